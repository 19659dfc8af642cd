"""Which layouts the doctor scores: the declared one, the served one, and the usual mistakes.

- declared: what the draft's config says it was trained on (``read_draft``); ids that do not
  say their convention give two readings instead, both scored.
- served: what would reach the fc when serving. ``plugin``: this project's SGLang plugin (the
  declared layout; stock behaviour when the draft declares none). ``stock``: stock SGLang 0.5.23,
  which reads only ``eagle_config`` ids (default [2, n//2, n-3]) and turns them into capture
  indices by the target family's rule (DeepSeek's without a target: as is, +1 when the first
  id is 1); a family outside the table leaves it unknown.
- mistakes: every tap shifted one layer up or down, one stored tap later, the last K stored
  taps, SGLang's default (by the same rule), and with ``search`` every ascending K-subset of
  the stored taps.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3.checkpoint.draft_layout import UNKNOWN_FAMILY
from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.checkpoint.draft_spec import DraftSpec
from sglang_eagle3.errors import AmbiguousIdsError, WiringError
from sglang_eagle3.layout.capture_plan import plan_from_layout
from sglang_eagle3.layout.conventions import (
    DEEPSEEK,
    STOCK,
    Convention,
    stock_capture,
    taps_from_ids,
)
from sglang_eagle3.layout.families import Family
from sglang_eagle3.layout.taps import Tap, format_taps

MAX_SEARCH = 200  # ascending K-subsets scored at most by the exhaustive search
SERVED_BY = ("plugin", "stock")


@dataclass(frozen=True)
class Candidate:
    """A layout to score: stored-tap ``indices`` feed the fc in this order."""

    name: str
    taps: tuple[Tap, ...] | None  # tap names, when the data says what it stores
    indices: tuple[int, ...] | None  # into the stored taps; None: not evaluable
    sources: tuple[str, ...]
    why_not: str | None = None  # why it is not evaluable
    aliases: tuple[str, ...] = ()  # names of merged duplicates

    def __post_init__(self) -> None:
        if (self.indices is None) == (self.why_not is None):
            raise ValueError("a candidate has indices or a reason it has none, not both")
        if self.indices is not None and len(set(self.indices)) != len(self.indices):
            raise ValueError(f"candidate {self.name} repeats a stored tap: {self.indices}")

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def is_floor(self) -> bool:
        """The no-information baseline: the fc input zeroed."""
        return self.indices == ()

    @property
    def label(self) -> str:
        if self.is_floor:
            return "(taps zeroed: floor)"
        if self.taps is not None:
            return format_taps(self.taps)
        return "stored taps #" + ",".join(str(i) for i in self.indices or ())


FLOOR = Candidate(
    "floor: taps zeroed", None, (), ("fc input all zeros: what the token alone gives",)
)


def stored_index_candidates(num_stored: int, num_aux: int) -> list[tuple[str, tuple[int, ...]]]:
    """Layouts defined by stored position alone: first K, shifted by one, last K."""
    out = [("first K stored taps", tuple(range(num_aux)))]
    if num_stored > num_aux:
        out.append(("shifted +1 stored tap", tuple(range(1, num_aux + 1))))
        out.append(("last K stored taps", tuple(range(num_stored - num_aux, num_stored))))
    return out


def candidate_from_taps(
    name: str, taps: Sequence[Tap], stored: Sequence[Tap] | None, source: str
) -> Candidate:
    """A named-tap layout, evaluable when every tap is stored."""
    taps = tuple(taps)
    if stored is None:
        return Candidate(name, taps, None, (source,), "the data does not say which taps it stores")
    missing = [t for t in taps if t not in stored]
    if missing:
        why = f"{format_taps(missing)} not in the data (stored: {format_taps(stored)})"
        return Candidate(name, taps, None, (source,), why)
    return Candidate(name, taps, tuple(list(stored).index(t) for t in taps), (source,))


def merge_candidates(cands: Iterable[Candidate]) -> list[Candidate]:
    """One row per distinct layout, keeping the first name and every source."""
    out: list[Candidate] = []
    for c in cands:
        key = c.taps if c.taps is not None else c.indices
        for i, seen in enumerate(out):
            if (seen.taps if seen.taps is not None else seen.indices) == key and key is not None:
                out[i] = Candidate(
                    seen.name,
                    seen.taps,
                    seen.indices,
                    seen.sources + c.sources,
                    seen.why_not,
                    seen.aliases + c.names,
                )
                break
        else:
            out.append(c)
    return out


@dataclass(frozen=True)
class DraftLayouts:
    num_aux: int
    declared: tuple[Tap, ...] | None
    declared_source: str
    served: tuple[Tap, ...] | None
    served_source: str
    served_crash: str | None
    stock: tuple[Tap, ...] | None  # stock SGLang 0.5.23's capture (None: crash, unknown family)
    stock_text: str
    readings: tuple[tuple[str, tuple[Tap, ...]], ...]  # ambiguous ids, one per convention
    spec: DraftSpec | None
    notes: tuple[str, ...] = ()
    family: Family | None = DEEPSEEK  # the target's row: its rule makes stock's taps

    def __post_init__(self) -> None:
        if self.served is not None and self.served_crash is not None:
            raise ValueError("a served layout cannot both exist and crash")


def eagle_config_ids(draft_dir: Path) -> tuple[list[int] | None, bool]:
    """(eagle_config ids as SGLang reads them, is a speculators config)."""
    try:
        cfg = json.loads((draft_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None, False  # read_draft has already named the problem
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    ok = isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    return (ids if ok and ids else None), "speculators_model_type" in cfg


def draft_layouts(
    draft_dir: str | Path,
    *,
    num_layers: int,
    target_hidden_size: int,
    served_by: str = "plugin",
    family: Family | None = DEEPSEEK,
) -> DraftLayouts:
    """``family``: the target's row (None: not in the table, so stock's capture is unknown)."""
    if served_by not in SERVED_BY:
        raise WiringError(f"served_by must be one of {SERVED_BY}, got {served_by!r}")
    draft_dir = Path(draft_dir)
    n = num_layers
    readings: list[tuple[str, tuple[Tap, ...]]] = []
    notes: list[str] = []
    try:
        # no caller layout, so the launcher's override has no doctor twin: the doctor scores
        # the checkpoint's own declaration against the alternatives, and its verdict, not a
        # flag, says which layout the draft works with
        spec: DraftSpec | None = read_draft(
            draft_dir, num_layers=n, target_hidden_size=target_hidden_size, family=family
        )
    except AmbiguousIdsError as err:
        spec = None
        notes.append(err.message)
    ids, is_speculators = eagle_config_ids(draft_dir)
    if spec is None:
        for conv in (Convention.OUTPUT_OF_LAYER, Convention.INPUT_TO_LAYER):
            try:
                readings.append((f"ids {ids} read as {conv}", taps_from_ids(ids or [], conv, n)))
            except WiringError:
                pass
    stock = stock_capture(family, None if is_speculators else ids, n) if family else None
    stock_text = stock.describe() if stock else f"{STOCK} on this target: {UNKNOWN_FAMILY}"
    if is_speculators and stock:
        stock_text += " (SGLang reads only eagle_config ids; speculators' top-level ids unused)"
    declared = spec.layout.taps if spec is not None and spec.layout is not None else None
    num_aux = spec.num_aux if spec is not None else len(ids or ()) or 3
    served, crash = (stock.taps, stock.crash) if stock else (None, None)
    source = stock_text  # it opens with "stock SGLang 0.5.23 (family)" already
    if served_by == "plugin" and spec is not None and spec.layout is not None:
        try:
            plan_from_layout(spec.layout, spec.config_path)
            served, crash = declared, None
        except WiringError as err:
            served, crash = None, err.message
        source = f"sglang_eagle3 plugin: {spec.layout_source}"
    elif served_by == "plugin":
        source = "sglang_eagle3 plugin keeps stock behaviour (no declared layout): " + stock_text
    return DraftLayouts(
        num_aux=num_aux,
        declared=declared,
        declared_source=spec.layout_source if spec is not None else "ids without a convention",
        served=served,
        served_source=source,
        served_crash=crash,
        stock=stock.taps if stock else None,
        stock_text=stock_text,
        readings=tuple(readings),
        spec=spec,
        notes=tuple(notes) + (tuple(spec.notes) if spec is not None else ()),
        family=family,
    )


def _shift(taps: tuple[Tap, ...], delta: int, n: int) -> tuple[Tap, ...] | None:
    moved = tuple(Tap(t.hf_index + delta) for t in taps if 0 <= t.hf_index + delta <= n)
    return moved if len(moved) == len(taps) else None


def build_candidates(
    lay: DraftLayouts,
    stored: tuple[Tap, ...] | None,
    num_stored: int,
    num_layers: int,
    *,
    search: bool = False,
    positional: bool = True,
    extra: Sequence[tuple[str, tuple[Tap, ...], str]] = (),
) -> list[Candidate]:
    """Every layout worth scoring, de-duplicated; not-evaluable ones keep their reason.
    ``positional``: also the layouts named by stored position (meaningful for training data,
    not for taps the doctor captured itself); ``extra``: more (name, taps, source) layouts."""
    n, k = num_layers, lay.num_aux
    cands: list[Candidate] = []

    def named(name: str, taps: tuple[Tap, ...] | None, source: str) -> None:
        if taps is not None and len(taps) == k:
            cands.append(candidate_from_taps(name, taps, stored, source))

    named("declared", lay.declared, lay.declared_source)
    for name, taps in lay.readings:
        named(name, taps, "draft config ids")
    if lay.served is not None:
        named("served", lay.served, lay.served_source)
    named("stock SGLang 0.5.23", lay.stock, lay.stock_text)
    base = lay.declared or (lay.readings[0][1] if lay.readings else None)
    if base is not None:
        named("shifted +1 layer", _shift(base, 1, n), "every declared tap one layer later")
        named("shifted -1 layer", _shift(base, -1, n), "every declared tap one layer earlier")
    for name, taps, source in extra:
        named(name, taps, source)
    for name, idx in stored_index_candidates(num_stored, k) if positional else ():
        if stored is None:
            cands.append(Candidate(name, None, idx, ("stored position",)))
        else:
            named(name, tuple(stored[i] for i in idx), "stored position")
    if lay.family is not None:  # an unknown family's default is as unknown as its rule
        default = stock_capture(lay.family, None, n)
        named("SGLang default [2, n//2, n-3]", default.taps, default.describe())
    if stored is not None and (search or lay.declared is None):
        combos = list(itertools.islice(itertools.combinations(range(num_stored), k), MAX_SEARCH))
        for idx in combos:
            named("search", tuple(stored[i] for i in idx), "exhaustive search")
    cands.append(FLOOR)
    return merge_candidates(cands)


def resolve_stored_taps(
    data_taps: tuple[Tap, ...] | None, num_stored: int, lay: DraftLayouts, num_layers: int
) -> tuple[tuple[Tap, ...] | None, str]:
    """The data's stored taps: its metadata, else speculators' convention (the draft's fc taps
    then the final layer's output) when the count fits, else unknown."""
    if data_taps is not None:
        return data_taps, "data metadata"
    final = Tap(num_layers)  # layer:{n-1}, the verifier tap speculators stores last
    if lay.declared is not None and num_stored == len(lay.declared) + 1:
        taps = lay.declared + (final,)
        if len(set(taps)) == len(taps):
            return taps, (
                f"assumed {format_taps(taps)}: speculators stores the draft's fc taps, then the "
                "final layer (pass --data-taps to state them)"
            )
    return None, "unknown (pass --data-taps to name them)"
