"""A tiny EAGLE-3 drafter for the tiny target, trained with speculators' own model code.

``tiny_drafter()`` returns a cached :class:`TinyDrafter`: a speculators-format checkpoint
(``save_pretrained``) trained on taps ``embed, layer:2, layer:5`` (input-to-layer ids [0, 3, 6])
with ``layer:7`` (the final layer, pre-norm) as the verifier tap, plus its training data
(captured through real SGLang by ``python -m sglang_eagle3.capture``, manifest included) and an
evaluation set that stores every hidden state (``embed, layer:0 .. layer:7``), both in
speculators' data layout. speculators' defaults are kept where they matter:
``norm_before_residual=True``, 3 TTT steps; the draft vocabulary is the target's, so the
lm_head is the target's, frozen, and no d2t/t2d are saved (as speculators does).

Training (``drafter_train``): a small AdamW loop over ``Eagle3DraftModel.forward`` (its loss,
masks and TTT), single-threaded. Deterministic on one machine; about 95 s on 2 cores with the
tiny target cached. ``python -m sglang_eagle3.testing.tiny.drafter`` builds it and prints the paths.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from filelock import FileLock

from sglang_eagle3.layout.taps import Tap, parse_taps
from sglang_eagle3.testing.tiny.train import DEFAULT_TRAIN_STEPS

RECORD = "tiny_drafter.json"


@dataclass(frozen=True)
class DrafterRecipe:
    seed: int = 0
    target_train_steps: int = DEFAULT_TRAIN_STEPS
    taps: tuple[str, ...] = ("embed", "layer:2", "layer:5")
    seq_len: int = 128
    train_sequences: int = 256
    eval_sequences: int = 32
    steps: int = 300
    batch_sequences: int = 8
    lr: float = 3e-3
    warmup_steps: int = 20
    ttt_steps: int = 3
    norm_before_residual: bool = True
    corpus_bytes: int = 2_000_000

    def __post_init__(self) -> None:
        parse_taps(list(self.taps))
        if min(self.seq_len, self.train_sequences, self.eval_sequences, self.steps) < 2:
            raise ValueError("seq_len, sequences and steps must be >= 2")
        if not 1 <= self.batch_sequences <= self.train_sequences or self.ttt_steps < 1:
            raise ValueError("batch_sequences must be in [1, train_sequences], ttt_steps >= 1")
        if not self.lr > 0 or self.warmup_steps < 0:
            raise ValueError("lr must be > 0 and warmup_steps >= 0")


@dataclass(frozen=True)
class TinyDrafter:
    draft_dir: Path  # speculators checkpoint
    train_data: Path  # taps embed, layer:2, layer:5, layer:7
    eval_data: Path  # every hidden state: embed, layer:0 .. layer:7
    target_dir: Path
    record: dict


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Tiny matrices: one thread is as fast as two alone and 10-20x faster when other
    processes share the cores (OpenMP workers wait on descheduled peers)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def build_tiny_drafter(
    out_dir: Path, recipe: DrafterRecipe, target_dir: Path, key: str | None = None
) -> Path:
    """Data from the target, then the draft: the package's shipped copy when ``key`` is the
    one it was trained for, else trained here."""
    with _one_thread():
        return _build(out_dir, recipe, target_dir, key)


def _build(out_dir: Path, recipe: DrafterRecipe, target_dir: Path, key: str | None) -> Path:
    from sglang_eagle3.checkpoint.hf_target import load_hf_target
    from sglang_eagle3.testing.tiny import embedded
    from sglang_eagle3.testing.tiny.drafter_data import (
        capture_target_data,
        token_windows,
        write_target_data,
    )

    t0 = time.monotonic()
    target = load_hf_target(target_dir)
    n = target.config.num_hidden_layers
    tok = target_dir / "tokenizer.json"
    length, budget = recipe.seq_len, recipe.corpus_bytes
    train_w = token_windows(tok, "train", recipe.train_sequences, length, recipe.seed, budget)
    eval_w = token_windows(tok, "heldout", recipe.eval_sequences, length, recipe.seed, budget)
    fc_taps = parse_taps(list(recipe.taps))
    # speculators' order: the fc taps, then the final layer (the capture's verifier tap)
    train_digest, captured = capture_target_data(
        target_dir, train_w, out_dir / "data" / "train", fc_taps
    )
    digests = {
        "train": train_digest,
        "eval": write_target_data(
            target, eval_w, out_dir / "data" / "eval", [Tap(k) for k in range(n + 1)]
        ),
    }
    data_seconds = time.monotonic() - t0
    if key is not None and embedded.restore("drafter", key, out_dir):
        record = json.loads((out_dir / RECORD).read_text())
        # Float sums may round differently on another CPU kind: the shipped draft still
        # serves, but its doctor figures were measured on the data it was trained on.
        record["shipped"] = True
        record["data_as_trained"] = record["data_digests"] == digests
    else:
        record = _train(out_dir, recipe, target_dir, target)
    record.update(
        target_dir=str(target_dir),
        train_data_capture={k: captured[k] for k in ("samples", "tokens", "taps", "tok_s")},
        data_digests=digests,
        data_seconds=round(data_seconds, 1),
        build_seconds=round(time.monotonic() - t0, 1),
    )
    (out_dir / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return out_dir


def _train(out_dir: Path, recipe: DrafterRecipe, target_dir: Path, target) -> dict:
    from sglang_eagle3.testing.tiny.drafter_train import speculators_draft, train_drafter

    model = speculators_draft(recipe, target_dir, target)
    metrics = train_drafter(model, out_dir / "data" / "train", recipe)
    model.save_pretrained(str(out_dir / "draft"))
    return {"recipe": asdict(recipe), **metrics}


def drafter_key(recipe: DrafterRecipe, target_dir: Path) -> str:
    """What the drafter is built from: its recipe, the target's cache entry and the code of
    the modules that write its data and train it (comments and docstrings excluded)."""
    from sglang_eagle3.testing.tiny.cache import source_fingerprint

    here = Path(__file__).resolve().parent
    data = here.parents[1] / "data"
    blob = {
        "recipe": asdict(recipe),
        "target": target_dir.name,
        "sources": [
            source_fingerprint(f)
            for f in (
                here / "drafter.py",
                here / "drafter_data.py",
                here / "drafter_train.py",
                data / "train_data.py",
                data / "arrow.py",
                data / "writer.py",
            )
        ],
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def tiny_drafter(
    recipe: DrafterRecipe | None = None, *, root: Path | str | None = None
) -> TinyDrafter:
    """The cached tiny drafter (built on first use: its data in about 60 s, the draft
    restored from the package, or trained for about 5 minutes when its builder changed)."""
    from sglang_eagle3.testing.tiny.cache import cache_root, tiny_target_dir

    recipe = recipe or DrafterRecipe()
    target_dir = tiny_target_dir(train_steps=recipe.target_train_steps, seed=recipe.seed)
    root = Path(root) if root is not None else cache_root()
    key = drafter_key(recipe, target_dir)
    final = root / f"drafter-s{recipe.seed}-{key}"
    if not (final / RECORD).is_file():
        root.mkdir(parents=True, exist_ok=True)
        with FileLock(root / f".{final.name}.lock"):
            if not (final / RECORD).is_file():
                tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
                try:
                    build_tiny_drafter(tmp, recipe, target_dir, key)
                    if final.exists():
                        shutil.rmtree(final)  # incomplete: no record
                    os.rename(tmp, final)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    record = json.loads((final / RECORD).read_text())
    return TinyDrafter(
        final / "draft", final / "data" / "train", final / "data" / "eval", target_dir, record
    )


if __name__ == "__main__":
    built = tiny_drafter()
    print(json.dumps({k: str(v) for k, v in built.__dict__.items() if k != "record"}, indent=2))
