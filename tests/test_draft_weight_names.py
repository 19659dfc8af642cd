"""Which draft tensors SGLang 0.5.23's load_weights keeps (pure; the live check is in
test_draft_fidelity.py)."""

from __future__ import annotations

import pytest

from sglang_eagle3.checkpoint.draft_weight_names import (
    later_input_norm_layer,
    load_gaps,
    sglang_param_name,
)

PARAMS = {
    "model.fc.weight",
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.qkv_proj.weight",
    "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.mlp.gate_up_proj.weight",
    "model.layers.0.hidden_norm.weight",
    "model.layers.0.input_layernorm.weight",
    "model.layers.1.input_layernorm.weight",
    "model.layers.1.hidden_norm.weight",
    "model.norm.weight",
    "lm_head.weight",
}


@pytest.mark.parametrize(
    ("name", "param"),
    [
        ("fc.weight", "model.fc.weight"),
        ("layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.qkv_proj.weight"),
        ("layers.0.mlp.up_proj.weight", "model.layers.0.mlp.gate_up_proj.weight"),
        ("midlayer.hidden_norm.weight", "model.layers.0.hidden_norm.weight"),
        ("lm_head.weight", "lm_head.weight"),
        ("layers.0.self_attn.q_norm.weight", None),
        ("verifier_lm_head.weight", None),
    ],
)
def test_sglang_param_name_follows_load_weights(name, param):
    assert sglang_param_name(name, PARAMS) == param


def test_later_input_norm_is_only_layers_after_the_first():
    assert later_input_norm_layer("layers.1.input_layernorm.weight") == 1
    assert later_input_norm_layer("model.layers.12.input_layernorm.weight") == 12
    assert later_input_norm_layer("layers.0.input_layernorm.weight") is None
    assert later_input_norm_layer("layers.1.hidden_norm.weight") is None


def test_load_gaps_reports_skipped_tensors_and_unfilled_parameters():
    names = ["fc.weight", "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.o_proj.weight",
             "layers.0.mlp.gate_proj.weight", "layers.0.hidden_norm.weight",
             "layers.0.input_layernorm.weight", "layers.1.hidden_norm.weight", "norm.weight",
             "d2t", "t2d", "verifier_lm_head.weight", "verifier_norm.weight",
             "layers.0.self_attn.rotary_emb.inv_freq",
             "layers.0.self_attn.q_norm.weight"]  # fmt: skip
    dropped, missing = load_gaps(names, PARAMS, exempt={"model.embed_tokens.weight"})
    assert dropped == ["layers.0.self_attn.q_norm.weight"]
    # layers.1.input_layernorm: allocated, never read by SGLang's later EAGLE-3 layers
    assert missing == ["lm_head.weight"]
    dropped, missing = load_gaps(names[:-1] + ["lm_head.weight"], PARAMS,
                                 exempt={"model.embed_tokens.weight"})  # fmt: skip
    assert (dropped, missing) == ([], [])
