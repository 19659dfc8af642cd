"""Every deployment the tuner can recommend, predicted at each concurrency of the mix: plain
decoding, each static setting of the grid (trees included) and the tuner's adaptive config as
SGLang's own rule will serve it (tune/adaptive_sim.py)."""

from __future__ import annotations

from sglang_eagle3.tune.adaptive_sim import served_speed, steps_run
from sglang_eagle3.tune.cost import CostModel
from sglang_eagle3.tune.grid import Setting
from sglang_eagle3.tune.mix import ADAPTIVE, PLAIN, Phase, recommend
from sglang_eagle3.tune.report import adaptive_flags, chain_drafts


def initial_steps(config: dict) -> int:
    """The --speculative-num-steps adaptive_flags serves ``config`` with (0: it never drafts)."""
    flags = adaptive_flags(config)
    if flags is None:
        return 0
    parts = flags.split()
    return int(parts[parts.index("--speculative-num-steps") + 1])


def adaptive_speeds(model: CostModel, drafts: dict[int, float], config: dict, cs,
                    initial: int | None = None) -> dict:  # fmt: skip
    """{c: (tok/s per request, {steps: share of batches})} of ``config`` under SGLang's rule,
    started at ``initial`` steps (default: what adaptive_flags serves it with)."""
    out = {}
    start = initial_steps(config) if initial is None else initial
    for c in cs:
        ran = steps_run(config, start, drafts, c)
        total = sum(ran.values())
        out[c] = (served_speed(model, ran, drafts, c),
                  {str(s): round(n / total, 3) for s, n in sorted(ran.items())})  # fmt: skip
    return out


def mix_result(model: CostModel, profile: dict[Setting, float], settings: list[Setting],
               config: dict, phases: list[Phase]) -> dict:  # fmt: skip
    cs = sorted({p.concurrency for p in phases})
    candidates = {PLAIN: {c: 1 / model.plain(c) for c in cs}}
    labels = {PLAIN: "no speculation"}
    for s in settings:
        candidates[s.name] = {c: profile[s] / model.cycle(s.steps, s.topk, s.draft_tokens, c)
                              for c in cs}  # fmt: skip
        labels[s.name] = " ".join(s.flags)
    steps = {}
    if config:
        ran = adaptive_speeds(model, chain_drafts(profile), config, cs)
        candidates[ADAPTIVE] = {c: v for c, (v, _) in ran.items()}
        steps = {str(c): shares for c, (_, shares) in ran.items()}
        flags = adaptive_flags(config)
        labels[ADAPTIVE] = (f"{flags} --speculative-adaptive-config FILE" if flags else
                            "the adaptive config (it never drafts)")  # fmt: skip
    out = recommend(phases, candidates)
    out["flags"] = labels[out["recommended"]]
    out["adaptive_steps"] = steps  # per concurrency: the share of batches at each step
    out["per_concurrency_tok_s"] = {
        n: {str(c): round(v * c, 2) for c, v in speeds.items()} for n, speeds in candidates.items()
    }
    return out
