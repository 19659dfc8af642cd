"""The readers on MLA drafts (Eagle3DeepseekV2ForCausalLM): each id form resolves to the right
layout or is refused with both readings, the EAGLE-3.1 flags are read, SGLang's own limits are
refused before it starts, and the load-gap check knows the MLA loader's names.

Real files: a seeded random MLA draft (config.json + safetensors) for the tiny DeepSeek-V3
target's dimensions, read against a Kimi-K2.5-deep target (61 layers) where the ids say so.
"""

from __future__ import annotations

import json

import pytest

from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.checkpoint.draft_settings import REFUSED, draft_settings
from sglang_eagle3.checkpoint.draft_weight_names import load_gaps
from sglang_eagle3.errors import AmbiguousIdsError, WiringError
from sglang_eagle3.layout.conventions import DEEPSEEK, Convention
from sglang_eagle3.testing.tiny.random_mla_draft import mla_draft_weights, write_random_mla_draft

KIMI_LAYERS = 61
WIDTH = 128  # the tiny target's hidden size
TRAINING_IDS = [1, 29, 57]  # TorchSpec's kimi_k25_eagle3_mla.json
EXPORT_IDS = [2, 30, 58]  # after _fixup_export_config's +1
KIMI_TAPS = ["layer:1", "layer:29", "layer:57"]


@pytest.fixture
def make(tiny_target, tmp_path):
    def make(eagle_config: dict, **kw):
        return write_random_mla_draft(tmp_path / "d", tiny_target, eagle_config=eagle_config, **kw)

    return make


def _read(draft, n: int = KIMI_LAYERS, **kw):
    return read_draft(draft, num_layers=n, target_hidden_size=WIDTH, **kw)


def _names(spec) -> list[str]:
    return list(spec.layout.names())


def test_explicit_layout_reads_in_any_order(make):
    spec = _read(make({"hidden_state_layout": ["layer:5", "embed", "layer:2"]}), n=8)
    assert spec.format == "sglang-mla"
    assert _names(spec) == ["layer:5", "embed", "layer:2"]
    assert spec.layout_source == "eagle_config.hidden_state_layout"


def test_minus_one_ids_are_output_of_layer(make):
    spec = _read(make({"eagle_aux_hidden_state_layer_ids": [-1, 2, 5]}), n=8)
    assert spec.convention is Convention.OUTPUT_OF_LAYER
    assert _names(spec) == ["embed", "layer:2", "layer:5"]


@pytest.mark.parametrize("ids", [TRAINING_IDS, EXPORT_IDS], ids=["training", "export"])
def test_torchspec_ids_alone_are_refused_with_both_readings(make, ids):
    with pytest.raises(AmbiguousIdsError) as err:
        _read(make({"eagle_aux_hidden_state_layer_ids": ids}))
    msg = str(err.value)
    first, second = ids[0], ids[1]
    assert f"as output-of-layer ids: layer:{first}, layer:{second}," in msg
    assert f"as input-to-layer ids: layer:{first - 1}, layer:{second - 1}," in msg
    # stock SGLang's DeepSeek rule reads both forms as the same taps
    assert "would capture layer:1, layer:29, layer:57" in msg
    assert "--aux-layer-convention" in msg and "hidden_state_layout" in msg


@pytest.mark.parametrize(
    ("ids", "conv"),
    [(TRAINING_IDS, "output-of-layer"), (EXPORT_IDS, "input-to-layer")],
    ids=["training", "export"],
)
def test_each_form_in_its_convention_is_the_same_network(make, ids, conv):
    spec = _read(make({"eagle_aux_hidden_state_layer_ids": ids}), convention=conv)
    assert _names(spec) == KIMI_TAPS


@pytest.mark.parametrize("ids", [TRAINING_IDS, EXPORT_IDS], ids=["training", "export"])
def test_the_declared_layout_settles_either_form(make, ids):
    spec = _read(make({"eagle_aux_hidden_state_layer_ids": ids}), layout=",".join(KIMI_TAPS))
    assert _names(spec) == KIMI_TAPS
    assert spec.convention is (
        Convention.OUTPUT_OF_LAYER if ids == TRAINING_IDS else Convention.INPUT_TO_LAYER
    )


def test_a_layout_key_next_to_disagreeing_ids_is_refused(make):
    cfg = {"hidden_state_layout": KIMI_TAPS, "eagle_aux_hidden_state_layer_ids": [3, 30, 58]}
    with pytest.raises(WiringError, match="disagree"):
        _read(make(cfg))


@pytest.mark.parametrize(
    ("extra", "fc_norm", "norm_output"),
    [
        ({}, False, False),
        ({"fc_norm": True, "norm_output": True}, True, True),
        ({"use_aux_norm": True}, True, False),
    ],
    ids=["eagle3", "eagle3.1", "legacy-use_aux_norm"],
)
def test_eagle3_1_flags_are_read(make, extra, fc_norm, norm_output):
    spec = _read(make({"eagle_aux_hidden_state_layer_ids": [-1, 2, 5]}, extra_config=extra), 8)
    assert (spec.fc_norm, spec.norm_output) == (fc_norm, norm_output)


def test_a_layout_key_alone_sizes_the_fc_for_three_taps(make):
    # SGLang's MLA fc counts eagle_config ids, then top-level ids, else 3: a 2-tap layout
    # without ids would be served through a 3-tap fc
    with pytest.raises(WiringError, match=r"draft's fc takes 3 \(Eagle3DeepseekV2ForCausalLM"):
        _read(make({"hidden_state_layout": ["embed", "layer:2"]}, num_aux=2), n=8)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"num_hidden_layers": 2}, "only supports 1 layer"),
        ({"num_aux_hidden_states": 4}, "num_aux_hidden_states is 4"),
        ({"q_lora_rank": None}, "q_lora_rank"),
    ],
    ids=["two-layers", "num-aux-disagrees", "no-q-lora"],
)
def test_what_sglang_cannot_serve_is_refused(make, extra, match):
    draft = make({"eagle_aux_hidden_state_layer_ids": [-1, 2, 5]}, extra_config=extra)
    if extra.get("q_lora_rank", 0) is None:
        cfg = json.loads((draft / "config.json").read_text())
        del cfg["q_lora_rank"]
        (draft / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WiringError, match=match):
        _read(draft, n=8)


def _tiny_target_config(tiny_target) -> dict:
    return json.loads((tiny_target / "config.json").read_text())


# The parameters Eagle3DeepseekV2ForCausalLM allocates for this draft (as SGLang 0.5.23 names
# them; the served test above loads the same draft with the check on and nothing reported).
MLA_PARAMS = [
    "model.embed_tokens.weight", "model.fc.weight", "model.norm.weight", "lm_head.weight",
    "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight",
    "model.midlayer.self_attn.q_a_layernorm.weight",
    "model.midlayer.self_attn.q_b_proj.weight",
    "model.midlayer.self_attn.kv_a_layernorm.weight",
    "model.midlayer.self_attn.kv_b_proj.weight",
    "model.midlayer.self_attn.o_proj.weight",
    "model.midlayer.mlp.gate_up_proj.weight", "model.midlayer.mlp.down_proj.weight",
    "model.midlayer.input_layernorm.weight", "model.midlayer.hidden_norm.weight",
    "model.midlayer.post_attention_layernorm.weight",
]  # fmt: skip


def test_load_gaps_know_the_mla_names(tiny_target):
    names = list(mla_draft_weights(_tiny_target_config(tiny_target), num_aux=3, fc_norm=True,
                                   d2t=True, seed=0))  # fmt: skip
    params = MLA_PARAMS + [f"model.fc_norm.{i}.weight" for i in range(3)]
    assert load_gaps(names, params, mla=True) == ([], [])
    # Llama's names would call every MLA tensor dropped
    assert load_gaps(names, params)[0]


def test_a_lone_half_of_the_fused_a_projection_is_a_gap(tiny_target):
    names = list(mla_draft_weights(_tiny_target_config(tiny_target), num_aux=3, fc_norm=False,
                                   d2t=False, seed=0))  # fmt: skip
    names.remove("layers.0.self_attn.kv_a_proj_with_mqa.weight")
    names.append("layers.0.self_attn.q_proj.weight")  # a Llama name the MLA loader skips
    dropped, missing = load_gaps(names, MLA_PARAMS, mla=True)
    assert dropped == ["layers.0.self_attn.q_a_proj.weight", "layers.0.self_attn.q_proj.weight"]
    assert missing == ["model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"]


def test_fc_norm_tensors_without_the_flag_are_a_gap(tiny_target):
    names = list(mla_draft_weights(_tiny_target_config(tiny_target), num_aux=3, fc_norm=True,
                                   d2t=False, seed=0))  # fmt: skip
    dropped, missing = load_gaps(names, MLA_PARAMS, mla=True)
    assert dropped == [f"fc_norm.{i}.weight" for i in range(3)] and missing == []


@pytest.mark.parametrize("nbr", [False, True], ids=["plain", "norm_before_residual"])
def test_trained_settings_rows_cover_the_mla_drafter(make, nbr):
    extra = {"fc_norm": True, "norm_output": True, "norm_before_residual": nbr}
    spec = _read(
        make({"hidden_state_layout": ["layer:5", "embed", "layer:2"]}, extra_config=extra), 8
    )
    rows = {r.name: r for r in draft_settings(spec, family=DEEPSEEK)}
    assert rows["drafter"].honoured and "MLA" in rows["drafter"].trained
    assert rows["fc_norm"].trained == rows["norm_output"].trained == "true"
    assert rows["hidden-state layout"].trained == "layer:5,embed,layer:2"
    # SGLang's MLA layer keeps the un-normed fc output as residual; no hook changes that
    assert rows["norm_before_residual"].status == (REFUSED if nbr else "honoured")


@pytest.mark.parametrize("nbf", [False, True], ids=["plain", "norm_before_fc"])
def test_norm_before_fc_on_an_mla_drafter_is_refused(make, nbf):
    from sglang_eagle3.checkpoint.draft_config import load_draft_config

    draft = make({"hidden_state_layout": ["embed", "layer:2", "layer:5"]},
                 extra_config={"norm_before_fc": nbf})  # fmt: skip
    rows = {r.name: r for r in draft_settings(_read(draft, 8), family=DEEPSEEK)}
    assert rows["norm_before_fc"].status == (REFUSED if nbf else "honoured")
    if nbf:  # SGLang's Eagle3MLAModel has no input_norm: the doctor will not score it either
        assert "no input_norm" in rows["norm_before_fc"].stock
        with pytest.raises(WiringError, match="has no input_norm"):
            load_draft_config(draft)
    else:
        arch = load_draft_config(draft)
        assert arch.mla is not None and arch.head_dim == 64 and arch.num_layers == 1


def test_torchspec_training_config_shape_reads(make):
    # the keys of TorchSpec's configs/draft_models/kimi_k3_eagle3_mla.json (scaled down):
    # extra eagle_config switches and a legacy "type": "yarn" rope_scaling are not in the way
    eagle = {"eagle_aux_hidden_state_layer_ids": TRAINING_IDS, "use_aux_hidden_state": True,
             "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
             "use_mtp_layernorm": False}  # fmt: skip
    rope = {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 512}
    extra = {"mla_use_nope": True, "rope_scaling": rope, "torch_dtype": "bfloat16"}
    draft = make(eagle, extra_config=extra)
    with pytest.raises(AmbiguousIdsError):
        _read(draft)
    assert _names(_read(draft, convention="output-of-layer")) == KIMI_TAPS
