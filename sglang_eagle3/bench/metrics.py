"""Accept length, TTFT and inter-token latency from SGLang's responses (pure: no torch, no sglang).

SGLang 0.5.23 reports `spec_accept_length = completion_tokens / spec_verify_ct`, biased up:
the first token comes from prefill, not from a verify step. The unbiased figure is
`1 + spec_num_correct_drafts / spec_verify_ct` (tokens per verify step).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SpecStats:
    requests: int
    completion_tokens: int
    verify_ct: int
    correct_drafts: int
    proposed_drafts: int
    histogram: tuple[int, ...]  # [k] = verify steps that accepted k drafts

    @property
    def accept_length(self) -> float | None:
        return None if self.verify_ct == 0 else 1 + self.correct_drafts / self.verify_ct

    @property
    def sglang_accept_length(self) -> float | None:
        return None if self.verify_ct == 0 else self.completion_tokens / self.verify_ct

    @property
    def accept_rate(self) -> float | None:
        return None if self.proposed_drafts == 0 else self.correct_drafts / self.proposed_drafts

    def to_json(self) -> dict:
        return {
            "requests": self.requests,
            "completion_tokens": self.completion_tokens,
            "verify_ct": self.verify_ct,
            "accept_length": self.accept_length,
            "sglang_accept_length": self.sglang_accept_length,
            "accept_rate": self.accept_rate,
            "histogram": list(self.histogram),
        }


def spec_stats(metas: Iterable[dict]) -> SpecStats:
    """Sum over requests; a request without speculation (plain server) adds only tokens."""
    n = tokens = verify = correct = proposed = 0
    hist: list[int] = []
    for meta in metas:
        n += 1
        tokens += int(meta["completion_tokens"])
        verify += int(meta.get("spec_verify_ct", 0) or 0)
        correct += int(meta.get("spec_num_correct_drafts", 0) or 0)
        proposed += int(meta.get("spec_num_proposed_drafts", 0) or 0)
        for k, count in enumerate(meta.get("spec_correct_drafts_histogram") or []):
            hist += [0] * (k + 1 - len(hist))
            hist[k] += int(count)
    return SpecStats(n, tokens, verify, correct, proposed, tuple(hist))


# --- Latency from recorded stream timings -------------------------------------------------
#
# TTFT: request sent -> first chunk that carries a token. ITL: for every later chunk that adds
# k > 0 tokens, k samples of (gap since the previous token-carrying chunk) / k. That is per
# token, not per chunk, and it is exactly how `sglang.benchmark.serving` counts, so the two
# clients' figures compare: with speculation one chunk often carries several tokens, and a
# per-chunk ITL would hide the gain. Tokens that arrive in the first chunk count toward TTFT
# only. Medians and p90s are over every sample of every request in a configuration.


@dataclass(frozen=True)
class StreamTiming:
    """One streamed request: when it was sent and, per chunk, (arrival, cumulative tokens)."""

    start: float
    chunks: tuple[tuple[float, int], ...]

    def ttft(self) -> float | None:
        first = next((t for t, n in self.chunks if n > 0), None)
        return None if first is None else first - self.start

    def itls(self) -> list[float]:
        out: list[float] = []
        prev_t, prev_n = None, 0
        for t, n in self.chunks:
            new = n - prev_n
            if new <= 0:  # a chunk without new tokens (e.g. a repeated final state) is no gap
                continue
            if prev_t is not None:
                out += [(t - prev_t) / new] * new
            prev_t, prev_n = t, n
        return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation (numpy's default); None if empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class LatencyStats:
    ttft_ms_median: float | None
    ttft_ms_p90: float | None
    itl_ms_median: float | None
    itl_ms_p90: float | None
    itl_samples: int

    def to_json(self) -> dict:
        return {
            "ttft_ms_median": self.ttft_ms_median,
            "ttft_ms_p90": self.ttft_ms_p90,
            "itl_ms_median": self.itl_ms_median,
            "itl_ms_p90": self.itl_ms_p90,
            "itl_samples": self.itl_samples,
        }


def latency_stats(timings: Iterable[StreamTiming]) -> LatencyStats:
    ttfts: list[float] = []
    itls: list[float] = []
    for t in timings:
        first = t.ttft()
        if first is not None:
            ttfts.append(first * 1e3)
        itls += [x * 1e3 for x in t.itls()]
    return LatencyStats(
        percentile(ttfts, 50), percentile(ttfts, 90),
        percentile(itls, 50), percentile(itls, 90), len(itls),
    )  # fmt: skip


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is zero (no baseline figure to compare to)."""
    return None if a is None or not b else a / b
