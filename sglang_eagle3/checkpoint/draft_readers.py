"""Read an EAGLE-3 draft directory (speculators, SGLang-flat or SpecForge) into a DraftSpec.

Formats and where their ids live:
- speculators 0.9 (``speculators_model_type: "eagle3"``): TOP-LEVEL
  ``eagle_aux_hidden_state_layer_ids``, always input-to-layer; sizes in
  ``transformer_layer_config``. No ids: speculators' own default [2, n//2, n-3] (input-to-layer).
- sglang-flat (``architectures: ["LlamaForCausalLMEagle3"]``):
  ``eagle_config.eagle_aux_hidden_state_layer_ids`` in no stated convention. -1 (embed) exists
  only as output-of-layer and n (last layer) only as input-to-layer, so either settles it;
  otherwise the caller must say (``convention=``) or the config must name its taps.
- specforge: the same config shape as sglang-flat (SpecForge writes it that way), told apart
  only by weight names: SpecForge saves its decoder layer as ``midlayer.*`` (SGLang renames it
  to ``layers.0`` at load). SpecForge hands the ids to its target's
  ``set_aux_hidden_states_layers``: forward hooks on ``layers[id]`` outputs (HF backend) or
  SGLang llama/qwen's +1 (SGLang backend), i.e. output-of-layer. A SpecForge config whose
  weights are absent reads as sglang-flat (ambiguous), which is the safe side.

The explicit ``eagle_config.hidden_state_layout`` (also top-level for speculators) wins over
ids and needs no convention; when ids sit next to it they must agree with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sglang_eagle3.checkpoint.config_json import read_config_json
from sglang_eagle3.checkpoint.draft_spec import (
    STOCK_DEFAULT_SOURCE,
    DraftFields,
    DraftSpec,
    flat_fields,
    speculators_fields,
)
from sglang_eagle3.checkpoint.safetensors_header import (
    TensorInfo,
    read_checkpoint_tensors,
    safetensors_files,
)
from sglang_eagle3.errors import AmbiguousIdsError, WiringError
from sglang_eagle3.layout.conventions import (
    Convention,
    check_num_layers,
    stock_sglang_deepseek_capture,
    taps_from_ids,
)
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import Tap, format_taps, parse_taps

FLAT_ARCH = "LlamaForCausalLMEagle3"
_STATE_IT = (
    "pass --aux-layer-convention output-of-layer (or input-to-layer), or add "
    'eagle_config.hidden_state_layout, e.g. ["embed", "layer:2", "layer:30"], naming the '
    "taps the draft was trained on"
)
LayoutArg = HiddenStateLayout | str | Sequence[str | Tap] | None


def read_draft(
    draft_dir: str | Path,
    *,
    num_layers: int,
    target_hidden_size: int,
    convention: Convention | str | None = None,
    layout: LayoutArg = None,
) -> DraftSpec:
    """Parse ``draft_dir`` and check it against a target with ``num_layers`` decoder layers of
    width ``target_hidden_size``. ``layout`` (caller's explicit taps) wins over the config;
    ``convention`` disambiguates flat ids. ``layout`` may be a HiddenStateLayout, a string
    like ``"embed,layer:2,layer:30"`` or a list of tap names. Every problem is a WiringError
    naming the file (and the field)."""
    n = check_num_layers(num_layers)
    width = target_hidden_size
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise WiringError(f"target_hidden_size must be an int >= 1, got {width!r}")
    conv = None if convention is None else Convention.parse(convention)
    if conv is Convention.SGLANG_0_5_23_DEEPSEEK:
        raise WiringError(
            f"{conv} only explains what stock SGLang captures; it cannot name a draft's taps",
            fix="use output-of-layer or input-to-layer",
        )
    draft_dir = Path(draft_dir)
    cfg_path = draft_dir / "config.json"
    where = str(cfg_path)
    cfg = _load_config(cfg_path)
    files = safetensors_files(draft_dir) if draft_dir.is_dir() else None
    tensors: dict[str, TensorInfo] = read_checkpoint_tensors(draft_dir) if files else {}
    fmt = _detect_format(cfg, tensors, where)
    f = speculators_fields(cfg, where) if fmt == "speculators" else flat_fields(cfg, where)
    notes: list[str] = []

    if f.declared_target_hidden != target_hidden_size:
        null = " (target_hidden_size is null: the draft's own hidden size)" if f.null_target else ""
        raise WiringError(
            f"draft expects target hidden states {f.declared_target_hidden} wide{null}, "
            f"the target's are {target_hidden_size}",
            path=where,
            fix="use the draft trained for this target",
        )
    # speculators' data keeps the last captured tap (the final layer) as the verifier tap
    verifier = f.verifier or (Tap.layer_output(n - 1) if f.verifier_is_final else None)
    try:
        lay, used_conv, source = _resolve_layout(
            fmt, f, conv, layout, verifier, n, target_hidden_size, notes
        )
    except WiringError as err:  # layout validation knows no file: name the config
        raise err.with_path(where) from None
    if lay is not None and len(lay.taps) != f.num_aux:
        raise WiringError(
            f"layout {lay} has {len(lay.taps)} taps but the draft's fc takes {f.num_aux} "
            f"({f.num_aux_source})",
            path=where,
            fix="name exactly the taps the fc was trained on",
        )
    fc_in = _fc_in_features(tensors, draft_dir, f)
    if fc_in is not None and fc_in != f.num_aux * target_hidden_size:
        raise WiringError(
            f"fc.weight takes {fc_in} input features, but {f.num_aux} taps x target hidden "
            f"{target_hidden_size} = {f.num_aux * target_hidden_size}",
            path=str(draft_dir),
            fix="the weights do not match the config or the target; use the matching draft",
        )
    if lay is not None and not lay.is_capturable():
        notes.append(f"{format_taps(lay.uncapturable_taps())} cannot be captured by SGLang")
    return DraftSpec(
        config_path=where,
        format=fmt,
        layout=lay,
        convention=used_conv,
        layout_source=source,
        raw_ids=f.ids,
        draft_hidden_size=f.draft_hidden,
        target_hidden_size=target_hidden_size,
        num_aux=f.num_aux,
        fc_in_features=fc_in,
        draft_vocab_size=f.draft_vocab,
        target_vocab_size=f.target_vocab,
        norm_before_fc=f.norm_before_fc,
        fc_norm=f.fc_norm,
        norm_output=f.norm_output,
        norm_before_residual=f.norm_before_residual,
        has_d2t="d2t" in tensors,
        has_t2d="t2d" in tensors,
        sliding_window=f.sliding_window,
        verifier_name=f.verifier_name,
        notes=tuple(notes),
        embed_requires_grad=f.embed_requires_grad,
        has_embed=any(n.endswith("embed_tokens.weight") for n in tensors),
        draft_layers=f.draft_layers,
        null_target_hidden=f.null_target,
    )


def _load_config(cfg_path: Path) -> dict:
    return read_config_json(
        cfg_path.parent,
        missing="no config.json: not a draft checkpoint directory",
        fix="point at the directory that holds the draft's config.json and weights",
    )


def _detect_format(cfg: dict, tensors: dict[str, TensorInfo], where: str) -> str:
    smt = cfg.get("speculators_model_type")
    if smt is not None:
        if smt != "eagle3":
            raise WiringError(
                f"speculators_model_type is {smt!r}; only EAGLE-3 drafts are supported",
                path=where,
            )
        return "speculators"
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or FLAT_ARCH not in archs:
        raise WiringError(
            f"architectures is {archs!r}: not an EAGLE-3 draft this tool can read",
            path=where,
            fix=f'use a speculators eagle3 checkpoint or a flat config with ["{FLAT_ARCH}"]',
        )
    if any(name.startswith("midlayer.") for name in tensors):
        return "specforge"
    return "sglang-flat"


def _resolve_layout(
    fmt: str,
    f: DraftFields,
    conv: Convention | None,
    layout: LayoutArg,
    verifier: Tap | None,
    n: int,
    width: int,
    notes: list[str],
) -> tuple[HiddenStateLayout | None, Convention | None, str]:
    where = f.where
    if layout is not None:
        if isinstance(layout, HiddenStateLayout):
            if (layout.num_layers, layout.hidden_size) != (n, width):
                raise WiringError(
                    f"the given layout is for {layout.num_layers} layers x {layout.hidden_size}, "
                    f"the target has {n} x {width}"
                )
            verifier = layout.verifier or verifier
        taps = layout.taps if isinstance(layout, HiddenStateLayout) else parse_taps(layout)
        lay = HiddenStateLayout(taps, n, width, verifier)
        if f.ids is not None:
            notes.append(f"config ids {list(f.ids)} ignored: the caller's layout wins")
        return lay, None, "caller-supplied layout"
    if f.layout_taps is not None:
        lay = HiddenStateLayout(f.layout_taps, n, width, verifier)
        return lay, _agreeing_convention(f, lay, n), f.layout_field
    if f.ids is None:
        if fmt == "speculators":  # what speculators' from_pretrained resolves and trains with
            ids = (2, n // 2, n - 3)
            taps = taps_from_ids(ids, Convention.INPUT_TO_LAYER, n, path=where)
            notes.append(f"no ids in config: speculators' default {list(ids)} (input-to-layer)")
            lay = HiddenStateLayout(taps, n, width, verifier)
            return lay, Convention.INPUT_TO_LAYER, "speculators default [2, n//2, n-3]"
        notes.append(stock_sglang_deepseek_capture(None, n).describe())
        return None, None, STOCK_DEFAULT_SOURCE
    if fmt == "speculators":
        if conv not in (None, Convention.INPUT_TO_LAYER):
            raise WiringError(
                f"speculators drafts store input-to-layer ids, but {conv} was requested",
                path=where,
                fix="drop --aux-layer-convention for speculators drafts",
            )
        used = Convention.INPUT_TO_LAYER
    elif conv is not None:
        used = conv
    elif fmt == "specforge":
        used = Convention.OUTPUT_OF_LAYER
        notes.append("SpecForge weights (midlayer.*): ids read as output-of-layer")
    elif -1 in f.ids:
        used = Convention.OUTPUT_OF_LAYER  # -1 (embed) exists only in output-of-layer
    elif n in f.ids:
        used = Convention.INPUT_TO_LAYER  # n (last layer) exists only in input-to-layer
    else:
        raise _undeclared_ids_error(f, n)
    taps = taps_from_ids(f.ids, used, n, path=where)
    return HiddenStateLayout(taps, n, width, verifier), used, f"{f.ids_field} ({used})"


def _agreeing_convention(f: DraftFields, lay: HiddenStateLayout, n: int) -> Convention | None:
    """Ids next to an explicit layout must spell the same taps in some convention."""
    if f.ids is None:
        return None
    meanings = []
    for conv in (Convention.INPUT_TO_LAYER, Convention.OUTPUT_OF_LAYER):
        try:
            taps = taps_from_ids(f.ids, conv, n)
        except WiringError as err:
            meanings.append(f"as {conv}: invalid ({err.message})")
            continue
        if taps == lay.taps:
            return conv
        meanings.append(f"as {conv}: {format_taps(taps)}")
    raise WiringError(
        f"{f.layout_field} says {lay} but {f.ids_field} {list(f.ids)} disagree "
        f"({'; '.join(meanings)})",
        path=f.where,
        fix=f"set the ids to the input-to-layer spelling {list(lay.hf_indices())} or remove them",
    )


def _undeclared_ids_error(f: DraftFields, n: int) -> WiringError:
    """Ids within 0..n-1 read validly (or invalidly) in both conventions: say both readings
    and what stock SGLang would do, and how to state the intended one."""
    parts, valid = [], 0
    for conv in (Convention.OUTPUT_OF_LAYER, Convention.INPUT_TO_LAYER):
        try:
            parts.append(f"as {conv} ids: {format_taps(taps_from_ids(f.ids, conv, n))}")
            valid += 1
        except WiringError as err:
            parts.append(f"as {conv} ids: invalid ({err.message})")
    ids = list(f.ids or ())
    if not valid:
        return WiringError(
            f"{f.ids_field} {ids} are invalid in every convention: " + "; ".join(parts),
            path=f.where,
            fix="use ids of the target the draft was trained for",
        )
    stock = stock_sglang_deepseek_capture(ids, n)
    parts.append(
        "stock SGLang 0.5.23 on a DeepSeek target would "
        + (f"capture {format_taps(stock.taps)}" if stock.taps else f"crash ({stock.crash})")
    )
    return AmbiguousIdsError(
        f"{f.ids_field} {ids} do not say which id convention they use: " + "; ".join(parts),
        path=f.where,
        fix=_STATE_IT,
    )


def _fc_in_features(tensors: dict[str, TensorInfo], draft_dir: Path, f: DraftFields) -> int | None:
    if not tensors:
        return None
    if "fc.weight" not in tensors:
        raise WiringError(
            "the weights have no fc.weight: not an EAGLE-3 draft", path=str(draft_dir)
        )
    _dtype, shape = tensors["fc.weight"]
    if len(shape) != 2 or shape[0] != f.draft_hidden:
        raise WiringError(
            f"fc.weight has shape {list(shape)}; expected [{f.draft_hidden}, in_features]",
            path=str(draft_dir),
        )
    return shape[1]
