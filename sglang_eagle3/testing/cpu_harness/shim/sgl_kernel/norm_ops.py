"""Reference fused q/k RMSNorm, as MiniMax-M2's attention calls it on the CPU engine.

MiniMax-M2 normalises q and k over all heads at once (one RMS per token for q, one for k):
    out_x = x * rsqrt(mean(x ** 2) + eps) * w_x,  for x in (q, k), in fp32, cast back,
the math of SGLang's Triton pair `rms_sumsq_serial` + `rms_apply_serial` with one rank.
"""

from __future__ import annotations

import torch

FUSED_QK_RMSNORM_SCHEMA = (
    "(Tensor q, Tensor k, Tensor q_weight, Tensor k_weight, float eps) -> (Tensor, Tensor)"
)


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # x: [tokens, dim], w: [dim]
    x32 = x.float()
    inv_rms = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (x32 * inv_rms * w.float()).to(x.dtype)


def fused_qk_rmsnorm_cpu(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # q: [tokens, q_dim], k: [tokens, k_dim]
    return _rms_norm(q, q_weight, eps), _rms_norm(k, k_weight, eps)


OPS = {"fused_qk_rmsnorm_cpu": (FUSED_QK_RMSNORM_SCHEMA, fused_qk_rmsnorm_cpu)}
