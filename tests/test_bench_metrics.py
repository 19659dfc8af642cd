"""Accept-length arithmetic on recorded SGLang 0.5.23 responses."""

from __future__ import annotations

import statistics

import pytest

from sglang_eagle3.bench.metrics import StreamTiming, latency_stats, percentile, ratio, spec_stats

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


# --- Streaming: recorded from real SGLang 0.5.23 servers on this CPU (tiny target, trained
# drafter, topk 1, 3 steps, 4 draft tokens), `"stream": true` on /generate. Each pair is
# (seconds after the request was sent, meta_info.completion_tokens of that chunk); the final
# chunk's meta_info is the only one with the spec_* counters.
SPEC_CHUNKS = ((0.0215, 1), (0.03681, 2), (0.05149, 3), (0.06646, 6), (0.08087, 7), (0.09516, 9),
               (0.10991, 10), (0.12321, 11), (0.13672, 12), (0.15051, 13), (0.16411, 15),
               (0.18106, 18), (0.19317, 22), (0.20833, 24), (0.22285, 26), (0.23805, 28),
               (0.25269, 31), (0.26729, 33), (0.28144, 34), (0.29585, 35), (0.31223, 36),
               (0.32703, 37), (0.34135, 38), (0.35566, 39), (0.37088, 40))  # fmt: skip
SPEC_FINAL = {"finish_reason": {"type": "length", "length": 40}, "completion_tokens": 40,
              "spec_accept_rate": 0.20833333333333334, "spec_accept_length": 1.6666666666666667,
              "spec_num_correct_drafts": 15, "spec_num_proposed_drafts": 72,
              "spec_verify_ct": 24, "spec_correct_drafts_histogram": [14, 6, 3, 1]}  # fmt: skip
# Plain server, greedy, 12 tokens (max_new_tokens, truncated): three chunks within 0.07 ms.
PLAIN_CHUNKS = ((1.51033, 1), (1.52148, 2), (1.53202, 3), (1.62463, 4), (1.62468, 5),
                (1.6247, 6), (1.64619, 7), (1.72363, 8), (1.73292, 9), (1.74203, 10),
                (1.75082, 11), (1.75135, 12))  # fmt: skip
PLAIN_FINAL = {"finish_reason": {"type": "length", "length": 12}, "completion_tokens": 12}
# Plain server, sampled: the last chunk carried 2 tokens (SGLang coalesced two steps).
PLAIN_COALESCED = ((0.02481, 1), (0.0335, 2), (0.04489, 3), (0.05372, 4), (0.06538, 5),
                   (0.07764, 6), (0.0852, 7), (0.09297, 8), (0.10259, 9), (0.11217, 10),
                   (0.1233, 12))  # fmt: skip


def test_ttft_is_the_first_token_carrying_chunk():
    assert StreamTiming(0.0, SPEC_CHUNKS).ttft() == pytest.approx(0.0215)
    assert StreamTiming(1.0, PLAIN_CHUNKS).ttft() == pytest.approx(0.51033)
    assert StreamTiming(0.0, ((0.5, 0), (0.7, 1))).ttft() == pytest.approx(0.7)
    assert StreamTiming(0.0, ()).ttft() is None


def test_itl_divides_a_chunk_gap_among_its_tokens():
    itls = StreamTiming(0.0, SPEC_CHUNKS).itls()
    assert len(itls) == 39  # every token but the first (it belongs to TTFT)
    assert itls[:2] == pytest.approx([0.01531, 0.01468])
    assert itls[2:5] == pytest.approx([(0.06646 - 0.05149) / 3] * 3)  # a 3-token chunk
    assert sum(itls) == pytest.approx(0.37088 - 0.0215)
    coalesced = StreamTiming(0.0, PLAIN_COALESCED).itls()
    assert coalesced[-2:] == pytest.approx([(0.1233 - 0.11217) / 2] * 2)


def test_chunks_without_new_tokens_do_not_reset_the_gap():
    t = StreamTiming(0.0, ((0.1, 1), (0.2, 1), (0.4, 3)))
    assert t.itls() == pytest.approx([0.15, 0.15])


def test_percentile_matches_numpy_linear():
    np = pytest.importorskip("numpy")
    values = [x * 1e3 for x in StreamTiming(0.0, SPEC_CHUNKS).itls()]
    for q in (0, 10, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) is None
    assert percentile([3.0], 90) == 3.0
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_latency_stats_pool_every_request():
    lat = latency_stats([StreamTiming(0.0, SPEC_CHUNKS), StreamTiming(1.0, PLAIN_CHUNKS)])
    assert lat.ttft_ms_median == pytest.approx((21.5 + 510.33) / 2)
    assert lat.ttft_ms_p90 == pytest.approx(21.5 + 0.9 * (510.33 - 21.5))
    assert lat.itl_samples == 39 + 11
    plain_gaps_ms = [11.15, 10.54, 92.61, 0.05, 0.02, 21.49, 77.44, 9.29, 9.11, 8.79, 0.53]
    assert [x * 1e3 for x in StreamTiming(1.0, PLAIN_CHUNKS).itls()] == pytest.approx(plain_gaps_ms)
    pooled = [x * 1e3 for x in StreamTiming(0.0, SPEC_CHUNKS).itls()] + plain_gaps_ms
    assert lat.itl_ms_median == pytest.approx(statistics.median(pooled), abs=1e-6)
    assert lat.itl_ms_p90 > lat.itl_ms_median
    empty = latency_stats([])
    assert empty.ttft_ms_median is None and empty.itl_ms_p90 is None and empty.itl_samples == 0


def test_recorded_final_chunk_accept_lengths():
    s = spec_stats([SPEC_FINAL])
    assert s.accept_length == pytest.approx(1 + 15 / 24)
    assert s.sglang_accept_length == pytest.approx(SPEC_FINAL["spec_accept_length"])  # 40 / 24
    assert s.accept_rate == pytest.approx(SPEC_FINAL["spec_accept_rate"])
    assert sum(s.histogram) == s.verify_ct == 24
    # the histogram reproduces the correct-draft count: sum of k * steps accepting k drafts
    assert sum(k * c for k, c in enumerate(s.histogram)) == 15
    plain = spec_stats([PLAIN_FINAL])
    assert plain.accept_length is None and plain.sglang_accept_length is None
    assert plain.histogram == ()


def test_ratio_is_none_without_a_baseline_figure():
    assert ratio(2.0, 4.0) == 0.5
    assert ratio(None, 4.0) is None and ratio(2.0, None) is None and ratio(2.0, 0.0) is None
