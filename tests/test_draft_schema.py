"""The one draft schema: every field described, pydantic errors as one WiringError line, and
the cross-field checks the resolved models keep."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from sglang_eagle3.checkpoint import draft_config, draft_schema, draft_spec
from sglang_eagle3.checkpoint.draft_config import DraftArch, LlamaLayer, load_draft_config
from sglang_eagle3.checkpoint.draft_schema import FlatDraftConfig, SpeculatorsDraftConfig
from sglang_eagle3.checkpoint.draft_spec import DraftSpec
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout import schema as layout_schema
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout

ROOT = Path(__file__).resolve().parent.parent
WHERE = "/drafts/d/config.json"


# ---- every field is described ------------------------------------------------------------


def _models():
    for module in (draft_schema, draft_spec, draft_config, layout_schema):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseModel) and value is not BaseModel:
                if value.__module__ == module.__name__:
                    yield value


@pytest.mark.parametrize("model", list(_models()), ids=lambda m: m.__name__)
def test_every_field_has_a_description(model):
    missing = [name for name, f in model.model_fields.items() if not f.description]
    assert not missing, f"{model.__name__}: {missing}"


# ---- one WiringError line, never a pydantic traceback --------------------------------------


@pytest.mark.parametrize(
    ("cfg", "model", "text"),
    [
        (
            {"speculators_model_type": "eagle3", "transformer_layer_config": {"hidden_size": "16"}},
            SpeculatorsDraftConfig,
            "field transformer_layer_config.hidden_size must be an int >= 1, got '16'",
        ),
        (
            {"speculators_model_type": "eagle3", "transformer_layer_config": {"hidden_size": 8},
             "speculators_config": {"verifier": {"name_or_path": 5}}},
            SpeculatorsDraftConfig,
            "field speculators_config.verifier.name_or_path must be a str, got 5",
        ),
        (
            {"hidden_size": 8, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, "2"]}},
            FlatDraftConfig,
            "eagle_config.eagle_aux_hidden_state_layer_ids must hold only ints, got '2'",
        ),
        ({"hidden_size": 8, "fc_norm": 1}, FlatDraftConfig, "field fc_norm must be a bool, got 1"),
        ({}, FlatDraftConfig, "missing field hidden_size"),
    ],
)  # fmt: skip
def test_validation_errors_are_one_line_with_file_field_and_fix(cfg, model, text):
    with pytest.raises(WiringError) as info:
        model.load(cfg, path=WHERE)
    err = info.value
    assert err.path == WHERE and text in err.message and err.fix
    line = str(err)
    assert "\n" not in line and line.startswith(WHERE + ": ") and ". Fix: " in line
    assert "pydantic" not in line and "validation error" not in line.lower()


def test_layout_precedence_per_format():
    keys = ["embed", "layer:1", "layer:2"]
    spec = SpeculatorsDraftConfig.load(
        {
            "speculators_model_type": "eagle3",
            "transformer_layer_config": {"hidden_size": 8},
            "verifier_tap": "layer:5",  # ignored without a top-level layout, as before
            "eagle_config": {"hidden_state_layout": keys, "verifier_tap": "layer:6"},
        },
        path=WHERE,
    )
    found, name = spec.declared_layout
    assert (found.hidden_state_layout, found.verifier_tap, name) == (
        keys,
        "layer:6",
        "eagle_config.hidden_state_layout",
    )
    assert (spec.num_aux, spec.num_aux_source, spec.null_target) == (
        3,
        "speculators default 3",
        True,
    )
    flat = FlatDraftConfig.load(
        {"hidden_size": 8, "fc_norm": None, "use_aux_norm": True, "norm_before_fc": True,
         "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2], "norm_before_fc": False}},
        path=WHERE,
    )  # fmt: skip
    assert flat.flags().model_dump() == {
        "norm_before_fc": False,  # eagle_config's wins, as SGLang reads it
        "fc_norm": True,  # use_aux_norm is fc_norm's other name
        "norm_output": False,
        "norm_before_residual": False,
    }
    assert (flat.num_aux, flat.num_aux_source, flat.ids) == (2, "len(eagle_config ids)", (-1, 2))


# ---- the resolved models keep their cross-field checks ----------------------------------------


def _spec(**changes):
    fields = dict(
        config_path=WHERE,
        format="sglang-flat",
        layout=HiddenStateLayout(["embed", "layer:2", "layer:5"], 8, 16),
        convention="output-of-layer",
        layout_source="test",
        raw_ids=[-1, 2, 5],
        draft_hidden_size=16,
        target_hidden_size=16,
        num_aux=3,
        fc_in_features=48,
        draft_vocab_size=32,
        target_vocab_size=64,
    )
    return DraftSpec(**{**fields, **changes})


def test_hand_built_spec_is_checked():
    spec = _spec()
    assert spec.raw_ids == (-1, 2, 5) and str(spec.convention) == "output-of-layer"
    cases = {
        "layout has 3 taps but the fc takes 2": dict(num_aux=2, fc_in_features=32),
        "fc in_features 40 != 3 taps x 16 = 48": dict(fc_in_features=40),
        "layout hidden_size 16 != target_hidden_size 32": dict(target_hidden_size=32),
        "DraftSpec.format must be one of": dict(format="medusa"),
        "DraftSpec.num_aux must be an int >= 1, got 0": dict(num_aux=0, layout=None),
        "DraftSpec.draft_layers must be an int >= 1, got True": dict(draft_layers=True),
        "unknown id convention 'sideways'": dict(convention="sideways"),
    }
    for text, change in cases.items():
        with pytest.raises(WiringError, match=text) as info:
            _spec(**change)
        assert info.value.path == WHERE
    with pytest.raises(WiringError, match="fc in_features"):
        spec.replace(fc_in_features=47)
    assert spec.replace(layout=None, num_aux=3).layout is None
    with pytest.raises(ValidationError, match="frozen"):
        spec.num_aux = 4


def _arch(**changes):
    fields = dict(
        path=WHERE, format="flat", hidden_size=16, intermediate_size=32, num_heads=4,
        num_kv_heads=2, head_dim=4, num_layers=1, rms_norm_eps=1e-6, hidden_act="silu",
        vocab_size=64, draft_vocab_size=32, target_hidden_size=16, num_aux=3,
    )  # fmt: skip
    return DraftArch(**{**fields, **changes})


def test_arch_cross_field_rules():
    assert _arch().num_kv_heads == 2
    cases = {
        "num_attention_heads 4 is not a multiple of num_key_value_heads 3": dict(num_kv_heads=3),
        "norm_before_fc and fc_norm are both set": dict(norm_before_fc=True, fc_norm=True),
        r"hidden_act 'relu' is not supported \(only \['gelu', 'silu'\]\)": dict(hidden_act="relu"),
        "rms_norm_eps must be > 0, got 0.0": dict(rms_norm_eps=0.0),
        "head_dim must be an int >= 1, got 0": dict(head_dim=0),
    }
    for text, change in cases.items():
        with pytest.raises(WiringError, match=text) as info:
            _arch(**change)
        assert info.value.path == WHERE


def test_schema_modules_stay_free_of_torch_and_sglang():
    code = (
        "import sys\n"
        "import sglang_eagle3.checkpoint.draft_schema, sglang_eagle3.checkpoint.draft_spec\n"
        "import sglang_eagle3.checkpoint.draft_config, sglang_eagle3.layout.schema\n"
        "heavy = {'torch', 'sglang', 'transformers', 'numpy'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_llama_defaults_are_transformers_defaults(tmp_path):
    """speculators saves only what differs from LlamaConfig's defaults: ours must be its."""
    transformers = pytest.importorskip("transformers")
    ref = transformers.LlamaConfig()
    cfg = {"speculators_model_type": "eagle3", "transformer_layer_config": {"hidden_size": 4096}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    arch = load_draft_config(tmp_path)
    assert (arch.format, arch.path) == ("speculators", str(tmp_path / "config.json"))
    assert (
        arch.hidden_size,
        arch.intermediate_size,
        arch.num_heads,
        arch.num_kv_heads,
        arch.head_dim,
        arch.num_layers,
        arch.rms_norm_eps,
        arch.hidden_act,
        arch.vocab_size,
        arch.tie_word_embeddings,
    ) == (
        ref.hidden_size,
        ref.intermediate_size,
        ref.num_attention_heads,
        ref.num_key_value_heads,
        ref.head_dim,
        ref.num_hidden_layers,
        ref.rms_norm_eps,
        ref.hidden_act,
        ref.vocab_size,
        ref.tie_word_embeddings,
    )
    assert ref.model_type == LlamaLayer.model_fields["model_type"].default
    assert (arch.draft_vocab_size, arch.target_hidden_size, arch.num_aux) == (32000, 4096, 3)


def test_llama_layer_errors_name_the_nested_field(tmp_path):
    layer = {"hidden_size": 16, "num_attention_heads": 4, "intermediate_size": "32"}
    cfg = {"speculators_model_type": "eagle3", "transformer_layer_config": layer}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WiringError) as info:
        load_draft_config(tmp_path)
    assert info.value.path == str(tmp_path / "config.json")
    assert info.value.message == (
        "field transformer_layer_config.intermediate_size must be an int >= 1, got '32'"
    )
    layer.update(intermediate_size=32, model_type="mistral")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WiringError, match="model_type is 'mistral'; only Llama-style"):
        load_draft_config(tmp_path)
