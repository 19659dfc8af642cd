"""One recommendation for a traffic mix: the mix's inputs (weights, a trace of phases), the
whole-mix arithmetic, and a saved tune result read back for another mix (--tune-result), only
on the target and drafter it was measured on."""

from __future__ import annotations

import json
import re

import pytest

from sglang_eagle3.errors import WiringError
from sglang_eagle3.tune.cost import CostModel
from sglang_eagle3.tune.mix import Phase, from_weights, read_trace, recommend, whole

# costs where a lone request drafts deep and 64 decode faster without a draft
MODEL = CostModel(p0=0.010, p1=0.0015, v1=0.001, t0=0.002, d0=0.002, d1=0.0005, z0=0.001, z1=4e-4)


def test_the_mix_is_a_share_of_tokens_and_a_trace_weighs_its_phases(tmp_path):
    assert [p.weight for p in from_weights((1, 8), "3,1")] == [0.75, 0.25]
    assert [p.weight for p in from_weights((1, 8, 32), None)] == pytest.approx([1 / 3] * 3)
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"phases": [
        {"concurrency": 1, "requests": 4, "max_new_tokens": 32},
        {"concurrency": 8, "requests": 16}]}))  # fmt: skip
    got = read_trace(trace, 16, top=1024)
    assert [(p.concurrency, p.weight) for p in got] == [(1, 128 / 384), (8, 256 / 384)]
    for bad, why in (("1,x", "not a list of numbers"), ("1", "1 weight(s) for 2"),
                     ("0,0", "not all 0"), ("-1,2", "all >= 0"),
                     ("nan,1", "nan or inf")):  # fmt: skip
        with pytest.raises(WiringError, match=re.escape(why)):
            from_weights((1, 8), bad)
    for text, why in (("{", "cannot read the trace"), ("[]", 'no "phases" list'),
                      ('{"phases": [{"concurrency": 0, "requests": 1}]}', "phase 0"),
                      ('{"phases": [{"concurrency": 2000, "requests": 1}]}', "1-1024"),
                      ('{"phases": [{"concurrency": 1, "requests": true}]}',
                       "phase 0")):  # fmt: skip
        trace.write_text(text)
        with pytest.raises(WiringError, match=re.escape(why)) as err:
            read_trace(trace, 16, top=1024)
        assert err.value.path == str(trace)


def test_the_whole_mix_is_its_tokens_over_its_time_and_the_report_says_where_it_loses():
    phases = [Phase(1, 0.5), Phase(8, 0.5)]
    fast_alone = {1: 100.0, 8: 80.0}  # tok/s of all requests
    plain = {1: 60.0, 8: 112.0}
    # half the tokens at 100 tok/s, half at 80: 1 / (0.5/100 + 0.5/80)
    assert whole(phases, fast_alone) == pytest.approx(1 / (0.5 / 100 + 0.5 / 80))
    got = recommend(phases, {"plain": plain, "s3k1n4": fast_alone})
    assert got["recommended"] == "s3k1n4" and got["per_concurrency_best"] == {
        "1": "s3k1n4", "8": "plain"}  # fmt: skip
    assert any(w.startswith("at 8:") and "BELOW plain" in w for w in got["why"])
    heavy = recommend([Phase(1, 0.1), Phase(8, 0.9)], {"plain": plain, "s3k1n4": fast_alone})
    assert heavy["recommended"] == "plain"


def test_a_near_tie_in_the_whole_goes_to_the_deployment_no_concurrency_leaves_far_behind():
    # bench_live run 3's shape: a chain config leads the whole mix by 0.01 % and runs 0.86x the
    # tree at one request; the tree is within 5 % everywhere
    phases = [Phase(1, 0.02), Phase(64, 0.98)]
    chain, tree = {1: 65.0, 64: 666.0}, {1: 76.0, 64: 640.0}
    assert whole(phases, chain) > whole(phases, tree)
    got = recommend(phases, {"chain": chain, "tree": tree})
    assert got["recommended"] == "tree"
    assert got["worst_vs_fastest"] == {"chain": round(65 / 76, 3), "tree": round(640 / 666, 3)}
    assert any(w.startswith("not chain") and "below 0.90x" in w for w in got["why"])
    # 5 % ahead in the whole, it is still passed over: the floor is the rule, not a margin
    far = {1: 65.0, 64: 710.0}
    assert whole(phases, far) > 1.05 * whole(phases, tree)
    assert recommend(phases, {"chain": far, "tree": tree})["recommended"] == "tree"
    # where every candidate falls below the floor somewhere, the whole mix decides
    both = recommend(phases, {"chain": {1: 65.0, 64: 900.0}, "tree": {1: 76.0, 64: 640.0 * 0.9}})
    assert both["recommended"] == "chain"


def _saved(tmp_path, target, draft, **identity_changes) -> str:
    from sglang_eagle3.tune.saved import identity

    steps = {1: 0.75, 2: 1.31, 3: 1.73, 4: 2.05}
    profile = [{"steps": s, "topk": 1, "draft_tokens": s + 1, "accept_length": 1 + a,
                "explained": False} for s, a in steps.items()]  # fmt: skip
    profile.append({"steps": 2, "topk": 2, "draft_tokens": 5, "accept_length": 2.6,
                    "explained": False})  # fmt: skip
    result = {"identity": {**identity(target, draft), **identity_changes},
              "model": MODEL.to_dict(), "profile": profile, "measured": [],
              "timing": "synthetic", "acceptance_source": "synthetic"}  # fmt: skip
    path = tmp_path / f"tune{len(identity_changes)}.json"
    path.write_text(json.dumps(result))
    return str(path)


@pytest.mark.sglang
@pytest.mark.slow
def test_a_saved_result_predicts_another_mix_and_refuses_another_drafter(tmp_path, capsys):
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter
    from sglang_eagle3.tune.cli import main

    d = tiny_drafter()
    args = ["--cpu", "--model-path", str(d.target_dir), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(d.draft_dir), "--steps", "1-4",
            "--topk", "1-2"]  # fmt: skip
    good = _saved(tmp_path, d.target_dir, d.draft_dir)
    mix_args = ["--tune-result", good, "--concurrency", "1,64", "--weights", "0.5,0.5", "--json"]
    assert main([*args, *mix_args, "--max-running-requests", "64"]) == 0
    result = json.loads(capsys.readouterr().out)
    mix = result["mix"]
    assert set(mix["whole_tok_s"]) == {"plain", "adaptive", "s1k1n2", "s2k1n3", "s3k1n4",
                                       "s4k1n5", "s2k2n5"}  # fmt: skip
    assert mix["per_concurrency_best"]["64"] == "plain"  # many requests: no draft pays here
    assert mix["adaptive_steps"]["64"] == {"0": 1.0}  # the [0] slot never drafts
    assert mix["running_cap"] == 64
    # --cpu alone: SGLang runs 8 requests at most (the launcher's CPU default), 56 queue
    assert main([*args, *mix_args]) == 0
    capped = json.loads(capsys.readouterr().out)
    assert capped["mix"]["running_cap"] == 8 and "64" not in capped["per_concurrency"]
    assert capped["mix"]["per_concurrency_tok_s"]["plain"]["64"] < mix["per_concurrency_tok_s"][
        "plain"]["64"]  # fmt: skip
    even = [n for n, w in mix["worst_vs_fastest"].items() if w >= mix["floor"]]
    assert mix["recommended"] == max(even or mix["whole_tok_s"], key=mix["whole_tok_s"].get)
    assert result["from_tune_result"] == good and not (tmp_path / "tune-logs").exists()
    for change, what in (({"draft_weights_sha256": "0" * 64}, "another drafter"),
                         ({"target_sha256": "1" * 64}, "another target")):  # fmt: skip
        assert main([*args, "--tune-result", _saved(tmp_path, d.target_dir, d.draft_dir,
                                                    **change)]) == 2  # fmt: skip
        out, err = capsys.readouterr()
        lines = [line for line in err.splitlines() if line.strip()]
        assert out == "" and len(lines) == 1 and what in lines[0], lines
