"""What SGLang's adaptive mode will run, predicted by SGLang's own rule.

``AdaptiveSpeculativeParams`` (SGLang 0.5.23, imported, not re-typed) is fed the accepted drafts
per request the tuner predicts at the step it picks, batch after batch at one batch size; the
steps it runs after its warm-up, priced by the cost model, give the predicted speed. Where a
slot holds 0 and acceptance is low, SGLang keeps probing the next candidate (from 0 it always
does), and that time is counted too.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

from sglang_eagle3.tune.adaptive import speed
from sglang_eagle3.tune.cost import CostModel

BATCHES = 400  # decisions simulated per batch size; SGLang re-decides every 5 after 10


def _params(cfg: dict, initial_steps: int):
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "adaptive.json"
        path.write_text(json.dumps(cfg))
        return AdaptiveSpeculativeParams(initial_steps=initial_steps, cfg_path=str(path))


def steps_run(cfg: dict, initial_steps: int, drafts: dict[int, float], c: int,
              lam: float = 1.0, batches: int = BATCHES) -> Counter:  # fmt: skip
    """{steps: batches} SGLang runs at batch size ``c`` after its warm-up, each verify
    accepting ``lam * drafts[steps]`` drafts per request (never more than the steps)."""
    params = _params(cfg, initial_steps)
    ran: Counter = Counter()
    warm = max(int(e.get("warmup_batches", cfg.get("warmup_batches", 10)))
               for k, e in cfg.items() if k.isdigit())  # fmt: skip
    for i in range(batches):
        s = params.get_steps_for_batch(c)
        accepted = min(lam * drafts.get(s, 0.0), float(s)) if s else 0.0
        params.on_verify_complete([accepted] * c, batch_size=c)
        if i >= warm:
            ran[s] += 1
    return ran


def served_speed(model: CostModel, ran: Counter, drafts: dict[int, float], c: int,
                 lam: float = 1.0) -> float:  # fmt: skip
    """Tokens a second per request over the batches ``ran``: tokens over time."""
    tokens = time = 0.0
    for s, n in ran.items():
        v = speed(model, drafts, s, c, lam)
        cycle = model.cycle(s, 1, s + 1, c)
        tokens += n * v * cycle
        time += n * cycle
    return tokens / time


def settled(ran: Counter) -> int:
    """The step run most often."""
    return max(sorted(ran), key=lambda s: ran[s])
