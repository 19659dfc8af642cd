"""Capture-only mode on non-DeepSeek EAGLE-3 target families, against HF output_hidden_states.

The targets are tiny random HF models (testing/tiny/family_targets.py): capture exactness
needs each family's decoder loop and weight names, not trained weights. Stock SGLang 0.5.23
maps explicit ids X to hs[X + 1] (output of layer X) and cannot capture `embed` (ids must
be non-negative), so a layout with embed and a non-ascending order only passes when the
plugin hooks the family.
"""

from __future__ import annotations

import json

import pytest
from sglang_checks import capture_vs_hf, captured_and_hf, nearest_hf_indices, taps_diff

from sglang_eagle3 import env_names
from sglang_eagle3.testing.tiny import family_targets
from sglang_eagle3.testing.tiny import tokenizer as tok_mod

FP32 = ["--dtype", "float32"]
CAPTURE_ONLY = ["--enable-return-aux-hidden-states", "--speculative-algorithm", "EAGLE3"]
# gpt_oss refuses torch_native attention (SGLang asserts its backend list)
BACKEND = {"gpt_oss": "intel_amx"}
LAYOUT = "layer:4,embed,layer:1"  # not ascending: SGLang fills embed, layer:1, layer:4
HF_INDICES = (0, 2, 5)  # hs[0] = embed, hs[K + 1] = layer:K
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "glm4_moe": "Glm4MoeForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "minimax_m2": "MiniMaxM2ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",  # outside the table: for the refusal
}


@pytest.mark.parametrize("family", sorted(ARCHITECTURES))
def test_family_config_names_its_architecture(family):
    config = family_targets.family_config(family)
    assert config.architectures == [ARCHITECTURES[family]]
    assert config.num_hidden_layers == 8  # SGLang's default taps [2, 4, 5] stay distinct
    assert config.vocab_size == tok_mod.TokenizerRecipe().vocab_size
    assert (config.bos_token_id, config.eos_token_id) == (tok_mod.BOS_ID, tok_mod.EOS_ID)


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="unknown family"):
        family_targets.family_config("falcon")


def test_built_target_is_cached_and_reloads_with_all_hidden_states(tmp_path):
    import torch

    path = family_targets.tiny_family_target("llama", root=tmp_path)
    assert family_targets.tiny_family_target("llama", root=tmp_path) == path  # no rebuild
    assert json.loads((path / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    model = family_targets.load_family_target(path)
    with torch.no_grad():
        hs = model(torch.tensor([[0, 17, 300]]), output_hidden_states=True).hidden_states
    assert len(hs) == model.config.num_hidden_layers + 1


SERVED = ("llama", "qwen3", "qwen3_moe", "glm4_moe", "gpt_oss", "minimax_m2")


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.parametrize("family", SERVED)
def test_capture_only_returns_the_declared_taps_exactly(server_factory, family, figures):
    """Prefill and decode rows over HTTP equal HF hidden_states[0, 2, 5], fp32."""
    target = family_targets.tiny_family_target(family)
    srv = server_factory(
        target,
        FP32 + CAPTURE_ONLY + ["--attention-backend", BACKEND.get(family, "torch_native")],
        name=f"capture-{family}",
        env={env_names.LAYOUT: LAYOUT},
    )
    loader = family_targets.load_family_target
    diff, shifted_diff = capture_vs_hf(srv, target, HF_INDICES, loader)
    figures.record(f"{family}: max |diff| capture-only taps vs HF hidden_states[0, 2, 5]", diff)
    figures.record(f"{family}: max |diff| against the taps shifted by one", shifted_diff)
    if diff >= 1e-4:  # say what the server captured instead
        got = nearest_hf_indices(srv, target, loader)
        pytest.fail(f"{family}: taps differ by {diff:.3g}; server returned (nearest HF index, "
                    f"diff) {got} for layout {LAYOUT!r}, want {HF_INDICES}")  # fmt: skip
    assert shifted_diff > 1e-2, shifted_diff  # the comparison can tell neighbours apart
    # The plugin's log line names the family and the ascending indices it filled.
    line = f"{ARCHITECTURES[family]}: capturing taps layer:4, embed, layer:1 (SGLang capture "
    assert line + "indices [0, 2, 5]" in srv.log()


def _pre_norm_loader(path):
    # transformers 5 hands back the final norm's output as the last hidden state; SGLang's
    # gpt_oss captures the residual stream before that norm
    model = family_targets.load_family_target(path)
    model.config.tie_last_hidden_states = False
    return model


@pytest.mark.sglang
@pytest.mark.slow
def test_gpt_oss_captures_the_last_layers_output(server_factory, figures):
    """gpt_oss's loop reaches hs[n]: `layer:7` of 8 layers is captured, pre-norm, exactly."""
    target = family_targets.tiny_family_target("gpt_oss")
    srv = server_factory(
        target, FP32 + CAPTURE_ONLY + ["--attention-backend", BACKEND["gpt_oss"]],
        name="capture-gpt_oss-final", env={env_names.LAYOUT: "layer:7,embed,layer:1"},
    )  # fmt: skip
    assert "capturing taps layer:7, embed, layer:1 (SGLang capture indices [0, 2, 8]" in srv.log()
    got, hs, start = captured_and_hf(srv, target, _pre_norm_loader)
    diff, one_early = taps_diff(got, hs, start, (0, 2, 8)), taps_diff(got, hs, start, (0, 2, 7))
    figures.record("gpt_oss: max |diff| capture-only taps vs HF hidden_states[0, 2, 8]", diff)
    figures.record("gpt_oss: the same against layer:6 for the last tap", one_early)
    assert diff < 1e-4, diff
    assert one_early > 1e-2, one_early


@pytest.mark.sglang
@pytest.mark.slow
def test_a_declared_layout_on_a_family_outside_the_table_stops_the_server(server_factory):
    """SGLang serves OLMo-2 but has no EAGLE-3 capture for it: the server must not come up."""
    target = family_targets.tiny_family_target("olmo2")
    srv = server_factory(
        target, FP32 + CAPTURE_ONLY + ["--attention-backend", "torch_native"],
        name="capture-olmo2", wait=False, env={env_names.LAYOUT: LAYOUT},
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="server exited"):
        srv.wait_ready(timeout=240)
    log = srv.log()
    assert "Olmo2ForCausalLM is not in sglang-eagle3's table of SGLang 0.5.23 EAGLE-3" in log
    assert "capturing taps" not in log


@pytest.mark.sglang
@pytest.mark.slow
def test_kimi_k25_wrapper_served_text_only_captures_through_its_language_model(
    server_factory, figures
):
    """KimiK25ForConditionalGeneration hands capture to its DeepSeek-V3 language model."""
    from sglang_eagle3.testing.tiny.kimi_k25_target import load_hf_kimi_k25, tiny_kimi_k25_target

    target = tiny_kimi_k25_target()
    srv = server_factory(
        target, FP32 + CAPTURE_ONLY + ["--attention-backend", "torch_native"],
        name="capture-kimi_k25", env={env_names.LAYOUT: LAYOUT},
    )  # fmt: skip
    line = "KimiK25ForConditionalGeneration: capturing taps layer:4, embed, layer:1 (SGLang "
    assert line + "capture indices [0, 2, 5]" in srv.log()
    diff, shifted_diff = capture_vs_hf(srv, target, HF_INDICES, load_hf_kimi_k25)
    figures.record("kimi_k25: max |diff| capture-only taps vs HF hidden_states[0, 2, 5]", diff)
    figures.record("kimi_k25: the same against the taps shifted by one", shifted_diff)
    assert diff < 1e-4, diff
    assert shifted_diff > 1e-2, shifted_diff
