"""``eagle3_fused_fc``: the EAGLE-3 drafter's ``fc(norm(cat(h_1..h_K)))`` in one fused kernel.

norm = "none":      fc(cat(h))
       "before_fc": fc(rmsnorm(cat(h), norm_weight))            (SGLang ``input_norm``)
       "per_tap":   fc(cat(rmsnorm(h_k, norm_weights[k])))      (SGLang ``fc_norm``)
       "both":      input_norm first, then fc_norm, as SGLang 0.5.23 applies them when a config
                    sets both (``srt/models/llama_eagle3.py`` L237-247)

RMSNorm is SGLang's ``RMSNorm.forward_native`` (``ops.rms_norm``, cast_before_weight=False):
statistics in fp32, ``(x * rstd * w)`` in fp32, cast back to the input dtype. The fused kernel
(``sglang_eagle3.kernels.eagle3_fused_fc_kernel``) runs when ``use_fused`` says so;
``eagle3_fused_fc_reference`` is the PyTorch fallback with the same semantics. They agree to
input-dtype rounding, not bitwise: SGLang rounds the normalized input
before the GEMM; the kernel's decode shapes round ``x * weight`` and apply the rstd to the fp32
accumulator (so with fp16 inputs ``|x * weight|`` must stay below 65504), its prefill shape
rounds ``x * rstd * weight`` like SGLang, and ``both`` skips SGLang's intermediate rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F

from sglang_eagle3.ops.eagle3_fused_fc_dispatch import (
    NORM_NAMES,
    FusedFcConfig,
    interpreting,
    launch_eagle3_fused_fc,
    use_fused,
)
from sglang_eagle3.ops.rms_norm import rms_norm

Norm = Literal["none", "before_fc", "per_tap", "both"]
NORMS = NORM_NAMES  # the dispatch reads the wins file with them, so they live there
# The kernels take separate taps as up to 4 pointers (x0..x3); more taps go packed.
MAX_POINTER_TAPS = 4

__all__ = ["eagle3_fused_fc", "eagle3_fused_fc_reference", "use_fused", "FusedFcConfig"]


def _tap_weights(norm_weights, k: int) -> list[torch.Tensor]:
    if isinstance(norm_weights, torch.Tensor):
        return list(norm_weights.reshape(k, -1).unbind(0))
    return list(norm_weights)


def _check(norm: str, norm_weight, norm_weights, k: int | None) -> int:
    """Validate the norm arguments; returns the tap count they imply (or k)."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if norm in ("before_fc", "both") and norm_weight is None:
        raise ValueError(f"norm={norm!r} needs norm_weight (the [K*H] input_norm weight)")
    if norm in ("per_tap", "both"):
        if norm_weights is None:
            raise ValueError(f"norm={norm!r} needs norm_weights (K fc_norm weights of [H])")
        n = norm_weights.shape[0] if isinstance(norm_weights, torch.Tensor) else len(norm_weights)
        if k is not None and n != k:
            raise ValueError(f"{n} fc_norm weights for {k} taps")
        return n
    return k or 1


def eagle3_fused_fc_reference(
    taps_or_packed: torch.Tensor | Sequence[torch.Tensor],  # [T, K*H] or K x [T, H]
    fc_weight: torch.Tensor,  # [N, K*H]
    *,
    norm: Norm = "none",
    norm_weight: torch.Tensor | None = None,  # [K*H]
    norm_weights: torch.Tensor | Sequence[torch.Tensor] | None = None,  # [K, H] or K x [H]
    eps: float = 1e-6,
    bias: torch.Tensor | None = None,  # [N]
    out: torch.Tensor | None = None,  # [T, N]
    num_taps: int | None = None,
) -> torch.Tensor:
    """PyTorch fallback: exactly SGLang's input_norm -> fc_norm (chunk, norm, cat) -> fc."""
    listed = not isinstance(taps_or_packed, torch.Tensor)
    k = _check(norm, norm_weight, norm_weights, len(taps_or_packed) if listed else num_taps)
    h = torch.cat(list(taps_or_packed), dim=-1) if listed else taps_or_packed
    # SGLang's drafter norms round once, after the weight (cast_x_before_out_mul=False)
    if norm in ("before_fc", "both"):
        h = rms_norm(h, norm_weight, eps, cast_before_weight=False)
    if norm in ("per_tap", "both"):
        pairs = zip(h.chunk(k, dim=-1), _tap_weights(norm_weights, k), strict=True)
        h = torch.cat([rms_norm(c, w, eps, cast_before_weight=False) for c, w in pairs], dim=-1)
    y = F.linear(h, fc_weight, bias)
    if out is None:
        return y
    return out.copy_(y)


def _unit_col(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _as_packed_views(taps: list[torch.Tensor]) -> torch.Tensor | None:
    """The packed [T, K*H] buffer when the taps are its consecutive column slices."""
    t0 = taps[0]
    width = t0.shape[-1]
    for i, t in enumerate(taps):
        same = t.shape == t0.shape and t.stride() == t0.stride() and t.dtype == t0.dtype
        if not same or t.data_ptr() != t0.data_ptr() + i * width * t0.element_size():
            return None
    if t0.stride(-1) != 1 or t0.stride(0) < len(taps) * width:
        return None
    return t0.as_strided((t0.shape[0], len(taps) * width), t0.stride())


def eagle3_fused_fc(
    taps_or_packed: torch.Tensor | Sequence[torch.Tensor],  # [T, K*H] or K x [T, H]
    fc_weight: torch.Tensor,  # [N, K*H] (nn.Linear layout)
    *,
    norm: Norm = "none",
    norm_weight: torch.Tensor | None = None,  # [K*H]
    norm_weights: torch.Tensor | Sequence[torch.Tensor] | None = None,  # [K, H] or K x [H]
    eps: float = 1e-6,
    bias: torch.Tensor | None = None,  # [N]
    out: torch.Tensor | None = None,  # [T, N], written in place and returned
    num_taps: int | None = None,  # K for a packed input (implied by norm_weights when given)
    backend: Literal["auto", "triton", "torch"] = "auto",
    config: FusedFcConfig | None = None,  # tile override (tests, benchmark)
) -> torch.Tensor:
    """``fc(norm(cat(taps)))`` (+ bias) -> [T, N] in the input dtype.

    "auto" runs the fused Triton kernel where ``use_fused`` says it is faster (CUDA, sm_90+,
    measured shapes, ``SGLANG_EAGLE3_FUSED_FC``) and ``eagle3_fused_fc_reference`` otherwise;
    "triton" forces the kernel (CPU tensors only under TRITON_INTERPRET=1).
    """
    listed = not isinstance(taps_or_packed, torch.Tensor)
    k = _check(norm, norm_weight, norm_weights, len(taps_or_packed) if listed else num_taps)
    first = taps_or_packed[0] if listed else taps_or_packed
    width = first.shape[-1] * (k if listed else 1)
    hidden = width // k
    if width % k or fc_weight.shape[-1] != width:
        raise ValueError(f"fc weight {tuple(fc_weight.shape)} does not take {k} taps of {hidden}")
    tokens = first.numel() // first.shape[-1]
    if backend == "auto":
        backend = "triton" if use_fused(tokens, hidden, k, norm, first.device) else "torch"
    if backend == "torch" or (first.device.type == "cpu" and not interpreting()):
        return eagle3_fused_fc_reference(
            taps_or_packed, fc_weight, norm=norm, norm_weight=norm_weight,
            norm_weights=norm_weights, eps=eps, bias=bias, out=out, num_taps=k,
        )  # fmt: skip
    lead = first.shape[:-1]
    if listed:
        taps = [_unit_col(t.reshape(tokens, hidden)) for t in taps_or_packed]
        packed_view = _as_packed_views(taps) if k > MAX_POINTER_TAPS else None
        if packed_view is not None:
            taps, packed = [packed_view], True
        elif k > MAX_POINTER_TAPS:  # scattered taps beyond the pointer slots: one copy
            taps, packed = [torch.cat(taps, dim=-1)], True
        else:
            packed = False
    else:
        taps, packed = [_unit_col(taps_or_packed.reshape(tokens, width))], True
    n_out = fc_weight.shape[0]
    if out is None:
        out = torch.empty((*lead, n_out), device=first.device, dtype=first.dtype)
    out2d = out.view(tokens, n_out)
    if out2d.stride(-1) != 1:
        raise ValueError("out must have a unit last stride")
    wtap = None
    if norm in ("per_tap", "both"):
        wtap = norm_weights.reshape(k, hidden) if isinstance(norm_weights, torch.Tensor) else None
        wtap = (wtap if wtap is not None else torch.stack(list(norm_weights))).contiguous()
    launch_eagle3_fused_fc(
        taps, packed, k, hidden, _unit_col(fc_weight), norm,
        norm_weight.contiguous() if norm_weight is not None else None, wtap, eps,
        bias.contiguous() if bias is not None else None, out2d, config,
    )  # fmt: skip
    return out
