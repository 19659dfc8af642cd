"""What the doctor captures when it makes its own evidence from the target (no ``--data``).

It scores every candidate layout on hidden states it takes itself, so it needs, per token,
the union of the taps the candidates name. The plausible layouts ``--search`` adds: the draft's
ids read in each id convention and by each family's stock rule, each shifted by one layer, and
each family's stock default; plus every K-subset of a small tap range (every tap when the
target is small enough, else the plausible layouts' taps).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sglang_eagle3.doctor.candidates import MAX_SEARCH, DraftLayouts, build_candidates
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import Convention, stock_capture, taps_from_ids
from sglang_eagle3.layout.families import FAMILIES
from sglang_eagle3.layout.taps import Tap

Layout = tuple[str, tuple[Tap, ...], str]  # (candidate name, taps, where it comes from)


def _shifted(taps: tuple[Tap, ...], delta: int, n: int) -> tuple[Tap, ...] | None:
    moved = [t.hf_index + delta for t in taps]
    return tuple(Tap(i) for i in moved) if all(0 <= i <= n for i in moved) else None


def plausible_layouts(ids: Sequence[int] | None, num_aux: int, num_layers: int) -> list[Layout]:
    """Every layout a wiring mistake around these ids could give (one row per tap tuple)."""
    n = num_layers
    found: dict[tuple[Tap, ...], tuple[str, list[str]]] = {}

    def add(name: str, taps: tuple[Tap, ...] | None, source: str) -> None:
        if taps is None or len(taps) != num_aux or len(set(taps)) != num_aux:
            return
        found.setdefault(taps, (name, []))[1].append(source)

    bases: list[tuple[str, tuple[Tap, ...]]] = []
    for conv in (Convention.OUTPUT_OF_LAYER, Convention.INPUT_TO_LAYER) if ids else ():
        try:
            bases.append((f"ids {list(ids)} read as {conv}", taps_from_ids(ids, conv, n)))
        except WiringError:
            pass  # ids outside this convention's range: not a reading
    for fam in FAMILIES:
        for written in (list(ids), None) if ids else (None,):
            stock = stock_capture(fam, written, n)
            if stock.taps is None:
                continue  # that wiring crashes: no layout to score
            if written:
                name = f"ids {list(ids)} by stock SGLang's rule '{fam.rule}'"
            else:
                name = "stock default [2, n//2, n-3]" + (
                    ", then +1" if fam.default_plus_one else " as is"
                )
            bases.append((name, stock.taps))
    for name, taps in bases:  # every reading before any shift, so a reading keeps its name
        add(name, taps, name)
    for name, taps in bases:
        for delta in (1, -1):
            add(f"{name}, shifted {delta:+d} layer", _shifted(taps, delta, n), f"{name} {delta:+d}")
    return [(name, taps, "; ".join(dict.fromkeys(src))) for taps, (name, src) in found.items()]


def servable(num_layers: int, top: int | None = None) -> tuple[Tap, ...]:
    """Every tap a layout may use: up to HF index ``top`` (the family's loop reach; None:
    every tap up to the final layer's output)."""
    return tuple(Tap(i) for i in range((num_layers if top is None else top) + 1))


def search_range(
    layouts: Sequence[Layout], num_aux: int, num_layers: int, top: int | None = None
) -> tuple[Tap, ...]:
    """The taps whose every K-subset ``--search`` scores: all of them when there are at most
    ``MAX_SEARCH`` subsets, else the taps the plausible layouts use."""
    every = servable(num_layers, top)
    if math.comb(len(every), num_aux) <= MAX_SEARCH:
        return every
    used = {t for _, taps, _ in layouts for t in taps if t in every}
    return tuple(sorted(used, key=lambda t: t.hf_index))


def needed_taps(
    lay: DraftLayouts,
    num_layers: int,
    *,
    extra: Sequence[Layout] = (),
    search_taps: Sequence[Tap] = (),
    top: int | None = None,
) -> tuple[Tap, ...]:
    """The union of every candidate's taps that the target can give (``top``: see
    ``servable``), ascending (the order SGLang fills them in)."""
    every = servable(num_layers, top)
    cands = build_candidates(lay, every, len(every), num_layers, positional=False, extra=extra)
    union = {t for c in cands if c.indices for t in (every[i] for i in c.indices)}
    union |= set(search_taps)
    if not union:
        raise WiringError(
            f"no candidate layout of {lay.num_aux} taps exists on a {num_layers}-layer target",
            fix="check --target (or the server's model) is the draft's target",
        )
    return tuple(sorted(union, key=lambda t: t.hf_index))
