"""The doctor without training data: evidence from the target itself, in process (Hugging
Face) or from a real SGLang 0.5.23 server in capture mode (CPU harness), on the demo's tiny
target and trained drafter. Its refusals of bad input need no model and run in the fast tier."""

from __future__ import annotations

import json
import shutil

import pytest

from sglang_eagle3.bench.metrics import spec_stats
from sglang_eagle3.doctor.cli import DoctorOptions, main, run_doctor
from sglang_eagle3.doctor.prompts import BUILT_IN

TRAINED = ["embed", "layer:2", "layer:5"]
CAPTURE_TAPS = "embed,layer:0,layer:1,layer:2,layer:3,layer:4,layer:5,layer:6"  # all DeepSeek's
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]  # fmt: skip


@pytest.fixture(scope="module")
def drafter():
    pytest.importorskip("speculators.models.eagle3")
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    return tiny_drafter()


def best_row(report) -> dict:
    return next(r for r in report.rows if r["evaluable"] and r["layout"])  # rows sorted by step 1


def served_row(report) -> dict:
    return next(r for r in report.rows if r["is_served"])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sglang_eagle3.doctor: "), err
    return err[0]


# --- bad input: one line, exit 2, nothing loaded -------------------------------------------


def test_no_data_and_no_target_is_one_line(random_draft, capsys):
    assert main(["--draft", str(random_draft)]) == 2
    assert "no --data and no --target" in one_error_line(capsys)


def test_unreachable_server_is_one_line_with_the_command(random_draft, capsys):
    assert main(["--draft", str(random_draft), "--server", "http://127.0.0.1:9"]) == 2
    line = one_error_line(capsys)
    assert "cannot reach the server at http://127.0.0.1:9" in line
    assert "--enable-return-aux-hidden-states --hidden-state-layout" in line


def test_empty_prompts_file_is_one_line(random_draft, tiny_target, tmp_path, capsys):
    empty = tmp_path / "prompts.jsonl"
    empty.write_text("\n")
    argv = ["--draft", str(random_draft), "--target", str(tiny_target), "--prompts", str(empty)]
    assert main(argv) == 2
    assert f"{empty}: no prompts in it" in one_error_line(capsys)


@pytest.mark.sglang
@pytest.mark.slow  # the trained drafter
def test_a_prompt_past_the_targets_context_is_one_line_before_any_model_runs(
    drafter, tmp_path, capsys
):
    prompts = tmp_path / "prompts.jsonl"
    long = "def f(x):\n    return x\n" * 400  # thousands of tokens; the target reads 2,048
    prompts.write_text(json.dumps({"text": "def main("}) + "\n" + json.dumps({"text": long}))
    argv = ["--draft", str(drafter.draft_dir), "--target", str(drafter.target_dir),
            "--prompts", str(prompts), "--engine", "hf"]  # fmt: skip
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert f"{prompts}: prompt 2 has " in line and "passes the target's 2048 positions" in line
    assert "Fix: keep each prompt under" in line and "NO LAYOUT" not in line


def test_draft_too_narrow_for_the_target_is_one_line(random_draft, tiny_target, capsys):
    # the random draft is 64 wide, the tiny target 128
    assert main(["--draft", str(random_draft), "--target", str(tiny_target)]) == 2
    line = one_error_line(capsys)
    assert "64 wide" in line and "the target's are 128" in line


# --- which taps the doctor captures (pure) --------------------------------------------------


def kimi_speculators_draft(directory) -> str:
    """A config-only speculators draft for a 61-layer Kimi-K2.5: trained on embed, layer:2,
    layer:30 (input-to-layer ids [0, 3, 31])."""
    layer = {"model_type": "llama", "hidden_size": 7168, "num_attention_heads": 64,
             "num_key_value_heads": 64, "head_dim": 128, "intermediate_size": 18432,
             "vocab_size": 163840, "num_hidden_layers": 1, "rms_norm_eps": 1e-5}  # fmt: skip
    cfg = {"speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"],
           "draft_vocab_size": 32000, "target_hidden_size": 7168,
           "eagle_aux_hidden_state_layer_ids": [0, 3, 31],
           "transformer_layer_config": layer}  # fmt: skip
    (directory / "config.json").write_text(json.dumps(cfg))
    return str(directory)


def test_the_captured_taps_are_the_union_the_candidates_need(tmp_path):
    from sglang_eagle3.doctor.candidates import draft_layouts
    from sglang_eagle3.doctor.data_free import needed_taps, plausible_layouts, search_range
    from sglang_eagle3.layout.conventions import DEEPSEEK
    from sglang_eagle3.layout.taps import format_taps

    lay = draft_layouts(kimi_speculators_draft(tmp_path), num_layers=61, target_hidden_size=7168)
    top = DEEPSEEK.max_capture_index(61)  # hs[60] = layer:59: the loop never reaches layer:60
    # declared, shifted +1 (-1 would need a tap before embed), SGLang's default as is
    assert format_taps(needed_taps(lay, 61, top=top)) == (
        "embed, layer:0, layer:1, layer:2, layer:3, layer:29, layer:30, layer:31, layer:57"
    )
    plausible = {format_taps(t): name for name, t, _ in plausible_layouts([0, 3, 31], 3, 61)}
    assert plausible["embed, layer:2, layer:30"] == "ids [0, 3, 31] read as input-to-layer"
    assert plausible["layer:1, layer:29, layer:57"] == "stock default [2, n//2, n-3] as is"
    assert "layer:2, layer:30, layer:58" in plausible  # the default, +1 (llama's rule)
    assert "layer:60" not in " ".join(plausible)  # past the final layer's output
    # a 61-layer target has too many 3-subsets: the search range is the plausible taps
    wide = search_range(plausible_layouts([0, 3, 31], 3, 61), 3, 61, top)
    assert len(wide) < 20 and all(t.hf_index <= top for t in wide)
    assert len(search_range([], 3, 8, DEEPSEEK.max_capture_index(8))) == 8  # all of them


# --- in process ----------------------------------------------------------------------------


@pytest.mark.sglang
@pytest.mark.slow
def test_data_free_verdict_equals_the_data_based_one(drafter, doctor_report, figures):
    free = doctor_report(DoctorOptions(str(drafter.draft_dir), target=str(drafter.target_dir),
                                       progress=False))  # fmt: skip
    # the same report test_doctor.py reads (one run for both)
    data = doctor_report(DoctorOptions(str(drafter.draft_dir), data=str(drafter.eval_data),
                                       target=str(drafter.target_dir), max_tokens=2048,
                                       progress=False))  # fmt: skip
    print(free.render())
    assert free.source["kind"] == "in-process target" and data.source["kind"] == "training data"
    assert "Hugging Face transformers" in free.source["engine"]
    assert best_row(free)["layout"] == best_row(data)["layout"] == TRAINED
    assert served_row(free)["layout"] == served_row(data)["layout"] == TRAINED
    assert free.verdict == data.verdict == "ok" and free.exit_code == 0
    # the shifted and stock wirings lose on the target's own continuations too
    rows = {r["name"].split(", ")[0]: r for r in free.rows}
    for name in ("shifted +1 layer", "stock SGLang 0.5.23"):
        assert rows[name]["accuracy"] < best_row(free)["accuracy"] - 0.05, name
    figures.record("data-free doctor (in process): tokens scored", free.source["scored_tokens"])
    figures.record("data-free doctor: step-1 top-1 of the trained layout", best_row(free)
                   ["accuracy"], ".1%")  # fmt: skip


@pytest.mark.sglang
@pytest.mark.slow
def test_search_without_ids_finds_the_trained_layout(drafter, tmp_path, capsys, figures):
    from tokenizers import Tokenizer

    from sglang_eagle3.data.train_data import TrainData

    draft = tmp_path / "draft"
    shutil.copytree(drafter.draft_dir, draft)
    cfg = json.loads((draft / "config.json").read_text())
    del cfg["eagle_aux_hidden_state_layer_ids"]
    (draft / "config.json").write_text(json.dumps(cfg))
    # the prompts it was trained on, without their hidden states (what teams usually still have)
    tok = Tokenizer.from_file(str(drafter.target_dir / "tokenizer.json"))
    prompts = tmp_path / "prompts.jsonl"
    with prompts.open("w") as f:
        for i, s in enumerate(TrainData(drafter.train_data)):
            if i == 64:
                break
            text = tok.decode(s.input_ids.tolist(), skip_special_tokens=True)
            f.write(json.dumps({"text": text}) + "\n")
    argv = ["--draft", str(draft), "--target", str(drafter.target_dir), "--search", "--json",
            "--prompts", str(prompts), "--max-new-tokens", "8", "--max-tokens", "8192",
            "--no-progress"]  # fmt: skip
    code = main(argv)
    report = json.loads(capsys.readouterr().out)
    search = report["search"]
    print(search["text"])
    # without ids the plugin would serve SGLang's default: clearly wrong
    assert code == 1 and report["served"]["layout"] == ["layer:1", "layer:3", "layer:4"]
    assert search["layout"] == TRAINED, search["text"]
    assert search["flags"] == "--hidden-state-layout embed,layer:2,layer:5"
    assert search["z"] >= 4 and not search["tied"], search["text"]  # measured: z = 5.3
    # one report, one winner: the verdict and the table's top row name the search's layout
    scored = [r for r in report["candidates"] if r["evaluable"] and not r["is_floor"]]
    assert scored[0]["layout"] == TRAINED, scored[0]
    assert "clearly below embed, layer:2, layer:5 (" in report["reason"], report["reason"]
    figures.record("--search without ids, 64 training prompts: paired z over the runner-up",
                   search["z"], ".1f")  # fmt: skip


# --- real SGLang servers ------------------------------------------------------------------


@pytest.mark.sglang
@pytest.mark.slow
def test_server_mode_gives_the_in_process_numbers(server_factory, drafter, doctor_report,
                                                  figures):  # fmt: skip
    srv = server_factory(drafter.target_dir, [
        "--cpu", "--dtype", "float32", "--attention-backend", "torch_native",
        "--enable-return-aux-hidden-states", "--hidden-state-layout", CAPTURE_TAPS,
        "--disable-radix-cache"], name="doctor-capture", module="sglang_eagle3.launch",
    )  # fmt: skip
    opts = dict(max_new_tokens=16, progress=False)
    remote = run_doctor(DoctorOptions(str(drafter.draft_dir), server=srv.url, **opts))
    local = doctor_report(DoctorOptions(str(drafter.draft_dir), target=str(drafter.target_dir),
                                        engine="hf", **opts))  # fmt: skip
    assert remote.source["kind"] == "server" and "SGLang 0.5.23" in remote.source["engine"]
    assert remote.source["scored_tokens"] == local.source["scored_tokens"] > 500
    by_layout = {r["text"]: r for r in local.rows}
    worst = 0.0
    for r in remote.rows:
        mine = by_layout[r["text"]]
        for a, b in zip(r["step_accuracy"], mine["step_accuracy"], strict=True):
            if a is not None and b is not None:
                worst = max(worst, abs(a - b))
    figures.record("doctor --server vs in process: max |step accuracy diff|", worst, ".2g")
    assert worst < 0.005  # fp32 noise may flip a near-tie or two, not a layout's score
    assert remote.verdict == local.verdict == "ok"
    assert best_row(remote)["layout"] == TRAINED
    figures.record("doctor --server: bytes moved per token (8 taps x 128, JSON)",
                   remote.source["bytes_per_token"])  # fmt: skip
    assert remote.source["cut_short"] is False and "cut the run short" not in remote.reason
    # a run the time limit cuts after its first prompt says so, wherever it gives the verdict
    cut = run_doctor(DoctorOptions(str(drafter.draft_dir), server=srv.url,
                                   server_time_limit=0.001, **opts))  # fmt: skip
    assert cut.source["cut_short"] is True and cut.source["prompts"] == 1
    assert f"stopped after 1 of {remote.source['prompts']} prompts" in cut.render()
    assert "--server-time-limit cut the run short" in cut.reason
    assert cut.to_dict()["reason"] == cut.reason


@pytest.mark.sglang
@pytest.mark.slow
def test_predicted_accept_length_is_what_an_eagle3_server_measures(
    server_factory, drafter, doctor_report, tmp_path, capsys, figures
):
    srv = server_factory(drafter.target_dir, [
        "--cpu", "--dtype", "float32", "--attention-backend", "intel_amx", *SPEC,
        "--speculative-draft-model-path", str(drafter.draft_dir),
        "--draft-cache-dir", str(tmp_path / "drafts")], name="doctor-eagle3",
        module="sglang_eagle3.launch",
    )  # fmt: skip
    params = {"max_new_tokens": 64, "temperature": 0}
    outs = [srv.post("/generate", {"text": p, "sampling_params": params}) for p in BUILT_IN]
    served = spec_stats(o["meta_info"] for o in outs).accept_length
    # an EAGLE-3 server is not in capture mode: the doctor says so and how to start one
    assert main(["--draft", str(drafter.draft_dir), "--server", srv.url]) == 2
    assert "is not in capture mode" in one_error_line(capsys)
    srv.stop()  # the doctor's own forward passes need the cores
    # the data-free report of test_data_free_verdict_equals_the_data_based_one (64 tokens)
    report = doctor_report(DoctorOptions(str(drafter.draft_dir), target=str(drafter.target_dir),
                                         max_new_tokens=64, progress=False))  # fmt: skip
    predicted = report.replay_accept_length
    figures.record("EAGLE-3 server accept length, built-in prompts (3 steps, chain)", served,
                   ".2f")  # fmt: skip
    figures.record("data-free doctor's predicted (replay) accept length", predicted, ".2f")
    assert served and predicted
    assert abs(predicted - served) / served < 0.10, (predicted, served)


def test_the_help_gives_the_capture_server_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    cmd = "python -m sglang_eagle3.launch --model-path TARGET --enable-return-aux-hidden-states"
    assert cmd in out and "--hidden-state-layout TAPS --disable-radix-cache" in out


@pytest.mark.sglang
@pytest.mark.slow
def test_engine_sglang_starts_its_own_capture_server_and_agrees_with_hf(
    drafter, doctor_report, figures, monkeypatch
):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the server it starts: one thread
    opts = dict(target=str(drafter.target_dir), max_new_tokens=16, progress=False)
    real = run_doctor(DoctorOptions(str(drafter.draft_dir), engine="sglang", **opts))
    # the in-process report of test_server_mode_gives_the_in_process_numbers
    hf = doctor_report(DoctorOptions(str(drafter.draft_dir), engine="hf", **opts))
    assert "capture server the doctor started" in real.source["engine"]
    assert "Hugging Face" in hf.source["engine"]
    assert real.source["scored_tokens"] == hf.source["scored_tokens"]
    got = {r["text"]: r["accuracy"] for r in real.rows if r["evaluable"]}
    want = {r["text"]: r["accuracy"] for r in hf.rows if r["evaluable"]}
    worst = max(abs(got[k] - want[k]) for k in want)
    figures.record("doctor --engine sglang vs --engine hf: max |step-1 accuracy diff|", worst,
                   ".2g")  # fmt: skip
    assert worst < 0.005 and best_row(real)["layout"] == TRAINED
