"""The ops SGLang 0.5.23's CPU graph runner registers fakes for (`--enable-torch-compile`).

`CPUGraphRunner.__init__` calls `register_fake_ops` (sglang/srt/model_executor/
cpu_graph_runner.py L171-611), which calls `torch.library.register_fake("sgl_kernel::<op>")`
for the 55 names in `SGLANG_FAKED`; that raises unless every one of them is a defined torch op.
Three are implemented by this reference (`IMPLEMENTED`, defined at import). The other 52 are
defined here, only when the graph runner is about to register its fakes
(`define_graph_runner_ops`), as ops whose CPU kernel raises NotImplementedError: an eager
process keeps today's behaviour (no such op, AttributeError), and a compiled graph that reaches
one fails loudly at run time. SGLang supplies every fake; defining one here would make its own
`register_fake` raise ("already has a fake impl").

Schemas follow SGLang 0.5.23's call sites and its fakes' parameter names (with the CPU
sgl_kernel's types), so a stray call reaches the NotImplementedError, not a schema mismatch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

STUB_MESSAGE = "is not implemented by the sglang-eagle3 CPU reference harness"

# Implemented by attention.py / norm_ops.py, defined at import; SGLang fakes them too.
IMPLEMENTED = ("decode_attention_cpu", "extend_attention_cpu", "fused_qk_rmsnorm_cpu")

_NORM = "(Tensor input, Tensor weight, float eps) -> Tensor"
_ACT = "(Tensor input) -> Tensor"
_ADD_NORM = "(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps) -> ()"
_GROUPED = (
    "int topk, bool renormalize, int num_expert_group, int topk_group, "
    "int num_fused_shared_experts, float? routed_scaling_factor, "
    "Tensor? num_token_non_padded=None) -> (Tensor, Tensor)"
)
_TOPK = (
    "(Tensor hidden_states, Tensor gating_output, int topk, bool renormalize, "
    "Tensor? correction_bias=None) -> (Tensor, Tensor)"
)
_QKVZBA = (
    "(Tensor mixed_qkvz, Tensor mixed_ba, int num_heads_qk, int num_heads_v, int head_qk, "
    "int head_v) -> (Tensor, Tensor, Tensor, Tensor)"
)
_MM_TAIL = "Tensor? bias, ScalarType out_dtype, bool is_vnni) -> Tensor"
_ROPE_QKV = (
    "Tensor positions, Tensor cos_sin_cache, float eps, bool use_int8_w8a8, bool use_fp8_w8a16, "
)

STUB_SCHEMAS: dict[str, str] = {
    # no result: they write into their first argument(s)
    "shm_allreduce": "(Tensor(a!) data, int reduce_op) -> ()",
    "bmm_cpu": "(Tensor(a!) out, Tensor mat1, Tensor mat2, bool is_vnni, Tensor? scale) -> ()",
    "fused_add_rmsnorm_cpu": _ADD_NORM,
    "gemma_fused_add_rmsnorm_cpu": _ADD_NORM,
    "layernorm_cpu": "(Tensor(a!) input, Tensor weight, Tensor? bias, float eps) -> ()",
    "fused_add_layernorm_cpu": (
        "(Tensor(a!) input, Tensor(b!) residual, Tensor weight, Tensor? bias, float eps) -> ()"
    ),
    "multimodal_rotary_embedding_cpu": (
        "(Tensor positions, Tensor(a!) query, Tensor(b!) key, int head_size, "
        "Tensor cos_sin_cache, int[]? mrope_section, bool mrope_interleaved, bool is_neox) -> ()"
    ),
    "apply_multidimensional_rope_cpu": "(Tensor(a!) q, Tensor(b!) k, Tensor cos, Tensor sin) -> ()",
    "fused_sigmoid_mul_cpu": "(Tensor(a!) input, Tensor gate) -> ()",
    # norms and activations
    "rmsnorm_cpu": _NORM,
    "gemma_rmsnorm_cpu": _NORM,
    "gemma3_rmsnorm_cpu": _NORM,
    "gemma4_rmsnorm_cpu": (
        "(Tensor input, Tensor weight, float eps, float scale_shift, bool with_scale) -> Tensor"
    ),
    "l2norm_cpu": "(Tensor input, float eps) -> Tensor",
    "fused_rmsnorm_gated_cpu": "(Tensor input, Tensor weight, Tensor gate, float eps) -> Tensor",
    "fused_dual_residual_rmsnorm_cpu": (
        "(Tensor x, Tensor residual, Tensor w1, Tensor w2, float eps) -> (Tensor, Tensor)"
    ),
    "fused_qk_gemma_rmsnorm_cpu": (
        "(Tensor q, Tensor k, Tensor q_weight, Tensor k_weight, float eps, int head_dim) "
        "-> (Tensor, Tensor)"
    ),
    "fused_qk_gemma_rmsnorm_with_gate_cpu": (
        "(Tensor q_gate, Tensor k, Tensor q_weight, Tensor k_weight, float eps, int head_dim, "
        "int num_head) -> (Tensor, Tensor, Tensor)"
    ),
    "fused_qk_rmsnorm_sumsq_cpu": "(Tensor q, Tensor k) -> Tensor",
    "fused_qk_rmsnorm_apply_from_stats_cpu": (
        "(Tensor q, Tensor k, Tensor q_weight, Tensor k_weight, Tensor sum_sq, int world_size, "
        "float eps) -> (Tensor, Tensor)"
    ),
    "silu_and_mul_cpu": _ACT,
    "gelu_tanh_and_mul_cpu": _ACT,
    "gelu_and_mul_cpu": _ACT,
    # rope and MLA projections
    "rotary_embedding_cpu": (
        "(Tensor positions, Tensor query, Tensor key, int head_size, Tensor cos_sin_cache, "
        "bool is_neox) -> (Tensor, Tensor)"
    ),
    "apply_rotary_pos_emb_cpu": (
        "(Tensor query, Tensor key, Tensor cos, Tensor sin) -> (Tensor, Tensor)"
    ),
    "qkv_proj_with_rope": (
        "(Tensor hidden_states, Tensor q_a_proj_weight, Tensor q_b_proj_weight, "
        "Tensor kv_a_proj_weight, Tensor w_kc, Tensor q_a_layernorm_weight, "
        "Tensor kv_a_layernorm_weight, " + _ROPE_QKV + "Tensor? q_a_proj_scale, "
        "Tensor? q_b_proj_scale, Tensor? kv_a_proj_scale, bool is_vnni, int[]? block_size) "
        "-> (Tensor, Tensor, Tensor)"
    ),
    "qkv_proj_with_rope_fused_weight": (
        "(Tensor hidden_states, Tensor q_a_proj_weight, Tensor q_b_proj_weight, Tensor w_kc, "
        "Tensor q_a_layernorm_weight, Tensor kv_a_layernorm_weight, "
        + _ROPE_QKV
        + "Tensor? qkv_a_proj_scale, Tensor? q_b_proj_scale, Tensor? w_scale, bool is_vnni, "
        "int[]? block_size, int q_lora_rank, int kv_lora_rank, int qk_rope_head_dim) "
        "-> (Tensor, Tensor, Tensor)"
    ),  # fmt: skip
    # GEMMs
    "weight_packed_linear": "(Tensor mat1, Tensor mat2, Tensor? bias, bool is_vnni) -> Tensor",
    "per_token_quant_int8_cpu": "(Tensor input) -> (Tensor, Tensor)",
    "int8_scaled_mm_cpu": "(Tensor mat1, Tensor mat2, Tensor scales1, Tensor scales2, " + _MM_TAIL,
    "int8_scaled_mm_with_quant": "(Tensor mat1, Tensor mat2, Tensor scales2, " + _MM_TAIL,
    "fp8_scaled_mm_cpu": "(Tensor mat1, Tensor mat2, Tensor scales2, int[] block_size, " + _MM_TAIL,
    "fp8_per_tensor_scaled_mm_cpu": "(Tensor mat1, Tensor mat2, Tensor scale2, " + _MM_TAIL,
    "mxfp4_scaled_mm_cpu": (
        "(Tensor mat1, Tensor mat2, Tensor scales2, Tensor? bias, bool is_vnni) -> Tensor"
    ),
    "int4_scaled_mm_cpu": (
        "(Tensor x, Tensor w, Tensor w_zeros, Tensor w_scales, Tensor? bias) -> Tensor"
    ),
    "fused_linear_sigmoid_mul": (
        "(Tensor mat1, Tensor mat2, Tensor? bias, bool is_vnni, Tensor post_mul_mat) -> Tensor"
    ),
    "fused_input_proj_cpu": (
        "(Tensor hidden_states, Tensor qkvz_weight, Tensor ba_weight, bool is_vnni) "
        "-> (Tensor, Tensor)"
    ),
    # MoE
    "fused_experts_cpu": (
        "(Tensor hidden_states, Tensor w1, Tensor w2, Tensor topk_weights, Tensor topk_ids, "
        "bool inplace, int moe_comp_method, Tensor? w1_scale, Tensor? w2_scale, Tensor? w1_zp, "
        "Tensor? w2_zp, int[]? block_size, Tensor? w1_bias, Tensor? w2_bias, float? alpha, "
        "float? limit, bool is_vnni, str activation='silu') -> Tensor"
    ),
    "shared_expert_cpu": (
        "(Tensor hidden_states, Tensor w1, Tensor w2, Tensor fused_experts_out, "
        "float routed_scaling_factor, bool inplace, bool use_int8_w8a8, bool use_fp8_w8a16, "
        "Tensor? w1_scale, Tensor? w2_scale, int[]? block_size, bool is_vnni) -> Tensor"
    ),
    "grouped_topk_cpu": "(Tensor hidden_states, Tensor gating_output, " + _GROUPED,
    "biased_grouped_topk_cpu": (
        "(Tensor hidden_states, Tensor gating_output, Tensor correction_bias, " + _GROUPED
    ),
    "topk_sigmoid_cpu": _TOPK,
    "topk_softmax_cpu": _TOPK,
    "fused_moe_router_cpu": (
        "(float moe_softcapping, Tensor hidden_states, Tensor gating_output, int topk, "
        "bool renormalize, Tensor? correction_bias=None) -> (Tensor, Tensor)"
    ),
    # linear attention (Qwen3-Next / Qwen3.5) and tensor-parallel collectives
    "fused_qkvzba_split_reshape_cat_cpu": _QKVZBA,
    "fused_qkvzba_split_reshape_cat_contiguous_cpu": _QKVZBA,
    "fused_sigmoid_gating_delta_rule_update_cpu": (
        "(Tensor A_log, Tensor dt_bias, Tensor q, Tensor k, Tensor v, Tensor a, Tensor b, "
        "Tensor(a!) initial_state_source, Tensor initial_state_indices, Tensor cu_seqlens, "
        "bool use_qk_l2norm_in_kernel, float softplus_beta=1.0, float softplus_threshold=20.0) "
        "-> Tensor"
    ),
    "fused_gdn_gating_cpu": (
        "(Tensor A_log, Tensor a, Tensor b, Tensor dt_bias) -> (Tensor, Tensor)"
    ),
    "chunk_gated_delta_rule_cpu": (
        "(Tensor query, Tensor key, Tensor value, Tensor g, Tensor beta, Tensor initial_state, "
        "bool output_final_state, Tensor cu_seqlens, bool head_first, "
        "bool use_qk_l2norm_in_kernel, Tensor? initial_state_indices, float eps=1e-06) "
        "-> (Tensor, Tensor)"
    ),
    "causal_conv1d_fwd_cpu": (
        "(Tensor x, Tensor weight, Tensor? bias, Tensor? conv_states, Tensor? query_start_loc, "
        "Tensor? cache_indices, Tensor? has_initial_state, bool silu_activation, "
        "int pad_slot_id, bool is_vnni) -> Tensor"
    ),
    "causal_conv1d_update_cpu": (
        "(Tensor x, Tensor conv_states, Tensor weight, Tensor? bias, bool silu_activation, "
        "Tensor? cache_seqlens, Tensor? conv_state_indices, int pad_slot_id, bool is_vnni) "
        "-> Tensor"
    ),
    "shm_allgather": "(Tensor data, int dim) -> Tensor",
}

SGLANG_FAKED: tuple[str, ...] = tuple(sorted([*IMPLEMENTED, *STUB_SCHEMAS]))

_libraries: list[torch.library.Library] = []


def _stub(name: str, lib: torch.library.Library) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        # `lib` is held by the dispatcher through this kernel: the op outlives this module
        raise NotImplementedError(f"sgl_kernel.{name} {STUB_MESSAGE} ({lib.ns}, CPU graph op)")

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def define_graph_runner_ops() -> list[str]:
    """Define every op of `STUB_SCHEMAS` not yet defined in this process (idempotent): the
    ones SGLang's `register_fake_ops` needs besides those this reference implements.
    Returns the names defined by this call."""
    missing = [n for n in STUB_SCHEMAS if not hasattr(torch.ops.sgl_kernel, n)]
    if not missing:
        return []
    lib = torch.library.Library("sgl_kernel", "FRAGMENT")
    for name in missing:
        lib.define(name + STUB_SCHEMAS[name])
        lib.impl(name, _stub(name, lib), "CPU")
    _libraries.append(lib)
    return missing
