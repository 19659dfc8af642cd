"""SGLang's drafter, in process on CPU, computes what speculators trained (issue 9).

Each case runs tests/scripts/drafter_vs_speculators.py: SGLang 0.5.23's real ModelRunner loads
the launcher's flat copy of a speculators draft (plugin hooks in place, or not) and runs the
first draft step; speculators' own Eagle3DraftModel.forward runs on the same tokens and taps.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3.checkpoint.flat_draft import flat_copy_for_target
from sglang_eagle3.launch.cpu_env import harness_env

pytestmark = [pytest.mark.sglang, pytest.mark.slow]
SCRIPT = Path(__file__).parent / "scripts" / "drafter_vs_speculators.py"
PLUGIN_OFF = {"SGLANG_PLUGINS": "sglang_eagle3_cpu_harness"}  # the CPU harness only


@pytest.fixture(scope="module")
def drafter():
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    return tiny_drafter()


def _compare(flat: Path, spec: Path, drafter, out: Path, env_extra=None):
    env = harness_env()
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(flat), str(spec), str(drafter.train_data),
         str(drafter.target_dir), str(out)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return proc, (json.loads(out.read_text()) if proc.returncode == 0 else None)


def test_norm_before_residual_drafter_matches_speculators(drafter, tmp_path, figures):
    """The demo's drafter: speculators' defaults (norm_before_residual=True), trained."""
    assert json.loads((drafter.draft_dir / "config.json").read_text())["norm_before_residual"]
    flat = flat_copy_for_target(drafter.draft_dir, drafter.target_dir, tmp_path / "flat")
    proc, on = _compare(flat, drafter.draft_dir, drafter, tmp_path / "on.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures.record("trained tiny drafter: max |logit diff| with the plugin", on["max_abs_diff"])
    figures.record("trained tiny drafter: same argmax with the plugin", on["same_argmax"])
    assert on["rows"] == 3 and on["norm_before_residual_flag"]
    assert on["max_abs_diff"] < 1e-4, on
    assert on["same_argmax"], on
    assert "norm_before_residual honoured" in proc.stderr

    # Documented behaviour of stock SGLang 0.5.23: the residual is the un-normed fc output.
    proc, off = _compare(flat, drafter.draft_dir, drafter, tmp_path / "off.json", PLUGIN_OFF)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures.record("trained tiny drafter: max |logit diff| without", off["max_abs_diff"])
    figures.record("trained tiny drafter: same argmax without", off["same_argmax"])
    assert not off["norm_before_residual_flag"]
    assert off["max_abs_diff"] > 1e-2, off  # measured 7.7 on the tiny drafter
    assert "plugin loaded" not in proc.stderr


def test_two_layer_drafter_with_trained_embedding_matches_speculators(drafter, tmp_path, figures):
    """speculators' later layers are stock Llama layers (input_layernorm) and
    embed_requires_grad trains the draft's own embedding: stock SGLang drops both."""
    from sglang_eagle3.testing.tiny.random_speculators import write_random_speculators_draft

    src = write_random_speculators_draft(tmp_path / "src", drafter.target_dir, num_layers=2)
    flat = flat_copy_for_target(src, drafter.target_dir, tmp_path / "flat")
    proc, on = _compare(flat, src, drafter, tmp_path / "on.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures.record("random 2-layer draft: max |logit diff| with the plugin", on["max_abs_diff"])
    figures.record("random 2-layer draft: same argmax with the plugin", on["same_argmax"])
    assert on["max_abs_diff"] < 1e-4 and on["same_argmax"], on
    assert "layers.1.input_layernorm.weight -> layers.1.hidden_norm.weight" in proc.stderr
    assert "trained embedding kept" in proc.stderr

    proc, off = _compare(flat, src, drafter, tmp_path / "off.json", PLUGIN_OFF)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures.record("random 2-layer draft: max |logit diff| without", off["max_abs_diff"])
    figures.record("random 2-layer draft: same argmax without", off["same_argmax"])
    assert off["max_abs_diff"] > 1e-2, off


def test_tensor_sglang_would_skip_is_refused_at_load(drafter, tmp_path):
    from safetensors.torch import load_file, save_file

    flat = flat_copy_for_target(drafter.draft_dir, drafter.target_dir, tmp_path / "flat")
    bad = tmp_path / "bad"
    bad.mkdir()
    shutil.copy(flat / "config.json", bad / "config.json")
    tensors = load_file(str(flat / "model.safetensors"))
    tensors["layers.0.self_attn.q_norm.weight"] = tensors["norm.weight"].clone()
    del tensors["layers.0.post_attention_layernorm.weight"]
    save_file(tensors, str(bad / "model.safetensors"))
    proc, _ = _compare(bad, drafter.draft_dir, drafter, tmp_path / "bad.json")
    assert proc.returncode != 0
    assert "the served drafter would differ from the trained one" in proc.stderr
    assert "tensors SGLang 0.5.23 would skip: layers.0.self_attn.q_norm.weight" in proc.stderr
    assert "parameters no tensor fills: model.layers.0.post_attention_layernorm.weight" in (
        proc.stderr
    )
