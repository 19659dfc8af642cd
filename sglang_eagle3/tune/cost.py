"""The cost of a speculative cycle, fitted to a few measured servers (pure: no torch, no numpy).

Per decode cycle at concurrency c (SGLang 0.5.23's EAGLE worker: one target forward verifies
c * draft_tokens tokens, the draft extend runs the drafter once on them, then steps - 1 draft
decode forwards run on c * topk beams):

    cycle(s, k, n, c) = plain(c) + V1 * c * (n - 1)       the verify: a decode step, and the
                                                          n - 1 more tokens per request
                      + T0 + D1 * c * n                   the extend, and fixed extra costs
                      + (s - 1) * (D0 + D1 * c * k)       the draft decode steps
                      + R1 * c                            per request, whatever its tokens
    plain(c)          = the plain server's measured step, linear between its concurrencies
                        (P0 + P1 * c where none was timed, and beyond the last by P1)

P0 and P1 are the plain server's line. The measured points themselves price plain: on 2 CPU
cores a plain step grows with the batch up to about 8 requests and then hardly at all (the
first bench_live run: 21, 27, 31, 38 and 36 ms at 1, 2, 4, 8 and 32), which no line fits
within 20 %. A verify is priced as a decode step plus a marginal cost
per extra token (V1), not as n decode steps: where decoding is memory-bound, verifying a few
more tokens costs far less than decoding them (the first bench_tune run, which priced them as
plain tokens, drove every other cost to zero). T0, V1, D0 and D1 are fitted, non-negative, to
the cycle times of two speculative servers with different step counts and widths, each at
several concurrencies. Predicted decode speed per request: accept_length / cycle (tokens per
second); plain: 1 / plain(c).

R1 is what a speculative cycle pays per request beyond its tokens: the per-request work of
building the draft tree and walking the verify's accepted tokens (a Python loop per request in
the CPU harness's spec ops). Two servers cannot tell it from the per-token costs; a steps-0
server can, and it is fitted only with one: steps 0 verifies one token with no draft step, so
its cycle is ``plain(c) + Z0 + (D1 + R1) * c``, its own fixed part Z0 fitted with the rest.
Without R1 the fit put the one-step chain's cycle 18-19 % high at one request and 11-12 % low
at 64 (bench_live runs 3 and 4 alike), and priced draft steps at nothing (D0 = 0).

Steps 0 (SGLang's adaptive mode with a [0] slot) is not plain decoding: each cycle still
verifies one token through the speculative path and runs the drafter's extend on it. It is
priced from its own server where one was timed, ``steps0(c) = plain(c) + Z0 + Z1 * c``, else as
a cycle without draft steps, ``plain(c) + T0 + (D1 + R1) * c``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """One server at one concurrency: seconds per decode cycle (per token when plain)."""

    steps: int  # 0: plain (topk 0), or SGLang's adaptive steps 0 (topk 1, draft tokens 1)
    topk: int
    draft_tokens: int
    concurrency: int
    seconds: float  # per cycle (per decode step for plain)
    accept_length: float | None = None  # served, when speculative

    @property
    def plain(self) -> bool:
        return self.topk == 0

    @property
    def steps0(self) -> bool:
        return self.steps == 0 and self.topk > 0


@dataclass(frozen=True)
class CostModel:
    p0: float  # plain: seconds per decode step, fixed part
    p1: float  # plain: seconds per request in the batch
    v1: float  # verify: seconds per extra token per request beyond a decode step's one
    t0: float  # a speculative cycle's fixed part whatever its steps (target, extend, overhead)
    d0: float  # seconds per draft decode step, fixed part
    d1: float  # seconds per token the drafter processes
    z0: float | None = None  # steps 0: fixed seconds over a plain step (None: not timed)
    z1: float | None = None  # steps 0: seconds per request over a plain step
    # seconds an arriving request stalls the batch (tune/rounds.py; None: not timed)
    arr_plain: float | None = None  # plain decoding
    arr0: float | None = None  # a speculative server: arr0 + arr1 * steps
    arr1: float | None = None
    r1: float = 0.0  # seconds per request of every speculative cycle (0: not fitted)
    plain_points: tuple[tuple[int, float], ...] = ()  # (concurrency, seconds) timed, sorted

    def plain(self, c: float) -> float:
        pts = self.plain_points
        if not pts:
            return self.p0 + self.p1 * c
        if c <= pts[0][0]:
            return pts[0][1]
        for (c0, s0), (c1, s1) in itertools.pairwise(pts):
            if c <= c1:
                return s0 + (s1 - s0) * (c - c0) / (c1 - c0)
        return pts[-1][1] + self.p1 * (c - pts[-1][0])

    def steps0(self, c: int) -> float:
        """Seconds per cycle of SGLang's adaptive steps 0 (one verified token, no draft)."""
        if self.z0 is None or self.z1 is None:
            return self.plain(c) + self.t0 + (self.d1 + self.r1) * c
        return self.plain(c) + self.z0 + self.z1 * c

    def arrival(self, steps: float | None) -> float:
        """Seconds an arriving request stalls the batch; ``steps`` None: plain decoding.
        Untimed: one batch-1 step (plain's, or steps 0's: the prefill and the drafter's
        extend), the first bench_live run's pricing."""
        if self.arr_plain is None or self.arr0 is None or self.arr1 is None:
            return self.plain(1) if steps is None else self.steps0(1)
        return self.arr_plain if steps is None else self.arr0 + self.arr1 * steps

    def parts(self, s: int, k: int, n: int, c: int) -> dict[str, float]:
        """Seconds per cycle by part: verify and draft extend (their per-token costs), draft
        steps, the per-request work and the fixed rest (the target's, the extend's and the
        scheduler's)."""
        return {
            "verify": self.plain(c) + self.v1 * c * (n - 1),
            "draft_extend": self.d1 * c * n,
            "draft_steps": (s - 1) * (self.d0 + self.d1 * c * k),
            "per_request": self.r1 * c,
            "rest": self.t0,
        }

    def cycle(self, s: int, k: int, n: int, c: int) -> float:
        if s == 0:
            return self.steps0(c)
        return sum(self.parts(s, k, n, c).values())

    def to_dict(self) -> dict:
        out = {k: None if v is None else round(v, 9) for k, v in vars(self).items()
               if k != "plain_points"}  # fmt: skip
        out["plain_points"] = [[c, round(v, 9)] for c, v in self.plain_points]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> CostModel:
        pts = tuple((int(c), float(v)) for c, v in d.get("plain_points", ()))
        return cls(**{**{k: v for k, v in d.items() if k != "plain_points"}, "plain_points": pts})


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


def nnls(a: list[list[float]], b: list[float]) -> list[float]:
    """Non-negative least squares by trying every subset of free variables (n <= 6)."""
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
    speculative points; steps-0 points, where given, price steps 0)."""
    plain = [m for m in measured if m.plain]
    spec = [m for m in measured if m.steps > 0]
    zero = [m for m in measured if m.steps0]
    if not plain or len(spec) < 2:
        raise ValueError("a fit needs a plain server and two speculative measurements")
    if len({m.concurrency for m in plain}) > 1:
        p0, p1 = nnls([[1.0, m.concurrency] for m in plain], [m.seconds for m in plain])
    else:
        p0, p1 = plain[0].seconds, 0.0
    by_c: dict[int, list[float]] = {}
    for m in plain:
        by_c.setdefault(m.concurrency, []).append(m.seconds)
    points = tuple((c, sum(v) / len(v)) for c, v in sorted(by_c.items()))
    line = CostModel(p0, p1, 0, 0, 0, 0, plain_points=points)
    joint = len({m.concurrency for m in zero}) > 1  # steps 0's slope tells R1 from D1
    rows, ys = [], []
    for m in spec:
        c, s, k, n = m.concurrency, m.steps, m.topk, m.draft_tokens
        per_token = [1.0, float(c * (n - 1)), float(s - 1), c * (n + (s - 1) * k)]
        rows.append([*per_token, c, 0.0] if joint else per_token)
        ys.append(m.seconds - line.plain(c))
    if joint:  # steps 0: Z0, then the extend of one token and the per-request work
        for m in zero:
            rows.append([0.0, 0.0, 0.0, m.concurrency, m.concurrency, 1.0])
            ys.append(m.seconds - line.plain(m.concurrency))
        t0, v1, d0, d1, r1, z0 = nnls(rows, ys)
        return CostModel(p0, p1, v1, t0, d0, d1, z0, d1 + r1, r1=r1, plain_points=points)
    t0, v1, d0, d1 = nnls(rows, ys)
    z0 = z1 = None
    if zero:  # one concurrency: its excess over plain, flat
        z0, z1 = max(0.0, zero[0].seconds - line.plain(zero[0].concurrency)), 0.0
    return CostModel(p0, p1, v1, t0, d0, d1, z0, z1, plain_points=points)


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
