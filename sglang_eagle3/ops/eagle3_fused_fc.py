"""``eagle3_fused_fc``: the EAGLE-3 drafter's ``fc(norm(cat(h_1..h_K)))`` on three fused paths.

norm = "none":      fc(cat(h))
       "before_fc": fc(rmsnorm(cat(h), norm_weight))            (SGLang ``input_norm``)
       "per_tap":   fc(cat(rmsnorm(h_k, norm_weights[k])))      (SGLang ``fc_norm``)
       "both":      input_norm first, then fc_norm, as SGLang 0.5.23 applies them when a config
                    sets both (``srt/models/llama_eagle3.py`` L237-247)

RMSNorm is SGLang's ``RMSNorm.forward_native`` (``ops.rms_norm``, cast_before_weight=False):
statistics in fp32, ``(x * rstd * w)`` in fp32, cast back to the input dtype.
``eagle3_fused_fc_reference`` is the PyTorch fallback with those semantics; a fused path runs
where ``fused_path`` (the dispatch) says one was measured faster:

- ``gemv`` (``eagle3_fused_fc_gemv``, decode): split-K GEMV; rounds ``x * weight`` before
  tl.dot and applies the rstd to the fp32 accumulator once per tap (so with fp16 inputs
  ``|x * weight|`` must stay below 65504), and ``both`` skips SGLang's intermediate rounding;
- ``normcat`` (``eagle3_fused_fc_normcat``, prefill): rounds every norm exactly as SGLang,
  then cuBLAS: equal to the reference up to the order of the fp32 sums;
- ``tiled`` (``eagle3_fused_fc``'s first kernel): like gemv at decode; its prefill shape rounds
  ``x * rstd * weight`` like SGLang.

They agree with the reference to input-dtype rounding, not bitwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F

from sglang_eagle3.ops.eagle3_fused_fc_configs import (
    FusedFcConfig,
    GemvConfig,
    NormCatConfig,
    interpreting,
)
from sglang_eagle3.ops.eagle3_fused_fc_dispatch import choose_path, fused_path, use_fused
from sglang_eagle3.ops.eagle3_fused_fc_launch import (
    launch_eagle3_fused_fc,
    launch_eagle3_fused_fc_gemv,
    launch_eagle3_fused_fc_normcat,
)
from sglang_eagle3.ops.eagle3_fused_fc_wins import NORM_NAMES, PATHS
from sglang_eagle3.ops.rms_norm import rms_norm

Norm = Literal["none", "before_fc", "per_tap", "both"]
FcPath = Literal["gemv", "normcat", "tiled"]
NORMS = NORM_NAMES  # the wins file is read with them, so they live with its reader
# The kernels take separate taps as up to 4 pointers (x0..x3); more taps go packed.
MAX_POINTER_TAPS = 4
KERNEL_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_CONFIG_PATHS = {FusedFcConfig: "tiled", GemvConfig: "gemv", NormCatConfig: "normcat"}
_LAUNCH = {
    "tiled": launch_eagle3_fused_fc,
    "gemv": launch_eagle3_fused_fc_gemv,
    "normcat": launch_eagle3_fused_fc_normcat,
}

__all__ = [
    "eagle3_fused_fc", "eagle3_fused_fc_reference", "use_fused", "fused_path", "FusedFcConfig",
    "GemvConfig", "NormCatConfig", "PATHS",
]  # fmt: skip


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


def _pick_path(
    path: str | None, config: object, tokens: int, hidden: int, k: int, norm: str
) -> str:
    """The explicit path, the one ``config``'s type implies, else the dispatch's choice."""
    if path is not None and path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    if config is not None:
        implied = _CONFIG_PATHS.get(type(config))
        if implied is None:
            raise TypeError(f"config must be one of {[c.__name__ for c in _CONFIG_PATHS]}")
        if path is not None and path != implied:
            raise ValueError(f"path {path!r} with a {type(config).__name__} (the {implied} path)")
        return implied
    return path or choose_path(tokens, hidden, k, norm)


def _check_tensors(
    taps: list[torch.Tensor],  # K x [..., H], or one packed [..., K*H]
    fc_weight: torch.Tensor,  # [N, K*H]
    norm_weight: torch.Tensor | None,  # [K*H]
    norm_weights: torch.Tensor | Sequence[torch.Tensor] | None,  # [K, H] or K x [H]
    bias: torch.Tensor | None,  # [N]
    out: torch.Tensor | None,  # [..., N]
    k: int,
    hidden: int,
) -> None:
    """What the kernels assume of their operands, refused with a clear error otherwise."""
    t0 = taps[0]
    if t0.dtype not in KERNEL_DTYPES:
        raise TypeError(f"the fused kernels take {KERNEL_DTYPES}, got {t0.dtype}")
    for i, t in enumerate(taps):
        if t.shape != t0.shape or t.dtype != t0.dtype or t.device != t0.device:
            raise ValueError(
                f"tap {i} is {t.dtype} {tuple(t.shape)} on {t.device}, "
                f"tap 0 {t0.dtype} {tuple(t0.shape)} on {t0.device}"
            )
    sizes = {"fc_weight": None, "norm_weight": k * hidden, "bias": None, "out": None}
    named = dict(fc_weight=fc_weight, norm_weight=norm_weight, bias=bias, out=out)
    if isinstance(norm_weights, torch.Tensor):
        named["norm_weights"], sizes["norm_weights"] = norm_weights, k * hidden
    elif norm_weights is not None:
        for i, w in enumerate(norm_weights):
            named[f"norm_weights[{i}]"], sizes[f"norm_weights[{i}]"] = w, hidden
    for name, t in named.items():
        if t is None:
            continue
        if t.device != t0.device:
            raise ValueError(f"{name} is on {t.device}, the taps on {t0.device}")
        if sizes[name] is not None and t.numel() != sizes[name]:
            raise ValueError(
                f"{name} has {t.numel()} elements, needs {sizes[name]} (K={k}, H={hidden})"
            )
    if fc_weight.dtype != t0.dtype or fc_weight.dim() != 2:
        raise ValueError(
            f"fc_weight must be a 2-D {t0.dtype} tensor (the taps' dtype), "
            f"got a {fc_weight.dim()}-D {fc_weight.dtype} one"
        )
    n_out = fc_weight.shape[0]
    if bias is not None and bias.shape != (n_out,):
        raise ValueError(f"bias has shape {tuple(bias.shape)}, needs [N] = [{n_out}]")
    if out is not None and (out.shape != (*t0.shape[:-1], n_out) or out.dtype != t0.dtype):
        raise ValueError(
            f"out must be a {t0.dtype} tensor of shape {(*t0.shape[:-1], n_out)}, "
            f"got {out.dtype} {tuple(out.shape)}"
        )


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
    config: FusedFcConfig | GemvConfig | NormCatConfig | None = None,  # tiles (tests, benchmarks)
    path: FcPath | None = None,  # the fused path; None: config's, else the dispatch's choice
) -> torch.Tensor:
    """``fc(norm(cat(taps)))`` (+ bias) -> [T, N] in the input dtype.

    "auto" runs a fused Triton path where ``fused_path`` says one is faster (CUDA, sm_90+,
    measured shapes, ``SGLANG_EAGLE3_FUSED_FC``) and ``eagle3_fused_fc_reference`` otherwise;
    "triton" forces a fused path (CPU tensors only under TRITON_INTERPRET=1): ``path``, or the
    one ``config`` belongs to, or the measured one for this shape, or ``default_path``.
    """
    if backend not in ("auto", "triton", "torch"):
        raise ValueError(f"backend must be 'auto', 'triton' or 'torch', got {backend!r}")
    listed = not isinstance(taps_or_packed, torch.Tensor)
    if listed and not taps_or_packed:
        raise ValueError("no taps given")
    k = _check(norm, norm_weight, norm_weights, len(taps_or_packed) if listed else num_taps)
    first = taps_or_packed[0] if listed else taps_or_packed
    width = first.shape[-1] * (k if listed else 1)
    hidden = width // k
    if width % k or fc_weight.shape[-1] != width:
        raise ValueError(f"fc weight {tuple(fc_weight.shape)} does not take {k} taps of {hidden}")
    tokens = first.numel() // first.shape[-1]
    if backend == "auto":
        measured = fused_path(tokens, hidden, k, norm, first.device)
        backend = "torch" if measured is None else "triton"
        path = path or (measured if config is None else None)
    if backend == "triton":  # checked even where CPU without the interpreter falls back below
        path = _pick_path(path, config, tokens, hidden, k, norm)
        _check_tensors(
            list(taps_or_packed) if listed else [taps_or_packed], fc_weight, norm_weight,
            norm_weights, bias, out, k, hidden,
        )  # fmt: skip
        if isinstance(config, GemvConfig) and not config.use_dot and tokens != 1:
            raise ValueError(f"GemvConfig(use_dot=False) computes one token row; T = {tokens}")
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
    _LAUNCH[path](
        taps, packed, k, hidden, _unit_col(fc_weight), norm,
        norm_weight.reshape(-1).contiguous() if norm_weight is not None else None, wtap, eps,
        bias.contiguous() if bias is not None else None, out2d, config,
    )  # fmt: skip
    return out
