"""Which taps a draft reads, in order of authority: the caller's layout, the config's explicit
``hidden_state_layout``, its ids read in a convention, or a default (pure).

-1 (embed) exists only as output-of-layer and n (the last layer) only as input-to-layer, so
either settles flat ids; otherwise the caller must say (``convention=``) or the config must name
its taps. SpecForge hands its ids to forward hooks on ``layers[id]`` outputs: output-of-layer.
speculators always trains with input-to-layer ids.

What stock SGLang would capture instead is told by the target's family rule (``Target.family``);
without a target the seed's family, DeepSeek, is assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sglang_eagle3.checkpoint.draft_schema import DraftFile
from sglang_eagle3.checkpoint.draft_spec import STOCK_DEFAULT_SOURCE
from sglang_eagle3.errors import AmbiguousIdsError, WiringError
from sglang_eagle3.layout.conventions import (
    DEEPSEEK,
    STOCK,
    Convention,
    stock_capture,
    taps_from_ids,
)
from sglang_eagle3.layout.families import Family
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import Tap, format_taps, parse_taps

LayoutArg = HiddenStateLayout | str | Sequence[str | Tap] | None
_STATE_IT = (
    "pass --aux-layer-convention output-of-layer (or input-to-layer), or add "
    'eagle_config.hidden_state_layout, e.g. ["embed", "layer:2", "layer:30"], naming the '
    "taps the draft was trained on"
)
CALLER_SOURCE = "caller-supplied layout"
# the launcher's flags: only the launcher passes a caller layout
LAYOUT_FLAG, OVERRIDE_FLAG = "--hidden-state-layout", "--override-draft-layout"
# the target's architecture is not in the table: its stock rule is SGLang's alone to know
UNKNOWN_FAMILY = "a target family sglang-eagle3 does not know, so it cannot say which taps"


@dataclass
class Resolved:
    """The layout a draft reads, the convention its ids were read in, where it came from."""

    layout: HiddenStateLayout | None
    convention: Convention | None
    source: str
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Target:
    num_layers: int
    hidden_size: int
    verifier: Tap | None  # the draft's verifier tap, when known
    # whose stock id rule the notes explain; None: an architecture outside the table
    family: Family | None = DEEPSEEK


def resolve_layout(
    fmt: str,
    f: DraftFile,
    conv: Convention | None,
    layout: LayoutArg,
    t: Target,
    where: str,
    *,
    override: bool = False,
) -> Resolved:
    """The layout for draft ``f`` (format ``fmt``, read from ``where``) on target ``t``.
    ``layout``: the caller's, checked against what the checkpoint says (``override``: used
    even where it contradicts)."""
    if layout is not None:
        return _caller_layout(fmt, f, conv, layout, t, where, override)
    return _checkpoint_layout(fmt, f, conv, t, where)


def _checkpoint_layout(
    fmt: str, f: DraftFile, conv: Convention | None, t: Target, where: str
) -> Resolved:
    keys, layout_field = f.declared_layout
    if keys.taps is not None:
        lay = HiddenStateLayout(keys.taps, t.num_layers, t.hidden_size, t.verifier)
        return Resolved(lay, _agreeing_convention(f, lay, layout_field, where), layout_field)
    if f.ids is None:
        return _default_layout(fmt, t, where)
    used, notes = _ids_convention(fmt, f, conv, t, where)
    taps = taps_from_ids(f.ids, used, t.num_layers, path=where)
    lay = HiddenStateLayout(taps, t.num_layers, t.hidden_size, t.verifier)
    return Resolved(lay, used, f"{f.ids_field} ({used})", notes)


def _caller_layout(
    fmt: str,
    f: DraftFile,
    conv: Convention | None,
    layout: LayoutArg,
    t: Target,
    where: str,
    override: bool,
) -> Resolved:
    """The caller's layout where the checkpoint agrees or cannot say (no layout, no ids, or
    ids in no stated convention: the caller's layout is how the user says which reading);
    a contradiction of an explicit layout or of ids that settle their convention is an
    error unless ``override``, and then the source says "overridden"."""
    verifier = t.verifier
    if isinstance(layout, HiddenStateLayout):
        if (layout.num_layers, layout.hidden_size) != (t.num_layers, t.hidden_size):
            raise WiringError(
                f"the given layout is for {layout.num_layers} layers x {layout.hidden_size}, "
                f"the target has {t.num_layers} x {t.hidden_size}"
            )
        verifier = layout.verifier or verifier
    taps = layout.taps if isinstance(layout, HiddenStateLayout) else parse_taps(layout)
    lay = HiddenStateLayout(taps, t.num_layers, t.hidden_size, verifier)
    explicit = f.declared_layout[0].taps is not None or f.ids is not None
    try:
        own = _checkpoint_layout(fmt, f, conv, t, where) if explicit else None
    except AmbiguousIdsError:  # the caller's layout is the user's answer to "which reading?"
        reading = _reading(f, lay)
        neither = f"config ids {list(f.ids or ())} spell these taps in neither convention"
        return Resolved(lay, reading, CALLER_SOURCE, [] if reading else [neither])
    except WiringError as err:  # the config's own taps are broken: nothing to agree with
        if not override:
            raise WiringError(
                f"{LAYOUT_FLAG} {format_taps(lay.taps)} cannot be checked against the draft "
                f"config: {err.message}",
                path=err.path or where,
                fix=f"fix the draft config, or add {OVERRIDE_FLAG} to serve the given taps",
            ) from None
        note = f"overridden: the draft config's own taps do not read ({err.message})"
        return Resolved(lay, None, f"{CALLER_SOURCE} (overridden)", [note])
    if own is None or own.layout is None or own.layout.taps == lay.taps:
        return Resolved(lay, None if own is None else own.convention, CALLER_SOURCE)
    said = f"{own.source} says {format_taps(own.layout.taps)}"
    if not override:
        raise WiringError(
            f"{LAYOUT_FLAG} {format_taps(lay.taps)} contradicts the checkpoint: {said}",
            path=where,
            fix=f"drop {LAYOUT_FLAG} to serve the checkpoint's taps, or add {OVERRIDE_FLAG} "
            "if the draft was really trained on the given ones",
        )
    note = f"overridden: serving {format_taps(lay.taps)} where {said}"
    return Resolved(lay, None, f"{CALLER_SOURCE} (overridden; {said})", [note])


def _reading(f: DraftFile, lay: HiddenStateLayout) -> Convention | None:
    """The convention in which ambiguous ids spell ``lay``, if one does."""
    for conv in (Convention.OUTPUT_OF_LAYER, Convention.INPUT_TO_LAYER):
        try:
            if taps_from_ids(f.ids or (), conv, lay.num_layers) == lay.taps:
                return conv
        except WiringError:
            continue
    return None


def _default_layout(fmt: str, t: Target, where: str) -> Resolved:
    n = t.num_layers
    if fmt != "speculators":
        fam = t.family
        note = stock_capture(fam, None, n).describe() if fam else f"{STOCK}: {UNKNOWN_FAMILY}"
        return Resolved(None, None, STOCK_DEFAULT_SOURCE, [note])
    ids = (2, n // 2, n - 3)  # what speculators' from_pretrained resolves and trains with
    taps = taps_from_ids(ids, Convention.INPUT_TO_LAYER, n, path=where)
    note = f"no ids in config: speculators' default {list(ids)} (input-to-layer)"
    lay = HiddenStateLayout(taps, n, t.hidden_size, t.verifier)
    return Resolved(lay, Convention.INPUT_TO_LAYER, "speculators default [2, n//2, n-3]", [note])


def _ids_convention(
    fmt: str, f: DraftFile, conv: Convention | None, t: Target, where: str
) -> tuple[Convention, list[str]]:
    """The convention ``f.ids`` are read in, and a note when the format decided it."""
    ids, n = f.ids or (), t.num_layers
    if fmt == "speculators":
        if conv not in (None, Convention.INPUT_TO_LAYER):
            raise WiringError(
                f"speculators drafts store input-to-layer ids, but {conv} was requested",
                path=where,
                fix="drop --aux-layer-convention for speculators drafts",
            )
        return Convention.INPUT_TO_LAYER, []
    if conv is not None:
        return conv, []
    if fmt == "specforge":
        return Convention.OUTPUT_OF_LAYER, [
            "SpecForge weights (midlayer.*): ids read as output-of-layer"
        ]
    if -1 in ids:
        return Convention.OUTPUT_OF_LAYER, []  # -1 (embed) exists only in output-of-layer
    if n in ids:
        return Convention.INPUT_TO_LAYER, []  # n (last layer) exists only in input-to-layer
    raise _undeclared_ids_error(f, t, where)


def _agreeing_convention(
    f: DraftFile, lay: HiddenStateLayout, layout_field: str, where: str
) -> Convention | None:
    """Ids next to an explicit layout must spell the same taps in some convention."""
    if f.ids is None:
        return None
    meanings = []
    for conv in (Convention.INPUT_TO_LAYER, Convention.OUTPUT_OF_LAYER):
        try:
            taps = taps_from_ids(f.ids, conv, lay.num_layers)
        except WiringError as err:
            meanings.append(f"as {conv}: invalid ({err.message})")
            continue
        if taps == lay.taps:
            return conv
        meanings.append(f"as {conv}: {format_taps(taps)}")
    raise WiringError(
        f"{layout_field} says {lay} but {f.ids_field} {list(f.ids)} disagree "
        f"({'; '.join(meanings)})",
        path=where,
        fix=f"set the ids to the input-to-layer spelling {list(lay.hf_indices())} or remove them",
    )


def _undeclared_ids_error(f: DraftFile, t: Target, where: str) -> WiringError:
    """Ids within 0..n-1 read validly (or invalidly) in both conventions: say both readings
    and what stock SGLang would do on the target's family, and how to state the intended one."""
    ids, n = list(f.ids or ()), t.num_layers
    parts, valid = [], 0
    for conv in (Convention.OUTPUT_OF_LAYER, Convention.INPUT_TO_LAYER):
        try:
            parts.append(f"as {conv} ids: {format_taps(taps_from_ids(ids, conv, n))}")
            valid += 1
        except WiringError as err:
            parts.append(f"as {conv} ids: invalid ({err.message})")
    if not valid:
        return WiringError(
            f"{f.ids_field} {ids} are invalid in every convention: " + "; ".join(parts),
            path=where,
            fix="use ids of the target the draft was trained for",
        )
    parts.append(_stock_reading(t.family, ids, n))
    return AmbiguousIdsError(
        f"{f.ids_field} {ids} do not say which id convention they use: " + "; ".join(parts),
        path=where,
        fix=_STATE_IT,
    )


def _stock_reading(family: Family | None, ids: list[int], n: int) -> str:
    """What stock SGLang would make of ``ids``: the rule is the family's, so name both."""
    if family is None:
        return f"{STOCK} on this target: {UNKNOWN_FAMILY}"
    stock = stock_capture(family, ids, n)
    did = f"capture {format_taps(stock.taps)}" if stock.taps else f"crash ({stock.crash})"
    return f"{STOCK} on {family.label} (ids {family.rule}) would {did}"
