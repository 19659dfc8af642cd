"""read_draft on real speculators 0.9.0 checkpoints, SGLang-flat and SpecForge configs, the
seed's Kimi-K2.5 case, and every bad input the brief names."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest_helpers_layout import (
    build_speculators_draft,
    flat_config,
    make_flat_draft,
)

from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import Convention, stock_sglang_deepseek_capture
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import Tap, format_taps

N, H = 8, 16  # tiny target for fake drafts: 8 layers, 16 wide


def read(path, **kw):
    kw.setdefault("num_layers", N)
    kw.setdefault("target_hidden_size", H)
    return read_draft(path, **kw)


# ---- real speculators 0.9.0 checkpoints ------------------------------------------------


@pytest.fixture(scope="module")
def spec_drafts(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("speculators")
    root = tmp_path_factory.mktemp("speculators")
    return {
        "ids": build_speculators_draft(root / "ids", ids=[0, 3, 6]),
        "last": build_speculators_draft(root / "last", ids=[0, 3, 8], norm_before_fc=True),
        "default": build_speculators_draft(root / "default", ids=None),
        "wide": build_speculators_draft(root / "wide", ids=[0, 3, 6], target_hidden_size=128),
    }


def test_speculators_checkpoint_reads_input_to_layer(spec_drafts):
    spec = read_draft(spec_drafts["ids"], num_layers=8, target_hidden_size=64)
    assert spec.format == "speculators"
    assert spec.layout.names() == ["embed", "layer:2", "layer:5"]
    assert spec.convention is Convention.INPUT_TO_LAYER
    assert spec.layout_source == (
        "speculators top-level eagle_aux_hidden_state_layer_ids (input-to-layer)"
    )
    assert spec.raw_ids == (0, 3, 6)
    assert spec.layout.verifier == Tap.parse("layer:7")  # final layer when not stated
    assert (spec.num_aux, spec.fc_in_features, spec.draft_hidden_size) == (3, 192, 64)
    assert (spec.draft_vocab_size, spec.target_vocab_size) == (128, 256)
    assert spec.has_d2t and spec.has_t2d
    assert spec.verifier_name == "tiny/deepseek-8-layers"
    assert spec.layout.is_capturable()
    assert json.loads(json.dumps(spec.to_dict()))["layout"]["taps"][0] == "embed"
    assert "ids [0, 3, 6] (input-to-layer)" in spec.describe()


def test_speculators_checkpoint_with_final_layer_tap(spec_drafts):
    spec = read_draft(spec_drafts["last"], num_layers=8, target_hidden_size=64)
    assert spec.layout.names() == ["embed", "layer:2", "layer:7"]
    assert spec.norm_before_fc and not spec.fc_norm
    assert not spec.layout.is_capturable()
    assert any("layer:7 cannot be captured by SGLang" in n for n in spec.notes)


def test_speculators_checkpoint_without_ids_uses_speculators_default(spec_drafts):
    spec = read_draft(spec_drafts["default"], num_layers=8, target_hidden_size=64)
    assert spec.raw_ids is None
    assert spec.layout.names() == ["layer:1", "layer:3", "layer:4"]  # [2, 4, 5] input-to-layer
    assert spec.layout_source == "speculators default [2, n//2, n-3]"


def test_speculators_target_hidden_checks(spec_drafts):
    with pytest.raises(WiringError, match="target_hidden_size is null") as info:
        read_draft(spec_drafts["ids"], num_layers=8, target_hidden_size=128)
    assert str(info.value).startswith(str(spec_drafts["ids"] / "config.json"))
    # speculators 0.9.0 sizes fc with the DRAFT hidden size even when target_hidden_size is set
    with pytest.raises(WiringError, match=r"fc.weight takes 192 input features, but 3 taps x"):
        read_draft(spec_drafts["wide"], num_layers=8, target_hidden_size=128)


def test_speculators_rejects_a_contradicting_convention(spec_drafts):
    with pytest.raises(WiringError, match="speculators drafts store input-to-layer ids"):
        read_draft(
            spec_drafts["ids"], num_layers=8, target_hidden_size=64, convention="output-of-layer"
        )
    with pytest.raises(WiringError, match="out of range"):
        read_draft(spec_drafts["ids"], num_layers=4, target_hidden_size=64)


# ---- SGLang-flat: both conventions ----------------------------------------------------------


def test_flat_minus_one_means_output_of_layer(tmp_path):
    d = make_flat_draft(tmp_path, flat_config(hidden=H, ids=[-1, 2, 5]), fc_in=3 * H)
    spec = read(d)
    assert spec.format == "sglang-flat"
    assert spec.layout.names() == ["embed", "layer:2", "layer:5"]
    assert spec.convention is Convention.OUTPUT_OF_LAYER
    assert spec.layout_source == "eagle_config.eagle_aux_hidden_state_layer_ids (output-of-layer)"
    assert spec.layout.verifier is None


def test_flat_last_layer_id_means_input_to_layer(tmp_path):
    d = make_flat_draft(tmp_path, flat_config(hidden=H, ids=[0, 3, 8]), fc_in=3 * H)
    spec = read(d)
    assert spec.convention is Convention.INPUT_TO_LAYER
    assert spec.layout.names() == ["embed", "layer:2", "layer:7"]


def test_flat_ambiguous_ids_need_a_convention(tmp_path):
    d = make_flat_draft(tmp_path, flat_config(hidden=H, ids=[2, 4, 5]), fc_in=3 * H)
    with pytest.raises(WiringError) as info:
        read(d)
    msg = str(info.value)
    assert "do not say which id convention they use" in msg
    assert "as output-of-layer ids: layer:2, layer:4, layer:5" in msg
    assert "as input-to-layer ids: layer:1, layer:3, layer:4" in msg
    # no target given: the seed's family, named with its rule
    deepseek = "stock SGLang 0.5.23 on DeepSeek (ids +1 only when the first id is 1, else as is)"
    assert f"{deepseek} would capture layer:1, layer:3, layer:4" in msg
    assert "--aux-layer-convention output-of-layer" in msg
    assert "eagle_config.hidden_state_layout" in msg
    out = read(d, convention="output-of-layer")
    assert out.layout.names() == ["layer:2", "layer:4", "layer:5"]
    assert out.layout_source == "eagle_config.eagle_aux_hidden_state_layer_ids (output-of-layer)"
    inp = read(d, convention=Convention.INPUT_TO_LAYER)
    assert inp.layout.names() == ["layer:1", "layer:3", "layer:4"]
    with pytest.raises(WiringError, match="only explains what stock SGLang captures"):
        read(d, convention="sglang-0.5.23-deepseek")


def test_explicit_layout_key_wins_and_must_agree_with_ids(tmp_path):
    layout = ["embed", "layer:2", "layer:5"]
    d = make_flat_draft(tmp_path / "a", flat_config(hidden=H, layout=layout), fc_in=3 * H)
    spec = read(d, convention="input-to-layer")  # not needed, and ignored
    assert spec.layout.names() == layout and spec.convention is None
    assert spec.layout_source == "eagle_config.hidden_state_layout"
    ok = make_flat_draft(tmp_path / "b", flat_config(hidden=H, ids=[0, 3, 6], layout=layout))
    assert read(ok).convention is Convention.INPUT_TO_LAYER  # ids agree as input-to-layer
    bad = make_flat_draft(tmp_path / "c", flat_config(hidden=H, ids=[2, 4, 5], layout=layout))
    with pytest.raises(WiringError, match="disagree") as info:
        read(bad)
    assert "set the ids to the input-to-layer spelling [0, 3, 6]" in str(info.value)


def test_caller_layout_wins(tmp_path):
    d = make_flat_draft(tmp_path, flat_config(hidden=H, ids=[2, 4, 5]), fc_in=3 * H)
    spec = read(d, layout="embed,layer:1,layer:6")
    assert spec.layout.names() == ["embed", "layer:1", "layer:6"]
    assert spec.layout_source == "caller-supplied layout"
    given = HiddenStateLayout(["layer:0", "layer:1", "layer:2"], N, H, Tap.parse("layer:7"))
    assert read(d, layout=given).layout == given
    with pytest.raises(WiringError, match="the given layout is for 9 layers"):
        read(d, layout=dataclasses.replace(given, num_layers=9))


def test_flat_without_ids_is_the_stock_default(tmp_path):
    d = make_flat_draft(tmp_path, flat_config(hidden=H), fc_in=3 * H)
    spec = read(d)
    assert spec.layout is None and spec.convention is None
    assert spec.layout_source == "none (stock SGLang default)"
    assert spec.num_aux == 3
    assert any("default [2, n//2, n-3]" in n for n in spec.notes)


def test_flat_config_without_weights_and_flags(tmp_path):
    extra = {"fc_norm": True, "norm_before_residual": True, "num_aux_hidden_states": 3}
    extra |= {"sliding_window": 2048, "layer_types": ["sliding_attention"]}
    cfg = flat_config(hidden=H, ids=[-1, 0, 1], target_hidden_size=32, extra=extra)
    spec = read(make_flat_draft(tmp_path, cfg), target_hidden_size=32)
    assert spec.fc_in_features is None and not spec.has_d2t
    assert spec.fc_norm and spec.norm_before_residual and spec.sliding_window == 2048
    assert (spec.target_hidden_size, spec.layout.hidden_size) == (32, 32)


# ---- SpecForge ----------------------------------------------------------------------------


def test_specforge_weights_mean_output_of_layer(tmp_path):
    # SpecForge writes the same config shape as SGLang-flat; its weights say midlayer.*
    cfg = flat_config(hidden=H, ids=[1, 3, 5])
    d = make_flat_draft(tmp_path / "sf", cfg, fc_in=3 * H, prefix="midlayer.")
    spec = read(d)
    assert spec.format == "specforge"
    assert spec.convention is Convention.OUTPUT_OF_LAYER
    assert spec.layout.names() == ["layer:1", "layer:3", "layer:5"]
    assert any("SpecForge" in n for n in spec.notes)
    # the same config without weights cannot be told apart: ambiguous, as sglang-flat
    with pytest.raises(WiringError, match="do not say which id convention"):
        read(make_flat_draft(tmp_path / "cfg-only", cfg))


# ---- the seed: Kimi-K2.5 ---------------------------------------------------------------------


def test_seed_kimi_k25_case(tmp_path):
    """61-layer, 7168-wide target; draft trained on embed, layer:2, layer:30 (verifier tap
    layer:58), declared with output-of-layer ids [-1, 2, 30]."""
    cfg = flat_config(hidden=7168, ids=[-1, 2, 30])
    spec = read_draft(make_flat_draft(tmp_path, cfg), num_layers=61, target_hidden_size=7168)
    assert spec.convention is Convention.OUTPUT_OF_LAYER
    assert format_taps(spec.layout.taps) == "embed, layer:2, layer:30"
    assert spec.layout.describe().startswith(
        "embed, layer:2, layer:30 (HF hidden_states [0, 3, 31]; SGLang capture indices [0, 3, 31])"
    )
    trained = dataclasses.replace(spec.layout, verifier=Tap.parse("layer:58"))
    assert trained.describe().endswith("; verifier layer:58 (HF hidden_states [59])")
    stock = stock_sglang_deepseek_capture(spec.raw_ids, 61)
    assert stock.taps is None
    assert stock.crash == "RuntimeError: captured 2 of 3 aux hidden states"
    assert "crash at the first forward" in stock.describe()
    default = stock_sglang_deepseek_capture(None, 61)
    assert default.capture_indices == (2, 30, 58)
    assert format_taps(default.taps) == "layer:1, layer:29, layer:57"
