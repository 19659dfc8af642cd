"""``launch_eagle3_fused_fc*``: the fused EAGLE-3 fc paths' kernels run on tensors that
``eagle3_fused_fc`` has validated, with the given tiles or ``eagle3_fused_fc_tiles``' choice.

Triton and the kernels are imported inside the launchers, so that CPU-only installs never need
them.
"""

from __future__ import annotations

import contextlib

import torch

from sglang_eagle3.ops.eagle3_fused_fc_configs import (
    FusedFcConfig,
    GemvConfig,
    NormCatConfig,
    interpreting,
    pow2_at_least,
)
from sglang_eagle3.ops.eagle3_fused_fc_tiles import (
    pick_config,
    pick_gemv_config,
    pick_normcat_config,
)


@contextlib.contextmanager
def _on_device(t: torch.Tensor):
    """Triton launches on the current CUDA device: make it ``t``'s."""
    if t.is_cuda and t.device != torch.device("cuda", torch.cuda.current_device()):
        with torch.cuda.device(t.device):
            yield
    else:
        yield


def _device_shape(t: torch.Tensor) -> tuple[tuple[int, int], int]:
    """(compute capability, SM count) of ``t``'s device; pick_config's defaults off CUDA."""
    if not t.is_cuda:
        return (9, 0), 132
    props = torch.cuda.get_device_properties(t.device)
    return (props.major, props.minor), props.multi_processor_count


def _dot_mode(dtype: torch.dtype) -> tuple[bool, str]:
    """(upcast tl.dot operands to fp32, input_precision): the interpreter's bf16 arithmetic is
    on raw bits; fp32 runs tf32x3 on a GPU."""
    if interpreting():
        return True, "ieee"
    return dtype == torch.float32, "tf32x3" if dtype == torch.float32 else "tf32"


def _tap_slots(
    taps: list[torch.Tensor], packed: bool, tokens: int
) -> tuple[list[torch.Tensor], bool, list[int]]:
    """The 4 tap pointer slots and their row strides, as the gemv / normcat kernels take them.

    The strides are specialized (divisible by 16: vectorized loads), so none may be 1, which
    Triton would turn into a constant that the kernels' run-time tap choice cannot mix with the
    others: one token row never uses its stride (16 stands in), and taps of width 1 go packed."""
    if not packed and tokens > 1 and any(t.stride(0) == 1 for t in taps):
        taps, packed = [torch.cat(taps, dim=-1)], True
    x = list(taps) + [taps[0]] * (4 - len(taps))
    strides = [16] * 4 if tokens == 1 else [t.stride(0) for t in x]
    return x, packed, strides


def launch_eagle3_fused_fc_gemv(
    taps: list[torch.Tensor],  # K x [T, H] unit column stride (K <= 4); or one packed [T, K*H]
    packed: bool,
    taps_k: int,
    hidden: int,
    fc_weight: torch.Tensor,  # [N, K*H] unit column stride
    norm: str,
    norm_weight: torch.Tensor | None,  # [K*H] contiguous
    norm_weights: torch.Tensor | None,  # [K, H] contiguous
    eps: float,
    bias: torch.Tensor | None,  # [N]
    out: torch.Tensor,  # [T, N] unit column stride
    config: GemvConfig | None = None,
) -> torch.Tensor:
    """``eagle3_fused_fc_gemv``: the split-K GEMV and, when split, its reduce."""
    from sglang_eagle3.kernels.eagle3_fused_fc_gemv import (
        _eagle3_fused_fc_gemv_kernel,
        _eagle3_fused_fc_gemv_reduce_kernel,
        gemv_grid,
    )
    from sglang_eagle3.kernels.eagle3_fused_fc_kernel import NORM_CODES

    tokens, n_out = out.shape
    if tokens == 0:
        return out
    cap, sms = _device_shape(out)
    cfg = config or pick_gemv_config(tokens, n_out, hidden, taps_k, out.dtype, cap, sms,
                                     norm=norm)  # fmt: skip
    if not cfg.use_dot and tokens != 1:
        raise ValueError(f"GemvConfig(use_dot=False) computes one token row; got T = {tokens}")
    block_t, chunks, code = cfg.block_t(tokens), cfg.split_chunks, NORM_CODES[norm]
    x, packed, strides = _tap_slots(taps, packed, tokens)
    dummy = fc_weight
    ws = ss = dummy
    if chunks:
        n_split = taps_k * chunks
        ws = torch.empty((n_split, tokens, n_out), device=out.device, dtype=torch.float32)
        if code:
            ss = torch.empty((2, n_split, tokens), device=out.device, dtype=torch.float32)
    dot_f32, precision = _dot_mode(fc_weight.dtype)
    grid = gemv_grid(tokens, n_out, taps_k, chunks, block_t, cfg.block_n)
    with _on_device(out):
        _eagle3_fused_fc_gemv_kernel[grid](
            *x, fc_weight,
            norm_weight if norm_weight is not None else dummy,
            norm_weights if norm_weights is not None else dummy,
            bias if bias is not None else dummy,
            out, ws, ss,
            tokens, n_out, hidden, max(1, chunks), hidden, *strides, fc_weight.stride(0),
            out.stride(0), eps,
            K=taps_k, PACKED=packed, NORM=code, HAS_BIAS=bias is not None and not chunks,
            SPLIT=chunks > 0, BLOCK_T=block_t, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
            USE_DOT=cfg.use_dot, DOT_F32=dot_f32, PRECISION=precision,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
        if chunks:
            rbt, rbn = min(16, pow2_at_least(tokens, 1)), 128
            _eagle3_fused_fc_gemv_reduce_kernel[(-(-tokens // rbt), -(-n_out // rbn))](
                ws, ss, bias if bias is not None else dummy, out,
                tokens, n_out, hidden, chunks, out.stride(0), eps,
                K=taps_k, NORM=code, HAS_BIAS=bias is not None, BLOCK_T=rbt, BLOCK_N=rbn,
                num_warps=4,
            )  # fmt: skip
    return out


def launch_eagle3_fused_fc_normcat(
    taps: list[torch.Tensor],  # K x [T, H] unit column stride (K <= 4); or one packed [T, K*H]
    packed: bool,
    taps_k: int,
    hidden: int,
    fc_weight: torch.Tensor,  # [N, K*H]
    norm: str,
    norm_weight: torch.Tensor | None,  # [K*H] contiguous
    norm_weights: torch.Tensor | None,  # [K, H] contiguous
    eps: float,
    bias: torch.Tensor | None,  # [N]
    out: torch.Tensor,  # [T, N] unit column stride
    config: NormCatConfig | None = None,
) -> torch.Tensor:
    """``eagle3_fused_fc_normcat``: one pass writes the fc input [T, K*H] (none + packed: the
    input itself, no pass), then cuBLAS writes ``out`` (``torch.mm`` / ``torch.addmm``)."""
    from sglang_eagle3.kernels.eagle3_fused_fc_kernel import NORM_CODES
    from sglang_eagle3.kernels.eagle3_fused_fc_normcat import (
        _eagle3_fused_fc_normcat_kernel,
        normcat_grid,
    )

    tokens = out.shape[0]
    if tokens == 0:
        return out
    with _on_device(out):
        if norm == "none" and packed:
            y = taps[0]
        else:
            cfg = config or pick_normcat_config(hidden, out.dtype)
            y = torch.empty((tokens, taps_k * hidden), device=out.device, dtype=out.dtype)
            x, packed, strides = _tap_slots(taps, packed, tokens)
            dummy = y
            _eagle3_fused_fc_normcat_kernel[normcat_grid(tokens, cfg.block_m)](
                *x,
                norm_weight if norm_weight is not None else dummy,
                norm_weights if norm_weights is not None else dummy,
                y, tokens, hidden, hidden, *strides, y.stride(0), eps,
                K=taps_k, PACKED=packed, NORM=NORM_CODES[norm], BLOCK_M=cfg.block_m,
                BLOCK_H=cfg.block_h, num_warps=cfg.num_warps,
            )  # fmt: skip
        if bias is None:
            torch.mm(y, fc_weight.t(), out=out)
        else:
            torch.addmm(bias, y, fc_weight.t(), out=out)
    return out


def launch_eagle3_fused_fc(
    taps: list[torch.Tensor],  # K x [T, H] unit column stride; or one packed [T, K*H] when packed
    packed: bool,
    taps_k: int,
    hidden: int,
    fc_weight: torch.Tensor,  # [N, K*H] unit column stride
    norm: str,
    norm_weight: torch.Tensor | None,  # [K*H] contiguous
    norm_weights: torch.Tensor | None,  # [K, H] contiguous
    eps: float,
    bias: torch.Tensor | None,  # [N]
    out: torch.Tensor,  # [T, N] unit column stride
    config: FusedFcConfig | None = None,
) -> torch.Tensor:
    import triton

    from sglang_eagle3.kernels.eagle3_fused_fc_aux_kernels import (
        _eagle3_fused_fc_reduce_kernel,
        _eagle3_fused_fc_stats_kernel,
    )
    from sglang_eagle3.kernels.eagle3_fused_fc_kernel import NORM_CODES, _eagle3_fused_fc_kernel

    tokens, n_out = out.shape
    if tokens == 0:
        return out
    if out.is_cuda and out.device != torch.device("cuda", torch.cuda.current_device()):
        with torch.cuda.device(out.device):  # Triton launches on the current device
            return launch_eagle3_fused_fc(
                taps, packed, taps_k, hidden, fc_weight, norm, norm_weight, norm_weights, eps,
                bias, out, config,
            )  # fmt: skip
    interp = interpreting()
    if config is None:
        cap, sms = (9, 0), 132
        if out.is_cuda:
            cap = torch.cuda.get_device_capability(out.device)
            sms = torch.cuda.get_device_properties(out.device).multi_processor_count
        config = pick_config(tokens, n_out, hidden, taps_k, out.dtype, cap, sms)
    x = list(taps) + [taps[0]] * (4 - len(taps))
    strides = [t.stride(0) for t in x]
    dummy = fc_weight
    n_split = taps_k * config.split_chunks
    ws = ss = dummy
    if n_split:
        ws = torch.empty((n_split, tokens, n_out), device=out.device, dtype=torch.float32)
        ss = torch.empty((2, n_split, tokens), device=out.device, dtype=torch.float32)
    code = NORM_CODES[norm]
    prescaled = config.prescale and code != 0 and not n_split
    scale = dummy
    if prescaled:
        scale = torch.empty((tokens, taps_k), device=out.device, dtype=torch.float32)
        _eagle3_fused_fc_stats_kernel[(triton.cdiv(tokens, 16),)](
            *x[:4], norm_weight if norm_weight is not None else dummy, scale,
            tokens, hidden, hidden, *strides[:4], eps,
            K=taps_k, PACKED=packed, NORM=code, BLOCK_M=16, BLOCK_H=256, num_warps=4,
        )  # fmt: skip
    dot_f32 = interp or fc_weight.dtype == torch.float32
    precision = "ieee" if interp else ("tf32x3" if fc_weight.dtype == torch.float32 else "tf32")
    tiles = triton.cdiv(tokens, config.block_m) * triton.cdiv(n_out, config.block_n)
    _eagle3_fused_fc_kernel[(tiles, max(1, n_split))](
        *x[:4], fc_weight,
        norm_weight if norm_weight is not None else dummy,
        norm_weights if norm_weights is not None else dummy,
        bias if bias is not None else dummy,
        out, ws, ss, scale,
        tokens, n_out, hidden, hidden, *strides[:4], fc_weight.stride(0), out.stride(0), eps,
        K=taps_k, PACKED=packed, NORM=code, HAS_BIAS=bias is not None,
        SPLIT_CHUNKS=config.split_chunks, PRESCALED=prescaled, BLOCK_M=config.block_m,
        BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m, DOT_F32=dot_f32,
        PRECISION=precision, num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    if n_split:
        rbm, rbn = min(64, pow2_at_least(tokens, 16)), 128
        grid = (triton.cdiv(tokens, rbm), triton.cdiv(n_out, rbn))
        _eagle3_fused_fc_reduce_kernel[grid](
            ws, ss, bias if bias is not None else dummy, out,
            tokens, n_out, hidden, out.stride(0), eps,
            K=taps_k, NORM=code, HAS_BIAS=bias is not None, SPLIT_CHUNKS=config.split_chunks,
            BLOCK_M=rbm, BLOCK_N=rbn, num_warps=4,
        )  # fmt: skip
    return out
