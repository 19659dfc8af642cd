"""A seeded random-weight EAGLE-3 draft in SGLang's flat format, for a given target.

Random weights propose poor tokens but exercise every wiring path: startup, capture,
verification and losslessness. Trained drafters live in `tiny/drafter.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file


def write_random_flat_draft(
    out_dir: Path | str,
    target_dir: Path | str,
    *,
    eagle_config: dict,
    num_aux: int = 3,
    seed: int = 0,
    extra_config: dict | None = None,
) -> Path:
    """Write config.json + model.safetensors; `eagle_config` is written as given."""
    target = json.loads((Path(target_dir) / "config.json").read_text())
    h, vocab = target["hidden_size"], target["vocab_size"]
    heads, inter = target["num_attention_heads"], 2 * target["hidden_size"]
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.05

    weights = {
        "fc.weight": rand(h, num_aux * h),
        "layers.0.self_attn.q_proj.weight": rand(h, 2 * h),  # input layer sees [embed, hidden]
        "layers.0.self_attn.k_proj.weight": rand(h, 2 * h),
        "layers.0.self_attn.v_proj.weight": rand(h, 2 * h),
        "layers.0.self_attn.o_proj.weight": rand(h, h),
        "layers.0.mlp.gate_proj.weight": rand(inter, h),
        "layers.0.mlp.up_proj.weight": rand(inter, h),
        "layers.0.mlp.down_proj.weight": rand(h, inter),
        "layers.0.input_layernorm.weight": torch.ones(h),
        "layers.0.hidden_norm.weight": torch.ones(h),
        "layers.0.post_attention_layernorm.weight": torch.ones(h),
        "norm.weight": torch.ones(h),
        "lm_head.weight": rand(vocab, h),
        "embed_tokens.weight": rand(vocab, h),
    }
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "max_position_embeddings": target.get("max_position_embeddings", 2048),
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "target_hidden_size": h,
        "dtype": "float32",
        "eagle_config": eagle_config,
        **(extra_config or {}),
    }
    return write_draft_dir(out_dir, weights, config)


def write_draft_dir(out_dir: Path | str, weights: dict, config: dict) -> Path:
    """A draft checkpoint directory: model.safetensors and config.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
