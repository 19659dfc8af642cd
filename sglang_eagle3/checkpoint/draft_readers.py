"""Read an EAGLE-3 draft directory (speculators, SGLang-flat or SpecForge) into a DraftSpec.

Formats and where their ids live:
- speculators 0.9 (``speculators_model_type: "eagle3"``): TOP-LEVEL
  ``eagle_aux_hidden_state_layer_ids``, always input-to-layer; sizes in
  ``transformer_layer_config``. No ids: speculators' own default [2, n//2, n-3] (input-to-layer).
- sglang-flat (``architectures: ["LlamaForCausalLMEagle3"]``):
  ``eagle_config.eagle_aux_hidden_state_layer_ids`` in no stated convention. -1 (embed) exists
  only as output-of-layer and n (last layer) only as input-to-layer, so either settles it;
  otherwise the caller must say (``convention=``) or the config must name its taps.
- sglang-mla (``architectures: ["Eagle3DeepseekV2ForCausalLM"]``, SGLang's MLA drafter):
  the flat keys plus MLA dimensions, ids read by the sglang-flat rules (``draft_schema_mla``
  says what TorchSpec's training and export ids mean).
- specforge: the same config shape as sglang-flat (SpecForge writes it that way), told apart
  only by weight names: SpecForge saves its decoder layer as ``midlayer.*`` (SGLang renames it
  to ``layers.0`` at load). SpecForge hands the ids to its target's
  ``set_aux_hidden_states_layers``: forward hooks on ``layers[id]`` outputs (HF backend) or
  SGLang llama/qwen's +1 (SGLang backend), i.e. output-of-layer. A SpecForge config whose
  weights are absent reads as sglang-flat (ambiguous), which is the safe side.

The explicit ``eagle_config.hidden_state_layout`` (also top-level for speculators) wins over
ids and needs no convention; when ids sit next to it they must agree with it (``draft_layout``).
A caller's layout must agree with both, unless overridden.
The config's keys and types are ``draft_schema``'s models.
"""

from __future__ import annotations

from pathlib import Path

from sglang_eagle3.checkpoint.config_json import read_draft_config_json
from sglang_eagle3.checkpoint.draft_layout import LayoutArg, Resolved, Target, resolve_layout
from sglang_eagle3.checkpoint.draft_schema import FLAT_ARCH, DraftFile, load_draft_file
from sglang_eagle3.checkpoint.draft_schema_mla import MLA_ARCH, MlaDraftConfig, is_mla_config
from sglang_eagle3.checkpoint.draft_spec import DraftSpec
from sglang_eagle3.checkpoint.safetensors_header import (
    TensorInfo,
    read_checkpoint_tensors,
    safetensors_files,
)
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import DEEPSEEK, Convention, check_num_layers
from sglang_eagle3.layout.families import Family
from sglang_eagle3.layout.taps import Tap, format_taps


def read_draft(
    draft_dir: str | Path,
    *,
    num_layers: int,
    target_hidden_size: int,
    convention: Convention | str | None = None,
    layout: LayoutArg = None,
    family: Family | None = DEEPSEEK,
    override_layout: bool = False,
) -> DraftSpec:
    """Parse ``draft_dir`` and check it against a target with ``num_layers`` decoder layers of
    width ``target_hidden_size``. ``layout`` (caller's explicit taps) must agree with an
    explicit layout in the config or with ids that settle their convention, unless
    ``override_layout``; it settles ids that do not. ``convention`` disambiguates flat ids.
    ``layout`` may be a HiddenStateLayout, a string like ``"embed,layer:2,layer:30"`` or a
    list of tap names. ``family`` is the target's row in the family table, whose stock id
    rule the notes and errors explain (None: not in the table; DeepSeek, the seed's, when the
    caller does not say). Every problem is a WiringError naming the file (and the field)."""
    n = check_num_layers(num_layers)
    width = target_hidden_size
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise WiringError(f"target_hidden_size must be an int >= 1, got {width!r}")
    conv = _requested_convention(convention)
    draft_dir = Path(draft_dir)
    where = str(draft_dir / "config.json")
    cfg = read_draft_config_json(draft_dir)
    files = safetensors_files(draft_dir) if draft_dir.is_dir() else None
    tensors: dict[str, TensorInfo] = read_checkpoint_tensors(draft_dir) if files else {}
    fmt = _detect_format(cfg, tensors, where)
    if fmt == "sglang-mla":
        f: DraftFile = MlaDraftConfig.load(cfg, path=where)
    else:
        f = load_draft_file(cfg, where, speculators=fmt == "speculators")
    _check_target_width(f, width, where)
    # speculators' data keeps the last captured tap (the final layer) as the verifier tap
    verifier = f.declared_layout[0].verifier
    if verifier is None and f.verifier_is_final:
        verifier = Tap.layer_output(n - 1)
    try:
        target = Target(n, width, verifier, family)
        r = resolve_layout(fmt, f, conv, layout, target, where, override=override_layout)
    except WiringError as err:  # layout validation knows no file: name the config
        raise err.with_path(where) from None
    _check_tap_count(r, f, where)
    fc_in = _fc_in_features(tensors, draft_dir, f, width)
    return _spec(f, r, fmt=fmt, where=where, width=width, fc_in=fc_in, tensors=tensors)


def _requested_convention(convention: Convention | str | None) -> Convention | None:
    conv = None if convention is None else Convention.parse(convention)
    if conv is Convention.SGLANG_0_5_23_DEEPSEEK:
        raise WiringError(
            f"{conv} only explains what stock SGLang captures; it cannot name a draft's taps",
            fix="use output-of-layer or input-to-layer",
        )
    return conv


def _detect_format(cfg: dict, tensors: dict[str, TensorInfo], where: str) -> str:
    smt = cfg.get("speculators_model_type")
    if smt is not None:
        if smt != "eagle3":
            raise WiringError(
                f"speculators_model_type is {smt!r}; only EAGLE-3 drafts are supported",
                path=where,
            )
        return "speculators"
    if is_mla_config(cfg):
        return "sglang-mla"
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or FLAT_ARCH not in archs:
        raise WiringError(
            f"architectures is {archs!r}: not an EAGLE-3 draft this tool can read",
            path=where,
            fix="use a speculators eagle3 checkpoint or a flat config with "
            f'["{FLAT_ARCH}"] or ["{MLA_ARCH}"]',
        )
    if any(name.startswith("midlayer.") for name in tensors):
        return "specforge"
    return "sglang-flat"


def _check_target_width(f: DraftFile, width: int, where: str) -> None:
    if f.declared_target_hidden != width:
        null = " (target_hidden_size is null: the draft's own hidden size)" if f.null_target else ""
        raise WiringError(
            f"draft expects target hidden states {f.declared_target_hidden} wide{null}, "
            f"the target's are {width}",
            path=where,
            fix="use the draft trained for this target",
        )


def _check_tap_count(r: Resolved, f: DraftFile, where: str) -> None:
    if r.layout is not None and len(r.layout.taps) != f.num_aux:
        raise WiringError(
            f"layout {r.layout} has {len(r.layout.taps)} taps but the draft's fc takes "
            f"{f.num_aux} ({f.num_aux_source})",
            path=where,
            fix="name exactly the taps the fc was trained on",
        )


def _fc_in_features(
    tensors: dict[str, TensorInfo], draft_dir: Path, f: DraftFile, width: int
) -> int | None:
    """fc.weight's in_features (None without weights), checked against taps x width."""
    if not tensors:
        return None
    if "fc.weight" not in tensors:
        raise WiringError(
            "the weights have no fc.weight: not an EAGLE-3 draft", path=str(draft_dir)
        )
    _dtype, shape = tensors["fc.weight"]
    hidden = f.layer.hidden_size
    if len(shape) != 2 or shape[0] != hidden:
        raise WiringError(
            f"fc.weight has shape {list(shape)}; expected [{hidden}, in_features]",
            path=str(draft_dir),
        )
    if shape[1] != f.num_aux * width:
        raise WiringError(
            f"fc.weight takes {shape[1]} input features, but {f.num_aux} taps x target hidden "
            f"{width} = {f.num_aux * width}",
            path=str(draft_dir),
            fix="the weights do not match the config or the target; use the matching draft",
        )
    return shape[1]


def _spec(
    f: DraftFile,
    r: Resolved,
    *,
    fmt: str,
    where: str,
    width: int,
    fc_in: int | None,
    tensors: dict[str, TensorInfo],
) -> DraftSpec:
    notes = list(r.notes)
    if r.layout is not None and not r.layout.is_capturable():
        notes.append(f"{format_taps(r.layout.uncapturable_taps())} cannot be captured by SGLang")
    return DraftSpec(
        config_path=where,
        format=fmt,
        layout=r.layout,
        convention=r.convention,
        layout_source=r.source,
        raw_ids=f.ids,
        draft_hidden_size=f.layer.hidden_size,
        target_hidden_size=width,
        num_aux=f.num_aux,
        fc_in_features=fc_in,
        draft_vocab_size=f.draft_vocab_size,
        target_vocab_size=f.layer.vocab_size,
        **f.flags().model_dump(),
        has_d2t="d2t" in tensors,
        has_t2d="t2d" in tensors,
        sliding_window=f.layer.window,
        verifier_name=f.verifier_name,
        notes=tuple(notes),
        embed_requires_grad=f.embed_requires_grad,
        has_embed=any(name.endswith("embed_tokens.weight") for name in tensors),
        draft_layers=f.layer.num_hidden_layers,
        null_target_hidden=f.null_target,
    )
