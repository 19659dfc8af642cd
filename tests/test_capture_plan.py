"""Which taps the plugin makes SGLang capture, per draft format (pure logic, no SGLang)."""

from __future__ import annotations

import pytest
from conftest_helpers_layout import build_speculators_draft, flat_config, make_flat_draft

from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.plan import resolve_plan
from sglang_eagle3.layout.capture_plan import plan_from_layout
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import parse_taps

N, H = 8, 16


def plan_for(tmp_path, **cfg_kw):
    draft = make_flat_draft(tmp_path / "d", flat_config(hidden=H, **cfg_kw), fc_in=3 * H)
    return resolve_plan(env_layout=None, draft_dir=str(draft), num_layers=N, hidden_size=H)


def test_explicit_layout_key_is_captured_exactly(tmp_path):
    plan, source = plan_for(tmp_path, layout=["embed", "layer:2", "layer:5"])
    assert plan.taps == ("embed", "layer:2", "layer:5")
    assert plan.capture_indices == (0, 3, 6)
    assert not plan.needs_permutation
    assert "hidden_state_layout" in source


def test_seed_style_output_of_layer_ids_capture_the_embedding(tmp_path):
    plan, source = plan_for(tmp_path, ids=[-1, 2, 5])
    assert plan.taps == ("embed", "layer:2", "layer:5")
    assert plan.capture_indices == (0, 3, 6)
    assert "output-of-layer" in source


def test_speculators_top_level_ids_are_honoured(tmp_path):
    pytest.importorskip("speculators")
    # speculators keeps the last tap for the targets: 3 fc taps + the verifier tap.
    draft = build_speculators_draft(tmp_path / "spec3", ids=[0, 3, 6], hidden=64)
    plan, source = resolve_plan(env_layout=None, draft_dir=str(draft), num_layers=N,
                                hidden_size=64)  # fmt: skip
    assert plan.taps == ("embed", "layer:2", "layer:5")  # input-to-layer ids
    assert plan.capture_indices == (0, 3, 6)
    assert "speculators" in source


def test_non_ascending_layout_permutes_fc_blocks_once(tmp_path):
    plan, _ = plan_for(tmp_path, layout=["layer:5", "embed", "layer:2"])
    assert plan.capture_indices == (0, 3, 6)  # SGLang fills in ascending order
    assert plan.fc_block_order == (2, 0, 1)  # layer:5's block moves to the last position
    assert plan.needs_permutation
    assert "permuted [2, 0, 1]" in plan.log_line("DeepseekV3ForCausalLM")


def test_ids_without_a_convention_keep_stock_behaviour(tmp_path):
    plan, why = plan_for(tmp_path, ids=[2, 4, 5])
    assert plan is None
    assert "do not say which id convention" in why


def test_draft_without_ids_keeps_stock_behaviour(tmp_path):
    plan, why = plan_for(tmp_path)
    assert plan is None and "stock SGLang default" in why


def test_environment_layout_wins(tmp_path):
    plan, source = resolve_plan(env_layout="layer:1,layer:3", draft_dir=None, num_layers=N,
                                hidden_size=H)  # fmt: skip
    assert plan.taps == ("layer:1", "layer:3") and plan.capture_indices == (2, 4)
    assert source == "$SGLANG_EAGLE3_LAYOUT"


def test_last_layer_output_is_refused_with_a_fix():
    layout = HiddenStateLayout(parse_taps("embed,layer:2,layer:7"), N, H)
    with pytest.raises(WiringError, match=r"layer:7 is the output of the last decoder layer"):
        plan_from_layout(layout, "test")
    try:
        plan_from_layout(layout, "test")
    except WiringError as err:
        assert "up to layer:6" in err.fix


def test_malformed_draft_config_is_an_error_not_stock(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text("{not json")
    with pytest.raises(WiringError, match="config is not readable JSON"):
        resolve_plan(env_layout=None, draft_dir=str(tmp_path / "d"), num_layers=N, hidden_size=H)
