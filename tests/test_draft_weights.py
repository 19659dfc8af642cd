"""draft_weights: safe_open with clear errors, and SGLang's own names for every format."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from sglang_eagle3.checkpoint.draft_weight_names import sglang_param_name
from sglang_eagle3.checkpoint.draft_weights import (
    canonical_name,
    load_tensors,
    open_safetensors,
    stored_dtype,
    tensor_files,
)
from sglang_eagle3.errors import WiringError

LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 12345\n"


def test_names_follow_sglang_load_weights():
    stored = [
        "model.midlayer.self_attn.q_proj.weight",
        "midlayer.hidden_norm.weight",
        "model.aux_norm_mid.weight",
        "fc.weight",
        "model.layers.1.mlp.up_proj.weight",
    ]
    canon = [canonical_name(n) for n in stored]
    assert canon == [
        "layers.0.self_attn.q_proj.weight",
        "layers.0.hidden_norm.weight",
        "fc_norm.1.weight",
        "fc.weight",
        "layers.1.mlp.up_proj.weight",
    ]
    # one mapping: the doctor's canonical names land in the parameters SGLang loads
    params = {
        "model.layers.0.self_attn.qkv_proj.weight",
        "model.layers.0.hidden_norm.weight",
        "model.fc_norm.1.weight",
        "model.fc.weight",
        "model.layers.1.mlp.gate_up_proj.weight",
    }
    for name, c in zip(stored, canon, strict=True):
        assert sglang_param_name(name, params) == sglang_param_name(c, params) is not None


def test_load_skips_what_serving_never_reads(tmp_path):
    tensors = {
        "fc.weight": torch.ones(2, 6),
        "midlayer.hidden_norm.weight": torch.ones(2),
        "verifier_lm_head.weight": torch.ones(3, 2),
        "d2t": torch.zeros(3, dtype=torch.int64),
        "layers.0.self_attn.rotary_emb.inv_freq": torch.ones(1),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    got = load_tensors(tmp_path, dtype=torch.bfloat16)
    assert sorted(got) == ["d2t", "fc.weight", "layers.0.hidden_norm.weight"]
    assert got["fc.weight"].dtype == torch.bfloat16 and got["d2t"].dtype == torch.int64
    assert stored_dtype(tmp_path) == torch.float32


def test_refused_files_say_why(tmp_path):
    f = tmp_path / "model.safetensors"
    save_file({"fc.weight": torch.ones(4, 4)}, str(f))
    good = f.read_bytes()
    cases = [(LFS_POINTER, "Git LFS pointer"), (good[:-8], "data is truncated"),
             (good[:40], "does not fit"), (good[:3], "too short")]  # fmt: skip
    for raw, message in cases:
        f.write_bytes(raw)
        with pytest.raises(WiringError, match=message) as err:
            load_tensors(tmp_path, dtype=None)
        assert err.value.path == str(f)
    with pytest.raises(WiringError, match="cannot read safetensors file") as err:
        with open_safetensors(tmp_path / "missing.safetensors"):
            pass
    assert err.value.path == str(tmp_path / "missing.safetensors")


def test_sharded_index_is_checked_against_its_shards(tmp_path):
    save_file({"fc.weight": torch.ones(2, 2)}, str(tmp_path / "a.safetensors"))
    save_file({"norm.weight": torch.ones(2)}, str(tmp_path / "b.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    weight_map = {"fc.weight": "a.safetensors", "norm.weight": "b.safetensors"}
    index.write_text(json.dumps({"weight_map": weight_map}))
    assert tensor_files(tmp_path) == {k: tmp_path / v for k, v in weight_map.items()}
    index.write_text(json.dumps({"weight_map": {**weight_map, "lm_head.weight": "a.safetensors"}}))
    with pytest.raises(WiringError, match="maps 'lm_head.weight' to a.safetensors"):
        tensor_files(tmp_path)
    (tmp_path / "b.safetensors").write_bytes(LFS_POINTER)
    index.write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(WiringError, match="git lfs pull"):
        tensor_files(tmp_path)
