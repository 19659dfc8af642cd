"""Companion kernels of ``eagle3_fused_fc`` (math and launch shapes: see that module).

- ``_eagle3_fused_fc_stats_kernel``: the prescaled shape's light first pass, the per-row, per-tap
  factor [T, K] fp32 (before_fc: r; per_tap: r_k; both: r * s_k) of the input.
- ``_eagle3_fused_fc_reduce_kernel``: the split shape's second launch.
"""

from __future__ import annotations

import triton
import triton.language as tl
from sglang_eagle3.kernels.eagle3_fused_fc_kernel import _store_out, _tap_ptr, _tap_scale


@triton.jit(do_not_specialize=["T"])
def _eagle3_fused_fc_stats_kernel(
    x0, x1, x2, x3,  # tap bases, each [T, H] with unit column stride (PACKED: x0 only)
    win_ptr,  # [K*H] input_norm weight (NORM 3: fc_norm statistics are of x * g)
    scale_ptr,  # [T, K] fp32 out
    T, H, seg_stride, s0, s1, s2, s3, eps,
    K: tl.constexpr, PACKED: tl.constexpr, NORM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr,
):  # fmt: skip
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < T
    rows = offs_m.to(tl.int64)[:, None]
    r = tl.zeros((BLOCK_M,), dtype=tl.float32)
    if NORM == 1 or NORM == 3:  # whole-row rstd first
        ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for k in tl.static_range(K):
            xk, sk = _tap_ptr(k, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED)
            for h in range(0, H, BLOCK_H):
                offs_h = h + tl.arange(0, BLOCK_H)
                m = mask_m[:, None] & (offs_h < H)[None, :]
                v = tl.load(xk + rows * sk + offs_h[None, :], mask=m, other=0.0).to(tl.float32)
                ss += tl.sum(v * v, axis=1)
        r = tl.rsqrt(ss / (K * H) + eps)
    for k in tl.static_range(K):
        if NORM == 1:
            sc = r
        else:
            xk, sk = _tap_ptr(k, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED)
            ssk = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for h in range(0, H, BLOCK_H):
                offs_h = h + tl.arange(0, BLOCK_H)
                mask_h = offs_h < H
                m = mask_m[:, None] & mask_h[None, :]
                v = tl.load(xk + rows * sk + offs_h[None, :], mask=m, other=0.0).to(tl.float32)
                if NORM == 3:
                    gi = tl.load(win_ptr + k * H + offs_h, mask=mask_h, other=0.0)
                    v = v * gi.to(tl.float32)[None, :]
                ssk += tl.sum(v * v, axis=1)
            sc = _tap_scale(NORM, ssk, ssk, r, H, eps)
        tl.store(scale_ptr + offs_m * K + k, sc, mask=mask_m)


@triton.jit(do_not_specialize=["T"])
def _eagle3_fused_fc_reduce_kernel(
    ws_ptr, ss_ptr, b_ptr, out_ptr,  # as in _eagle3_fused_fc_kernel
    T, N, H, stride_om, eps,
    K: tl.constexpr, NORM: tl.constexpr, HAS_BIAS: tl.constexpr, SPLIT_CHUNKS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """out = sum_k scale_k * sum_c partial[k*C + c] (+ bias): the split path's second launch."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < T
    mask_n = offs_n < N
    n_split: tl.constexpr = K * SPLIT_CHUNKS
    r = tl.zeros((BLOCK_M,), dtype=tl.float32)
    if NORM == 1 or NORM == 3:
        ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for s in tl.static_range(n_split):
            ss += tl.load(ss_ptr + s * T + offs_m, mask=mask_m, other=0.0)
        r = tl.rsqrt(ss / (K * H) + eps)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.static_range(K):
        p = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        ssr = tl.zeros((BLOCK_M,), dtype=tl.float32)
        ssw = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for c in tl.static_range(SPLIT_CHUNKS):
            row = ((k * SPLIT_CHUNKS + c) * T + offs_m).to(tl.int64)
            p += tl.load(
                ws_ptr + row[:, None] * N + offs_n[None, :],
                mask=mask_m[:, None] & mask_n[None, :],
                other=0.0,
            )
            if NORM == 2 or NORM == 3:
                ssr += tl.load(ss_ptr + row, mask=mask_m, other=0.0)
                ssw += tl.load(ss_ptr + n_split * T + row, mask=mask_m, other=0.0)
        if NORM == 0:
            acc += p
        else:
            acc += p * _tap_scale(NORM, ssr, ssw, r, H, eps)[:, None]
    _store_out(acc, b_ptr, out_ptr, stride_om, offs_m, offs_n, mask_m, mask_n, HAS_BIAS)
