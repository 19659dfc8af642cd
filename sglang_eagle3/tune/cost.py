"""The cost of a speculative cycle, fitted to a few measured servers (pure: no torch, no numpy).

Per decode cycle at concurrency c (SGLang 0.5.23's EAGLE worker: one target forward verifies
c * draft_tokens tokens, the draft extend runs the drafter once on them, then steps - 1 draft
decode forwards run on c * topk beams):

    cycle(s, k, n, c) = plain(c) + V1 * c * (n - 1)       the verify: a decode step, and the
                                                          n - 1 more tokens per request
                      + T0 + D1 * c * n                   the extend, and fixed extra costs
                      + (s - 1) * (D0 + D1 * c * k)       the draft decode steps
    plain(c)          = P0 + P1 * c

P0 and P1 come from the plain server. A verify is priced as a decode step plus a marginal cost
per extra token (V1), not as n decode steps: where decoding is memory-bound, verifying a few
more tokens costs far less than decoding them (the first bench_tune run, which priced them as
plain tokens, drove every other cost to zero). T0, V1, D0 and D1 are fitted, non-negative, to
the cycle times of two speculative servers with different step counts and widths, each at
several concurrencies. Predicted decode speed per request: accept_length / cycle (tokens per
second); plain: 1 / plain(c).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """One server at one concurrency: seconds per decode cycle (per token when plain)."""

    steps: int  # 0: plain (no speculation)
    topk: int
    draft_tokens: int
    concurrency: int
    seconds: float  # per cycle (per decode step for plain)
    accept_length: float | None = None  # served, when speculative


@dataclass(frozen=True)
class CostModel:
    p0: float  # plain: seconds per decode step, fixed part
    p1: float  # plain: seconds per request in the batch
    v1: float  # verify: seconds per extra token per request beyond a decode step's one
    t0: float  # a speculative cycle's fixed part whatever its steps (target, extend, overhead)
    d0: float  # seconds per draft decode step, fixed part
    d1: float  # seconds per token the drafter processes

    def plain(self, c: int) -> float:
        return self.p0 + self.p1 * c

    def parts(self, s: int, k: int, n: int, c: int) -> dict[str, float]:
        """Seconds per cycle by part: verify and draft extend (their per-token costs), draft
        steps, and the fixed rest (the target's, the extend's and the scheduler's)."""
        return {
            "verify": self.plain(c) + self.v1 * c * (n - 1),
            "draft_extend": self.d1 * c * n,
            "draft_steps": (s - 1) * (self.d0 + self.d1 * c * k),
            "rest": self.t0,
        }

    def cycle(self, s: int, k: int, n: int, c: int) -> float:
        return sum(self.parts(s, k, n, c).values())

    def to_dict(self) -> dict[str, float]:
        return {k: round(v, 9) for k, v in vars(self).items()}


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Least squares of a small system via its normal equations; None when singular."""
    n = len(a[0])
    m = [[sum(r[i] * r[j] for r in a) for j in range(n)] for i in range(n)]
    v = [sum(r[i] * y for r, y in zip(a, b, strict=True)) for i in range(n)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-18:
            return None
        m[col], m[piv], v[col], v[piv] = m[piv], m[col], v[piv], v[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
                v[r] -= f * v[col]
    return [v[i] / m[i][i] for i in range(n)]


def _nnls(a: list[list[float]], b: list[float]) -> list[float]:
    """Non-negative least squares by trying every subset of free variables (n <= 4)."""
    n, best, best_err = len(a[0]), [0.0] * len(a[0]), float("inf")
    for size in range(n + 1):
        for free in itertools.combinations(range(n), size):
            x = [0.0] * n
            if free:
                sol = _solve([[r[i] for i in free] for r in a], b)
                if sol is None or min(sol) < 0:
                    continue
                for i, v in zip(free, sol, strict=True):
                    x[i] = v
            err = sum(
                (sum(r[i] * x[i] for i in range(n)) - y) ** 2 for r, y in zip(a, b, strict=True)
            )
            if err < best_err:
                best, best_err = x, err
    return best


def fit(measured: list[Measured]) -> CostModel:
    """The model through the measurements (at least two plain concurrencies, or one, and two
    speculative points)."""
    plain = [m for m in measured if m.steps == 0]
    spec = [m for m in measured if m.steps > 0]
    if not plain or len(spec) < 2:
        raise ValueError("a fit needs a plain server and two speculative measurements")
    if len({m.concurrency for m in plain}) > 1:
        p0, p1 = _nnls([[1.0, m.concurrency] for m in plain], [m.seconds for m in plain])
    else:
        p0, p1 = plain[0].seconds, 0.0
    rows, ys = [], []
    for m in spec:
        c, s, k, n = m.concurrency, m.steps, m.topk, m.draft_tokens
        rows.append([1.0, float(c * (n - 1)), float(s - 1), c * (n + (s - 1) * k)])
        ys.append(m.seconds - (p0 + p1 * c))
    t0, v1, d0, d1 = _nnls(rows, ys)
    return CostModel(p0, p1, v1, t0, d0, d1)


def accept_scale(pairs: list[tuple[float, float]]) -> float:
    """How far the profile's drafts per verify are from the served ones on the measured
    servers: sum(served - 1) / sum(profile - 1) over (profile, served) accept lengths.

    The profile scores the doctor's evidence (training data, or the target's own greedy
    continuations), the servers the user's traffic; where the two differ, every setting's
    accepted drafts move alike to first order, so the profile is rescaled by this factor."""
    den = sum(p - 1 for p, _ in pairs)
    num = sum(s - 1 for _, s in pairs)
    return num / den if den > 0 and num > 0 else 1.0


def break_even(model: CostModel, s: int, k: int, n: int, c: int) -> float:
    """The accept length at which this setting matches plain decoding's speed."""
    return model.cycle(s, k, n, c) / model.plain(c)
