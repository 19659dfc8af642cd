"""The doctor on an MLA drafter (``Eagle3DeepseekV2ForCausalLM``, issue 16): the tiny MLA
drafter trained through the doctor's reference forward (testing/tiny/mla_drafter.py) on the
tiny drafter's data, scored under every candidate layout, chain and tree, and its predicted
accept length against what a real SGLang 0.5.23 server with it measures."""

from __future__ import annotations

import pytest

from sglang_eagle3.bench.metrics import spec_stats
from sglang_eagle3.doctor.cli import DoctorOptions, main, run_doctor
from sglang_eagle3.doctor.prompts import BUILT_IN

TRAINED = ["embed", "layer:2", "layer:5"]
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]  # fmt: skip


@pytest.fixture(scope="module")
def mla():
    pytest.importorskip("speculators.models.eagle3")  # the tiny drafter's data is built with it
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter
    from sglang_eagle3.testing.tiny.mla_drafter import tiny_mla_drafter

    return tiny_mla_drafter(), tiny_drafter()


def by_name(report) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for row in report.rows:
        for name in row["name"].split(", "):
            out.setdefault(name, row)
    return out


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.parametrize("tree", [None, (2, 6)], ids=["chain", "tree-topk2-6"])
def test_mla_declared_layout_ranks_first(mla, figures, tree):
    draft, data = mla
    opts = {"topk": tree[0], "draft_tokens": tree[1]} if tree else {}
    opts |= {"data": str(data.eval_data), "target": str(data.target_dir), "progress": False}
    report = run_doctor(DoctorOptions(str(draft), **opts))
    print(report.render())
    rows = by_name(report)
    declared, stock = rows["declared"], rows["stock SGLang 0.5.23"]
    assert declared["layout"] == TRAINED and declared["is_served"]
    scored = [r for r in report.rows if r["evaluable"] and not r["is_floor"]]
    assert max(scored, key=lambda r: r["accuracy"]) is declared
    kind = "tree topk 2, 6 tokens" if tree else "chain"
    figures.record(
        f"doctor, tiny MLA drafter ({kind}): declared step-1", declared["accuracy"], ".1%"
    )
    figures.record(f"doctor, tiny MLA drafter ({kind}): stock SGLang's taps step-1",
                   stock["accuracy"], ".1%")  # fmt: skip
    assert declared["accuracy"] - stock["accuracy"] > 0.05  # measured 7.1 points (chain)
    assert declared["accuracy"] - rows["floor: taps zeroed"]["accuracy"] > 0.15
    assert report.verdict == "ok" and report.exit_code == 0
    text = report.render()
    assert "drafter=Eagle3DeepseekV2 (MLA attention, 1 layer): honoured" in text
    assert "fc_norm=true: honoured" in text and "norm_output=true: honoured" in text


@pytest.mark.sglang
@pytest.mark.slow
def test_mla_draft_served_by_stock_sglang_is_flagged(mla, capsys):
    draft, data = mla
    code = main(["--draft", str(draft), "--data", str(data.eval_data), "--target",
                 str(data.target_dir), "--served-by", "stock", "--no-progress"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1, out[-3000:]
    assert "verdict: SERVED LAYOUT IS WRONG: served layer:1, layer:3, layer:4" in out


@pytest.mark.sglang
@pytest.mark.slow
def test_mla_predicted_accept_length_is_what_a_server_measures(mla, server_factory, figures):
    draft, data = mla
    srv = server_factory(data.target_dir, [
        "--cpu", "--dtype", "float32", "--attention-backend", "intel_amx", *SPEC,
        "--speculative-draft-model-path", str(draft)], name="doctor-eagle3-mla",
        module="sglang_eagle3.launch",
    )  # fmt: skip
    params = {"max_new_tokens": 64, "temperature": 0}
    outs = [srv.post("/generate", {"text": p, "sampling_params": params}) for p in BUILT_IN]
    served = spec_stats(o["meta_info"] for o in outs).accept_length
    srv.stop()  # the doctor's own forward passes need the cores
    report = run_doctor(DoctorOptions(str(draft), target=str(data.target_dir),
                                      max_new_tokens=64, progress=False))  # fmt: skip
    predicted = report.replay_accept_length
    figures.record("MLA EAGLE-3 server accept length, built-in prompts (3 steps, chain)",
                   served, ".2f")  # fmt: skip
    figures.record("data-free doctor's predicted accept length, MLA draft", predicted, ".2f")
    assert served > 1.5  # random MLA weights accept almost nothing: the taps are the trained ones
    assert abs(predicted - served) / served < 0.10, (predicted, served)
