"""SGLang's MLA drafter, in process on CPU, computes what the doctor's reference forward
computes (issue 16), with and without the EAGLE-3.1 settings ``fc_norm`` and ``norm_output``.

Each case runs tests/scripts/mla_drafter_vs_reference.py: SGLang 0.5.23's real ModelRunner
loads a random Eagle3DeepseekV2ForCausalLM draft (plugin hooks in place) and runs the first
draft step (absorbed MLA); the doctor's Eagle3Draft runs it unabsorbed on the same tokens
and taps, as the config declares it and with each setting altered (each alteration must show).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3.launch.cpu_env import harness_env
from sglang_eagle3.testing.tiny.random_mla_draft import write_random_mla_draft

pytestmark = [pytest.mark.sglang, pytest.mark.slow]
SCRIPT = Path(__file__).parent / "scripts" / "mla_drafter_vs_reference.py"
LAYOUT = {"hidden_state_layout": ["embed", "layer:2", "layer:5"]}


@pytest.mark.parametrize("eagle31", [False, True], ids=["eagle3", "fc_norm+norm_output"])
def test_sglang_mla_drafter_matches_the_reference(tiny_target, tmp_path, figures, eagle31):
    draft = write_random_mla_draft(
        tmp_path / "draft", tiny_target, eagle_config=LAYOUT,
        fc_norm=eagle31, norm_output=eagle31, d2t=eagle31,
        extra_config={"embed_requires_grad": True},  # SGLang's MLA set_embed needs CUDA
    )  # fmt: skip
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(draft), str(tiny_target), str(out)],
        env=harness_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["model"] == "Eagle3DeepseekV2ForCausalLM" and got["rows"] == 3
    same = got["declared"]
    figures.record(f"MLA draft ({'eagle3.1' if eagle31 else 'eagle3'}): max |logit diff|",
                   same["max_abs_diff"])  # fmt: skip
    assert same["max_abs_diff"] < 1e-4 and same["max_abs_hidden_diff"] < 1e-4, got
    assert same["same_argmax"], got
    # each setting the reference must get right shows when it is wrong (measured >= 7e-3)
    assert got["norm_output flipped"]["max_abs_hidden_diff"] > 1e-2, got
    assert got["neox rope"]["max_abs_diff"] > 1e-3, got
    assert got["no yarn mscale"]["max_abs_diff"] > 1e-3, got
    assert ("fc_norm dropped" in got) == eagle31
    if eagle31:
        assert got["fc_norm dropped"]["max_abs_diff"] > 1e-2, got
    assert "Eagle3 MLA: skipping unexpected weight" not in proc.stderr
    assert "drafter fc: eagle3_fused_fc not installed on Eagle3DeepseekV2ForCausalLM" in proc.stderr


@pytest.mark.parametrize("flag", ["norm_before_fc", "norm_before_residual"])
def test_settings_sglangs_mla_drafter_cannot_serve_are_refused_at_load(tiny_target, tmp_path, flag):
    """Stock SGLang would serve these drafts without the setting (Eagle3MLAModel has no
    input_norm; its residual is the un-normed fc output): the plugin refuses them."""
    draft = write_random_mla_draft(
        tmp_path / "draft", tiny_target, eagle_config=LAYOUT,
        extra_config={"embed_requires_grad": True, flag: True},
    )  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(draft), str(tiny_target), str(tmp_path / "o.json")],
        env=harness_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode != 0
    assert f"{flag} is true, but SGLang 0.5.23's Eagle3DeepseekV2ForCausalLM cannot serve it" in (
        proc.stderr
    )
