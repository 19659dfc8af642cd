"""A tiny trained MLA drafter (``Eagle3DeepseekV2ForCausalLM``) for the tiny DeepSeek-V3 target.

``tiny_mla_drafter()`` returns a cached checkpoint directory. It is trained through the
doctor's own reference forward (``doctor/draft_mla.py``, which SGLang's drafter matches to
1e-6: tests/test_mla_draft_fidelity.py) on the tiny Llama-style drafter's training data (taps
``embed, layer:2, layer:5``, verifier ``layer:7``): cross-entropy against the target's greedy
token, draft step 1 only. EAGLE-3.1 settings on (``fc_norm``, ``norm_output``); the embedding
and lm_head are the target's, frozen, and kept in the checkpoint (``embed_requires_grad``:
SGLang's MLA ``set_embed`` calls torch.cuda.synchronize() and cannot share it on CPU).
The layout is declared as ``eagle_config.hidden_state_layout``. Shipped in the package
(``embedded.py``); trained here, in about 2 minutes on 2 cores, only when its builder changed.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from sglang_eagle3.testing.tiny.drafter import TinyDrafter, _one_thread, tiny_drafter

RECORD = "tiny_mla_drafter.json"
TAPS = ("embed", "layer:2", "layer:5")  # the tiny drafter's training taps, in its data's order
STEPS, BATCH, LR, SEED = 600, 8, 3e-3, 0


def tiny_mla_drafter() -> Path:
    """The cached trained MLA draft directory (built on first use)."""
    from sglang_eagle3.testing.tiny import embedded
    from sglang_eagle3.testing.tiny.cache import cache_root, cached_build

    drafter = tiny_drafter()
    key = mla_key(drafter.train_data.parent.parent.name)
    name = f"mla-drafter-s{SEED}-{key}"

    def build(tmp: Path) -> None:
        if embedded.restore("mla_drafter", key, tmp):
            return
        with _one_thread():
            _build(tmp, drafter)

    done = cached_build(cache_root(), name, lambda p: (p / RECORD).is_file(), build)
    return done / "draft"


def _build(out: Path, drafter: TinyDrafter) -> None:
    from safetensors.torch import load_file

    from sglang_eagle3.data.train_data import TrainData
    from sglang_eagle3.doctor.draft_forward import load_draft
    from sglang_eagle3.doctor.target import VerifierHead
    from sglang_eagle3.testing.tiny.random_mla_draft import write_random_mla_draft

    t0 = time.monotonic()
    target = load_file(str(drafter.target_dir / "model.safetensors"))
    shared = {
        "embed_tokens.weight": target["model.embed_tokens.weight"],
        "lm_head.weight": target["lm_head.weight"],
    }
    kw = {
        "eagle_config": {"hidden_state_layout": list(TAPS)},
        "fc_norm": True, "norm_output": True, "seed": SEED,
        "extra_config": {"embed_requires_grad": True},
    }  # fmt: skip
    start = write_random_mla_draft(out / "start", drafter.target_dir, tensors=shared, **kw)
    draft = load_draft(start, dtype="float32")
    params = [w.requires_grad_() for n, w in draft.w.items() if n not in shared]  # frozen
    head = VerifierHead(drafter.target_dir)
    samples = []
    for s in TrainData(drafter.train_data):  # hidden states [L, 4 taps, hidden]: fc taps, final
        hs = s.hidden_states.float()
        # row t: taps of t, fed token t+1, predicts the target's token after t+1
        samples.append((hs[:-1, :3].flatten(1), s.input_ids[1:], head(hs[1:, 3]).clone()))
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    gen = torch.Generator().manual_seed(SEED + 1)
    recent: list[float] = []
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = (
                LR * min(1.0, (step + 1) / 20) * (0.55 + 0.45 * math.cos(math.pi * step / STEPS))
            )
        loss = (
            sum(
                _loss(draft, *samples[i])
                for i in torch.randperm(len(samples), generator=gen)[:BATCH]
            )
            / BATCH
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        recent = (recent + [loss.item()])[-20:]
    trained = {n: w.detach() for n, w in draft.w.items()} | shared
    write_random_mla_draft(out / "draft", drafter.target_dir, tensors=trained, **kw)
    record = {
        "taps": list(TAPS), "steps": STEPS, "batch_sequences": BATCH, "lr": LR,
        "loss_last20": round(sum(recent) / len(recent), 4),
        "build_seconds": round(time.monotonic() - t0, 1),
    }  # fmt: skip
    (out / RECORD).write_text(json.dumps(record, indent=2) + "\n")


def _loss(draft, taps: torch.Tensor, ids: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """taps [T, 3 * hidden], ids [T], truth [T] target ids -> the mean cross-entropy."""
    from sglang_eagle3.doctor.draft_attention import LayerCache

    rows = torch.arange(ids.shape[0])
    logits, _ = draft.step(ids, draft.fc_input(taps), rows, 0, [LayerCache()])
    return F.cross_entropy(logits, truth)


def mla_key(drafter_entry: str) -> str:
    """What the MLA drafter is built from: the tiny drafter's cache entry (its data) and the
    code of the modules that train it (comments and docstrings excluded)."""
    from sglang_eagle3.testing.tiny.cache import source_fingerprint

    pkg = Path(__file__).resolve().parents[2]
    sources = [
        pkg / "testing/tiny/mla_drafter.py",
        pkg / "testing/tiny/random_mla_draft.py",
        pkg / "doctor/draft_forward.py",
        pkg / "doctor/draft_mla.py",
        pkg / "doctor/draft_attention.py",
    ]
    blob = {
        "drafter": drafter_entry,
        "sources": [source_fingerprint(p) for p in sources],
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


if __name__ == "__main__":
    print(tiny_mla_drafter())
