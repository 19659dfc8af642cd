"""EAGLE-3 training data as speculators 0.9 writes it: read it one sample at a time, write it.

The layout (``speculators prepare-data`` + ``generate-offline-data``, read back by
``speculators/train/data.py`` ``ArrowDataset``):

    DATA/                         a Hugging Face ``datasets`` save_to_disk directory:
      state.json, dataset_info.json, data-00000-of-0000N.arrow   (Arrow IPC stream files)
        columns: input_ids list<int64>, loss_mask list<int64>, seq_len int64
      hidden_states/hs_{row}.safetensors
        hidden_states [seq, num_taps, hidden]  (model dtype; or float8 + hidden_states_scales
                                                [seq, 1, 1] from hs_connectors' FP8 connector)
        token_ids     [seq] int64              (must equal the row's input_ids)

The trainer feeds ``hidden_states[:, :-1].flatten(1)`` to the fc and computes targets from
``hidden_states[:, -1]`` (the verifier tap). No file says which taps are stored: this module's
writer adds ``sglang_eagle3_data.json`` (and the same keys in each file's safetensors
metadata), which speculators ignores. Also read: a bare ``hidden_states/`` directory or one
``hs_*.safetensors`` file (loss mask all ones), and, only with ``allow_pickle=True``, torch
``.pt`` files (older speculators and ad-hoc dumps: ``input_ids``/``token_ids``,
``hidden_states`` as a tensor or a list of per-tap tensors, optional ``loss_mask``).

A file may also hold STACKED samples, as hand-written capture scripts save them:
``hidden_states [num_samples, seq, num_taps, hidden]`` with ``input_ids [num_samples, seq]``
(optional ``loss_mask``, ``attention_mask`` [num_samples, seq] and ``lengths`` [num_samples]
trim each row; without them rows are read at full length). Such a file (safetensors, or .pt
with allow_pickle) or a directory of them (``hs_*.safetensors`` or ``*.pt``) reads as one
sample per row, numbered in file order; ``stacked`` describes the keys. One directory holds
one layout: all files stacked, or all one sequence each.

``.pt`` files are loaded with ``torch.load(weights_only=True)``: tensors and plain containers
only, never arbitrary objects. It is still a pickle parser, so reading one stays an opt-in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from sglang_eagle3.data.arrow import HS_DIR, META_NAME, read_rows
from sglang_eagle3.data.stacked import (
    file_shapes,
    is_pickle,
    layout_rows,
    safetensors_load,
    stacked_rows,
    torch_load,
)
from sglang_eagle3.data.writer import TrainDataWriter
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import Tap, format_taps, parse_taps

__all__ = ["DataInfo", "Sample", "TrainData", "TrainDataWriter", "HS_DIR", "META_NAME"]
_HS_RE = re.compile(r"hs_(\d+)\.safetensors")
_PICKLE_FIX = (
    "pass allow_pickle=True (--allow-pickle) to read it with torch.load(weights_only=True), "
    "or convert it to safetensors"
)


@dataclass(frozen=True)
class Sample:
    index: int
    path: str
    hidden_states: torch.Tensor  # [seq, num_taps, hidden]
    input_ids: torch.Tensor  # [seq] int64, target ids
    loss_mask: torch.Tensor  # [seq] bool
    # set by the doctor's own captures: truth[u] = the target's greedy token after u (-1:
    # unknown), and the positions a server's walk covers (its generated continuation)
    truth: torch.Tensor | None = None  # [seq] int64
    walk_mask: torch.Tensor | None = None  # [seq] bool (None: loss_mask)


@dataclass(frozen=True)
class DataInfo:
    path: str
    # "speculators-0.9", "hidden-states-dir", "torch-pickle", "stacked-safetensors",
    # "stacked-torch-pickle"
    format: str
    num_samples: int  # sequences: files, or the rows of stacked files
    num_taps: int
    hidden_size: int
    dtype: str
    taps: tuple[Tap, ...] | None  # stored taps in stored order (last: verifier), when known
    num_layers: int | None
    taps_source: str

    def __post_init__(self) -> None:
        if self.taps is not None and len(self.taps) != self.num_taps:
            raise WiringError(
                f"metadata names {len(self.taps)} taps ({format_taps(self.taps)}) but the "
                f"files store {self.num_taps}",
                path=self.path,
                fix=f"fix or delete {META_NAME}",
            )


class TrainData:
    """Iterate samples of a data path, one file in memory at a time."""

    def __init__(self, path: str | Path, *, allow_pickle: bool = False) -> None:
        self.path = Path(path)
        self.allow_pickle = allow_pickle
        if not self.path.exists():
            raise WiringError("data path does not exist", path=str(self.path))
        self._files, self.format = self._discover()
        self._rows: list[int] | None = None  # rows per file when stacked
        self.info = self._info()

    def _discover(self) -> tuple[list[tuple[int, Path]], str]:
        p = self.path
        if p.is_file():
            if p.suffix == ".safetensors":
                return [(_file_index(p), p)], "hidden-states-dir"
            if p.suffix in (".pt", ".pth", ".bin"):
                return [(0, self._pickle_ok(p))], "torch-pickle"
            raise WiringError(
                "not a training-data file (expected .safetensors, or .pt with allow_pickle)",
                path=str(p),
            )
        hs_dir = p / HS_DIR if (p / HS_DIR).is_dir() else p
        files = sorted(
            (
                (int(m.group(1)), f)
                for f in hs_dir.glob("hs_*.safetensors")
                if (m := _HS_RE.fullmatch(f.name))
            ),
        )
        fmt = "speculators-0.9" if (p / "state.json").is_file() else "hidden-states-dir"
        if files:
            return files, fmt
        pts = sorted(p.glob("*.pt"))
        if pts:
            return [(i, self._pickle_ok(f)) for i, f in enumerate(pts)], "torch-pickle"
        others = sorted(f.name for f in hs_dir.glob("*.safetensors"))
        raise WiringError(
            f"no hidden-state files (hs_*.safetensors under {hs_dir}, or *.pt)"
            + (f"; it holds {others}" if others else ""),
            path=str(p),
            fix="name data files hs_0.safetensors, hs_1.safetensors, ... or pass one file"
            if others
            else "point at the speculators data directory (the one holding hidden_states/)",
        )

    def _pickle_ok(self, f: Path) -> Path:
        if not self.allow_pickle:
            raise WiringError(
                "is a pickle-based torch file; not loaded", path=str(f), fix=_PICKLE_FIX
            )
        return f

    def _info(self) -> DataInfo:
        first = self._files[0][1]
        shapes, dtype, meta = file_shapes(first)
        rows = layout_rows(shapes, str(first))
        shape = shapes["hidden_states"]
        if rows is not None:
            if self.format == "speculators-0.9":
                raise WiringError(
                    f"is stacked ({rows} samples) but speculators 0.9 stores one Arrow row "
                    "per hs_{row}.safetensors",
                    path=str(first),
                    fix="point at the stacked file itself, or regenerate the directory",
                )
            self._rows = [rows] + [self._count(f) for _, f in self._files[1:]]
            self.format = "stacked-" + ("torch-pickle" if is_pickle(first) else "safetensors")
            shape = shape[1:]
        side = self.path / META_NAME if self.path.is_dir() else self.path.parent / META_NAME
        if side.is_file():
            try:
                meta = json.loads(side.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
                raise WiringError(f"metadata is not valid JSON ({err})", path=str(side)) from None
            source = str(side)
            if not isinstance(meta, dict):
                raise WiringError("metadata must be a JSON object", path=source)
        else:
            source = f"safetensors metadata of {first.name}" if meta else "unknown"
        taps = meta.get("taps")
        num_layers = meta.get("num_layers")
        return DataInfo(
            path=str(self.path),
            format=self.format,
            num_samples=len(self),
            num_taps=shape[1],
            hidden_size=shape[2],
            dtype=str(dtype),
            taps=None if not taps else parse_taps(taps, path=source),
            num_layers=num_layers if isinstance(num_layers, int) else None,
            taps_source=source,
        )

    def _count(self, f: Path) -> int:
        rows = layout_rows(file_shapes(f)[0], str(f))
        if rows is None:
            raise WiringError(
                f"holds one sequence but {self._files[0][1].name} is stacked",
                path=str(f),
                fix="keep one layout per directory",
            )
        return rows

    def __len__(self) -> int:
        return len(self._files) if self._rows is None else sum(self._rows)

    def __iter__(self) -> Iterator[Sample]:
        if self._rows is not None:
            yield from self._iter_stacked()
            return
        if self.format != "speculators-0.9":
            for index, f in self._files:
                yield self._load(index, f, None)
            return
        # hs_{i} belongs to Arrow row i; rows without a file (not generated yet) are skipped
        rows = read_rows(self.path)
        current = next(rows, None)
        for index, f in self._files:
            while current is not None and current[0] < index:
                current = next(rows, None)
            if current is None or current[0] != index:
                raise WiringError(
                    f"has no row {index} in the Arrow table next to it",
                    path=str(f),
                    fix="keep hidden_states/ together with the dataset it was generated from",
                )
            yield self._load(index, f, current[1:])

    def _iter_stacked(self) -> Iterator[Sample]:
        index = 0  # rows are numbered across files, in file order
        for _, f in self._files:
            for r, hs, ids, mask in stacked_rows(f):
                try:
                    self._check(hs, ids, mask, str(f))
                except WiringError as err:  # name the row inside the file
                    raise WiringError(
                        f"row {r}: {err.message}", path=err.path, fix=err.fix
                    ) from None
                yield Sample(index, str(f), hs, ids.long(), mask.bool())
                index += 1

    def _load(self, index: int, f: Path, row: tuple | None) -> Sample:
        where = str(f)
        if is_pickle(f):
            data = torch_load(f)
        else:
            data = safetensors_load(f)
        hs = data.get("hidden_states")
        if isinstance(hs, (list, tuple)):  # older dumps: one [seq, hidden] tensor per tap
            hs = torch.stack(list(hs), dim=1)
        ids = data.get("token_ids", data.get("input_ids"))
        if not isinstance(hs, torch.Tensor) or not isinstance(ids, torch.Tensor):
            raise WiringError(
                "needs hidden_states and token_ids (or input_ids) tensors", path=where
            )
        if "hidden_states_scales" in data:  # hs_connectors FP8: one scale per token
            hs = hs.float() * data["hidden_states_scales"].float()
        mask = data.get("loss_mask")
        if row is not None:
            arrow_ids, arrow_mask = row
            if not torch.equal(arrow_ids, ids.long()):
                raise WiringError(
                    f"token_ids differ from row {index}'s input_ids in the Arrow table",
                    path=where,
                    fix="regenerate the hidden states for this dataset",
                )
            mask = arrow_mask
        if mask is None:
            mask = torch.ones(ids.shape[0], dtype=torch.bool)
        self._check(hs, ids, mask, where)
        return Sample(index, where, hs, ids.long(), mask.bool())

    def _check(self, hs: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, where: str) -> None:
        info = getattr(self, "info", None)
        shapes = {"hidden_states": hs.shape, "token_ids": ids.shape, "loss_mask": mask.shape}
        if layout_rows(shapes, where) is not None:
            raise WiringError(
                f"is stacked ({hs.shape[0]} samples) but {self._files[0][1].name} holds one "
                "sequence",
                path=where,
                fix="keep one layout per directory",
            )
        if info is not None and tuple(hs.shape[1:]) != (info.num_taps, info.hidden_size):
            raise WiringError(
                f"stores {hs.shape[1]} taps x {hs.shape[2]}, the first file "
                f"{info.num_taps} x {info.hidden_size}",
                path=where,
                fix="keep one tap set per data directory",
            )
        if not bool(torch.isfinite(hs).all()):
            raise WiringError("hidden_states contain inf or NaN", path=where, fix="regenerate it")


def _file_index(p: Path) -> int:
    m = _HS_RE.fullmatch(p.name)
    return int(m.group(1)) if m else 0
