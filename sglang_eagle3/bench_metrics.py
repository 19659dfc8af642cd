"""Accept length and friends from SGLang's per-request meta_info (pure).

SGLang 0.5.23 reports `spec_accept_length = completion_tokens / spec_verify_ct`, biased up:
the first token comes from prefill, not from a verify step. The unbiased figure is
`1 + spec_num_correct_drafts / spec_verify_ct` (tokens per verify step).
"""

from __future__ import annotations

from collections.abc import Iterable
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
