"""A closed-loop round simulated (its arrivals and its drain), the arrival cost fitted from
timed rounds, and a trace's rounds priced by the mix (pure)."""

from __future__ import annotations

import json
import re

import pytest

from sglang_eagle3.errors import WiringError
from sglang_eagle3.tune.cost import CostModel
from sglang_eagle3.tune.grid import Setting
from sglang_eagle3.tune.mix import Phase, phase_of, read_trace
from sglang_eagle3.tune.predict_mix import mix_result, served
from sglang_eagle3.tune.rounds import (
    ArrivalRound,
    fit_arrivals,
    mixed_lengths,
    per_request_cost,
    round_seconds,
)

MODEL = CostModel(p0=0.010, p1=0.0015, v1=0.001, t0=0.002, d0=0.002, d1=0.0005, z0=0.001, z1=4e-4)


def test_a_round_pays_each_arrival_and_drains_at_falling_batch_sizes():
    def speed(b):  # tok/s per request: 100 alone, 50 each at two
        return 100.0 / b

    assert mixed_lengths(64, 6) == [24, 64, 40, 56, 24, 64]
    # one request: its arrival, then its tokens
    assert round_seconds([30], 1, None, speed, 0.2) == pytest.approx(0.2 + 30 / 100)
    # 10 and 30 tokens together: both arrive, 10 each at 50 tok/s, then 20 alone at 100
    assert round_seconds([10, 30], 2, None, speed, 0.2) == pytest.approx(0.4 + 0.2 + 0.2)
    # the server's cap queues the second; it arrives when the first ends
    assert round_seconds([10, 30], 2, 1, speed, 0.2) == pytest.approx(0.2 + 0.1 + 0.2 + 0.3)
    assert round_seconds([10, 30], 8, 1, speed, 0.2) == round_seconds([10, 30], 1, None,
                                                                      speed, 0.2)  # fmt: skip
    with pytest.raises(ValueError):
        round_seconds([], 1, None, speed, 0.0)


def test_the_arrival_costs_are_recovered_from_rounds_that_paid_them():
    true = {None: 0.05, 0: 0.06, 1: 0.07, 4: 0.10}  # plain; 0.06 + 0.01 x steps with a draft
    lengths = tuple(mixed_lengths(64, 32))
    rounds = []
    for steps, a in true.items():
        s = -1 if steps is None else steps
        k, n = (0, 0) if steps is None else (1 if steps < 2 else 2, steps + 1 if steps < 2 else 6)
        acc = None if steps in (None, 0) else 1.8
        r = ArrivalRound(s, k, n, 16, 8, lengths, 0.0, acc)
        decode = round_seconds(lengths, 16, 8, lambda b, r=r: _speed(r, b), 0.0)
        rounds.append(ArrivalRound(s, k, n, 16, 8, lengths, decode + a * len(lengths), acc))
    for r, a in zip(rounds, true.values(), strict=True):
        assert per_request_cost(MODEL, r) == pytest.approx(a)
    got = fit_arrivals(MODEL, rounds)
    assert (got.arr_plain, got.arr0, got.arr1) == pytest.approx((0.05, 0.06, 0.01))
    assert got.arrival(None) == pytest.approx(0.05) and got.arrival(3) == pytest.approx(0.09)
    # untimed: a batch-1 step, plain's or steps 0's
    assert MODEL.arrival(None) == MODEL.plain(1) and MODEL.arrival(2) == MODEL.steps0(1)
    assert fit_arrivals(MODEL, rounds[1:]) == MODEL  # no plain round: nothing to fit
    assert got.to_dict()["arr1"] == pytest.approx(0.01)
    assert CostModel.from_dict(MODEL.to_dict()).arr_plain is None  # results saved before


def _speed(r: ArrivalRound, b: int) -> float:
    if r.steps < 0:
        return 1 / MODEL.plain(b)
    return (r.accept_length or 1.0) / MODEL.cycle(r.steps, r.topk, r.draft_tokens, b)


def test_a_trace_of_rounds_is_simulated_and_a_weighted_mix_is_steady_state(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"phases": [
        {"concurrency": 1, "requests": 4, "per_round": 1, "lengths": [24, 64]},
        {"concurrency": 8, "requests": 32, "per_round": 16, "lengths": [24, 64, 40, 56]},
        {"concurrency": 2, "requests": 3, "max_new_tokens": 10}]}))  # fmt: skip
    one, eight, two = read_trace(trace, 16, top=64)
    assert one.rounds() == [[24], [64], [24], [64]] and one.max_new_tokens == 44
    assert [len(r) for r in eight.rounds()] == [16, 16] and eight.rounds()[0][:5] == [
        24, 64, 40, 56, 24]  # fmt: skip
    assert two.rounds() == [[10, 10, 10]] and two.lengths is None
    # each phase weighs its tokens: 176, 1472 and 30
    assert [p.weight for p in (one, eight, two)] == pytest.approx([176 / 1678, 1472 / 1678,
                                                                   30 / 1678])  # fmt: skip
    assert phase_of(json.loads(json.dumps(vars(eight)))) == eight
    for bad in ({"lengths": []}, {"lengths": [0]}, {"lengths": "24"}, {"per_round": 0}):
        trace.write_text(json.dumps({"phases": [{"concurrency": 1, "requests": 2, **bad}]}))
        with pytest.raises(WiringError, match=re.escape("phase 0")):
            read_trace(trace, 16, top=64)

    def speed(b):
        return 1 / MODEL.plain(b)

    a = 0.03
    # a phase's rounds, drained one by one, against the steady state of the same requests
    got = served(speed, 8, 8, 46.0, a, [eight])
    want = 1472 / sum(round_seconds(r, 8, 8, speed, a) for r in eight.rounds())
    assert got == pytest.approx(want)
    steady = served(speed, 8, 8, 46.0, a, [Phase(8, 1.0)])
    assert steady == pytest.approx(46 / (46 / (8 * speed(8)) + a)) and got < steady
    # a long closed loop of one length tends to the steady state
    long = Phase(8, 1.0, 4000, 46)
    assert served(speed, 8, 8, 46.0, a, [long]) == pytest.approx(steady, rel=0.01)


def test_the_mix_prices_arrivals_by_the_timed_costs():
    settings = [Setting(1, 1, 2), Setting(3, 1, 4)]
    profile = {settings[0]: 1.7, settings[1]: 2.2}
    phases = [Phase(1, 0.5, 4, 46, None, 1), Phase(8, 0.5, 32, 46, None, 16)]
    timed = fit_arrivals(MODEL, [ArrivalRound(-1, 0, 0, 4, 8, (10,), 1.0),
                                 ArrivalRound(1, 1, 2, 4, 8, (10,), 1.0, 1.7)])  # fmt: skip
    cheap = mix_result(MODEL, profile, settings, {}, phases, 8, 46.0)
    dear = mix_result(timed, profile, settings, {}, phases, 8, 46.0)
    assert timed.arrival(None) > MODEL.arrival(None)
    for name in ("plain", "s1k1n2", "s3k1n4"):
        for c in ("1", "8"):
            assert dear["per_concurrency_tok_s"][name][c] < cheap["per_concurrency_tok_s"][name][c]
