"""The MLA attention of an EAGLE-3 draft: SGLang 0.5.23's ``Eagle3DeepseekV2ForCausalLM``
(``kimi_k25_eagle3.py``), whose one layer runs DeepSeek-V2's ``DeepseekV2AttentionMLA`` on
the 2h-wide ``x = cat([input_layernorm(embed), hidden_norm(h)])``. The unabsorbed form:

  q          = q_b_proj(rms(q_a_proj(x)))                      [H, R, nope + rope]
  c, k_pe    = split(kv_a_proj_with_mqa(x))                    latent [R, kv_rank], [R, rope]
  k_nope, v  = split(kv_b_proj(rms(c)))                        [H, R, nope], [H, R, v_dim]
  q_pe, k_pe = rope(q_pe, k_pe)     interleaved pairs (DeepSeek's), unless rope_interleave=false
  k          = cat(k_nope, k_pe shared by every head)
  scale      = (nope + rope)^-0.5 * mscale^2,  mscale = 0.1 * mscale_all_dim * ln(factor) + 1
               (yarn with factor > 1; SGLang's compute_mla_mscale_scaling)

SGLang's CPU path runs the absorbed form (q_nope @ W_kc scored against the latent, the
output lifted by W_vc); the two are equal up to rounding (tests/test_mla_draft_fidelity.py).
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from sglang_eagle3.checkpoint.draft_config import DraftArch
from sglang_eagle3.checkpoint.draft_schema_mla import MlaDraftConfig
from sglang_eagle3.errors import WiringError
from sglang_eagle3.ops.rms_norm import rms_norm as _rms_norm

if TYPE_CHECKING:
    from transformers import DeepseekV3Config

rms_norm = partial(_rms_norm, cast_before_weight=True)  # as draft_forward's (HF's LlamaRMSNorm)

_ROPE_KEYS = (
    "max_position_embeddings", "rope_theta", "rope_scaling", "rope_parameters", "rope_interleave",
)  # fmt: skip


def mla_config(c: DraftArch) -> DeepseekV3Config:
    """The draft's numbers as transformers' DeepseekV3Config (rope parameters standardised as
    SGLang's process reads them: ``kimi_k2`` maps to DeepseekV3Config there)."""
    from transformers import DeepseekV3Config

    f = _mla(c)
    keys = {k: c.layer_config[k] for k in _ROPE_KEYS if k in c.layer_config}
    try:
        return DeepseekV3Config(
            hidden_size=f.hidden_size,
            num_attention_heads=f.num_attention_heads,
            num_key_value_heads=f.num_attention_heads,  # MLA: every head reads the latent
            q_lora_rank=f.q_lora_rank,
            kv_lora_rank=f.kv_lora_rank,
            qk_nope_head_dim=f.qk_nope_head_dim,
            qk_rope_head_dim=f.qk_rope_head_dim,
            v_head_dim=f.v_head_dim,
            **keys,
        )
    except Exception as err:  # transformers validates rope parameters with its own errors
        raise WiringError(
            f"cannot build a DeepSeek-V3 config from it ({err})", path=c.path
        ) from None


def mla_rotary(c: DraftArch) -> torch.nn.Module:
    """transformers' DeepSeek-V3 rotary table over ``qk_rope_head_dim`` (default, yarn ...)."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    return DeepseekV3RotaryEmbedding(mla_config(c))


def mla_softmax_scale(c: DraftArch) -> float:
    """SGLang's MLA softmax scale: ``(nope + rope)^-0.5``, times yarn's mscale squared."""
    f = _mla(c)
    scale = (f.qk_nope_head_dim + f.qk_rope_head_dim) ** -0.5
    rope = mla_config(c).rope_parameters or {}
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if kind == "default" or not rope.get("apply_yarn_scaling", True):
        return scale
    if not rope.get("apply_scale", True):
        return scale
    factor = float(rope.get("factor", 1.0))
    mscale = (
        1.0 if factor <= 1 else 0.1 * float(rope.get("mscale_all_dim", 0)) * math.log(factor) + 1
    )
    return scale * mscale * mscale


def mla_qkv(
    c: DraftArch,
    w: dict[str, torch.Tensor],
    x: torch.Tensor,  # [R, 2 * hidden]
    cos_sin: tuple[torch.Tensor, torch.Tensor],  # [1, R, rope] each
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> q [H, R, nope + rope], k [H, R, nope + rope], v [H, R, v_dim] (unabsorbed)."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        apply_rotary_pos_emb,
        apply_rotary_pos_emb_interleave,
    )

    f, p, eps = _mla(c), "layers.0.self_attn.", c.rms_norm_eps
    n, heads = x.shape[0], f.num_attention_heads
    nope, rope = f.qk_nope_head_dim, f.qk_rope_head_dim
    q_lat = rms_norm(F.linear(x, w[p + "q_a_proj.weight"]), w[p + "q_a_layernorm.weight"], eps)
    q = F.linear(q_lat, w[p + "q_b_proj.weight"]).view(n, heads, nope + rope).transpose(0, 1)
    latent, k_pe = F.linear(x, w[p + "kv_a_proj_with_mqa.weight"]).split([f.kv_lora_rank, rope], -1)
    latent = rms_norm(latent, w[p + "kv_a_layernorm.weight"], eps)
    kv = F.linear(latent, w[p + "kv_b_proj.weight"]).view(n, heads, nope + f.v_head_dim)
    k_nope, v = kv.transpose(0, 1).split([nope, f.v_head_dim], -1)
    turn = apply_rotary_pos_emb_interleave if f.rope_interleave else apply_rotary_pos_emb
    # both rotate q and k the same way (the interleaved one also reorders the pairs alike)
    q_pe, k_pe = turn(q[None, :, :, nope:], k_pe[None, None], *cos_sin)
    q = torch.cat([q[:, :, :nope], q_pe[0]], -1)
    k = torch.cat([k_nope, k_pe[0].expand(heads, n, rope)], -1)
    return q, k, v


def _mla(c: DraftArch) -> MlaDraftConfig:
    if c.mla is None:
        raise WiringError("not an MLA draft (Eagle3DeepseekV2ForCausalLM)", path=c.path)
    return c.mla
