"""Fail closed: a declared layout with a hook not in place, or another SGLang, starts nothing.

The pure part (`declared_layout`) runs here; the plugin runs inside real SGLang 0.5.23 in a
subprocess: the real `python -m sglang.launch_server` entry with one hook target removed, and
SGLang's own `load_plugins()` with installed-package metadata that says another version.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest_helpers_layout import flat_config, make_flat_draft, write_json

from sglang_eagle3 import env_names
from sglang_eagle3.hooks.plan import declared_layout
from sglang_eagle3.launch.cpu_env import harness_env

CAPTURE = "sglang.srt.model_executor.model_runner.configure_aux_hidden_state_capture"
H = 16


def _target(tmp_path, layers: int = 8):
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": layers,
           "hidden_size": H}  # fmt: skip
    write_json(tmp_path / "target" / "config.json", cfg)
    return tmp_path / "target"


def _argv(target, draft) -> list[str]:
    return ["launch_server", "--model-path", str(target), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft)]  # fmt: skip


def test_environment_layout_is_declared():
    assert declared_layout([], {env_names.LAYOUT: "embed,layer:2"}) == "$SGLANG_EAGLE3_LAYOUT"
    assert declared_layout([], {}) is None


def test_draft_with_output_of_layer_ids_is_declared(tmp_path):
    draft = make_flat_draft(tmp_path / "d", flat_config(hidden=H, ids=[-1, 2, 5]), fc_in=3 * H)
    source = declared_layout(_argv(_target(tmp_path), draft), {})
    assert source is not None and str(draft) in source
    # `--flag=value` spelling, the last value wins (as in SGLang's parser)
    argv = ["x", f"--model-path={_target(tmp_path)}", "--speculative-draft-model-path", "gone",
            f"--speculative-draft-model-path={draft}"]  # fmt: skip
    assert declared_layout(argv, {}) == source


def test_ids_without_a_convention_are_not_declared(tmp_path):
    draft = make_flat_draft(tmp_path / "d", flat_config(hidden=H, ids=[2, 4, 5]), fc_in=3 * H)
    assert declared_layout(_argv(_target(tmp_path), draft), {}) is None


def test_unreadable_draft_counts_as_declared(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text("{not json")
    source = declared_layout(_argv(_target(tmp_path), tmp_path / "d"), {})
    assert source is not None and "unreadable" in source and "not readable JSON" in source


LAUNCH_WITHOUT_HOOK = """
import runpy, sys
import sglang.srt.model_executor.model_runner as m
del m.configure_aux_hidden_state_capture  # the hook's target is gone
sys.argv = {argv!r}
runpy.run_module("sglang.launch_server", run_name="__main__")
print("SERVER CODE REACHED PAST PLUGIN LOADING")
"""


def _run(code: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


@pytest.mark.sglang
def test_declared_layout_with_a_missing_hook_exits_at_start(tiny_target, tmp_path):
    argv = ["launch_server", "--model-path", str(tiny_target), "--device", "cpu"]
    env = {**harness_env(), env_names.LAYOUT: "embed,layer:2,layer:5"}
    proc = _run(LAUNCH_WITHOUT_HOOK.format(argv=argv), env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    ours = [line for line in proc.stderr.splitlines() if line.startswith("sglang_eagle3: ")]
    assert len(ours) == 1, proc.stderr[-3000:]
    assert f"hooks not in place: {CAPTURE}" in ours[0]
    assert ours[0].startswith("sglang_eagle3: $SGLANG_EAGLE3_LAYOUT: ") and "Fix: " in ours[0]
    # SGLang logs the failed patch with its traceback; the refusal itself is the last word.
    assert "Traceback" not in proc.stderr.split(ours[0])[-1]
    assert "SERVER CODE REACHED" not in proc.stdout


LOAD_PLUGINS = """
import json, sys
sys.argv = {argv!r}
from sglang.srt.plugins import load_plugins
load_plugins()
from importlib import metadata
print(json.dumps({{"loaded": True, "sglang": metadata.version("sglang")}}))
"""


@pytest.mark.sglang
def test_missing_hook_without_a_declared_layout_keeps_stock_and_says_so(tmp_path):
    code = "import sglang.srt.model_executor.model_runner as m\n"
    code += "del m.configure_aux_hidden_state_capture\n"
    code += LOAD_PLUGINS.format(argv=["launch_server"])
    env = {k: v for k, v in harness_env().items() if k != env_names.LAYOUT}
    proc = _run(code, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1])["loaded"] is True
    assert f"hooks NOT in place: {CAPTURE}. No layout is declared" in proc.stderr
    assert "stock SGLang behaviour is kept" in proc.stderr


def _fake_sglang_metadata(tmp_path, version: str):
    """Installed-package metadata, first on sys.path, that says another SGLang version."""
    dist = tmp_path / "meta" / f"sglang-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return dist.parent


@pytest.mark.sglang
@pytest.mark.parametrize("declared", [True, False], ids=["declared", "nothing-declared"])
def test_other_sglang_version(tmp_path, declared):
    env = {k: v for k, v in harness_env().items() if k != env_names.LAYOUT}
    if declared:
        env[env_names.LAYOUT] = "embed,layer:2,layer:5"
    meta = _fake_sglang_metadata(tmp_path, "0.5.24")
    code = f"import sys; sys.path.insert(0, {str(meta)!r})\n"
    code += LOAD_PLUGINS.format(argv=["launch_server"])
    proc = _run(code, env)
    if declared:
        assert proc.returncode == 2, proc.stderr[-3000:]
        ours = [line for line in proc.stderr.splitlines() if line.startswith("sglang_eagle3: ")]
        assert len(ours) == 1, proc.stderr[-3000:]
        assert "SGLang 0.5.24 is installed" in ours[0] and "sglang==0.5.23" in ours[0]
        assert not proc.stdout.strip()
    else:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout.splitlines()[-1]) == {"loaded": True, "sglang": "0.5.24"}
        assert "plugin inactive, no hooks applied" in proc.stderr
        assert "stock SGLang behaviour is kept" in proc.stderr
