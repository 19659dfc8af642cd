"""A round of requests in a closed loop, as a benchmark or a user's client sends them, and the
per-arrival cost fitted from one timed (pure).

A round: ``lengths`` (generated tokens per request, in order) sent with at most ``c`` in
flight; the server runs at most ``cap`` at once and the rest wait in its queue. Every running
request decodes at ``speed(b)`` tokens a second while ``b`` run (fluid: a request's tokens
need not be whole cycles), and each admitted request stalls the batch for ``arrival`` seconds
(its prefill, the drafter's extend over its prompt, the scheduler's and the client's work:
SGLang 0.5.23 does not mix prefill into decode here). The round ends with its slowest request:
its drain, at falling batch sizes, is counted.

The first bench_live run priced an arrival as one batch-1 step and every whole-trace
prediction came out 14-27 % high: on 2 cores an arrival costs about three plain steps. The
tuner now times one trace-like round per server (tune/measure.py, ``arrival_round``) and takes
the arrival cost as what its round took beyond the simulated decoding, per request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from sglang_eagle3.tune.cost import CostModel, nnls

MIX = (0.375, 1.0, 0.625, 0.875)  # a timed round's lengths, as shares of --max-new-tokens


def mixed_lengths(max_new_tokens: int, n: int) -> list[int]:
    """``n`` request lengths cycling through MIX (64 tokens: 24, 64, 40, 56, as bench_live)."""
    return [max(2, round(max_new_tokens * MIX[i % len(MIX)])) for i in range(n)]


def round_seconds(lengths: Sequence[int], c: int, cap: int | None,
                  speed: Callable[[int], float], arrival: float) -> float:  # fmt: skip
    """Seconds the round takes; ``speed(b)``: tokens a second per request at batch size b."""
    if c < 1 or not lengths:
        raise ValueError("a round needs c >= 1 and at least one request")
    run = c if cap is None else min(c, cap)
    pending = list(lengths)
    running: list[float] = []
    t = 0.0
    while pending or running:
        while pending and len(running) < run:  # the client keeps c in flight, the server runs
            running.append(float(pending.pop(0)))  # at most cap of them
            t += arrival
        b = len(running)
        v = speed(b)
        dt = min(running) / v
        t += dt
        running = [r - v * dt for r in running]
        running = [r for r in running if r > 1e-9]
    return t


@dataclass(frozen=True)
class ArrivalRound:
    """One server's trace-like round, drift-corrected against the plain reference."""

    steps: int  # -1: plain decoding; 0: SGLang's adaptive steps 0
    topk: int
    draft_tokens: int
    concurrency: int
    cap: int | None
    lengths: tuple[int, ...]
    seconds: float  # the round's wall
    accept_length: float | None = None  # served, when speculative


def _speed(model: CostModel, r: ArrivalRound) -> Callable[[int], float]:
    if r.steps < 0:
        return lambda b: 1 / model.plain(b)
    a = 1.0 if r.steps == 0 else (r.accept_length or 1.0)
    return lambda b: a / model.cycle(r.steps, r.topk, r.draft_tokens, b)


def per_request_cost(model: CostModel, r: ArrivalRound) -> float:
    """Seconds the round took beyond its simulated decoding, per request (>= 0)."""
    decode = round_seconds(r.lengths, r.concurrency, r.cap, _speed(model, r), 0.0)
    return max(0.0, (r.seconds - decode) / len(r.lengths))


def fit_arrivals(model: CostModel, rounds: Sequence[ArrivalRound]) -> CostModel:
    """``model`` with its arrival costs: plain's from the plain rounds, a speculative server's
    as ``A0 + A1 * steps`` through the speculative ones (non-negative least squares)."""
    plain = [per_request_cost(model, r) for r in rounds if r.steps < 0]
    spec = [(r.steps, per_request_cost(model, r)) for r in rounds if r.steps >= 0]
    if not plain or not spec:
        return model
    if len({s for s, _ in spec}) > 1:
        a0, a1 = nnls([[1.0, float(s)] for s, _ in spec], [a for _, a in spec])
    else:
        a0, a1 = sum(a for _, a in spec) / len(spec), 0.0
    return replace(model, arr_plain=sum(plain) / len(plain), arr0=a0, arr1=a1)
