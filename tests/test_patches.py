"""patches/ for SGLang forks: applies to a pristine copy of the pinned sglang and captures
the declared taps there with the plugin disabled."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from sglang_checks import capture_vs_hf

DRAFTER_SCRIPT = Path(__file__).parent / "scripts" / "drafter_vs_speculators.py"

PATCHES = sorted((Path(__file__).parent.parent / "patches").glob("*.patch"))


@pytest.fixture(scope="module")
def patched_sglang(tmp_path_factory) -> Path:
    import sglang

    pristine = Path(sglang.__file__).parent
    root = tmp_path_factory.mktemp("fork")
    shutil.copytree(pristine, root / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    for patch in PATCHES:
        dry = subprocess.run(["patch", "-p1", "--dry-run", "-i", str(patch)], cwd=root,
                             capture_output=True, text=True)  # fmt: skip
        assert dry.returncode == 0, f"{patch.name} no longer applies:\n{dry.stdout}{dry.stderr}"
        subprocess.run(["patch", "-p1", "-i", str(patch)], cwd=root, check=True,
                       capture_output=True)  # fmt: skip
    return root


def test_there_are_patches():
    assert PATCHES, "patches/ is empty"


@pytest.mark.sglang
@pytest.mark.slow
def test_patched_fork_captures_declared_taps_without_the_plugin(
    patched_sglang, server_factory, tiny_target
):
    srv = server_factory(
        tiny_target,
        ["--dtype", "float32", "--attention-backend", "torch_native",
         "--enable-return-aux-hidden-states", "--speculative-algorithm", "EAGLE3"],
        name="patched-fork",
        env={"PYTHONPATH": str(patched_sglang), "SGLANG_PLUGINS": "sglang_eagle3_cpu_harness",
             "SGLANG_EAGLE3_LAYOUT": "embed,layer:2,layer:5"},
    )  # fmt: skip
    log = srv.log()
    assert "sglang-eagle3 patch: capturing taps ['embed', 'layer:2', 'layer:5']" in log
    assert "capturing taps embed" not in log, "the plugin must be off in this test"
    diff, shifted = capture_vs_hf(srv, tiny_target, (0, 3, 6))
    assert diff < 1e-4 and shifted > 1e-2, (diff, shifted)


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.parametrize("layers", [1, 2])
def test_patched_fork_serves_the_speculators_drafter_without_the_plugin(
    patched_sglang, tmp_path, layers
):
    """1 layer: the trained tiny drafter (norm_before_residual); 2 layers: a random one with a
    trained embedding. SGLang's drafter in process against speculators' forward."""
    import json
    import os
    import sys

    from sglang_eagle3.checkpoint.flat_draft import flat_copy_for_target
    from sglang_eagle3.launch.cpu_env import harness_env
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter
    from sglang_eagle3.testing.tiny.random_speculators import write_random_speculators_draft

    d = tiny_drafter()
    src = d.draft_dir
    if layers == 2:
        src = write_random_speculators_draft(tmp_path / "src", d.target_dir, num_layers=2)
    flat = flat_copy_for_target(src, d.target_dir, tmp_path / "flat")
    env = harness_env()
    env["PYTHONPATH"] = os.pathsep.join([str(patched_sglang), env["PYTHONPATH"]])
    env["SGLANG_PLUGINS"] = "sglang_eagle3_cpu_harness"  # the CPU harness, not the plugin
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(DRAFTER_SCRIPT), str(flat), str(src), str(d.train_data),
         str(d.target_dir), str(out)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "plugin loaded" not in proc.stderr
    result = json.loads(out.read_text())
    assert result["max_abs_diff"] < 1e-4 and result["same_argmax"], result


MLA_SCRIPT = Path(__file__).parent / "scripts" / "mla_drafter_vs_reference.py"


def _fork_env(patched_sglang: Path) -> dict[str, str]:
    import os

    from sglang_eagle3.launch.cpu_env import harness_env

    env = harness_env()
    env["PYTHONPATH"] = os.pathsep.join([str(patched_sglang), env["PYTHONPATH"]])
    env["SGLANG_PLUGINS"] = "sglang_eagle3_cpu_harness"  # the CPU harness, not the plugin
    return env


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.parametrize("case", ["as trained", "extra tensor", "norm_before_fc"])
def test_patched_fork_loads_the_mla_drafter_without_the_plugin(
    patched_sglang, tiny_target, tmp_path, case
):
    """SGLang's MLA drafter in process on the fork: the reference forward's logits, and the
    patch's refusals where the stock loader would log one line or ignore a setting."""
    import json
    import sys

    from safetensors.torch import load_file, save_file

    from sglang_eagle3.testing.tiny.random_mla_draft import write_random_mla_draft

    extra = {"embed_requires_grad": True, "norm_before_fc": case == "norm_before_fc"}
    draft = write_random_mla_draft(
        tmp_path / "draft", tiny_target,
        eagle_config={"hidden_state_layout": ["embed", "layer:2", "layer:5"]},
        fc_norm=True, norm_output=True, d2t=True, extra_config=extra,
    )  # fmt: skip
    if case == "extra tensor":
        tensors = load_file(str(draft / "model.safetensors"))
        tensors["layers.0.self_attn.q_norm.weight"] = tensors["norm.weight"].clone()
        save_file(tensors, str(draft / "model.safetensors"))
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(MLA_SCRIPT), str(draft), str(tiny_target), str(out)],
        env=_fork_env(patched_sglang), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert "plugin loaded" not in proc.stderr
    if case == "as trained":
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(out.read_text())["declared"]
        assert got["max_abs_diff"] < 1e-4 and got["max_abs_hidden_diff"] < 1e-4, got
    elif case == "extra tensor":
        assert proc.returncode != 0
        assert "the served drafter would differ from the trained one (tensors skipped: " \
            "['layers.0.self_attn.q_norm.weight']" in proc.stderr  # fmt: skip
    else:
        assert proc.returncode != 0
        assert "norm_before_fc is true; Eagle3DeepseekV2 cannot serve it" in proc.stderr


@pytest.mark.sglang
@pytest.mark.slow
def test_patched_fork_serves_the_trained_mla_drafter(patched_sglang, server_factory):
    """Both patches, no plugin: the trained tiny MLA drafter (ascending layout, its own
    embedding kept by the patched set_embed) drafts as trained: accepted drafts, not noise."""
    pytest.importorskip("speculators.models.eagle3")
    from sglang_checks import generate

    from sglang_eagle3.bench.metrics import spec_stats
    from sglang_eagle3.doctor.prompts import BUILT_IN
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter
    from sglang_eagle3.testing.tiny.mla_drafter import tiny_mla_drafter

    draft, target = tiny_mla_drafter(), tiny_drafter().target_dir
    env = _fork_env(patched_sglang)
    srv = server_factory(
        target,
        ["--dtype", "float32", "--attention-backend", "intel_amx",
         "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
         "--speculative-draft-model-path", str(draft)],
        name="patched-fork-mla", env={k: env[k] for k in ("PYTHONPATH", "SGLANG_PLUGINS")},
    )  # fmt: skip
    log = srv.log()
    assert "sglang-eagle3 patch: capturing taps ['embed', 'layer:2', 'layer:5']" in log
    assert "plugin loaded" not in log
    outs = [generate(srv, p, 64) for p in BUILT_IN]
    accept = spec_stats(o["meta_info"] for o in outs).accept_length
    print(f"patched fork, tiny MLA drafter: accept length {accept:.2f}")
    assert accept > 1.5  # random MLA weights accept almost nothing (measured 2.16 with the plugin)
