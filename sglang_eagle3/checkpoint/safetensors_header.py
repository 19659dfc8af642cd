"""Read tensor names, dtypes and shapes from .safetensors headers without loading any data.

Format: 8-byte little-endian header length N, then N bytes of JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``, then the
data buffer. Reading only the header keeps a 100 GB checkpoint check instant and torch-free.

Pure on purpose: the launcher's readers (draft_readers, flat_draft) run with no third-party
package (the core declares no dependencies; tests/test_taps_conventions.py checks that torch,
numpy and safetensors stay unimported), and safetensors' ``safe_open`` imports torch
(framework "pt") or numpy ("np") to open a file. Code that holds torch anyway opens files with
``draft_weights.open_safetensors``, which comes back here to explain a file it refuses.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3.errors import WiringError

INDEX_NAME = "model.safetensors.index.json"
TensorInfo = tuple[str, tuple[int, ...]]
_MAX_HEADER = 100 * 1024 * 1024  # the reference implementation refuses larger headers too


@dataclass(frozen=True)
class Entry:
    """One tensor's header entry; ``begin``/``end`` are offsets into the data buffer."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class Header:
    """A parsed header: its entries, where the data buffer starts, the file's size."""

    path: Path
    entries: dict[str, Entry]
    data_start: int  # 8 + the header's length
    file_size: int

    @property
    def data_size(self) -> int:
        return self.file_size - self.data_start


def read_safetensors_header(path: str | Path) -> dict[str, TensorInfo]:
    """``{tensor_name: (dtype, shape)}`` of one .safetensors file."""
    return {name: (e.dtype, e.shape) for name, e in read_header(path).entries.items()}


def read_header(path: str | Path) -> Header:
    """The header of one .safetensors file; a file too short for what it declares, a Git LFS
    pointer or a malformed header is a WiringError (prestart checks the offsets further)."""
    path = Path(path)
    where = str(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if head.startswith(b"version "):
                raise WiringError(
                    "this is a Git LFS pointer, not the weights",
                    path=where,
                    fix="run `git lfs pull` (or download the real file)",
                )
            if len(head) < 8:
                raise WiringError(
                    f"file is {size} bytes, too short for a safetensors header (truncated?)",
                    path=where,
                    fix="re-download or re-save the checkpoint",
                )
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER or n > size - 8:
                raise WiringError(
                    f"header length {n} does not fit in a {size}-byte file (truncated or "
                    "not a safetensors file)",
                    path=where,
                    fix="re-download or re-save the checkpoint",
                )
            raw = f.read(n)
    except OSError as err:
        raise WiringError(
            f"cannot read safetensors file ({err.strerror or err})", path=where
        ) from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WiringError(f"safetensors header is not valid JSON ({err})", path=where) from None
    if not isinstance(header, dict):
        raise WiringError("safetensors header is not a JSON object", path=where)
    entries = {
        name: _tensor_info(name, info, where)
        for name, info in header.items()
        if name != "__metadata__"
    }
    data_end = max((e.end for e in entries.values()), default=0)
    if data_end > size - 8 - n:
        raise WiringError(
            f"data is truncated: the header needs {data_end} data bytes, the file holds "
            f"{size - 8 - n}",
            path=where,
            fix="re-download or re-save the checkpoint",
        )
    return Header(path, entries, 8 + n, size)


def _tensor_info(name: str, info: object, where: str) -> Entry:
    if not isinstance(info, dict) or not (
        isinstance(info.get("dtype"), str)
        and isinstance(info.get("shape"), list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in info["shape"])
        and isinstance(info.get("data_offsets"), list)
        and len(info["data_offsets"]) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) for o in info["data_offsets"])
        and 0 <= info["data_offsets"][0] <= info["data_offsets"][1]
    ):
        text = repr(info)
        text = text if len(text) <= 200 else text[:200] + "..."
        raise WiringError(f"safetensors header entry {name!r} is malformed: {text}", path=where)
    begin, end = info["data_offsets"]
    return Entry(name, info["dtype"], tuple(info["shape"]), begin, end)


def read_index(index_path: str | Path) -> dict[str, str]:
    """``{tensor_name: shard_file_name}`` from a ``model.safetensors.index.json``."""
    index_path = Path(index_path)
    where = str(index_path)
    try:
        data = json.loads(index_path.read_text(encoding="utf-8"))
    except OSError as err:
        raise WiringError(f"cannot read index ({err.strerror or err})", path=where) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WiringError(f"index is not valid JSON ({err})", path=where) from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise WiringError("weight_map must be an object of tensor name -> shard file", path=where)
    for shard in set(weight_map.values()):
        if Path(shard).name != shard:  # shards live next to the index; refuse path games
            raise WiringError(f"shard name {shard!r} is not a plain file name", path=where)
    return weight_map


def read_checkpoint_tensors(path: str | Path) -> dict[str, TensorInfo]:
    """Tensors of a checkpoint: a .safetensors file, an index file, or a directory holding
    either ``model.safetensors.index.json`` or .safetensors files."""
    path = Path(path)
    if path.is_dir():
        files = safetensors_files(path)
        if files is None:
            raise WiringError("no .safetensors weights found", path=str(path))
        path = files[0] if files[0].name == INDEX_NAME else path
        if path.is_dir():
            out: dict[str, TensorInfo] = {}
            for f in files:
                out.update(read_safetensors_header(f))
            return out
    if path.name.endswith(".index.json"):
        weight_map = read_index(path)
        out = {}
        for shard in sorted(set(weight_map.values())):
            shard_tensors = read_safetensors_header(path.parent / shard)
            for name, where in weight_map.items():
                if where == shard and name not in shard_tensors:
                    raise WiringError(
                        f"index maps {name!r} to {shard} but that shard does not hold it",
                        path=str(path),
                    )
            out.update({k: v for k, v in shard_tensors.items() if weight_map.get(k) == shard})
        return out
    return read_safetensors_header(path)


def safetensors_files(directory: str | Path) -> list[Path] | None:
    """``[index]`` when the directory is sharded, else its .safetensors files; None if none."""
    directory = Path(directory)
    index = directory / INDEX_NAME
    if index.is_file():
        return [index]
    files = sorted(p for p in directory.glob("*.safetensors") if p.is_file())
    return files or None
