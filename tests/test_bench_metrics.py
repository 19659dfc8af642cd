"""Accept-length arithmetic on recorded SGLang 0.5.23 responses."""

from __future__ import annotations

import pytest

from sglang_eagle3.bench_metrics import spec_stats

# Recorded from a real CPU run (random-weight draft, topk 1, 3 steps): nothing accepted.
RANDOM_DRAFT = {"completion_tokens": 16, "spec_accept_rate": 0.0, "spec_accept_length": 16 / 15,
                "spec_num_correct_drafts": 0, "spec_num_proposed_drafts": 45,
                "spec_verify_ct": 15, "spec_correct_drafts_histogram": [15]}  # fmt: skip
# A truncated generation (finish_reason length) whose last verify accepted 3 drafts.
TRUNCATED = {"completion_tokens": 9, "spec_num_correct_drafts": 5, "spec_num_proposed_drafts": 12,
             "spec_verify_ct": 4, "spec_correct_drafts_histogram": [1, 1, 1, 1],
             "finish_reason": {"type": "length", "length": 9}}  # fmt: skip
PLAIN = {"completion_tokens": 16}


def test_unbiased_and_sglang_accept_length_differ_by_the_prefill_token():
    s = spec_stats([RANDOM_DRAFT])
    assert s.accept_length == 1.0
    assert s.sglang_accept_length == pytest.approx(RANDOM_DRAFT["spec_accept_length"])
    assert s.accept_rate == 0.0 and s.histogram == (15,)


def test_aggregate_sums_before_dividing():
    s = spec_stats([RANDOM_DRAFT, TRUNCATED])
    assert s.accept_length == pytest.approx(1 + 5 / 19)
    assert s.sglang_accept_length == pytest.approx(25 / 19)
    assert s.histogram == (16, 1, 1, 1)
    assert s.accept_rate == pytest.approx(5 / 57)


def test_plain_requests_have_no_accept_length():
    s = spec_stats([PLAIN, PLAIN])
    assert s.completion_tokens == 32 and s.accept_length is None and s.accept_rate is None
