"""One deployment for a traffic mix: the static setting, the adaptive config or plain decoding
that serves the whole mix fastest, with the reasons (pure).

A mix is a share of the generated tokens per concurrency: ``--concurrency 1,8,32 --weights
0.5,0.3,0.2``, or a trace file of phases (``{"phases": [{"concurrency": 1, "requests": 16,
"max_new_tokens": 64}, ...]}``, each phase weighted by its tokens). A phase may give
``"lengths"`` instead (each request's tokens, cycled over its requests) and ``"per_round"``
(its requests are sent in closed-loop rounds of that many, each round drained before the next,
as a benchmark does; tune/rounds.py simulates them). A deployment serving
``a_c`` tokens a second in all at concurrency c (tune/predict_mix.py: the running batch is capped
at --max-running-requests, and each arrival's prefill stalls the batch) takes
``sum(w_c / a_c)`` seconds a token over the mix: whole-mix tok/s is its inverse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from sglang_eagle3.errors import WiringError

PLAIN, ADAPTIVE = "plain", "adaptive"
# A deployment more than 10 % behind the fastest at one concurrency of the mix is passed over
# for one that is not, even if it leads the whole mix by a little: a mix's weights are a guess,
# and a near-tie in the whole (run 3 of bench_live: 0.01 %) is within any model's error.
FLOOR = 0.90


@dataclass(frozen=True)
class Phase:
    concurrency: int
    weight: float  # share of the mix's generated tokens
    requests: int | None = None
    max_new_tokens: int | None = None  # the mean of ``lengths`` where given
    lengths: tuple[int, ...] | None = None  # cycled over the requests
    per_round: int | None = None  # requests a closed-loop round (None: one round)

    def rounds(self) -> list[list[int]]:
        """The requests' lengths, round by round (empty: a mix without requests)."""
        if self.requests is None:
            return []
        cycle = self.lengths or (self.max_new_tokens or 1,)
        every = [cycle[i % len(cycle)] for i in range(self.requests)]
        size = self.per_round or self.requests
        return [every[i : i + size] for i in range(0, len(every), size)]


def phase_of(d: dict) -> Phase:
    """A Phase from its JSON (a result's ``mix.phases`` entry)."""
    lengths = d.get("lengths")
    return Phase(**{**d, "lengths": None if lengths is None else tuple(lengths)})


def from_weights(concurrency: tuple[int, ...], weights: str | None) -> list[Phase]:
    """--concurrency with --weights (default: equal shares); a WiringError on a bad list."""
    if weights is None:
        return [Phase(c, 1 / len(concurrency)) for c in concurrency]
    fix = "give one weight >= 0 per --concurrency value, e.g. --weights 0.5,0.3,0.2"
    try:
        values = [float(w) for w in weights.split(",")]
    except ValueError:
        raise WiringError(f"--weights {weights!r} is not a list of numbers",
                          path="command line", fix=fix) from None  # fmt: skip
    if any(v != v or v == float("inf") for v in values):
        raise WiringError(f"--weights {weights!r} holds nan or inf", path="command line", fix=fix)
    if len(values) != len(concurrency) or min(values) < 0 or not sum(values) > 0:
        raise WiringError(f"--weights {weights!r}: {len(values)} weight(s) for "
                          f"{len(concurrency)} concurrencies, all >= 0 and not all 0",
                          path="command line", fix=fix)  # fmt: skip
    total = sum(values)
    return [Phase(c, w / total) for c, w in zip(concurrency, values, strict=True)]


def read_trace(path: Path, default_tokens: int, *, top: int) -> list[Phase]:
    """The phases of a trace file, each weighted by requests x max_new_tokens."""
    fix = ('write {"phases": [{"concurrency": 1, "requests": 16, "max_new_tokens": 64}, ...]} '
           f"with concurrency 1-{top}, requests >= 1 (optional: \"lengths\": [24, 64], a "
           '"per_round": 16)')  # fmt: skip
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WiringError(f"cannot read the trace: {err}", path=str(path), fix=fix) from None
    phases = data.get("phases") if isinstance(data, dict) else None
    if not isinstance(phases, list) or not phases:
        raise WiringError('the trace holds no "phases" list', path=str(path), fix=fix)
    out = []
    for i, ph in enumerate(phases):
        ok = isinstance(ph, dict)
        c, n = (ph.get("concurrency"), ph.get("requests")) if ok else (None, None)
        t = ph.get("max_new_tokens", default_tokens) if ok else None
        lengths = ph.get("lengths", [t]) if ok else None
        size = ph.get("per_round", n) if ok else None
        lengths_ok = isinstance(lengths, list) and bool(lengths) and all(map(_whole, lengths))
        if not (lengths_ok and all(map(_whole, (c, n, t, size)))) or c > top:
            raise WiringError(f"phase {i} ({ph!r}) needs whole-number concurrency "
                              f"(1-{top}), requests, max_new_tokens, lengths and per_round "
                              "(>= 1)", path=str(path), fix=fix)  # fmt: skip
        given = ph.get("lengths")
        phase = Phase(c, 0.0, n, t if given is None else sum(given) / len(given),
                      None if given is None else tuple(given), ph.get("per_round"))  # fmt: skip
        out.append(replace(phase, weight=float(sum(map(sum, phase.rounds())))))
    total = sum(p.weight for p in out)
    return [replace(p, weight=p.weight / total) for p in out]


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def running(c: int, cap: int | None) -> int:
    """The batch ``c`` concurrent requests run as: at most ``cap`` (None: no cap), the rest
    queue."""
    return c if cap is None else min(c, cap)


def whole(phases: list[Phase], served: dict[int, float]) -> float:
    """Whole-mix tok/s of a deployment serving ``served[c]`` tok/s in all at c."""
    return 1 / sum(p.weight / served[p.concurrency] for p in phases)


def recommend(phases: list[Phase], candidates: dict[str, dict[int, float]]) -> dict:
    """The fastest deployment over the whole mix among those within FLOOR of the fastest at
    every concurrency of it (all of them where none is), every candidate's figures, and why."""
    totals = {name: whole(phases, v) for name, v in candidates.items()}
    cs = sorted({p.concurrency for p in phases})
    per_c = {c: max(candidates, key=lambda n: candidates[n][c]) for c in cs}
    worst = {n: min(v[c] / candidates[per_c[c]][c] for c in cs) for n, v in candidates.items()}
    even = [n for n in candidates if worst[n] >= FLOOR] or list(candidates)
    best = max(even, key=lambda n: totals[n])
    ranked = sorted(totals, key=lambda n: -totals[n])
    runners = [n for n in ranked if n != best][:3]
    others = ", ".join(f"{n} {totals[n]:.1f}" for n in runners)
    why = [f"{best} serves the whole mix at {totals[best]:.1f} tok/s; next {others}"]
    if ranked[0] != best:
        lag = f"{worst[ranked[0]]:.2f}x the fastest at one concurrency, below {FLOOR:.2f}x"
        why.append(f"not {ranked[0]} ({totals[ranked[0]]:.1f} tok/s): it runs {lag}")
    for c in cs:
        mine, top = candidates[best][c], candidates[per_c[c]][c]
        line = f"at {c}: {mine:.1f} tok/s, {mine / top:.2f}x the fastest here ({per_c[c]})"
        if PLAIN in candidates and best != PLAIN and mine < candidates[PLAIN][c]:
            line += f"; BELOW plain ({candidates[PLAIN][c]:.1f} tok/s) at this concurrency"
        why.append(line)
    return {"recommended": best, "whole_tok_s": {n: round(v, 2) for n, v in totals.items()},
            "per_concurrency_best": {str(c): n for c, n in per_c.items()}, "why": why,
            "worst_vs_fastest": {n: round(v, 3) for n, v in worst.items()}, "floor": FLOOR,
            "phases": [vars(p) for p in phases]}  # fmt: skip
