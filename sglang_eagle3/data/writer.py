"""Write EAGLE-3 training data in speculators 0.9's layout (see ``train_data``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

from sglang_eagle3.data.arrow import HS_DIR, META_NAME, write_rows
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import Tap, parse_taps


class TrainDataWriter:
    """Write samples in speculators 0.9's layout (see ``train_data``). Hidden states go to disk
    as they come; the token ids (8 bytes a token) are kept for the Arrow table written by
    ``close()``, so a very large set is better written in several directories."""

    def __init__(
        self,
        out_dir: str | Path,
        *,
        taps: Sequence[Tap | str] | None = None,
        num_layers: int | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.out = Path(out_dir)
        if self.out.exists() and any(self.out.iterdir()):
            raise WiringError("output directory is not empty", path=str(self.out))
        (self.out / HS_DIR).mkdir(parents=True, exist_ok=True)
        self.taps = None if taps is None else parse_taps(list(taps))
        self.meta = {"taps": None if self.taps is None else [str(t) for t in self.taps]}
        if num_layers is not None:
            if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
                raise WiringError(f"num_layers must be an int >= 1, got {num_layers!r}")
            self.meta["num_layers"] = num_layers
        self.dtype = dtype
        self._ids: list[list[int]] = []
        self._masks: list[list[int]] = []

    def add(
        self,
        hidden_states: torch.Tensor,  # [seq, num_taps, hidden]
        input_ids: torch.Tensor,  # [seq]
        loss_mask: torch.Tensor | None = None,  # [seq]
    ) -> Path:
        if hidden_states.ndim != 3 or input_ids.shape != hidden_states.shape[:1]:
            raise WiringError(
                f"hidden_states {list(hidden_states.shape)} / input_ids {list(input_ids.shape)}: "
                "expected [seq, num_taps, hidden] and [seq]"
            )
        if self.taps is not None and hidden_states.shape[1] != len(self.taps):
            raise WiringError(f"{hidden_states.shape[1]} taps given, {len(self.taps)} declared")
        from safetensors.torch import save_file

        path = self.out / HS_DIR / f"hs_{len(self._ids)}.safetensors"
        tensors = {
            "hidden_states": hidden_states.detach().to("cpu", self.dtype).contiguous(),
            "token_ids": input_ids.detach().to("cpu", torch.long).contiguous(),
        }
        save_file(tensors, str(path), metadata={"sglang_eagle3": json.dumps(self.meta)})
        mask = torch.ones_like(input_ids) if loss_mask is None else loss_mask
        if mask.shape != input_ids.shape:
            raise WiringError(f"loss_mask {list(mask.shape)} vs input_ids {list(input_ids.shape)}")
        self._ids.append(input_ids.long().tolist())
        self._masks.append(mask.long().tolist())
        return path

    def close(self) -> Path:
        write_rows(self.out, self._ids, self._masks)
        (self.out / META_NAME).write_text(json.dumps(self.meta, indent=2) + "\n", encoding="utf-8")
        return self.out

    def __enter__(self) -> TrainDataWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
