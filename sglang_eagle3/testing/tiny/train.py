"""A short language-modelling run on stdlib sources, so the tiny target's greedy output is
code-like rather than random (a drafter trained against a random target learns nothing).

fp32 AdamW on 16 x 128-token windows; about 0.23 s a step on 2 CPU cores. Deterministic for a
given seed on a given machine; float reductions may differ across CPU types or thread counts.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from sglang_eagle3.log import get_logger
from sglang_eagle3.testing.tiny import corpus

DEFAULT_TRAIN_STEPS = 600  # about 140 s on 2 cores: whole build stays well under 4 minutes


@dataclass(frozen=True)
class TrainRecipe:
    steps: int = 0
    batch_size: int = 16
    seq_len: int = 128
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_batches: int = 8

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError("steps must be >= 0")
        if self.batch_size < 1 or self.seq_len < 2 or self.eval_batches < 1:
            raise ValueError("batch_size, seq_len and eval_batches must be positive")
        if not (self.lr > 0 and 0 <= self.min_lr_ratio <= 1 and self.grad_clip > 0):
            raise ValueError("lr must be > 0, min_lr_ratio in [0, 1], grad_clip > 0")
        if self.warmup_steps < 0 or self.weight_decay < 0:
            raise ValueError("warmup_steps and weight_decay must be >= 0")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def token_stream(tok: Any, split: str) -> torch.Tensor:
    """One long id stream: each file as ``bos ids eos``, files in sorted order."""
    from sglang_eagle3.testing.tiny.tokenizer import BOS_ID, EOS_ID

    texts = list(corpus.iter_texts(corpus.stdlib_files(split)))
    bos, eos = torch.tensor([BOS_ID]), torch.tensor([EOS_ID])
    parts: list[torch.Tensor] = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        parts += [bos, torch.tensor(enc.ids, dtype=torch.long), eos]
    return torch.cat(parts)


def sample_windows(
    stream: torch.Tensor, batch: int, length: int, gen: torch.Generator
) -> torch.Tensor:
    """``batch`` random windows of ``length`` tokens (inputs and shifted labels together)."""
    if stream.numel() <= length:
        raise ValueError("token stream shorter than one window")
    starts = torch.randint(0, stream.numel() - length, (batch,), generator=gen)
    return torch.stack([stream[s : s + length] for s in starts.tolist()])


def lm_loss(model: torch.nn.Module, windows: torch.Tensor) -> torch.Tensor:
    # Shift here rather than via HF ``labels`` so the objective is explicit.
    logits = model(input_ids=windows[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))


def _lr_at(step: int, r: TrainRecipe) -> float:
    if step < r.warmup_steps:
        return r.lr * (step + 1) / r.warmup_steps
    progress = (step - r.warmup_steps) / max(1, r.steps - r.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return r.lr * (r.min_lr_ratio + (1 - r.min_lr_ratio) * cosine)


@torch.no_grad()
def evaluate(model: torch.nn.Module, stream: torch.Tensor, r: TrainRecipe, seed: int) -> float:
    gen = torch.Generator().manual_seed(seed + 1)  # fixed windows: comparable across runs
    was_training = model.training
    model.eval()
    losses = [
        lm_loss(model, sample_windows(stream, r.batch_size, r.seq_len + 1, gen)).item()
        for _ in range(r.eval_batches)
    ]
    model.train(was_training)
    return sum(losses) / len(losses)


def train_target(
    model: torch.nn.Module, tok: Any, r: TrainRecipe, seed: int, log_every: int = 100
) -> dict[str, Any]:
    """Train ``model`` in place; return metrics (losses, seconds) for build_info.json."""
    if r.steps == 0:
        return {"steps": 0}
    t0 = time.monotonic()
    train_ids, heldout_ids = token_stream(tok, "train"), token_stream(tok, "heldout")
    gen = torch.Generator().manual_seed(seed)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]  # norms: no weight decay
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": r.weight_decay}, {"params": no_decay}],
        lr=r.lr,
        weight_decay=0.0,
    )
    initial = evaluate(model, heldout_ids, r, seed)
    model.train()
    recent: list[float] = []
    for step in range(r.steps):
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, r)
        loss = lm_loss(model, sample_windows(train_ids, r.batch_size, r.seq_len + 1, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), r.grad_clip)
        opt.step()
        recent = (recent + [loss.item()])[-50:]
        if log_every and (step + 1) % log_every == 0:
            avg, secs = sum(recent) / len(recent), time.monotonic() - t0
            get_logger().info(
                "tiny target: step %d/%d loss %.3f (%.0f s)", step + 1, r.steps, avg, secs
            )
    model.eval()
    return {
        "steps": r.steps,
        "train_tokens": int(train_ids.numel()),
        "heldout_loss_initial": round(initial, 4),
        "train_loss_last50": round(sum(recent) / len(recent), 4),
        "heldout_loss": round(evaluate(model, heldout_ids, r, seed), 4),
        "train_seconds": round(time.monotonic() - t0, 1),
    }
