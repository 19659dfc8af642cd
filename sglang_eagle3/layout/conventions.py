"""Numeric layer-id conventions, converted to and from taps.

- ``output-of-layer``: id -1 = embed, id K = layer:K (SGLang llama/qwen, SpecForge, the seed).
- ``input-to-layer``: id 0 = embed, id K = layer:K-1, id n = layer:n-1 (vLLM, speculators 0.9).
- ``sglang-0.5.23-deepseek``: what stock SGLang 0.5.23 captures on a DeepSeek/Kimi target. It is
  for explaining and diagnosing stock SGLang only, never for choosing taps.

A list is "mixed" when it holds an id that only one convention allows (-1: output-of-layer
only) together with an id that only the other allows (n: input-to-layer only); no convention
reads it, so it is rejected with both ids named.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.families import Family, IdRule, Switch, family_named
from sglang_eagle3.layout.taps import Tap, format_taps

STOCK = "stock SGLang 0.5.23"
DEEPSEEK = family_named("deepseek_v2")


class Convention(str, Enum):
    OUTPUT_OF_LAYER = "output-of-layer"
    INPUT_TO_LAYER = "input-to-layer"
    SGLANG_0_5_23_DEEPSEEK = "sglang-0.5.23-deepseek"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | Convention, *, path: str | None = None) -> Convention:
        if isinstance(value, Convention):
            return value
        for conv in cls:
            if value == conv.value:
                return conv
        names = ", ".join(c.value for c in cls)
        raise WiringError(f"unknown id convention {value!r}", path=path, fix=f"use one of {names}")


def id_range(convention: Convention | str, num_layers: int) -> tuple[int, int]:
    """Inclusive range of valid ids (capture indices for the DeepSeek convention)."""
    conv = Convention.parse(convention)
    if conv is Convention.OUTPUT_OF_LAYER:
        return -1, num_layers - 1
    if conv is Convention.INPUT_TO_LAYER:
        return 0, num_layers
    return 0, num_layers - 1


MAX_LAYERS = 10_000  # decoder layers; real targets have under 200


def check_num_layers(num_layers: int) -> int:
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise WiringError(f"num_layers must be an int >= 1, got {num_layers!r}")
    if num_layers > MAX_LAYERS:
        raise WiringError(
            f"num_layers {num_layers} is not a decoder depth (at most {MAX_LAYERS})",
            fix="check num_hidden_layers in the target's config.json",
        )
    return num_layers


def check_ids(ids: object, *, path: str | None = None, field: str = "ids") -> tuple[int, ...]:
    """A non-empty list of plain ints (bools and floats like 2.0 are refused)."""
    if not isinstance(ids, (list, tuple)):
        raise WiringError(f"{field} must be a list of ints, got {ids!r}", path=path)
    if not ids:
        raise WiringError(f"{field} is an empty list", path=path, fix="list at least one id")
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int):
            raise WiringError(
                f"{field} must hold only ints, got {i!r} in {list(ids)}",
                path=path,
                fix="write plain integers such as [-1, 2, 30]",
            )
    return tuple(ids)


def _reject_mixed(ids: tuple[int, ...], num_layers: int, path: str | None) -> None:
    only_out = [i for i in ids if i < 0]
    only_in = [i for i in ids if i == num_layers]
    if only_out and only_in:
        raise WiringError(
            f"ids {list(ids)} mix conventions: id {only_out[0]} exists only as output-of-layer "
            f"(valid -1..{num_layers - 1}) and id {only_in[0]} only as input-to-layer "
            f"(valid 0..{num_layers}) for a {num_layers}-layer target",
            path=path,
            fix="rewrite every id in one convention, or list taps by name in "
            "eagle_config.hidden_state_layout",
        )


def taps_from_ids(
    ids: Sequence[int],
    convention: Convention | str,
    num_layers: int,
    *,
    path: str | None = None,
) -> tuple[Tap, ...]:
    """Taps meant by ``ids`` in ``convention``, in list order. For the DeepSeek convention:
    the taps stock SGLang would capture (loop order), or a WiringError describing its crash."""
    conv = Convention.parse(convention, path=path)
    check_num_layers(num_layers)
    ids = check_ids(ids, path=path)
    if conv is Convention.SGLANG_0_5_23_DEEPSEEK:
        cap = stock_sglang_deepseek_capture(ids, num_layers)
        if cap.taps is None:
            raise WiringError(cap.describe(), path=path, fix="state taps explicitly instead")
        return cap.taps
    _reject_mixed(ids, num_layers, path)
    lo, hi = id_range(conv, num_layers)
    other = (
        Convention.INPUT_TO_LAYER
        if conv is Convention.OUTPUT_OF_LAYER
        else Convention.OUTPUT_OF_LAYER
    )
    for i in ids:
        if not lo <= i <= hi:
            olo, ohi = id_range(other, num_layers)
            hint = f"; {i} would be valid as an {other} id" if olo <= i <= ohi else ""
            raise WiringError(
                f"{conv} id {i} is out of range for a {num_layers}-layer target "
                f"(valid {conv} ids: {lo}..{hi}){hint}",
                path=path,
                fix="use ids of the target the draft was trained for, in one convention",
            )
    seen: set[int] = set()
    for i in ids:
        if i in seen:
            raise WiringError(
                f"{conv} id {i} appears twice in {list(ids)} (valid {conv} ids: {lo}..{hi}, "
                "each at most once)",
                path=path,
                fix="list each hidden state once",
            )
        seen.add(i)
    shift = 1 if conv is Convention.OUTPUT_OF_LAYER else 0
    return tuple(Tap(i + shift) for i in ids)


def ids_from_taps(
    taps: Sequence[Tap],
    convention: Convention | str,
    *,
    num_layers: int | None = None,
) -> tuple[int, ...]:
    """Ids spelling ``taps`` in ``convention``. For the DeepSeek convention: ids that make stock
    SGLang 0.5.23 capture exactly these taps (needs ascending, capturable taps)."""
    conv = Convention.parse(convention)
    taps = tuple(taps)
    if not taps:
        raise WiringError("no taps given")
    if len(set(taps)) != len(taps):
        raise WiringError(f"taps repeat: {format_taps(taps)}", fix="list each tap once")
    if conv is Convention.OUTPUT_OF_LAYER:
        return tuple(t.hf_index - 1 for t in taps)
    if conv is Convention.INPUT_TO_LAYER:
        return tuple(t.hf_index for t in taps)
    if list(taps) != sorted(taps):
        raise WiringError(
            f"{STOCK} packs captures in ascending layer order, so it cannot feed "
            f"{format_taps(taps)} in this order",
            fix="use the sglang_eagle3 capture plugin, or retrain with ascending taps",
        )
    if num_layers is not None:
        for t in taps:
            t.capture_index(check_num_layers(num_layers))
    ids = [t.hf_index for t in taps]
    if ids[0] == 1:  # a first id of 1 makes 0.5.23 add +1 to every id: move it
        if len(ids) == 1:
            raise WiringError(
                f"{STOCK} on DeepSeek cannot capture layer:0 alone (id 1 alone becomes 2)",
                fix="use the sglang_eagle3 capture plugin",
            )
        ids = ids[1:] + ids[:1]
    return tuple(ids)


@dataclass(frozen=True)
class StockCapture:
    """What stock SGLang 0.5.23 does with a draft's ids on one target family."""

    family: Family
    ids: tuple[int, ...] | None  # as written in eagle_config (None: key absent)
    num_layers: int
    capture_indices: tuple[int, ...]  # the list after the family's id rule
    shifted: bool  # the rule added 1
    taps: tuple[Tap, ...] | None  # captured taps in fill (ascending) order; None on crash
    crash: str | None  # the startup error SGLang raises, or None

    def describe(self) -> str:
        where = f"{STOCK} ({self.family.label})"
        if self.ids is None:
            plus = ", then +1" if self.family.default_plus_one else " used as is"
            head = f"{where} with no ids: default [2, n//2, n-3]{plus}"
        elif self.shifted:
            first = self.family.rule is IdRule.PLUS_ONE_IF_FIRST_IS_1
            why = "first id is 1" if first else "its rule is +1 always"
            head = f"{where} with ids {list(self.ids)}: {why}, so +1 to each"
        else:
            head = f"{where} with ids {list(self.ids)}: ids used as is"
        head += f" -> capture indices {list(self.capture_indices)} (input-to-layer ids)"
        if self.crash is None:
            return f"{head} = {format_taps(self.taps or ())}"
        top = self.family.max_capture_index(self.num_layers)
        bad = [i for i in self.capture_indices if not 0 <= i <= top]
        dup = sorted({i for i in self.capture_indices if self.capture_indices.count(i) > 1})
        why = []
        if bad:
            why.append(f"indices {bad} are outside 0..{top} and never match")
        if dup:
            why.append(f"indices {dup} repeat but are captured once")
        reason = "; ".join(why) or "no index matched"
        when = "at startup" if self.crash.startswith("IndexError") else "at the first forward"
        return f"{head}; {reason} -> crash {when}: {self.crash}"


def stock_capture(family: Family, ids: Sequence[int] | None, num_layers: int) -> StockCapture:
    """Replay a family's ``set_eagle3_layers_to_capture`` and capture loop in SGLang 0.5.23:
    stored index i captures hs[i] (the input of layer i) in ascending order. An index that
    never matches crashes the server: the packer (DeepSeek) at the first forward, a flag
    family at startup (``layers[n]``), a list family in the drafter's fc (too few taps)."""
    n = check_num_layers(num_layers)
    written = None
    if ids is not None:
        written = tuple(ids) if isinstance(ids, (list, tuple)) and not ids else check_ids(ids)
    indices = family.stock_indices(written, n)
    top = family.max_capture_index(n)
    matched = sorted({i for i in indices if 0 <= i <= top})
    crash: str | None = None
    if family.switch is Switch.FLAGS and any(i >= n for i in indices) and not family.final_layer:
        crash = f"IndexError: no decoder layer {max(indices)} in a {n}-layer model"
    elif not matched:
        # nothing captured: the model returns no aux tuple and the caller's unpack fails
        crash = "ValueError while unpacking hidden states: no aux hidden state was captured"
    elif len(matched) != len(indices):
        got = f"captured {len(matched)} of {len(indices)} aux hidden states"
        crash = f"RuntimeError: {got}" if family.switch is Switch.PACKER else got
    taps = None if crash else tuple(Tap(i) for i in matched)
    shifted = written is not None and indices != written
    return StockCapture(family, written, n, tuple(indices), shifted, taps, crash)


def stock_sglang_deepseek_capture(ids: Sequence[int] | None, num_layers: int) -> StockCapture:
    """``stock_capture`` on the DeepSeek-V2 family (DeepSeek-V3, Kimi-K2, Kimi-K2.5)."""
    return stock_capture(DEEPSEEK, ids, num_layers)
