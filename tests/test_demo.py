"""The README's main job end to end on CPU: accept-length ordering and losslessness."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(2400)]  # run: 1800 s max


def test_demo_orders_accept_lengths_and_stays_lossless(tmp_path):
    out = tmp_path / "demo.json"
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.demo", "--json", str(out), "--prompts", "6",
         "--max-new-tokens", "32"],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = {r["name"]: r for r in result["rows"]}
    assert list(rows) == ["plain", "stock-wiring", "declared-layout", "declared-layout-mla"]
    assert all(r["lossless"] for r in rows.values()), "speculative output must equal plain"
    assert rows["plain"]["accept_length"] is None
    stock, declared = (
        rows["stock-wiring"]["accept_length"],
        rows["declared-layout"]["accept_length"],
    )
    assert declared >= 1.5 * stock, (declared, stock)
    # the doctor replays the plain server's greedy outputs: the sequences the servers verified
    predicted = result["predicted_accept_length"]
    assert predicted is not None and abs(declared - predicted) / predicted < 0.15, (
        declared,
        predicted,
    )
    assert "| declared-layout |" in proc.stdout
    # the tiny MLA drafter (Eagle3DeepseekV2) through the launcher, and the doctor on it
    mla, mla_predicted = (
        rows["declared-layout-mla"]["accept_length"],
        result["mla_predicted_accept_length"],
    )
    assert mla > 1.5 and abs(mla - mla_predicted) / mla_predicted < 0.15, (mla, mla_predicted)
    assert "| declared-layout-mla |" in proc.stdout and "MLA drafter: served" in proc.stdout
