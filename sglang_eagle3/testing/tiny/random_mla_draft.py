"""A seeded random-weight MLA EAGLE-3 draft (``Eagle3DeepseekV2ForCausalLM``) for a target.

Modelled on TorchSpec's ``kimi_k25_eagle3_mla.json`` scaled down to the tiny DeepSeek-V3
target: the target's MLA dimensions, one decoder layer, a dense MLP, its own lm_head. The
tensor names are the ones SGLang 0.5.23's ``kimi_k25_eagle3.load_weights`` reads: flat
(``layers.0.*`` becomes ``midlayer.*``; ``q_a_proj`` and ``kv_a_proj_with_mqa`` are fused at
load into ``fused_qkv_a_proj_with_mqa``; ``fc_norm.{i}`` only with ``fc_norm``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from sglang_eagle3.checkpoint.draft_schema_mla import MLA_ARCH
from sglang_eagle3.testing.tiny.random_draft import write_draft_dir

ROPE_KEYS = ("rope_theta", "rope_parameters", "rope_scaling", "rope_interleave")


def mla_draft_weights(
    target: dict, *, num_aux: int, fc_norm: bool, d2t: bool, seed: int
) -> dict[str, torch.Tensor]:
    """The checkpoint tensors, by SGLang's names, for a target config.json ``target``."""
    h, vocab, heads = target["hidden_size"], target["vocab_size"], target["num_attention_heads"]
    q_rank, kv_rank = target["q_lora_rank"], target["kv_lora_rank"]
    nope, rope, v = target["qk_nope_head_dim"], target["qk_rope_head_dim"], target["v_head_dim"]
    inter = 2 * h
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.05

    def norm(n: int) -> torch.Tensor:  # not all ones, so a dropped norm shows
        return 1.0 + 0.1 * torch.randn(n, generator=gen)

    attn = "layers.0.self_attn."
    weights = {
        "embed_tokens.weight": rand(vocab, h),
        "fc.weight": rand(h, num_aux * h),
        # the input layer sees cat([input_layernorm(embed), hidden_norm(fc out)]): 2h wide
        attn + "q_a_proj.weight": rand(q_rank, 2 * h),
        attn + "kv_a_proj_with_mqa.weight": rand(kv_rank + rope, 2 * h),
        attn + "q_a_layernorm.weight": norm(q_rank),
        attn + "q_b_proj.weight": rand(heads * (nope + rope), q_rank),
        attn + "kv_a_layernorm.weight": norm(kv_rank),
        attn + "kv_b_proj.weight": rand(heads * (nope + v), kv_rank),
        attn + "o_proj.weight": rand(h, heads * v),
        "layers.0.mlp.gate_proj.weight": rand(inter, h),
        "layers.0.mlp.up_proj.weight": rand(inter, h),
        "layers.0.mlp.down_proj.weight": rand(h, inter),
        "layers.0.input_layernorm.weight": norm(h),
        "layers.0.hidden_norm.weight": norm(h),
        "layers.0.post_attention_layernorm.weight": norm(h),
        "norm.weight": norm(h),
        "lm_head.weight": rand(vocab, h),
    }
    if fc_norm:
        weights.update({f"fc_norm.{i}.weight": norm(h) for i in range(num_aux)})
    if d2t:  # the identity mapping (draft vocab = target vocab), as a zero offset
        weights["d2t"] = torch.zeros(vocab, dtype=torch.int64)
    return weights


def write_random_mla_draft(
    out_dir: Path | str,
    target_dir: Path | str,
    *,
    eagle_config: dict,
    num_aux: int = 3,
    fc_norm: bool = False,
    norm_output: bool = False,
    d2t: bool = False,
    seed: int = 0,
    extra_config: dict | None = None,
    tensors: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write config.json + model.safetensors; ``eagle_config`` is written as given (its ids or
    layout: ``{"hidden_state_layout": [...]}``, ``{"eagle_aux_hidden_state_layer_ids": [...]}``).
    SGLang sizes the fc from the eagle_config ids (else 3), so ``num_aux`` must agree.
    ``tensors`` replace the random ones of the same names (a trained draft's)."""
    target = json.loads((Path(target_dir) / "config.json").read_text())
    h, vocab = target["hidden_size"], target["vocab_size"]
    weights = mla_draft_weights(target, num_aux=num_aux, fc_norm=fc_norm, d2t=d2t, seed=seed)
    weights.update(tensors or {})
    config = {
        "architectures": [MLA_ARCH],
        "model_type": "kimi_k2",  # TorchSpec's; SGLang maps it to DeepseekV3Config
        "hidden_size": h,
        "intermediate_size": 2 * h,
        "num_attention_heads": target["num_attention_heads"],
        "num_key_value_heads": target["num_attention_heads"],
        "num_hidden_layers": 1,
        "q_lora_rank": target["q_lora_rank"],
        "kv_lora_rank": target["kv_lora_rank"],
        "qk_nope_head_dim": target["qk_nope_head_dim"],
        "qk_rope_head_dim": target["qk_rope_head_dim"],
        "v_head_dim": target["v_head_dim"],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "max_position_embeddings": target.get("max_position_embeddings", 2048),
        # the target's yarn rope, as Kimi's drafts keep it; SGLang's CPU rope (get_rope_cpu)
        # serves deepseek_yarn only, so a default-rope draft does not start on the harness
        **{k: target[k] for k in ROPE_KEYS if k in target},
        "tie_word_embeddings": False,
        "target_hidden_size": h,
        "dtype": "float32",
        "fc_norm": fc_norm,
        "norm_output": norm_output,
        "eagle_config": eagle_config,
        **(extra_config or {}),
    }
    return write_draft_dir(out_dir, weights, config)
