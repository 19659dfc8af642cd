"""Which layouts the doctor scores: the declared one, the served one, and the usual mistakes.

- declared: what the draft's config says it was trained on (``read_draft``); ids that do not
  say their convention give two readings instead, both scored.
- served: what would reach the fc when serving. ``plugin``: this project's SGLang plugin (the
  declared layout; stock behaviour when the draft declares none). ``stock``: stock SGLang 0.5.23
  on a DeepSeek/Kimi target, which reads only ``eagle_config`` ids and uses them as is (+1 when
  the first id is 1), default [2, n//2, n-3].
- mistakes: every tap shifted one layer up or down, one stored tap later, the last K stored
  taps, SGLang's default, and with ``search`` every ascending K-subset of the stored taps.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.checkpoint.draft_spec import DraftSpec
from sglang_eagle3.doctor.evaluate import (
    FLOOR,
    Candidate,
    candidate_from_taps,
    merge_candidates,
    stored_index_candidates,
)
from sglang_eagle3.errors import AmbiguousIdsError, WiringError
from sglang_eagle3.layout.capture_plan import plan_from_layout
from sglang_eagle3.layout.conventions import (
    Convention,
    stock_sglang_deepseek_capture,
    taps_from_ids,
)
from sglang_eagle3.layout.taps import Tap, format_taps

MAX_SEARCH = 200  # ascending K-subsets scored at most by the exhaustive search
SERVED_BY = ("plugin", "stock")


@dataclass(frozen=True)
class DraftLayouts:
    num_aux: int
    declared: tuple[Tap, ...] | None
    declared_source: str
    served: tuple[Tap, ...] | None
    served_source: str
    served_crash: str | None
    stock: tuple[Tap, ...] | None  # stock SGLang 0.5.23's capture for this config
    stock_text: str
    readings: tuple[tuple[str, tuple[Tap, ...]], ...]  # ambiguous ids, one per convention
    spec: DraftSpec | None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.served is not None and self.served_crash is not None:
            raise ValueError("a served layout cannot both exist and crash")


def _eagle_ids(draft_dir: Path) -> tuple[list[int] | None, bool]:
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
    draft_dir: str | Path, *, num_layers: int, target_hidden_size: int, served_by: str = "plugin"
) -> DraftLayouts:
    if served_by not in SERVED_BY:
        raise WiringError(f"served_by must be one of {SERVED_BY}, got {served_by!r}")
    draft_dir = Path(draft_dir)
    n = num_layers
    readings: list[tuple[str, tuple[Tap, ...]]] = []
    notes: list[str] = []
    try:
        spec: DraftSpec | None = read_draft(
            draft_dir, num_layers=n, target_hidden_size=target_hidden_size
        )
    except AmbiguousIdsError as err:
        spec = None
        notes.append(err.message)
    ids, is_speculators = _eagle_ids(draft_dir)
    if spec is None:
        for conv in (Convention.OUTPUT_OF_LAYER, Convention.INPUT_TO_LAYER):
            try:
                readings.append((f"ids {ids} read as {conv}", taps_from_ids(ids or [], conv, n)))
            except WiringError:
                pass
    stock = stock_sglang_deepseek_capture(None if is_speculators else ids, n)
    stock_text = stock.describe()
    if is_speculators:
        stock_text += " (SGLang reads only eagle_config ids; speculators' top-level ids unused)"
    declared = spec.layout.taps if spec is not None and spec.layout is not None else None
    num_aux = spec.num_aux if spec is not None else len(ids or ()) or 3
    served, crash = stock.taps, stock.crash
    source = f"stock SGLang 0.5.23: {stock_text}"
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
        stock=stock.taps,
        stock_text=stock_text,
        readings=tuple(readings),
        spec=spec,
        notes=tuple(notes) + (tuple(spec.notes) if spec is not None else ()),
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
) -> list[Candidate]:
    """Every layout worth scoring, de-duplicated; not-evaluable ones keep their reason."""
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
    for name, idx in stored_index_candidates(num_stored, k):
        if stored is None:
            cands.append(Candidate(name, None, idx, ("stored position",)))
        else:
            named(name, tuple(stored[i] for i in idx), "stored position")
    default = stock_sglang_deepseek_capture(None, n)
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
