"""The README's main job end to end on CPU: accept-length ordering and losslessness."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(2400)]  # run: 1800 s max
# The demo runs once (conftest_servers.demo_run) for this test and the scale-out tests.


def test_demo_orders_accept_lengths_and_stays_lossless(demo_run, figures):
    result, stdout = demo_run["result"], demo_run["stdout"]
    rows = {r["name"]: r for r in result["rows"]}
    # it serves the tuner's pick at concurrency 1 (the tune result shipped with the models)
    assert result["speculative_source"].startswith("the tuner's pick at concurrency 1")
    for name in ("stock-wiring", "declared-layout", "declared-layout-mla"):
        figures.record(f"demo: {name} speedup over plain, paired (a figure, not a test)",
                       rows[name]["speedup"], ".2f")  # fmt: skip
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
    assert "| declared-layout |" in stdout
    # the tiny MLA drafter (Eagle3DeepseekV2) through the launcher, and the doctor on it
    mla, mla_predicted = (
        rows["declared-layout-mla"]["accept_length"],
        result["mla_predicted_accept_length"],
    )
    assert mla > 1.5 and abs(mla - mla_predicted) / mla_predicted < 0.15, (mla, mla_predicted)
    assert "| declared-layout-mla |" in stdout and "MLA drafter: served" in stdout
