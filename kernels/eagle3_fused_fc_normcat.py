"""``eagle3_fused_fc_normcat``: the prefill shape's (T >= 64) one pass over the input. It writes
the fc's input ``y = norm(cat(h_1..h_K))`` [T, K*H] in the input dtype, rounded exactly as
SGLang's drafter rounds it; the GEMM that follows is cuBLAS (``torch.mm`` / ``torch.addmm``).

Math, per token row t (x_k = tap k [T, H]; g = input_norm weight [K*H], g_k its k-th block;
f_k = fc_norm[k] weight [H]; rnd = cast to the input dtype; statistics in fp32):

    none      y_k = x_k                                            (the concat)
    before_fc y_k = rnd(x_k * r * g_k),      r   = rsqrt(sum_k |x_k|^2 / (K*H) + eps)
    per_tap   y_k = rnd(x_k * r_k * f_k),    r_k = rsqrt(|x_k|^2 / H + eps)
    both      u_k = rnd(x_k * r * g_k),      y_k = rnd(u_k * s_k * f_k),
              s_k = rsqrt(|u_k|^2 / H + eps)           (input_norm, then fc_norm: SGLang's order)

This is SGLang 0.5.23's ``RMSNorm.forward_native`` (``(x * rstd * w).to(dtype)``) for each norm,
so ``mm(y, W^T)`` equals the unfused path up to the order of the fp32 sums. One program per row
(BLOCK_M rows under the interpreter): it reads the row once for the statistics (``both``:
twice, the second time for s_k of the rounded u_k) and once more to write it; the row (K*H
elements, 43 KB for H 7168, K 3 in bf16) stays in L1/L2 between the reads, so HBM sees one
read of the input and one write of y, against the unfused path's one read and write per norm
module plus the concat's.
"""

from __future__ import annotations

import triton
import triton.language as tl
from sglang_eagle3.kernels.eagle3_fused_fc_gemv import _tap_base


@triton.jit(do_not_specialize=["T"])  # strides: the launcher keeps them != 1
def _eagle3_fused_fc_normcat_kernel(
    x0, x1, x2, x3,  # tap bases, each [T, H] with unit column stride (PACKED: x0 = [T, K*H])
    win_ptr,  # [K*H] input_norm weight (NORM 1, 3)
    wtap_ptr,  # [K, H] fc_norm weights, contiguous (NORM 2, 3)
    y_ptr,  # [T, K*H] out: the fc's input, the taps' dtype, unit column stride
    T, H, seg_stride, s0, s1, s2, s3, stride_ym, eps,
    K: tl.constexpr, PACKED: tl.constexpr, NORM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_H: tl.constexpr,
):  # fmt: skip
    """Grid (cdiv(T, BLOCK_M),): program p writes rows [p*BLOCK_M, (p+1)*BLOCK_M) of y (math:
    module docstring). One row per program on a GPU (a row is K*H long); several under the
    interpreter, whose cost is per program."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < T
    rows = offs_m.to(tl.int64)[:, None]  # [BLOCK_M, 1]
    offs = tl.arange(0, BLOCK_H)
    y_rows = y_ptr + rows * stride_ym
    dtype = y_ptr.dtype.element_ty
    r = tl.full((BLOCK_M,), 1.0, tl.float32)
    if NORM == 1 or NORM == 3:  # whole-row rstd
        acc = tl.full((BLOCK_M, BLOCK_H), 0.0, tl.float32)
        for k in range(K):
            xk, sk = _tap_base(k, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED)
            for h in range(0, H, BLOCK_H):
                m = mask_m[:, None] & (h + offs < H)[None, :]
                v = tl.load(xk + rows * sk + (h + offs)[None, :], mask=m, other=0.0)
                v = v.to(tl.float32)
                acc += v * v
        r = tl.rsqrt(tl.sum(acc, axis=1) / (K * H) + eps)
    for k in range(K):
        xk, sk = _tap_base(k, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED)
        x_rows = xk + rows * sk
        s = r
        if NORM == 2 or NORM == 3:  # per-tap rstd: of x_k (per_tap), of the rounded u_k (both)
            acc = tl.full((BLOCK_M, BLOCK_H), 0.0, tl.float32)
            for h in range(0, H, BLOCK_H):
                mask_h = h + offs < H
                m = mask_m[:, None] & mask_h[None, :]
                v = tl.load(x_rows + (h + offs)[None, :], mask=m, other=0.0).to(tl.float32)
                if NORM == 3:
                    gi = tl.load(win_ptr + k * H + h + offs, mask=mask_h, other=0.0)
                    v = (v * r[:, None] * gi.to(tl.float32)[None, :]).to(dtype).to(tl.float32)
                acc += v * v
            s = tl.rsqrt(tl.sum(acc, axis=1) / H + eps)
        for h in range(0, H, BLOCK_H):
            mask_h = h + offs < H
            m = mask_m[:, None] & mask_h[None, :]
            v = tl.load(x_rows + (h + offs)[None, :], mask=m, other=0.0)
            if NORM == 0:
                y = v
            elif NORM == 1:
                gi = tl.load(win_ptr + k * H + h + offs, mask=mask_h, other=0.0).to(tl.float32)
                y = v.to(tl.float32) * r[:, None] * gi[None, :]
            elif NORM == 2:
                f = tl.load(wtap_ptr + k * H + h + offs, mask=mask_h, other=0.0).to(tl.float32)
                y = v.to(tl.float32) * s[:, None] * f[None, :]
            else:
                gi = tl.load(win_ptr + k * H + h + offs, mask=mask_h, other=0.0).to(tl.float32)
                u = (v.to(tl.float32) * r[:, None] * gi[None, :]).to(dtype).to(tl.float32)
                f = tl.load(wtap_ptr + k * H + h + offs, mask=mask_h, other=0.0).to(tl.float32)
                y = u * s[:, None] * f[None, :]
            tl.store(y_rows + k * H + (h + offs)[None, :], y.to(dtype), mask=m)


def normcat_grid(tokens: int, block_m: int) -> tuple[int]:
    """The norm + concat pass's launch grid: one program per ``block_m`` token rows."""
    return (max(1, triton.cdiv(tokens, block_m)),)
