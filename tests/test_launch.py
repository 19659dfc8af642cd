"""The launcher: dry-run goldens, bad input before any SGLang process, a real CPU server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest_helpers_layout import (
    build_speculators_draft,
    flat_config,
    make_flat_draft,
    run_main,
    write_json,
)

from sglang_eagle3 import env_names

GOLDEN = Path(__file__).parent / "golden"
SEED_FLAGS = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
              "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]  # fmt: skip


def kimi_k25_target(directory: Path) -> Path:
    """A config-only Kimi-K2.5-shaped target: 61 DeepSeek-V3 layers, hidden 7168."""
    text = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61,
            "hidden_size": 7168}  # fmt: skip
    return write_json(directory / "config.json", {
        "architectures": ["KimiK25ForConditionalGeneration"], "text_config": text,
    }).parent  # fmt: skip


def run_launch(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return run_main("sglang_eagle3.launch.cli", args, cwd)


def normalized(text: str, tmp: Path) -> str:
    text = text.replace(str(tmp), "<tmp>").replace(sys.executable, "<python>")
    return re.sub(r"-[0-9a-f]{12}\b", "-<hash>", text)  # converted-draft cache keys


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":  # regenerate, review the diff, commit
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with UPDATE_GOLDEN=1 and review"
    assert text == path.read_text(), f"{name} differs from the golden output"


def test_dry_run_golden_for_the_seed_scenario(tmp_path):
    target = kimi_k25_target(tmp_path / "kimi")
    draft = make_flat_draft(tmp_path / "draft", flat_config(hidden=7168, ids=[-1, 2, 30]),
                            fc_in=3 * 7168)  # fmt: skip
    args = ["--dry-run", "--model-path", str(target), "--speculative-draft-model-path",
            str(draft), "--tp-size", "8", *SEED_FLAGS]  # fmt: skip
    text = run_launch(args, tmp_path)
    assert text.returncode == 0, text.stderr
    check_golden("seed_dry_run.txt", normalized(text.stdout, tmp_path))
    out = run_launch(args + ["--json"], tmp_path)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["layout"] == ["embed", "layer:2", "layer:30"]
    assert plan["capture_indices"] == [0, 3, 31]
    assert "output-of-layer" in plan["layout_source"]
    assert plan["speculative"] == {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}
    assert plan["env"] == {"SGLANG_EAGLE3_LAYOUT": "embed,layer:2,layer:30"}
    assert "--tp-size" in plan["sglang_argv"]  # SGLang's own flags pass through unchanged
    check_golden("seed_dry_run.json", normalized(json.dumps(plan, indent=2), tmp_path) + "\n")
    assert "SGLANG_IMPORTED" not in out.stderr


def test_dry_run_golden_for_a_speculators_draft(tmp_path):
    pytest.importorskip("speculators")
    target = write_json(tmp_path / "target" / "config.json", {
        "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 8, "hidden_size": 64,
    }).parent  # fmt: skip
    draft = build_speculators_draft(tmp_path / "spec", ids=[0, 3, 6], hidden=64)
    args = ["--dry-run", "--json", "--model-path", str(target), "--speculative-draft-model-path",
            str(draft), "--speculative-algorithm", "EAGLE3", "--draft-cache-dir",
            str(tmp_path / "cache")]  # fmt: skip
    out = run_launch(args, tmp_path)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["layout"] == ["embed", "layer:2", "layer:5"]  # input-to-layer ids [0, 3, 6]
    assert plan["draft"]["format"] == "speculators"
    served = plan["draft"]["served_from"]
    assert served.startswith(str(tmp_path / "cache"))
    assert not Path(served).exists(), "a dry run writes nothing"
    assert {c["flag"] for c in plan["changes"]} >= {"--speculative-draft-model-path",
                                                    "--speculative-num-steps"}  # fmt: skip
    check_golden(
        "speculators_dry_run.json", normalized(json.dumps(plan, indent=2), tmp_path) + "\n"
    )


@pytest.mark.parametrize(
    "case,extra,message",
    [
        ("seed flags", ["--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
                        "--speculative-num-draft-tokens", "16"], "--speculative-num-steps 15"),
        ("tree + rejection sampling", ["--speculative-eagle-topk", "2",
                                       "--speculative-use-rejection-sampling"],
         "rejection sampling (or block verification) needs --speculative-eagle-topk 1"),
        ("tree + trtllm_mha decode", ["--speculative-num-steps", "3", "--speculative-eagle-topk",
                                      "4", "--decode-attention-backend", "trtllm_mha"],
         "trtllm_mha attention backend supports only --speculative-eagle-topk 1"),
        ("no draft", ["--no-draft"], "EAGLE3 needs --speculative-draft-model-path"),
        ("missing draft dir", ["--draft", "missing"], "draft directory not found"),
        ("ambiguous ids", ["--ids", "2,4,5"], "do not say which id convention"),
        ("no ids", ["--ids", ""], "does not say which hidden states it was trained on"),
        ("width", ["--fc-in", "100"], "fc.weight takes 100 input features"),
        ("last layer", ["--hidden-state-layout", "embed,layer:2,layer:7",
                        "--override-draft-layout"],  # the ids say layer:5: forced past that
         "output of the last decoder layer"),
        ("contradicts ids", ["--hidden-state-layout", "layer:5,embed,layer:2"],
         "contradicts the checkpoint"),
        ("tbo", ["--enable-two-batch-overlap"], "two-batch overlap"),
        ("pipeline", ["--pp-size", "2"], "pipeline parallelism (2 stages)"),
        ("pipeline alias", ["--pipeline-parallel-size=2"], "taps on earlier stages"),
        ("bad target", ["--model-path", "nowhere"], "no config.json for the target model"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_one_message_before_sglang(tmp_path, case, extra, message):
    target = write_json(tmp_path / "t" / "config.json", {
        "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 8, "hidden_size": 16,
    }).parent  # fmt: skip
    ids, fc_in, draft, extra = [-1, 2, 5], 48, None, list(extra)
    if "--ids" in extra:
        raw = extra[extra.index("--ids") + 1]
        ids = [int(x) for x in raw.split(",")] if raw else None
        extra = []
    if "--fc-in" in extra:
        fc_in, extra = int(extra[1]), []
    if "--draft" in extra:
        draft, extra = str(tmp_path / extra[1]), []
    made = make_flat_draft(tmp_path / "d", flat_config(hidden=16, ids=ids), fc_in=fc_in)
    args = ["--model-path", str(target), "--speculative-algorithm", "EAGLE3"]
    if "--no-draft" in extra:
        extra = []
    else:
        args += ["--speculative-draft-model-path", draft or str(made)]
    if "--model-path" in extra:
        args[1], extra = str(tmp_path / extra[1]), []
    out = run_launch(args + extra, tmp_path)
    assert out.returncode == 2, (case, out.stdout, out.stderr)
    err = [line for line in out.stderr.splitlines() if line.strip()]
    assert err[0].startswith("python -m sglang_eagle3.launch: error:"), err
    assert message in err[0], err[0]
    assert "SGLANG_IMPORTED" not in out.stderr, "validation must happen before SGLang loads"


CAPTURE = ["--enable-return-aux-hidden-states"]


def config_target(directory: Path, architecture: str = "DeepseekV3ForCausalLM") -> Path:
    return write_json(directory / "config.json", {
        "architectures": [architecture], "num_hidden_layers": 8, "hidden_size": 16,
    }).parent  # fmt: skip


def test_dry_run_says_what_each_pd_role_publishes_or_checks(tmp_path):
    target = kimi_k25_target(tmp_path / "kimi")
    draft = make_flat_draft(tmp_path / "draft", flat_config(hidden=7168, ids=[-1, 2, 30]),
                            fc_in=3 * 7168)  # fmt: skip
    args = ["--dry-run", "--model-path", str(target), "--speculative-draft-model-path",
            str(draft), *SEED_FLAGS, "--disaggregation-transfer-backend", "mooncake"]  # fmt: skip
    said = {}
    for role in ("prefill", "decode", "null"):
        out = run_launch([*args, "--disaggregation-mode", role, "--json"], tmp_path)
        assert out.returncode == 0, out.stderr
        said[role] = [n for n in json.loads(out.stdout)["notes"] if n.startswith("PD ")]
    assert said["null"] == []
    assert said["prefill"] == [
        "PD prefill: publishes this server's plan (taps, fc order, drafter weights sha256, "
        "speculative flags) at GET /sglang_eagle3/plan on its bootstrap server (port SGLang "
        "default 8998); decode servers refuse requests from a prefill whose plan is not theirs"
    ]
    assert said["decode"][0].startswith("PD decode: checks each prefill server's plan")
    text = run_launch([*args, "--disaggregation-mode", "prefill",
                       "--disaggregation-bootstrap-port", "9999"], tmp_path).stdout  # fmt: skip
    assert "note    PD prefill: publishes" in text and "(port 9999)" in text


def test_capture_only_dry_run_plans_the_declared_taps_without_a_draft(tmp_path):
    base = ["--dry-run", "--model-path", str(config_target(tmp_path / "t")), *CAPTURE,
            "--hidden-state-layout", "layer:5,embed,layer:2"]  # fmt: skip
    text = run_launch(base, tmp_path)
    assert text.returncode == 0, text.stderr
    said = "capture only: taps layer:5, embed, layer:2 returned in ascending capture order "
    assert said + "embed, layer:2, layer:5" in text.stdout
    assert "--speculative-algorithm: unset -> EAGLE3" in text.stdout
    command = text.stdout.splitlines()[-1]
    assert command.startswith("command SGLANG_EAGLE3_LAYOUT=layer:5,embed,layer:2 python -m ")
    assert command.endswith("--enable-return-aux-hidden-states --speculative-algorithm EAGLE3")
    out = run_launch(base + ["--json"], tmp_path)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["capture_only"] is True and plan["draft"] is None and plan["speculative"] is None
    assert plan["layout"] == ["layer:5", "embed", "layer:2"]
    assert plan["capture_order"] == ["embed", "layer:2", "layer:5"]
    assert plan["capture_indices"] == [0, 3, 6] and plan["hf_hidden_states_indices"] == [6, 0, 3]
    assert plan["env"] == {"SGLANG_EAGLE3_LAYOUT": "layer:5,embed,layer:2"}
    assert "SGLANG_IMPORTED" not in out.stderr
    # An explicit EAGLE3 is kept as given, once, and nothing is reported as changed.
    given = run_launch(base + ["--json", "--speculative-algorithm", "EAGLE3"], tmp_path)
    plan = json.loads(given.stdout)
    assert plan["sglang_argv"].count("--speculative-algorithm") == 1 and plan["changes"] == []


def test_capture_only_last_layer_output_only_where_the_family_loop_reaches_it(tmp_path):
    taps = ["--hidden-state-layout", "embed,layer:7"]  # layer:7 of 8: the last layer's output
    gpt_oss = config_target(tmp_path / "gpt", "GptOssForCausalLM")
    ok = run_launch(["--dry-run", "--json", "--model-path", str(gpt_oss), *CAPTURE, *taps],
                    tmp_path)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["capture_indices"] == [0, 8]
    deepseek = config_target(tmp_path / "ds")
    out = run_launch(["--dry-run", "--model-path", str(deepseek), *CAPTURE, *taps], tmp_path)
    assert out.returncode == 2 and "output of the last decoder layer" in out.stderr, out.stderr


@pytest.mark.parametrize(
    "case,extra,message",
    [
        ("no layout", [], "--enable-return-aux-hidden-states needs --hidden-state-layout"),
        ("draft", ["--speculative-draft-model-path", "d"], "drop --speculative-draft-model-path"),
        ("layer ids", ["--return-aux-hidden-state-layer-ids", "1", "2"],
         "--hidden-state-layout replaces --return-aux-hidden-state-layer-ids"),
        ("pipeline", ["--pp-size", "2"], "pipeline parallelism (2 stages)"),
        ("dflash", ["--speculative-algorithm", "DFLASH"], "EAGLE-3 convention only"),
        ("override", ["--override-draft-layout"], "--override-draft-layout reads a draft's"),
        ("convention", ["--aux-layer-convention", "input-to-layer"], "serves no draft"),
        ("bad tap", ["--hidden-state-layout", "embed,layer:9"], "does not exist in a 8-layer"),
        ("unknown family", ["--arch", "FooForCausalLM"], "not in sglang-eagle3's table"),
        ("layout twice", ["--hidden-state-layout", "embed,layer:3"],
         "--hidden-state-layout embed,layer:2 and --hidden-state-layout embed,layer:3 both set"),
    ],
)  # fmt: skip
def test_capture_only_bad_input_exits_2_before_sglang(tmp_path, case, extra, message):
    arch = "DeepseekV3ForCausalLM"
    if "--arch" in extra:
        arch, extra = extra[1], []
    args = ["--model-path", str(config_target(tmp_path / "t", arch)), *CAPTURE]
    if case not in ("no layout", "bad tap"):
        args += ["--hidden-state-layout", "embed,layer:2"]
    out = run_launch(args + extra, tmp_path)
    assert out.returncode == 2, (case, out.stdout, out.stderr)
    err = [line for line in out.stderr.splitlines() if line.strip()]
    assert err[0].startswith("python -m sglang_eagle3.launch: error:") and message in err[0], err
    assert "SGLANG_IMPORTED" not in out.stderr, "validation must happen before SGLang loads"


def test_cpu_ranks_get_a_core_set_each_or_an_error_before_sglang(tmp_path, monkeypatch):
    """Without SGLANG_CPU_OMP_THREADS_BIND, SGLang 0.5.23 dies 40 s into a CPU start with two
    ranks on one NUMA node (numa_utils.py:463): the launcher binds them, or refuses at once."""
    monkeypatch.delenv(env_names.CPU_OMP_THREADS_BIND, raising=False)
    target = str(config_target(tmp_path / "t"))
    ok = run_launch(["--cpu", "--model-path", target, "--tp-size", "2", "--dry-run"], tmp_path)
    assert ok.returncode == 0, ok.stderr
    cores = sorted(os.sched_getaffinity(0))
    assert f"{env_names.CPU_OMP_THREADS_BIND}='{cores[0]}" in ok.stdout  # in the command line
    too_many = str(len(cores) + 1)
    out = run_launch(["--cpu", "--model-path", target, "--tp-size", too_many, "--dry-run"],
                     tmp_path)  # fmt: skip
    err = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and "CPU ranks need a core each" in err[0], out.stderr
    assert "SGLANG_IMPORTED" not in out.stderr


def test_a_draft_as_model_path_is_named_as_one(tmp_path):
    draft = make_flat_draft(tmp_path / "d", flat_config(ids=[1, 4, 6]))
    out = run_launch(["--model-path", str(draft), "--dry-run"], tmp_path)
    err = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and "this is an EAGLE-3 draft's config" in err[0], out.stderr
    assert str(draft / "config.json") in err[0] and "SGLANG_IMPORTED" not in out.stderr


def test_help_shows_ours_then_points_to_sglang(tmp_path):
    out = run_launch(["--help"], tmp_path)
    assert out.returncode == 0
    assert out.stdout.index("--hidden-state-layout") < out.stdout.index(
        "sglang.launch_server --help"
    )


@pytest.mark.sglang
@pytest.mark.slow
def test_real_cpu_server_through_the_launcher_stops_cleanly_on_sigterm(server_factory, tiny_target,
                                                                     tmp_path):  # fmt: skip
    from sglang_eagle3.testing.tiny.random_draft import write_random_flat_draft

    seed_ids = {"eagle_aux_hidden_state_layer_ids": [-1, 2, 5]}
    draft = write_random_flat_draft(tmp_path / "seed", tiny_target, eagle_config=seed_ids)
    srv = server_factory(
        tiny_target, ["--cpu", "--dtype", "float32", "--speculative-algorithm", "EAGLE3",
                      "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "3"],
        name="launcher", module="sglang_eagle3.launch",
    )  # fmt: skip
    log = srv.log()
    assert "sglang-eagle3 wiring" in log and "SGLang capture index" in log
    assert "capturing taps embed, layer:2, layer:5" in log
    assert "layout from $SGLANG_EAGLE3_LAYOUT" in log
    params = {"max_new_tokens": 8, "temperature": 0}
    out = srv.post("/generate", {"text": "def main(", "sampling_params": params})
    assert out["meta_info"]["spec_verify_ct"] > 0
    pids = srv.pids()
    code = srv.stop(signal.SIGTERM, timeout=60)
    import psutil

    assert [p for p in pids if psutil.pid_exists(p)] == [], "processes left after SIGTERM"
    assert code is not None
