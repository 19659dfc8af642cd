"""What the launcher and the doctor check before anything starts or loads (pure: headers, and
the few bytes of ``d2t``). One module, so both tools refuse the same inputs with one message.

- Every weight file of the target and of the draft is a real safetensors file: not a Git LFS
  pointer, a header that parses, tensors laid out as the safetensors crate itself validates
  them (sorted by offset, contiguous from 0, each exactly dtype x shape bytes) and a file that
  ends where the data ends (a truncated file otherwise dies inside SGLang's loader after the
  target has spent its start-up time). A sharded checkpoint holds every shard its index names.
- The draft's vocab maps fit the target. SGLang 0.5.23 (``models/llama_eagle3.py``
  ``load_weights``) builds ``hot_token_id = d2t + arange(len(d2t))`` and maps each drafted id
  through it, so ``d2t`` needs one integer per ``lm_head`` row and every ``i + d2t[i]`` must
  be a target id (a bad one is an IndexError on the first request). A smaller draft vocab
  without ``d2t`` is served silently as if draft ids were target ids. ``t2d`` (one flag per
  target id) is not read by SGLang but must match the vocab the draft says it was trained on.
- The draft's config ``vocab_size`` is the target's (else it was trained on other token ids).
- With ``draft_vocab_size`` set and untied embeddings, SGLang's ``LlamaForCausalLMEagle3``
  fills the draft's ``lm_head`` only from the draft's weights: they must hold it.

A target or draft without weight files (a config-only dry run, planned before the weights are
downloaded) has nothing to check here; the readers say what they need of it.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3.checkpoint.config_json import read_draft_config_json
from sglang_eagle3.checkpoint.draft_schema import load_draft_file
from sglang_eagle3.checkpoint.safetensors_header import (
    INDEX_NAME,
    Entry,
    Header,
    read_header,
    read_index,
    safetensors_files,
)
from sglang_eagle3.checkpoint.target_config import read_target_config
from sglang_eagle3.errors import WiringError

REDOWNLOAD = "re-download or re-save the checkpoint"
# bits per element, as the safetensors crate sizes them; a dtype not listed is left to it
DTYPE_BITS = {
    **dict.fromkeys(("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0"), 8),
    **dict.fromkeys(("F8_E4M3FNUZ", "F8_E5M2FNUZ"), 8),
    **dict.fromkeys(("U16", "I16", "F16", "BF16"), 16),
    **dict.fromkeys(("U32", "I32", "F32"), 32),
    **dict.fromkeys(("U64", "I64", "F64", "C64"), 64),
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
_INT_CODES = {"I8": "b", "U8": "B", "I16": "h", "U16": "H", "I32": "i", "U32": "I", "I64": "q",
              "U64": "Q"}  # fmt: skip
_SHOWN = 3  # out-of-range ids quoted in a message; the rest are counted


def check_safetensors_file(path: str | Path) -> Header:
    """The header of ``path``, checked against the file's bytes."""
    h = read_header(path)  # LFS pointer, unparsable header, data past the end of the file
    where, expected = str(h.path), 0
    for e in sorted(h.entries.values(), key=lambda e: (e.begin, e.end)):
        if e.begin != expected:
            what = "overlaps the tensor before it" if e.begin < expected else "leaves a gap"
            raise WiringError(
                f"tensor {e.name!r} starts at data byte {e.begin}, expected {expected}: it {what}",
                path=where,
                fix=REDOWNLOAD,
            )
        bits = DTYPE_BITS.get(e.dtype)
        numel = math.prod(e.shape)
        if bits is not None and numel * bits != 8 * (e.end - e.begin):
            raise WiringError(
                f"tensor {e.name!r} is {e.dtype} {_dims(e.shape)}, {-(-numel * bits // 8)} bytes, "
                f"but its data_offsets [{e.begin}, {e.end}] hold {e.end - e.begin}",
                path=where,
                fix=REDOWNLOAD,
            )
        expected = e.end
    if h.data_size != expected:  # read_header refused a shorter file already
        raise WiringError(
            f"{h.data_size - expected} bytes follow the last tensor's data (the header covers "
            f"{expected} of {h.data_size} data bytes): not a whole safetensors file",
            path=where,
            fix=REDOWNLOAD,
        )
    return h


def weight_files(directory: str | Path) -> list[Path]:
    """The safetensors files a loader reads from ``directory``: the shards its index names
    (each must exist), else every ``*.safetensors``; none for a config-only directory."""
    directory = Path(directory)
    files = safetensors_files(directory) if directory.is_dir() else None
    if files is None:
        return []
    if files[0].name != INDEX_NAME:
        return files
    shards = sorted(set(read_index(files[0]).values()))
    missing = [s for s in shards if not (directory / s).is_file()]
    if missing:
        more = f" ... and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
        raise WiringError(
            f"the index names shards that are not there: {', '.join(missing[:_SHOWN])}{more}",
            path=str(files[0]),
            fix="download every shard of the checkpoint",
        )
    return [directory / s for s in shards]


def checked_tensors(directory: str | Path) -> dict[str, tuple[Header, Entry]]:
    """Every tensor of the checkpoint in ``directory`` (``model.`` prefix dropped, as SGLang's
    draft loader names them) with its file's header, after checking each file."""
    out: dict[str, tuple[Header, Entry]] = {}
    for f in weight_files(directory):
        h = check_safetensors_file(f)
        for name, e in h.entries.items():
            out[name.removeprefix("model.")] = (h, e)
    return out


@dataclass(frozen=True)
class VocabMap:
    """``d2t`` or ``t2d`` as stored: its shape, whether it holds integers, its values (d2t)."""

    shape: tuple[int, ...]
    dtype: str
    integer: bool = True
    values: Sequence[int] | None = None


@dataclass(frozen=True)
class VocabMaps:
    """What the vocab rules need; None: not known (the rule that needs it is skipped)."""

    draft_vocab: int | None  # lm_head rows the draft config implies (draft_vocab_size)
    trained_vocab: int | None  # the target vocab the draft config names (vocab_size)
    target_vocab: int | None  # the vocab SGLang maps drafted ids into
    target_source: str  # where target_vocab came from, for the messages
    has_weights: bool  # False: no weights read, so a missing d2t says nothing
    d2t: VocabMap | None = None
    t2d: VocabMap | None = None
    lm_head_rows: int | None = None


def check_vocab_maps(v: VocabMaps, *, path: str) -> None:
    """The vocab rules (module docstring), for the launcher, the doctor and the doctor's
    forward alike; ``path`` is the draft file the messages name."""
    dv, tv = v.draft_vocab, v.target_vocab
    if v.d2t is not None:
        _check_d2t(v.d2t, dv, tv, v.target_source, path)
    elif v.has_weights and dv is not None and tv is not None and dv != tv:
        raise WiringError(
            f"the draft vocab is {dv} tokens (draft_vocab_size) and the target's {tv} "
            f"({v.target_source}), but the weights hold no d2t to map draft ids to target ids",
            path=path,
            fix="use the draft's full checkpoint (it saves d2t with a reduced vocab), or a "
            "draft trained on this target's whole vocab",
        )
    trained = v.trained_vocab or tv
    if v.t2d is not None and trained is not None and v.t2d.shape != (trained,):
        source = "the draft config's vocab_size" if v.trained_vocab else v.target_source
        raise WiringError(
            f"t2d has shape {_dims(v.t2d.shape)}; the target vocab is {trained} ({source}), one "
            "flag per target id",
            path=path,
            fix="use the t2d saved with this draft's d2t (or re-export the draft)",
        )
    rows = dv or (v.d2t.shape[0] if v.d2t is not None and len(v.d2t.shape) == 1 else None)
    if v.lm_head_rows is not None and rows is not None and v.lm_head_rows != rows:
        raise WiringError(
            f"lm_head.weight has {v.lm_head_rows} rows, the draft vocab is {rows} "
            f"({'draft_vocab_size' if dv else 'len(d2t)'})",
            path=path,
            fix="the weights do not match config.json; use the matching pair",
        )


def _check_d2t(d2t: VocabMap, dv: int | None, tv: int | None, source: str, path: str) -> None:
    if not d2t.integer:
        raise WiringError(
            f"d2t is {d2t.dtype}, not integers; SGLang adds it to the draft ids",
            path=path,
            fix="save d2t as an int64 tensor (target id - draft id, per draft id)",
        )
    want = (dv,) if dv is not None else None
    if len(d2t.shape) != 1 or (want is not None and d2t.shape != want):
        raise WiringError(
            f"d2t has shape {_dims(d2t.shape)}; the draft vocab is "
            f"{dv if dv is not None else 'unknown'} (draft_vocab_size), one entry per lm_head row",
            path=path,
            fix="use the d2t saved with this draft's lm_head (or re-export the draft)",
        )
    if d2t.values is None or tv is None:
        return
    bad = [(i, i + d) for i, d in enumerate(d2t.values) if not 0 <= i + d < tv]
    if bad:
        shown = ", ".join(f"draft id {i} -> {t}" for i, t in bad[:_SHOWN])
        more = f" ... and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
        raise WiringError(
            f"d2t maps draft ids outside the target vocab 0..{tv - 1} ({source}): {shown}{more} "
            "(target id = draft id + d2t[draft id], as SGLang computes it)",
            path=path,
            fix="use the d2t saved with this draft, for a target with this vocab",
        )


def _dims(shape: Sequence[int]) -> str:
    """``[a, b]``; a header can claim any number of dimensions, so a long one is cut."""
    if len(shape) <= 8:
        return str(list(shape))
    return f"[{', '.join(map(str, shape[:8]))}, ... and {len(shape) - 8} more]"


def read_int_tensor(h: Header, e: Entry) -> list[int]:
    """The values of a small 1-D integer tensor, read from its bytes (little-endian)."""
    code = _INT_CODES.get(e.dtype)
    if code is None:
        raise WiringError(f"{e.name} is {e.dtype}, not an integer type read here", path=str(h.path))
    values = array(code)
    try:
        with h.path.open("rb") as f:
            f.seek(h.data_start + e.begin)
            values.frombytes(f.read(e.end - e.begin))
    except (OSError, ValueError) as err:
        raise WiringError(f"cannot read {e.name} ({err})", path=str(h.path)) from None
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def _map(found: tuple[Header, Entry] | None, *, read_values: bool) -> VocabMap | None:
    if found is None:
        return None
    h, e = found
    integer = e.dtype in _INT_CODES
    values = read_int_tensor(h, e) if read_values and integer else None
    return VocabMap(e.shape, e.dtype, integer, values)


def _int_or_none(cfg: dict, key: str, where: str) -> int | None:
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WiringError(f"{key} must be an int >= 1, got {value!r}", path=where)
    return value


def target_vocab_size(target_dir: str | Path) -> int | None:
    """``vocab_size`` of a local target's config.json (text_config for multimodal ones)."""
    text = read_target_config(target_dir, ints=())[1]
    return _int_or_none(text, "vocab_size", str(Path(target_dir) / "config.json"))


def prestart_check(draft_dir: str | Path, target_dir: str | Path | None = None) -> None:
    """Refuse a target or draft that cannot be served (module docstring), before anything
    starts. ``target_dir``: None when the caller has no target (the doctor without --target);
    the draft config's own vocab_size stands in for the target's then."""
    target_vocab, target_where = None, ""
    if target_dir is not None:
        checked_tensors(target_dir)
        target_vocab = target_vocab_size(target_dir)
        target_where = str(Path(target_dir) / "config.json")
    draft_dir = Path(draft_dir)
    where = str(draft_dir / "config.json")
    cfg = read_draft_config_json(draft_dir)
    speculators = "speculators_model_type" in cfg
    f = load_draft_file(cfg, where, speculators=speculators)
    tensors = checked_tensors(draft_dir)
    trained = f.layer.vocab_size
    source = "the target's config.json vocab_size"
    if target_vocab is None:
        target_vocab, source = trained, "the draft config's vocab_size"
    elif trained is not None and trained != target_vocab:
        raise WiringError(
            f"the draft was trained on a {trained}-token vocab (vocab_size), the target has "
            f"{target_vocab} ({target_where}): its token ids are another tokenizer's",
            path=where,
            fix="use a draft trained for this target (same tokenizer and vocab_size)",
        )
    draft_vocab = f.draft_vocab_size or trained  # SGLang: draft_vocab_size or vocab_size
    d2t = tensors.get("d2t")
    # the values only when the length is right: a wrong length says enough on its own
    fits = d2t is not None and len(d2t[1].shape) == 1 and draft_vocab in (None, d2t[1].shape[0])
    head = tensors.get("lm_head.weight")
    maps = VocabMaps(
        draft_vocab=draft_vocab,
        trained_vocab=trained,
        target_vocab=target_vocab,
        target_source=source,
        has_weights=bool(tensors),
        d2t=_map(d2t, read_values=fits),
        t2d=_map(tensors.get("t2d"), read_values=False),
        lm_head_rows=head[1].shape[0] if head is not None and head[1].shape else None,
    )
    files = {str(h.path) for h, _ in tensors.values()}
    path = files.pop() if len(files) == 1 else str(draft_dir)
    # draft_vocab_size set (always, in a speculators draft's flat copy): SGLang fills a fresh
    # draft head from these weights alone; tied, the head is the embedding
    layer = cfg.get("transformer_layer_config") if speculators else cfg
    tied = isinstance(layer, dict) and bool(layer.get("tie_word_embeddings"))
    explicit = draft_vocab is not None and (f.draft_vocab_size or speculators)
    if tensors and head is None and not tied and explicit:
        needs_own = speculators or (trained is not None and draft_vocab < trained)
        raise WiringError(
            f"draft_vocab_size is {draft_vocab} but the weights hold no lm_head.weight: SGLang "
            f"then builds a {draft_vocab}-row draft head and fills it only from these weights "
            "(with the target's head only when draft_vocab_size is unset), so it would draft "
            "from unfilled rows",
            path=path,
            fix="use the draft's full checkpoint (with its lm_head.weight)"
            + ("" if needs_own else ", or drop draft_vocab_size from config.json (then SGLang "
               "takes the target's head)"),
        )  # fmt: skip
    check_vocab_maps(maps, path=path)
