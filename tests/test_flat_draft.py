"""write_flat_draft: a real speculators 0.9.0 draft in, an SGLang-flat draft out."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest_helpers_layout import (
    build_speculators_draft,
    eagle_tensors,
    flat_config,
    make_flat_draft,
    write_json,
    write_safetensors,
)

from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.checkpoint.flat_draft import MARKER, write_flat_draft
from sglang_eagle3.checkpoint.safetensors_header import read_checkpoint_tensors
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import Convention


def snapshot(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("speculators")
    src = build_speculators_draft(tmp_path_factory.mktemp("spec") / "draft", ids=[0, 3, 6])
    (src / "tokenizer.json").write_text('{"version": "1.0"}')
    return src


@pytest.fixture
def spec(source):
    return read_draft(source, num_layers=8, target_hidden_size=64)


def test_flat_draft_round_trip(source, spec, tmp_path):
    before = snapshot(source)
    dst = write_flat_draft(spec, source, tmp_path / "flat")
    assert snapshot(source) == before  # the source is never touched
    cfg = json.loads((dst / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["model_type"] == "llama"
    assert cfg["eagle_config"] == {
        "eagle_aux_hidden_state_layer_ids": [0, 3, 6],
        "hidden_state_layout": ["embed", "layer:2", "layer:5"],
        "use_aux_hidden_state": True,
        "verifier_tap": "layer:7",
    }
    assert cfg["num_aux_hidden_states"] == 3
    assert cfg["target_hidden_size"] == 64 and cfg["draft_vocab_size"] == 128
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]) == (64, 1, 256)
    assert cfg["rope_theta"] == 10000.0
    for flag in ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual"):
        assert cfg[flag] is False
    assert "speculators_config" not in cfg and "transformer_layer_config" not in cfg
    weights = dst / "model.safetensors"
    assert weights.is_symlink() and weights.resolve() == (source / "model.safetensors").resolve()
    assert (dst / "tokenizer.json").read_text() == '{"version": "1.0"}'
    assert not (dst / "config.py").exists()  # speculators' auto_map code is not needed
    assert json.loads((dst / MARKER).read_text())["source"] == str(source.resolve())

    back = read_draft(dst, num_layers=8, target_hidden_size=64)
    assert back.format == "sglang-flat"
    assert back.layout == spec.layout
    assert back.layout_source == "eagle_config.hidden_state_layout"
    assert back.convention is Convention.INPUT_TO_LAYER  # the ids agree as input-to-layer
    assert back.fc_in_features == spec.fc_in_features
    assert read_checkpoint_tensors(dst) == read_checkpoint_tensors(source)


def test_flat_config_loads_in_transformers(spec, source, tmp_path):
    transformers = pytest.importorskip("transformers")
    dst = write_flat_draft(spec, source, tmp_path / "flat")
    config = transformers.AutoConfig.from_pretrained(str(dst))
    assert type(config).__name__ == "LlamaConfig"
    assert config.eagle_config["hidden_state_layout"] == ["embed", "layer:2", "layer:5"]
    assert config.target_hidden_size == 64 and config.num_aux_hidden_states == 3


def test_rerun_replaces_an_earlier_conversion_only(spec, source, tmp_path):
    dst = tmp_path / "flat"
    write_flat_draft(spec, source, dst)
    (dst / "stale.txt").write_text("from an earlier run")
    write_flat_draft(spec, source, dst)
    assert not (dst / "stale.txt").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(WiringError, match="not an earlier conversion of this draft"):
        write_flat_draft(spec, source, other)
    assert snapshot(other) == {"keep.txt": hashlib.sha256(b"mine").hexdigest()}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert write_flat_draft(spec, source, empty) == empty.absolute()


def test_refusals_write_nothing(spec, source, tmp_path):
    dst = tmp_path / "out" / "flat"
    inside = source / "flat"
    cases = [
        (spec.replace(layout=None, num_aux=3), source, "no resolved layout"),
        (spec.replace(format="sglang-flat"), source, "only speculators drafts"),
        (spec, tmp_path, "the spec was read from"),
    ]
    for bad_spec, src, match in cases:
        with pytest.raises(WiringError, match=match):
            write_flat_draft(bad_spec, src, dst)
        assert not dst.exists() and not dst.parent.exists()
    with pytest.raises(WiringError, match="the source or inside it"):
        write_flat_draft(spec, source, inside)
    assert not inside.exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(WiringError, match="not a directory"):
        write_flat_draft(spec, source, tmp_path / "file")
    assert list(tmp_path.glob(".*tmp*")) == []


def test_missing_weights_write_nothing(tmp_path):
    # a speculators config whose weights vanished after reading
    src = tmp_path / "src"
    cfg = {
        "speculators_model_type": "eagle3",
        "transformer_layer_config": {"hidden_size": 16, "vocab_size": 64},
        "eagle_aux_hidden_state_layer_ids": [0, 3, 6],
        "draft_vocab_size": 32,
    }
    write_json(src / "config.json", cfg)
    write_safetensors(src / "model.safetensors", eagle_tensors(draft_hidden=16, fc_in=48))
    spec = read_draft(src, num_layers=8, target_hidden_size=16)
    (src / "model.safetensors").unlink()
    with pytest.raises(WiringError, match="no .safetensors weights"):
        write_flat_draft(spec, src, tmp_path / "dst")
    assert not (tmp_path / "dst").exists()


def test_sharded_source_links_index_and_shards(tmp_path):
    src = tmp_path / "src"
    t = eagle_tensors(draft_hidden=16, fc_in=48)
    names = sorted(t)
    write_safetensors(src / "a.safetensors", {k: t[k] for k in names[:4]})
    write_safetensors(src / "b.safetensors", {k: t[k] for k in names[4:]})
    weight_map = {k: ("a.safetensors" if i < 4 else "b.safetensors") for i, k in enumerate(names)}
    write_json(src / "model.safetensors.index.json", {"weight_map": weight_map})
    cfg = {
        "speculators_model_type": "eagle3",
        "transformer_layer_config": {"hidden_size": 16, "vocab_size": 64},
        "eagle_aux_hidden_state_layer_ids": [0, 3, 6],
    }
    write_json(src / "config.json", cfg)
    spec = read_draft(src, num_layers=8, target_hidden_size=16)
    dst = write_flat_draft(spec, src, tmp_path / "dst")
    linked = {"model.safetensors.index.json", "a.safetensors", "b.safetensors"}
    assert linked <= {p.name for p in dst.iterdir()}
    assert read_draft(dst, num_layers=8, target_hidden_size=16).layout == spec.layout


def test_flat_source_is_refused(tmp_path):
    src = make_flat_draft(tmp_path / "src", flat_config(hidden=16, ids=[-1, 2, 5]), fc_in=48)
    spec = read_draft(src, num_layers=8, target_hidden_size=16)
    with pytest.raises(WiringError, match="serve it as it is"):
        write_flat_draft(spec, src, tmp_path / "dst")
    assert not (tmp_path / "dst").exists()
