"""The one RMSNorm, with its rounding named: SGLang 0.5.23's ``RMSNorm.forward_native``.

Statistics are always taken in fp32 (fp64 inputs stay fp64). The two roundings differ only
where the normalised input is cast back to the input dtype:

- ``cast_before_weight=True``:  ``weight * (x * rstd).to(x.dtype)``  HF ``LlamaRMSNorm``,
  so speculators' training forward (and SGLang's ``cast_x_before_out_mul=True``);
- ``cast_before_weight=False``: ``(x * rstd * weight).to(x.dtype)``  SGLang's default, which
  its EAGLE-3 drafter's ``input_norm`` / ``fc_norm`` use.

For fp32 and fp64 inputs the two are identical; in bf16/fp16 they can differ by one rounding.
"""

from __future__ import annotations

import torch


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, *, cast_before_weight: bool
) -> torch.Tensor:
    """RMSNorm over the last dimension of ``x``; see the module docstring for the rounding."""
    x32 = x.to(torch.promote_types(x.dtype, torch.float32))
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    if cast_before_weight:
        return weight * x32.to(x.dtype)
    return (x32 * weight).to(x.dtype)
