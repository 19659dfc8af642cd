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
