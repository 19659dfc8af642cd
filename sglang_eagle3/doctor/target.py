"""The target's side of the doctor: its greedy token from a stored tap, and a check that the
data's verifier tap really is the final layer's output.

speculators trains against ``lm_head(final_norm(last stored tap))``. That is the target's real
next-token distribution only when the last tap is the output of the LAST decoder layer, taken
BEFORE the final norm; an intermediate layer gives a logit lens, and a post-norm value gets
normed twice. With a small target the doctor runs it (Hugging Face) on the data's own tokens
and compares, and matches every stored tap against the real hidden states.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from sglang_eagle3.checkpoint.draft_weights import RowTable, find_tensor, load_tensor
from sglang_eagle3.checkpoint.safetensors_header import read_checkpoint_tensors
from sglang_eagle3.checkpoint.target_config import read_target_config
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import Tap, format_taps
from sglang_eagle3.ops.rms_norm import rms_norm

# Run the Hugging Face target only when its weights are at most this large.
MAX_HF_CHECK_BYTES = 2 * 1024**3
_ROWS = 256  # logits rows per chunk: a 163840-wide vocab stays under 200 MB


def target_config(target_dir: str | Path) -> dict:
    """The language model's config of a target (text_config for multimodal targets)."""
    return read_target_config(
        target_dir,
        ints=("num_hidden_layers", "hidden_size", "vocab_size"),
        missing="no config.json: not a model directory",
        fix="point --target at the target model's directory",
        refuse_draft=True,
    )[1]


class VerifierHead:
    """``argmax lm_head(final_norm(h))`` of the target, in target ids."""

    def __init__(self, target_dir: str | Path, *, device: str = "cpu") -> None:
        cfg = target_config(target_dir)
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        head = find_tensor(target_dir, "lm_head.weight")
        norm = find_tensor(target_dir, "norm.weight")
        if head is None and cfg.get("tie_word_embeddings"):
            head = find_tensor(target_dir, "embed_tokens.weight")
        if head is None or norm is None:
            raise WiringError(
                "the target weights lack lm_head.weight or the final norm.weight",
                path=str(target_dir),
            )
        self.weight = RowTable(head[0], head[1], dtype=None, device=device).full()
        self.norm = load_tensor(norm[0], norm[1]).to(device)
        self.vocab_size, self.hidden_size = self.weight.shape

    @torch.inference_mode()
    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """h: [T, hidden] (pre-norm final-layer output) -> [T] target ids."""
        if h.shape[-1] != self.hidden_size:
            raise WiringError(
                f"the verifier tap is {h.shape[-1]} wide, the target's lm_head takes "
                f"{self.hidden_size}",
                fix="use data generated from this target",
            )
        out = []
        for s in range(0, h.shape[0], _ROWS):
            x = h[s : s + _ROWS].to(self.weight.device, self.weight.dtype)
            # the target's final norm as HF computes it (the speculators trainer's reference)
            x = rms_norm(x, self.norm.to(self.weight.dtype), self.eps, cast_before_weight=True)
            out.append((x @ self.weight.T).float().argmax(-1).cpu())
        return torch.cat(out) if out else torch.empty(0, dtype=torch.long)


@dataclass(frozen=True)
class TargetCheck:
    tokens: int
    verifier_agreement: float | None  # argmax head(last tap) == HF forward argmax
    matched_taps: tuple[Tap | None, ...] | None  # per stored tap: the HF hidden state it equals
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "verifier_agreement": self.verifier_agreement,
            "matched_taps": None
            if self.matched_taps is None
            else [None if t is None else str(t) for t in self.matched_taps],
            "notes": list(self.notes),
        }


def load_hf(target_dir: Path, cfg: dict):
    if cfg.get("model_type") == "deepseek_v3":
        from sglang_eagle3.checkpoint.hf_target import load_hf_target

        return load_hf_target(target_dir)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    return model.eval()


@torch.inference_mode()
def check_target(
    target_dir: str | Path,
    samples,  # iterable of train_data.Sample
    head: VerifierHead,
    *,
    stored: tuple[Tap, ...] | None,
    max_tokens: int = 512,
) -> TargetCheck:
    """Run the target on the data's tokens: does the verifier tap give its real greedy tokens,
    and which real hidden state is each stored tap?"""
    target_dir = Path(target_dir)
    cfg = target_config(target_dir)
    size = sum(_nbytes(d, s) for d, s in read_checkpoint_tensors(target_dir).values())
    if size > MAX_HF_CHECK_BYTES:
        note = f"target weights are {size / 1e9:.1f} GB: not run on CPU (verifier tap unchecked)"
        return TargetCheck(0, None, None, (note,))
    model = load_hf(target_dir, cfg)
    captured: list[torch.Tensor] = []
    hook = model.model.norm.register_forward_hook(lambda m, i, o: captured.append(i[0]))
    agree = total = 0
    matches: list[list[int]] = []
    try:
        for sample in samples:
            if total >= max_tokens:
                break
            ids = sample.input_ids[: max_tokens - total]
            hs = sample.hidden_states[: ids.shape[0]].float()
            captured.clear()
            out = model(input_ids=ids[None], output_hidden_states=True)
            real = list(out.hidden_states[:-1]) + [captured[-1]]  # last one BEFORE the norm
            agree += int((head(hs[:, -1]) == out.logits[0].argmax(-1)).sum())
            total += ids.shape[0]
            matches.append([_nearest(hs[:, j], real) for j in range(hs.shape[1])])
    finally:
        hook.remove()
    per_tap = (
        tuple(_vote([m[j] for m in matches]) for j in range(len(matches[0]))) if matches else None
    )
    notes = []
    rate = agree / total if total else None
    final = Tap(cfg["num_hidden_layers"])
    if rate is not None and rate < 0.9:
        notes.append(
            f"the verifier tap (last stored) reproduces the target's greedy token for only "
            f"{rate:.0%} of tokens: the drafter was trained against the wrong targets (the last "
            f"tap must be {final}, the final layer's output before the final norm)"
        )
    if per_tap is not None and per_tap[-1] is not None and per_tap[-1] != final:
        notes.append(f"the last stored tap is {per_tap[-1]}, not the final layer {final}")
    if per_tap is not None and stored is not None and tuple(per_tap) != tuple(stored):
        found = ", ".join("?" if t is None else str(t) for t in per_tap)
        notes.append(f"data labels its taps {format_taps(stored)} but they match {found}")
    return TargetCheck(total, rate, per_tap, tuple(notes))


def _nearest(x: torch.Tensor, real: list[torch.Tensor]) -> int:
    """HF hidden-state index whose values ``x`` ([T, hidden]) equals; -1 if none is close."""
    errs = [float((x - r[0].float()).norm() / (r[0].float().norm() + 1e-12)) for r in real]
    best = min(range(len(errs)), key=errs.__getitem__)
    return best if errs[best] < 1e-2 else -1


def _vote(indices: list[int]) -> Tap | None:
    first = indices[0]
    return Tap(first) if first >= 0 and all(i == first for i in indices) else None


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    size = {"F64": 8, "F32": 4, "I64": 8, "I32": 4}.get(dtype, 2)
    for d in shape:
        size *= d
    return size
