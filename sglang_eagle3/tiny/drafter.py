"""A tiny EAGLE-3 drafter for the tiny target, trained with speculators' own model code.

``tiny_drafter()`` returns a cached :class:`TinyDrafter`: a speculators-format checkpoint
(``save_pretrained``) trained on taps ``embed, layer:2, layer:5`` (input-to-layer ids [0, 3, 6])
with ``layer:7`` (the final layer, pre-norm) as the verifier tap, plus its training data and an
evaluation set that stores every hidden state (``embed, layer:0 .. layer:7``), both in
speculators' data layout. speculators' defaults are kept where they matter:
``norm_before_residual=True``, 3 TTT steps; the draft vocabulary is the target's, so the
lm_head is the target's, frozen, and no d2t/t2d are saved (as speculators does).

speculators' trainer wants torch.distributed and a GPU, so a small AdamW loop drives
``Eagle3DraftModel.forward`` (its loss, masks and TTT) directly. Deterministic on one machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from sglang_eagle3.log import get_logger
from sglang_eagle3.taps import Tap, parse_taps
from sglang_eagle3.tiny.train import DEFAULT_TRAIN_STEPS

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


def _model(recipe: DrafterRecipe, target_dir: Path, target):
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    tc = target.config
    layer = LlamaConfig(
        vocab_size=tc.vocab_size,
        hidden_size=tc.hidden_size,
        intermediate_size=3 * tc.hidden_size,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=1,
        rms_norm_eps=tc.rms_norm_eps,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        bos_token_id=tc.bos_token_id,
        eos_token_id=tc.eos_token_id,
        tie_word_embeddings=False,
    )
    layer._attn_implementation = "sdpa"  # flex attention needs a GPU
    ids = [t.hf_index for t in parse_taps(list(recipe.taps))]  # input-to-layer ids
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=tc.vocab_size,
        norm_before_residual=recipe.norm_before_residual,
        eagle_aux_hidden_state_layer_ids=ids,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=recipe.ttt_steps)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(
                name_or_path=str(target_dir), architectures=list(tc.architectures or [])
            ),
        ),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        model = Eagle3DraftModel(cfg)
    sd = target.state_dict()
    with torch.no_grad():  # verifier-owned weights: copied and frozen
        model.embed_tokens.weight.copy_(sd["model.embed_tokens.weight"])
        model.lm_head.weight.copy_(sd["lm_head.weight"])
        model.verifier_lm_head.weight.copy_(sd["lm_head.weight"])
        model.verifier_norm.weight.copy_(sd["model.norm.weight"])
    for p in (model.embed_tokens, model.lm_head, model.verifier_lm_head, model.verifier_norm):
        p.weight.requires_grad_(False)
    return model


def _batch(hs: torch.Tensor, ids: torch.Tensor, pick: torch.Tensor) -> dict:
    """speculators' shift_batch per sequence, packed into one row with document ids."""
    seqs, length = pick.numel(), ids.shape[1] - 1
    h = hs[pick]  # [B, L, taps, hidden]
    return {
        "hidden_states": h[:, :-1, :-1].flatten(2).reshape(1, seqs * length, -1),
        "input_ids": ids[pick, 1:].reshape(1, -1),
        "verifier_last_hidden_states": h[:, 1:, -1].reshape(1, seqs * length, -1),
        "loss_mask": torch.ones(1, seqs * length, dtype=torch.bool),
        "position_ids": torch.arange(1, length + 1).repeat(seqs)[None],
        "document_ids": torch.arange(seqs).repeat_interleave(length)[None],
    }


def train_drafter(model, data_dir: Path, recipe: DrafterRecipe) -> dict:
    from speculators.losses import resolve_loss_config

    from sglang_eagle3.train_data import TrainData

    loss_config = resolve_loss_config("kl_div", "eager")  # the fused default is a Triton kernel
    samples = list(TrainData(data_dir))
    hs = torch.stack([s.hidden_states for s in samples])  # [N, L, taps, hidden]
    ids = torch.stack([s.input_ids for s in samples])  # [N, L]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(recipe.seed + 1)
    model.train()
    t0, recent = time.monotonic(), []
    for step in range(recipe.steps):
        warm = min(1.0, (step + 1) / max(1, recipe.warmup_steps))
        cos = 0.5 * (1 + math.cos(math.pi * step / recipe.steps))
        for group in opt.param_groups:
            group["lr"] = recipe.lr * warm * (0.1 + 0.9 * cos)
        pick = torch.randperm(ids.shape[0], generator=gen)[: recipe.batch_sequences]
        _, loss, metrics = model(
            **_batch(hs, ids, pick), ttt_steps=recipe.ttt_steps, loss_config=loss_config
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        recent = (recent + [loss.item()])[-20:]
        if (step + 1) % 50 == 0:
            get_logger().info(
                "tiny drafter: step %d/%d loss %.3f",
                step + 1,
                recipe.steps,
                sum(recent) / len(recent),
            )
    model.eval()
    return {
        "loss_last20": round(sum(recent) / len(recent), 4),
        "train_seconds": round(time.monotonic() - t0, 1),
    }


def build_tiny_drafter(out_dir: Path, recipe: DrafterRecipe, target_dir: Path) -> Path:
    from sglang_eagle3.tiny.checkpoint import load_hf_target
    from sglang_eagle3.tiny.drafter_data import token_windows, write_target_data

    t0 = time.monotonic()
    target = load_hf_target(target_dir)
    n = target.config.num_hidden_layers
    tok = target_dir / "tokenizer.json"
    length, budget = recipe.seq_len, recipe.corpus_bytes
    train_w = token_windows(tok, "train", recipe.train_sequences, length, recipe.seed, budget)
    eval_w = token_windows(tok, "heldout", recipe.eval_sequences, length, recipe.seed, budget)
    fc_taps = parse_taps(list(recipe.taps))
    train_taps = (*fc_taps, Tap(n))  # speculators: the fc taps, then the final layer
    digests = {
        "train": write_target_data(target, train_w, out_dir / "data" / "train", train_taps),
        "eval": write_target_data(
            target, eval_w, out_dir / "data" / "eval", [Tap(k) for k in range(n + 1)]
        ),
    }
    data_seconds = time.monotonic() - t0
    model = _model(recipe, target_dir, target)
    metrics = train_drafter(model, out_dir / "data" / "train", recipe)
    model.save_pretrained(str(out_dir / "draft"))
    record = {
        "recipe": asdict(recipe),
        "target_dir": str(target_dir),
        "data_digests": digests,
        "data_seconds": round(data_seconds, 1),
        **metrics,
        "build_seconds": round(time.monotonic() - t0, 1),
    }
    (out_dir / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return out_dir


def _key(recipe: DrafterRecipe, target_dir: Path) -> str:
    here = Path(__file__).resolve().parent
    blob = {
        "recipe": asdict(recipe),
        "target": target_dir.name,
        "sources": [
            hashlib.sha256((here / f).read_bytes()).hexdigest()
            for f in ("drafter.py", "drafter_data.py", "../train_data.py", "../train_data_arrow.py")
        ],
        "torch": torch.__version__,
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive flock, so concurrent test workers build once (no-op without fcntl)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def tiny_drafter(
    recipe: DrafterRecipe | None = None, *, root: Path | str | None = None
) -> TinyDrafter:
    """The cached tiny drafter (built on first use: a couple of minutes on 2 cores)."""
    from sglang_eagle3.tiny.cache import cache_root, tiny_target_dir

    recipe = recipe or DrafterRecipe()
    target_dir = tiny_target_dir(train_steps=recipe.target_train_steps, seed=recipe.seed)
    root = Path(root) if root is not None else cache_root()
    final = root / f"drafter-s{recipe.seed}-{_key(recipe, target_dir)}"
    if not (final / RECORD).is_file():
        root.mkdir(parents=True, exist_ok=True)
        with _locked(root / f".{final.name}.lock"):
            if not (final / RECORD).is_file():
                tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
                try:
                    build_tiny_drafter(tmp, recipe, target_dir)
                    if final.exists():
                        shutil.rmtree(final)  # incomplete: no record
                    os.rename(tmp, final)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    record = json.loads((final / RECORD).read_text())
    return TinyDrafter(
        final / "draft", final / "data" / "train", final / "data" / "eval", target_dir, record
    )
