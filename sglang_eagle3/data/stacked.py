"""Reading one training-data file: its shapes (one sequence or a stack), its tensors, its rows.

A stacked file (what hand-written capture scripts usually save) holds:

    hidden_states  [num_samples, seq, num_taps, hidden]   (or, in a .pt, a list of
                                                           [num_samples, seq, hidden] per tap)
    input_ids      [num_samples, seq]                     (or token_ids)
    loss_mask      [num_samples, seq]   optional; all ones when absent
    attention_mask [num_samples, seq]   optional; each row keeps its one block of ones
    lengths        [num_samples]        optional; each row keeps its first lengths[i] tokens
    hidden_states_scales [num_samples, seq, 1, 1]  optional (FP8, as in one-sequence files)

Without attention_mask or lengths every row is read at full length (padding included).
Rows are read one at a time: safetensors slices, or a memory-mapped ``torch.load``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import torch

from sglang_eagle3.checkpoint.draft_weights import open_safetensors
from sglang_eagle3.errors import WiringError

IDS_KEYS = ("token_ids", "input_ids")  # token_ids first: speculators' name wins
SCALES = "hidden_states_scales"
_STACKED_FIX = (
    "save hidden_states [num_samples, seq, num_taps, hidden] with input_ids [num_samples, seq] "
    "(and loss_mask / attention_mask [num_samples, seq], lengths [num_samples])"
)

Shape = Sequence[int]


def ids_key(names: Sequence[str]) -> str | None:
    return next((k for k in IDS_KEYS if k in names), None)


def layout_rows(shapes: Mapping[str, Shape], where: str) -> int | None:
    """None for one sequence, ``num_samples`` for a stacked file; a WiringError naming
    ``where`` when the tensors' shapes disagree. ``shapes`` holds hidden_states, one ids key
    and whichever optional keys the file has."""
    hs = list(shapes["hidden_states"])
    name = ids_key(list(shapes)) or "token_ids"
    ids = list(shapes[name])
    if len(hs) == 3 and len(ids) == 1:
        if hs[0] != ids[0]:
            raise WiringError(f"hidden_states {hs} and {name} {ids} differ in seq", path=where)
        _same("loss_mask", shapes, ids, name, where)
        return None
    if len(hs) == 3 and len(ids) == 2:
        raise WiringError(
            f"{name} {ids} is stacked but hidden_states {hs} is one sequence "
            "([seq, num_taps, hidden])",
            path=where,
            fix=_STACKED_FIX,
        )
    if len(hs) == 4 and len(ids) == 1:
        raise WiringError(
            f"hidden_states {hs} is stacked ({hs[0]} samples) but {name} {ids} is one sequence",
            path=where,
            fix=_STACKED_FIX,
        )
    if len(hs) != 4 or len(ids) != 2:
        raise WiringError(
            f"hidden_states {hs} and {name} {ids}: expected [seq, num_taps, hidden] and [seq] "
            "(one sequence) or [num_samples, seq, num_taps, hidden] and [num_samples, seq]",
            path=where,
        )
    if hs[:2] != ids:
        raise WiringError(
            f"hidden_states {hs} holds {hs[0]} samples of {hs[1]} tokens, {name} {ids} "
            f"{ids[0]} of {ids[1]}",
            path=where,
            fix=_STACKED_FIX,
        )
    for key in ("loss_mask", "attention_mask"):
        _same(key, shapes, ids, name, where)
    if "lengths" in shapes and list(shapes["lengths"]) != hs[:1]:
        raise WiringError(
            f"lengths {list(shapes['lengths'])} vs {hs[0]} samples: expected [{hs[0]}]",
            path=where,
            fix=_STACKED_FIX,
        )
    if SCALES in shapes and list(shapes[SCALES])[:2] != ids:
        raise WiringError(
            f"{SCALES} {list(shapes[SCALES])} vs {name} {ids}: expected [{ids[0]}, {ids[1]}, 1, 1]",
            path=where,
        )
    return hs[0]


def _same(key: str, shapes: Mapping[str, Shape], ids: list[int], name: str, where: str) -> None:
    if key in shapes and list(shapes[key]) != ids:
        raise WiringError(
            f"{key} {list(shapes[key])} vs {name} {ids}: expected the same shape",
            path=where,
            fix=f"write {key} with one value per token of {name}",
        )


def pt_shapes(data: Mapping[str, object], where: str) -> dict[str, list[int]]:
    """The shapes ``layout_rows`` checks, from a loaded .pt dict (hidden_states may be a list of
    per-tap tensors, stacked at dim -2 when read); {} when hidden_states or the ids are
    missing."""
    for k in ("loss_mask", "attention_mask", "lengths", SCALES):
        if k in data and not isinstance(data[k], torch.Tensor):
            raise WiringError(
                f"{k} is a {type(data[k]).__name__}, expected a tensor",
                path=where,
                fix=f"save {k} as a torch tensor",
            )
    hs = data.get("hidden_states")
    if isinstance(hs, (list, tuple)) and hs and all(isinstance(t, torch.Tensor) for t in hs):
        first = list(hs[0].shape)
        hs = [*first[:-1], len(hs), *first[-1:]]
    elif isinstance(hs, torch.Tensor):
        hs = list(hs.shape)
    key = ids_key(list(data))
    if not isinstance(hs, list) or key is None or not isinstance(data[key], torch.Tensor):
        return {}
    keep = ("loss_mask", "attention_mask", "lengths", SCALES)
    out = {k: list(v.shape) for k, v in data.items() if k in keep and isinstance(v, torch.Tensor)}
    return {"hidden_states": hs, key: list(data[key].shape), **out}


def safetensors_shapes(handle: object) -> dict[str, list[int]]:
    return {name: list(handle.get_slice(name).get_shape()) for name in handle.keys()}  # type: ignore[attr-defined]


def row_spans(
    attention_mask: torch.Tensor | None,  # [num_samples, seq]
    lengths: torch.Tensor | None,  # [num_samples]
    num_samples: int,
    seq: int,
    where: str,
) -> list[tuple[int, int]]:
    """``(start, end)`` of each row's real tokens: attention_mask's one block of ones,
    else the first ``lengths[i]``, else the whole row."""
    spans = [(0, seq)] * num_samples
    if attention_mask is not None:
        on = attention_mask.bool()  # [num_samples, seq]
        if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
            raise WiringError(
                "attention_mask holds values other than 0 and 1", path=where, fix=_MASK_FIX
            )
        for r in range(num_samples):
            pos = on[r].nonzero().flatten()  # [n_real]
            if pos.numel() == 0:
                raise WiringError(
                    f"row {r}: attention_mask is all zeros", path=where, fix=_MASK_FIX
                )
            start, end = int(pos[0]), int(pos[-1]) + 1
            if end - start != pos.numel():  # packed sequences would need a position reset
                raise WiringError(
                    f"row {r}: attention_mask is not one block of ones",
                    path=where,
                    fix="store one sequence per row (left or right padded)",
                )
            spans[r] = (start, end)
    if lengths is not None:
        if lengths.is_floating_point() or lengths.dtype == torch.bool:
            raise WiringError(
                f"lengths is {lengths.dtype}; expected integers", path=where, fix=_LENGTHS_FIX
            )
        for r, n in enumerate(lengths.tolist()):
            if not 1 <= n <= seq:
                raise WiringError(
                    f"row {r}: length {n} is outside 1 .. {seq}", path=where, fix=_LENGTHS_FIX
                )
            if attention_mask is not None and spans[r][1] - spans[r][0] != n:
                raise WiringError(
                    f"row {r}: lengths says {n} tokens, attention_mask {spans[r][1] - spans[r][0]}",
                    path=where,
                    fix="write both from the same padding, or drop one of them",
                )
            if attention_mask is None:
                spans[r] = (0, n)
    return spans


_MASK_FIX = "write attention_mask as 0/1 per token, with each row's real tokens one block of 1s"
_LENGTHS_FIX = "write lengths as each row's count of real tokens (an integer, 1 .. sequence length)"


Row = tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]  # row, hs, ids, mask (unchecked)


def stacked_rows(f: Path) -> Iterator[Row]:
    """Each row of a stacked file, trimmed to its span: ``(row, hidden_states [seq, num_taps,
    hidden], ids [seq], loss_mask [seq])``; the caller runs the per-sequence checks."""
    where = str(f)
    if is_pickle(f):
        data = torch_load(f)
        hs = data["hidden_states"]

        def take(name: str, r: int, s: int, e: int) -> torch.Tensor:
            if name == "hidden_states" and isinstance(hs, (list, tuple)):
                return torch.stack([t[r, s:e] for t in hs], dim=1)  # [len, num_taps, hidden]
            return data[name][r, s:e]

        yield from _rows(take, list(data), data.get, where)
        return
    with open_safetensors(f) as handle:
        names = list(handle.keys())

        def take_st(name: str, r: int, s: int, e: int) -> torch.Tensor:
            return handle.get_slice(name)[r, s:e]

        def small(name: str) -> torch.Tensor | None:
            return handle.get_tensor(name) if name in names else None

        try:
            yield from _rows(take_st, names, small, where)
        except WiringError:
            raise
        except Exception as err:  # safetensors raises its own error types
            raise WiringError(f"cannot read safetensors file ({err})", path=where) from None


def _rows(
    take: Callable[[str, int, int, int], torch.Tensor],
    names: list[str],
    small: Callable[[str], torch.Tensor | None],
    where: str,
) -> Iterator[Row]:
    key = ids_key(names) or "token_ids"
    ids_all = small(key)  # [num_samples, seq], small next to the hidden states
    if ids_all is None:
        raise WiringError("needs token_ids (or input_ids)", path=where)
    n, seq = ids_all.shape
    spans = row_spans(small("attention_mask"), small("lengths"), n, seq, where)
    for r, (s, e) in enumerate(spans):
        hs = take("hidden_states", r, s, e)  # [len, num_taps, hidden]
        if SCALES in names:  # FP8: one scale per token
            hs = hs.float() * take(SCALES, r, s, e).float()
        ids = ids_all[r, s:e]  # [len]
        mask = take("loss_mask", r, s, e) if "loss_mask" in names else torch.ones_like(ids)
        yield r, hs, ids, mask


def is_pickle(f: Path) -> bool:
    return f.suffix != ".safetensors"


def file_shapes(f: Path) -> tuple[dict[str, list[int]], str, dict]:
    """``(shapes for layout_rows, hidden_states dtype, writer metadata)`` from a safetensors
    header or a memory-mapped .pt, without reading the hidden states."""
    if is_pickle(f):
        data = torch_load(f)
        names, shapes, meta = sorted(data), pt_shapes(data, str(f)), {}
        hs = data.get("hidden_states")
        hs = hs[0] if isinstance(hs, (list, tuple)) and hs else hs
        dtype = str(getattr(hs, "dtype", ""))
    else:
        with open_safetensors(f) as handle:
            shapes, meta = safetensors_shapes(handle), file_meta(handle.metadata())
            names = sorted(shapes)
            dtype = (
                handle.get_slice("hidden_states").get_dtype() if "hidden_states" in shapes else ""
            )
    if "hidden_states" not in shapes or ids_key(list(shapes)) is None:
        raise WiringError(
            f"holds {names}; expected hidden_states and token_ids (or input_ids) tensors",
            path=str(f),
            fix="point at data written by speculators generate-offline-data",
        )
    return shapes, dtype, meta


def file_meta(meta: dict[str, str] | None) -> dict:
    """The writer's keys from a file's safetensors metadata ({} when absent or unreadable)."""
    raw = (meta or {}).get("sglang_eagle3")
    try:
        return json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        return {}


def safetensors_load(f: Path) -> dict:
    with open_safetensors(f) as handle:
        try:
            return {name: handle.get_tensor(name) for name in handle.keys()}
        except Exception as err:  # safetensors raises its own error types
            raise WiringError(f"cannot read safetensors file ({err})", path=str(f)) from None


def torch_load(f: Path) -> dict:
    try:  # weights_only: tensors and plain containers, never code from the file
        try:  # mmap: shapes and single rows of a large stacked file without reading it all
            data = torch.load(str(f), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as err:
            if "mmap" not in str(err):  # only the legacy (non-zip) format refuses mmap
                raise
            data = torch.load(str(f), map_location="cpu", weights_only=True)
    except Exception as err:  # pickle errors come in many types
        raise WiringError(
            f"cannot torch.load it with weights_only=True ({err})",
            path=str(f),
            fix="save only tensors, lists and dicts in it (or convert it to safetensors)",
        ) from None
    if not isinstance(data, dict):
        raise WiringError(f"holds a {type(data).__name__}, expected a dict", path=str(f))
    return data
