"""Draft readers on bad input: one WiringError naming the file, the field and the fix."""

from __future__ import annotations

import pytest
from conftest_helpers_layout import (
    eagle_tensors,
    flat_config,
    make_flat_draft,
    write_json,
    write_safetensors,
)

from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.checkpoint.safetensors_header import (
    read_checkpoint_tensors,
    read_safetensors_header,
)
from sglang_eagle3.errors import WiringError

N, H = 8, 16  # tiny target for fake drafts: 8 layers, 16 wide


def read(path, **kw):
    kw.setdefault("num_layers", N)
    kw.setdefault("target_hidden_size", H)
    return read_draft(path, **kw)


# ---- bad inputs --------------------------------------------------------------------------------


def test_missing_config(tmp_path):
    with pytest.raises(WiringError, match="no config.json") as info:
        read(tmp_path)
    assert info.value.path == str(tmp_path)


@pytest.mark.parametrize("text", ["{not json", "[1, 2, 3]", ""])
def test_non_json_config(tmp_path, text):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(WiringError) as info:
        read(tmp_path)
    assert info.value.path == str(tmp_path / "config.json")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"hidden_size": "16"}, "field hidden_size must be an int"),
        ({"hidden_size": True}, "field hidden_size must be an int"),
        ({"eagle_config": [1, 2]}, "field eagle_config must be a dict"),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": "1,2"}}, "layer_ids must be"),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1.0, 2]}}, "only ints, got 1.0"),
        ({"eagle_config": {"hidden_state_layout": "embed"}}, "hidden_state_layout must be a list"),
        ({"eagle_config": {"hidden_state_layout": ["layer:-1"]}}, "invalid tap 'layer:-1'"),
        ({"norm_before_residual": "yes"}, "field norm_before_residual must be a bool"),
        ({"architectures": ["LlamaForCausalLM"]}, "not an EAGLE-3 draft"),
        ({"target_hidden_size": None}, "target_hidden_size is null; SGLang 0.5.23"),
    ],
)
def test_wrong_types_name_file_and_field(tmp_path, change, field):
    cfg = flat_config(hidden=H, ids=[-1, 2, 5])
    cfg.update(change)
    make_flat_draft(tmp_path, cfg)
    with pytest.raises(WiringError, match=field) as info:
        read(tmp_path)
    assert info.value.path == str(tmp_path / "config.json")


def test_speculators_wrong_types(tmp_path):
    cfg = {"speculators_model_type": "eagle3", "transformer_layer_config": {"hidden_size": 0}}
    write_json(tmp_path / "config.json", cfg)
    with pytest.raises(WiringError, match="transformer_layer_config.hidden_size must be an int"):
        read(tmp_path)
    write_json(tmp_path / "config.json", {"speculators_model_type": "eagle3"})
    with pytest.raises(WiringError, match="missing field transformer_layer_config"):
        read(tmp_path)
    write_json(tmp_path / "config.json", {"speculators_model_type": "medusa"})
    with pytest.raises(WiringError, match="only EAGLE-3"):
        read(tmp_path)


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        ([-1, 2, 9], r"output-of-layer id 9 is out of range for a 8-layer target \(valid "
         r"output-of-layer ids: -1..7\)"),
        ([0, 3, 9], r"input-to-layer id 9 is out of range .*valid input-to-layer ids: 0..8"),
        ([-1, 2, 2], "output-of-layer id 2 appears twice"),
        ([0, 8, 8], "input-to-layer id 8 appears twice"),
        ([-1, 3, 8], "mix conventions"),
        ([-2, 3, 4], "output-of-layer id -2 is out of range"),
        ([0, 3, 12], r"invalid in every convention: as output-of-layer ids: invalid \(output-"
         r"of-layer id 12 is out of range .*as input-to-layer ids: invalid \(input-to-layer id 12"),
        ([2, 2, 3], "invalid in every convention.*output-of-layer id 2 appears twice"),
    ],
)  # fmt: skip
def test_bad_ids(tmp_path, ids, match):
    make_flat_draft(tmp_path, flat_config(hidden=H, ids=ids), fc_in=3 * H)
    with pytest.raises(WiringError, match=match) as info:
        read(tmp_path)
    assert info.value.path == str(tmp_path / "config.json")


def test_fc_width_and_tap_count_mismatch(tmp_path):
    make_flat_draft(tmp_path / "w", flat_config(hidden=H, ids=[-1, 2, 5]), fc_in=2 * H)
    with pytest.raises(WiringError, match=r"fc.weight takes 32 input features, but 3 taps x"):
        read(tmp_path / "w")
    cfg = flat_config(hidden=H, layout=["embed", "layer:2"], extra={"num_aux_hidden_states": 3})
    make_flat_draft(tmp_path / "n", cfg)
    with pytest.raises(WiringError, match=r"has 2 taps but the draft's fc takes 3 \(num_aux"):
        read(tmp_path / "n")
    make_flat_draft(tmp_path / "t", flat_config(hidden=H, ids=[-1, 2, 5]))
    with pytest.raises(WiringError, match="draft expects target hidden states 16 wide"):
        read(tmp_path / "t", target_hidden_size=32)


def test_truncated_and_corrupt_safetensors(tmp_path):
    d = make_flat_draft(tmp_path, flat_config(hidden=H, ids=[-1, 2, 5]), fc_in=3 * H)
    weights = d / "model.safetensors"
    good = weights.read_bytes()
    cases = {
        "short": (good[:5], "too short for a safetensors header"),
        "header": (good[:40], "does not fit"),
        "data": (good[:-10], "data is truncated"),
        "lfs": (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\n", "Git LFS"),
        "json": (good[:8] + b"{" * (len(good) - 8), "not valid JSON"),
    }
    for _name, (raw, match) in cases.items():
        weights.write_bytes(raw)
        with pytest.raises(WiringError, match=match) as info:
            read(d)
        assert info.value.path == str(weights)
    write_safetensors(weights, {"x": ("F16", [2])})
    with pytest.raises(WiringError, match="no fc.weight"):
        read(d)


def test_sharded_checkpoint_header(tmp_path):
    t = eagle_tensors(draft_hidden=H, fc_in=3 * H)
    names = sorted(t)
    write_safetensors(tmp_path / "a.safetensors", {k: t[k] for k in names[:3]})
    write_safetensors(tmp_path / "b.safetensors", {k: t[k] for k in names[3:]})
    weight_map = {k: ("a.safetensors" if i < 3 else "b.safetensors") for i, k in enumerate(names)}
    write_json(tmp_path / "model.safetensors.index.json", {"weight_map": weight_map})
    assert read_checkpoint_tensors(tmp_path) == {k: (v[0], tuple(v[1])) for k, v in t.items()}
    write_json(tmp_path / "config.json", flat_config(hidden=H, ids=[-1, 2, 5]))
    assert read(tmp_path).fc_in_features == 3 * H
    write_json(tmp_path / "model.safetensors.index.json", {"weight_map": {"fc.weight": "c.st"}})
    with pytest.raises(WiringError, match="cannot read safetensors file"):
        read(tmp_path)
    write_json(tmp_path / "model.safetensors.index.json", {"weight_map": {"x": "../a.st"}})
    with pytest.raises(WiringError, match="not a plain file name"):
        read(tmp_path)
    assert read_safetensors_header(tmp_path / "a.safetensors")[names[0]][0] in {"F16", "I64"}
