"""Save the aux hidden states a target hands its logits processor, to test stock SGLang.

Stock SGLang logs nothing about what it captures, so a test of a server without this
project's plugin cannot otherwise see its taps. With $SGLANG_EAGLE3_RECORD_TAPS naming a
folder, every forward that carries aux hidden states is saved there as
`<pid>-<n>.pt` = {"input_ids": [tokens], "taps": [tokens, taps * hidden] fp32}, taps in
SGLang's capture order. It only observes: the forward's inputs and result are untouched.

The drafter's logits are saved the same way under `draft/` (`<pid>-<n>.pt` = {"logits":
[tokens, vocab] fp32}), so a test can compare the drafter two servers serve.
"""

from __future__ import annotations

import functools
import itertools
import os
from pathlib import Path

from sglang_eagle3 import env_names


def record_dir() -> Path | None:
    value = os.environ.get(env_names.RECORD_TAPS)
    return Path(value) if value else None


def install_tap_recorder(out_dir: Path) -> None:
    import torch
    from sglang.srt.layers.logits_processor import LogitsProcessor

    out_dir.mkdir(parents=True, exist_ok=True)
    original = LogitsProcessor.forward
    count = itertools.count()

    @functools.wraps(original)
    def forward(self, input_ids, hidden_states, lm_head, logits_metadata, aux_hidden_states=None,
                *args, **kwargs):  # fmt: skip
        out = original(self, input_ids, hidden_states, lm_head, logits_metadata,
                       aux_hidden_states, *args, **kwargs)  # fmt: skip
        if _is_drafter(self) and getattr(out, "next_token_logits", None) is not None:
            _save(out_dir / "draft", {"logits": out.next_token_logits.detach().float().cpu()})
        if aux_hidden_states is not None:
            packed = (
                aux_hidden_states
                if isinstance(aux_hidden_states, torch.Tensor)
                else torch.cat(list(aux_hidden_states), -1)
            )
            record = {"input_ids": input_ids.detach().cpu(), "taps": packed.detach().float().cpu()}
            _save(out_dir, record)
        return out

    def _save(folder: Path, record: dict) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{os.getpid()}-{next(count)}.tmp"
        torch.save(record, tmp)
        tmp.rename(tmp.with_name(tmp.name[1:-4] + ".pt"))  # readers never see half a file

    LogitsProcessor.forward = forward


def _is_drafter(processor) -> bool:
    # SGLang builds the EAGLE-3 drafter's LogitsProcessor from the draft's config
    architectures = getattr(getattr(processor, "config", None), "architectures", None) or []
    return any("Eagle3" in a for a in architectures)


def recorded_taps(out_dir: Path) -> list[dict]:
    """Every saved record, in the order each process wrote them."""
    import torch

    def key(p: Path) -> tuple[int, int]:
        pid, n = p.stem.split("-")
        return int(pid), int(n)

    files = sorted(out_dir.glob("*.pt"), key=key)
    return [torch.load(f, weights_only=True) for f in files]
