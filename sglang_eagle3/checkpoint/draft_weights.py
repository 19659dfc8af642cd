"""Load an EAGLE-3 draft's tensors from safetensors only (no pickle), under one set of names.

Names are normalised to speculators' / SGLang-flat spelling (``fc.weight``, ``layers.0.*``,
``norm.weight``, ``lm_head.weight``, ``d2t`` ...): a ``model.`` prefix is dropped and SGLang's
own load-time renames apply (draft_weight_names: SpecForge's ``midlayer.`` -> ``layers.0.``,
``aux_norm_{low,mid,high}`` -> ``fc_norm.{0,1,2}``). Tensors serving never reads are skipped.

Files are opened with safetensors' ``safe_open``; when it refuses one, the pure header reader
(safetensors_header) names the cause: a Git LFS pointer, a truncated file, a corrupt header.
The embedding can be huge (Kimi: 163840 x 7168) while an evaluation touches a few thousand rows,
so :class:`RowTable` reads rows on demand from the mapped file instead of loading the matrix.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from sglang_eagle3.checkpoint.draft_weight_names import legacy_renamed, not_served
from sglang_eagle3.checkpoint.safetensors_header import (
    INDEX_NAME,
    read_index,
    read_safetensors_header,
    safetensors_files,
)
from sglang_eagle3.errors import WiringError

EMBED_NAMES = ("embed_tokens.weight",)
# Above this size the embedding is read row by row instead of loaded whole.
LAZY_EMBED_BYTES = 256 * 1024 * 1024


_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "BOOL": torch.bool,
}


def torch_dtype(name: str, path: str | Path) -> torch.dtype:
    """safetensors dtype string -> torch dtype."""
    if name not in _DTYPES:
        raise WiringError(f"unsupported tensor dtype {name}", path=str(path))
    return _DTYPES[name]


@contextmanager
def open_safetensors(path: str | Path) -> Iterator[Any]:
    """``safe_open(path, framework="pt")``; a file it refuses raises a WiringError that names
    the cause (Git LFS pointer, truncated or corrupt file) and the path."""
    try:
        handle = safe_open(str(path), framework="pt")
    except Exception as err:  # SafetensorError, OSError
        read_safetensors_header(path)  # raises the clear error when the bytes explain it
        raise WiringError(f"cannot read safetensors file ({err})", path=str(path)) from None
    with handle:
        yield handle


def check_finite(t: torch.Tensor, name: str, path: str | Path) -> torch.Tensor:
    """``t`` unchanged, or a WiringError naming it when a float tensor holds NaN or inf: a
    poisoned drafter scores like an untrained one under every layout, which reads as "the
    layout is fine" instead of "the weights are broken"."""
    if not t.is_floating_point() or bool(torch.isfinite(t).all()):
        return t
    nan = int(torch.isnan(t).sum())
    inf = int((~torch.isfinite(t)).sum()) - nan
    raise WiringError(
        f"{name} holds non-finite values ({nan} NaN, {inf} inf of {t.numel()})",
        path=str(path),
        fix="use a healthy checkpoint (these weights are corrupt or training diverged)",
    )


def canonical_name(name: str) -> str:
    """SGLang's load-time renames, applied once so every format reads alike."""
    return legacy_renamed(name.removeprefix("model."))


def tensor_files(directory: str | Path) -> dict[str, Path]:
    """``{stored tensor name: file}`` for a checkpoint directory (single file or sharded)."""
    directory = Path(directory)
    files = safetensors_files(directory) if directory.is_dir() else None
    if files is None:
        raise WiringError(
            "no .safetensors weights found (pickle checkpoints are not read)",
            path=str(directory),
            fix="save the checkpoint with safetensors (save_pretrained does by default)",
        )
    if files[0].name != INDEX_NAME:
        out: dict[str, Path] = {}
        for f in files:
            with open_safetensors(f) as handle:
                out.update(dict.fromkeys(handle.keys(), f))
        return out
    weight_map = read_index(files[0])
    for shard in sorted(set(weight_map.values())):
        with open_safetensors(directory / shard) as handle:
            held = set(handle.keys())
        for name, where in weight_map.items():
            if where == shard and name not in held:
                raise WiringError(
                    f"index maps {name!r} to {shard} but that shard does not hold it",
                    path=str(files[0]),
                )
    return {name: directory / shard for name, shard in weight_map.items()}


def load_tensors(
    directory: str | Path,
    *,
    dtype: torch.dtype | None,
    device: str | torch.device = "cpu",
    skip: tuple[str, ...] = EMBED_NAMES,
) -> dict[str, torch.Tensor]:
    """Every draft tensor under its canonical name; floats cast to ``dtype`` (None: as
    stored), integer tensors (``d2t``, ``t2d``) kept. Names in ``skip`` are left out. A float
    tensor holding NaN or inf is a WiringError naming it."""
    out: dict[str, torch.Tensor] = {}
    by_file: dict[Path, list[str]] = {}
    for name, f in tensor_files(directory).items():
        by_file.setdefault(f, []).append(name)
    for f, names in by_file.items():
        try:
            with open_safetensors(f) as handle:
                for name in names:
                    key = canonical_name(name)
                    if key in skip or not_served(key):
                        continue
                    t = check_finite(handle.get_tensor(name), name, f)  # as stored
                    if t.is_floating_point() and dtype is not None:
                        t = t.to(dtype)
                    out[key] = t.to(device)
        except WiringError:
            raise
        except Exception as err:  # safetensors raises its own SafetensorError
            raise WiringError(f"cannot read tensors ({err})", path=str(f)) from None
    return out


def stored_dtype(directory: str | Path, name: str = "fc.weight") -> torch.dtype:
    """The dtype a checkpoint stores ``name`` in (for ``dtype="auto"``)."""
    for key, f in tensor_files(directory).items():
        if canonical_name(key) == name:
            with open_safetensors(f) as handle:
                return torch_dtype(handle.get_slice(key).get_dtype(), f)
    raise WiringError(f"the weights have no {name}", path=str(directory))


class RowTable:
    """An embedding matrix ``[vocab, hidden]`` read whole when small, row by row otherwise."""

    def __init__(self, path: Path, name: str, *, dtype: torch.dtype | None, device: str) -> None:
        self.path, self.name, self.device = Path(path), name, device
        with open_safetensors(self.path) as handle:
            sl = handle.get_slice(name)
            shape = sl.get_shape()
            stored = torch_dtype(sl.get_dtype(), path)
        if len(shape) != 2:
            raise WiringError(
                f"{name} has shape {shape}; expected [vocab, hidden]",
                path=str(path),
                fix="point at the target whose embedding this is (a 2-D [vocab, hidden] tensor)",
            )
        self.vocab_size, self.hidden_size = shape
        self.dtype = dtype or stored
        self._full: torch.Tensor | None = None
        self._rows: dict[int, torch.Tensor] = {}
        nbytes = shape[0] * shape[1] * torch.tensor([], dtype=stored).element_size()
        if nbytes <= LAZY_EMBED_BYTES:
            self._full = self._read(slice(None)).to(device)

    def _read(self, index: slice) -> torch.Tensor:
        with open_safetensors(self.path) as handle:
            rows = handle.get_slice(self.name)[index]
        return check_finite(rows, self.name, self.path).to(self.dtype)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows for ``ids`` (any shape, target ids) -> ``[*ids.shape, hidden]``."""
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise WiringError(
                f"token id {int(ids.max())} is outside the embedding's {self.vocab_size} rows",
                path=str(self.path),
                fix="use data tokenized for this target",
            )
        if self._full is not None:
            return self._full[ids.to(self._full.device)]
        wanted = [i for i in torch.unique(ids).tolist() if i not in self._rows]
        if wanted:
            with open_safetensors(self.path) as handle:
                sl = handle.get_slice(self.name)
                for i in wanted:
                    row = check_finite(sl[i : i + 1][0], f"{self.name} row {i}", self.path)
                    self._rows[i] = row.to(self.dtype).to(self.device)
        flat = [self._rows[i] for i in ids.reshape(-1).tolist()]
        return torch.stack(flat).reshape(*ids.shape, self.hidden_size)

    def full(self) -> torch.Tensor:
        """The whole matrix (loads it if it was read lazily)."""
        if self._full is None:
            self._full = self._read(slice(None)).to(self.device)
        return self._full


def load_tensor(path: Path, name: str) -> torch.Tensor:
    """One tensor by its stored name."""
    try:
        with open_safetensors(path) as handle:
            return handle.get_tensor(name)
    except WiringError:
        raise
    except Exception as err:  # safetensors raises its own error types
        raise WiringError(f"cannot read {name} ({err})", path=str(path)) from None


def find_tensor(directory: str | Path, suffix: str) -> tuple[Path, str] | None:
    """The file and stored name of the tensor whose canonical name is ``suffix`` or ends with
    ``.suffix`` (multimodal targets nest the language model, e.g. ``language_model.model.``)."""
    files = tensor_files(directory)
    exact = [k for k in files if canonical_name(k) == suffix]
    nested = sorted((k for k in files if k.endswith("." + suffix)), key=len)
    for key in exact or nested:
        return files[key], key
    return None
