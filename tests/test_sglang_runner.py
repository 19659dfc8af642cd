"""Real SGLang 0.5.23 ModelRunner on the tiny target against HF transformers (fp32, CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3.launch.cpu_env import harness_env

pytestmark = [pytest.mark.sglang, pytest.mark.slow]
SCRIPT = Path(__file__).parent / "scripts" / "runner_vs_hf.py"


def test_model_runner_matches_hf_prefill_extend_decode(tiny_target, tmp_path, figures):
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tiny_target), str(out)],
        env=harness_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    figures.record("max |logit diff| SGLang ModelRunner vs HF, fp32", result["max_abs_diff"])
    figures.record("identical greedy tokens, ModelRunner vs HF", result["same_greedy_tokens"])
    figures.record("decode steps per row, ModelRunner vs HF", result["decode_steps"])
    kinds = [s["kind"] for s in result["steps"]]
    assert kinds.count("prefill") == 2 and kinds.count("extend") == 2
    assert kinds.count("decode") >= 2 * 5, "at least 5 decode steps for each of the 2 rows"
    assert result["max_abs_diff"] < 1e-4, result
    assert result["same_greedy_tokens"], result
