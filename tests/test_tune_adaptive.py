"""The tuner's adaptive config on SGLang 0.5.23's own ``AdaptiveSpeculativeParams``: fed
acceptance streams batch after batch, every slot settles on the step the cost model predicts
fastest for that stream, and the simulator the tuner predicts servers with agrees."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from sglang_eagle3.tune.adaptive import ACCEPT_BAND, config, fastest, slots, speed
from sglang_eagle3.tune.cost import CostModel

pytestmark = pytest.mark.sglang

# A machine where a lone request drafts deep, a few share a short chain and many decode plain
# (the shape of the tiny models' fit on 2 cores, with costs moved to show every kind of slot).
MODEL = CostModel(p0=0.010, p1=0.0015, v1=0.001, t0=0.002, d0=0.002, d1=0.0005, z0=0.001, z1=4e-4)
P0 = 0.75  # per-position acceptance the profile was made at


def drafts_at(p: float, top: int = 7) -> dict[int, float]:
    """Expected accepted drafts per verify of a chain of s steps, each draft accepted with
    probability p after the previous one was: sum of p**j, j = 1..s."""
    return {0: 0.0, **{s: sum(p**j for j in range(1, s + 1)) for s in range(1, top + 1)}}


def _accepted(rng: random.Random, p: float, steps: int) -> int:
    n = 0
    while n < steps and rng.random() < p:
        n += 1
    return n


def _params(tmp_path, cfg: dict, initial: int):
    import json

    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(cfg))
    return AdaptiveSpeculativeParams(initial_steps=initial, cfg_path=str(path))


def _settle(tmp_path, cfg, initial, c, p, seed=0, batches=400) -> Counter:
    """{steps: batches} SGLang ran over the last quarter of a stream at batch size c."""
    rng, params, ran = random.Random(seed), _params(tmp_path, cfg, initial), Counter()
    for i in range(batches):
        s = params.get_steps_for_batch(c)
        params.on_verify_complete([_accepted(rng, p, s) for _ in range(c)], batch_size=c)
        if i >= 3 * batches // 4:
            ran[s] += 1
    return ran


def test_every_slot_settles_on_the_fastest_step_for_its_stream(tmp_path):
    profile = drafts_at(P0)
    found = slots(MODEL, profile, (1, 8, 64))
    cfg = config(found)
    kinds = {len(s.candidates) if s.candidates != (0,) else 0 for s in found}
    assert {0, 2} <= kinds, cfg  # a [0] slot and switching ones
    initial = max(found[0].candidates)
    checked = 0
    for s in found:
        # the profile's own acceptance, and streams at the edges of the band the slot covers
        for p in (P0, P0 * ACCEPT_BAND[0] ** 0.5, min(0.97, P0 * ACCEPT_BAND[1] ** 0.5)):
            truth = drafts_at(p)
            want = max(s.candidates, key=lambda x: speed(MODEL, truth, x, s.key))
            if len(s.candidates) == 2:  # a stream at the break-even settles either way
                a, b = (speed(MODEL, truth, x, s.key) for x in s.candidates)
                if abs(a - b) / max(a, b) < 0.03:
                    continue
            ran = _settle(tmp_path, cfg, initial, s.key, p)
            got = ran.most_common(1)[0][0]
            if want == 0 and s.candidates != (0,):
                # from 0 SGLang always probes the next step: a [0, b] slot below its break-even
                # alternates, 5 batches at 0 then 5 at b (the tuner's simulator counts that)
                assert ran[0] >= 0.4 * sum(ran.values()), (s, p, ran)
                checked += 1
                continue
            assert got == want, (s, p, got, want)
            if p == P0:
                assert got == s.best == fastest(MODEL, profile, s.key), (s, got)
            checked += 1
    assert checked >= 2 * len(found)


def test_a_switching_slot_follows_acceptance_that_moves_across_the_break_even(tmp_path):
    found = [s for s in slots(MODEL, drafts_at(P0), (1, 8, 64)) if len(s.candidates) == 2]
    s = found[0]
    a, b = s.candidates
    low, high = 0.3, 0.9  # far below and above the break-even: b loses, then wins
    assert fastest(MODEL, {x: drafts_at(low)[x] for x in s.candidates}, s.key) == a
    assert fastest(MODEL, {x: drafts_at(high)[x] for x in s.candidates}, s.key) == b
    rng, params = random.Random(1), _params(tmp_path, config(found), b)
    ran = []
    for p in (high, low, high):
        phase = Counter()
        for i in range(300):
            steps = params.get_steps_for_batch(s.key)
            params.on_verify_complete([_accepted(rng, p, steps) for _ in range(s.key)], s.key)
            if i >= 200:
                phase[steps] += 1
        ran.append(phase.most_common(1)[0][0])
    assert ran == [b, a, b]


def test_the_simulator_predicts_the_settled_step_and_sglangs_default_config(tmp_path):
    from sglang.srt.speculative.adaptive_spec_params import DEFAULT_ADAPTIVE_CONFIG

    from sglang_eagle3.tune.adaptive_sim import served_speed, settled, steps_run

    profile = drafts_at(P0)
    found = slots(MODEL, profile, (1, 8, 64))
    for s in found:
        ran = steps_run(config(found), max(found[0].candidates), profile, s.key)
        assert settled(ran) == s.best
        assert served_speed(MODEL, ran, profile, s.key) == pytest.approx(
            speed(MODEL, profile, s.best, s.key), rel=0.02
        )
    # SGLang's default at batch size 1 rises through [1, 3, 5, 7] while the EMA allows it
    ran = steps_run(DEFAULT_ADAPTIVE_CONFIG, 3, profile, 1)
    assert settled(ran) == 3  # EMA at 3 steps: 0.75 + 0.56 + 0.42 = 1.73 <= 3 - 0.5: stays
    # a slot holding 0 keeps probing from it: at low acceptance half its batches draft
    ran = steps_run({"1": {"candidate_steps": [0, 1]}}, 1, drafts_at(0.1), 1)
    assert ran[0] and ran[1] and abs(ran[0] - ran[1]) <= 0.2 * sum(ran.values())
