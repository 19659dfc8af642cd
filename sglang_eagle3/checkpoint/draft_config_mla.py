"""The tensors an MLA EAGLE-3 draft (``Eagle3DeepseekV2ForCausalLM``) holds, by the names
SGLang 0.5.23's ``kimi_k25_eagle3.load_weights`` reads, with the shapes its config implies
(pure). Beside them the forward needs the shared ones (fc, norm, lm_head)."""

from __future__ import annotations

from sglang_eagle3.checkpoint.draft_schema_mla import MlaDraftConfig


def mla_shapes(f: MlaDraftConfig, num_aux: int) -> dict[str, tuple[int, ...]]:
    """The decoder layer's tensors (and ``fc_norm.{i}``) of the MLA draft ``f``."""
    h, heads = f.hidden_size, f.num_attention_heads
    qk, rope = f.qk_nope_head_dim + f.qk_rope_head_dim, f.qk_rope_head_dim
    attn, mlp = "layers.0.self_attn.", "layers.0.mlp."
    shapes = {
        # the layer's input is cat([input_layernorm(embed), hidden_norm(h)]): 2h wide
        attn + "q_a_proj.weight": (f.q_lora_rank, 2 * h),
        attn + "q_a_layernorm.weight": (f.q_lora_rank,),
        attn + "q_b_proj.weight": (heads * qk, f.q_lora_rank),
        attn + "kv_a_proj_with_mqa.weight": (f.kv_lora_rank + rope, 2 * h),
        attn + "kv_a_layernorm.weight": (f.kv_lora_rank,),
        attn + "kv_b_proj.weight": (heads * (f.qk_nope_head_dim + f.v_head_dim), f.kv_lora_rank),
        attn + "o_proj.weight": (h, heads * f.v_head_dim),
        mlp + "gate_proj.weight": (f.intermediate_size, h),
        mlp + "up_proj.weight": (f.intermediate_size, h),
        mlp + "down_proj.weight": (h, f.intermediate_size),
        "layers.0.input_layernorm.weight": (h,),
        "layers.0.hidden_norm.weight": (h,),
        "layers.0.post_attention_layernorm.weight": (h,),
    }
    if f.flags().fc_norm:
        width = f.declared_target_hidden
        shapes.update({f"fc_norm.{i}.weight": (width,) for i in range(num_aux)})
    return shapes
