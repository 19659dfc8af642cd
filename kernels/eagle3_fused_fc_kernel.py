"""Triton kernels for the EAGLE-3 drafter's first step: ``out = fc(norm(cat(h_1..h_K))) (+ b)``.

This is the ``tiled`` path (one tiled GEMM, norms inline). The decode split-K GEMV
(``eagle3_fused_fc_gemv.py``) and the prefill norm + concat pass before cuBLAS
(``eagle3_fused_fc_normcat.py``) are the other two; the dispatch picks per measured shape.

Math, per token row t (x_k = tap k, width H; W = fc weight [N, K*H], W_k its k-th column block):

  none      out = sum_k x_k @ W_k^T
  before_fc out = r * sum_k (x_k * g_k) @ W_k^T,        r   = rsqrt(sum_k |x_k|^2 / (K*H) + eps)
            (g = input_norm weight [K*H], g_k its k-th block: one RMSNorm over the concat)
  per_tap   out = sum_k r_k * (x_k * f_k) @ W_k^T,      r_k = rsqrt(|x_k|^2 / H + eps)
            (f_k = fc_norm[k] weight [H]: one RMSNorm per tap)
  both      out = sum_k r * s_k * (x_k * g_k * f_k) @ W_k^T,
            s_k = rsqrt(r^2 |x_k * g_k|^2 / H + eps)     (input_norm, then fc_norm: SGLang's order)

No normalized copy of the [T, K*H] input is ever written: the column factors g_k, f_k are
applied to the A tile as it is loaded, and the row factors r, r_k, s_k (one per row and tap)
either the same way (PRESCALED) or to the fp32 accumulator of each tap's partial product.
Accumulation is fp32; bf16/fp16/fp32 in and out. Launch shapes (chosen by
``sglang_eagle3.ops.eagle3_fused_fc_tiles.pick_config``):

- inline, one pass (decode, enough output tiles): each program owns a [BLOCK_M, BLOCK_N] output
  tile and walks all K taps; the sums of squares come from the A tiles the GEMM loads anyway
  (no extra pass, one launch); each tap's partial is scaled once at the end of the tap.
  ``both`` reads its rows once more first (s_k needs r before the first tap is combined).
- split (decode, SPLIT_CHUNKS = C >= 1): too few output tiles for the SMs (7168 / 128 = 56 for
  132 SMs), so the reduction is split over taps and C chunks per tap: program (tile, k*C + c)
  writes its unscaled fp32 partial and partial sums of squares to a workspace, and
  ``_eagle3_fused_fc_reduce_kernel`` combines them (scales, bias, cast). Two launches, no
  atomics: deterministic, and nothing to zero between calls.
- prescaled (prefill, PRESCALED): ``_eagle3_fused_fc_stats_kernel`` writes the row factors
  [T, K] in fp32 (one light pass over the input: about 2 % of the GEMM at T = 8192, H = 7168),
  and the GEMM scales A rows as it loads them, so it keeps a single accumulator (the inline
  shape's second accumulator spills registers at 128 x 128 tiles). Grouped tile order for L2.

Interpreter (TRITON_INTERPRET=1): bf16 arithmetic there works on raw bits, so DOT_F32 upcasts
operands to fp32 before tl.dot; every tl.sum is over fp32 values.
"""

from __future__ import annotations

import triton
import triton.language as tl

NORM_CODES = {"none": 0, "before_fc": 1, "per_tap": 2, "both": 3}


@triton.jit
def _tap_ptr(k: tl.constexpr, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED: tl.constexpr):
    """Base pointer and row stride of tap k (k is a compile-time constant)."""
    if PACKED:
        return x0 + k * seg_stride, s0
    elif k == 0:
        return x0, s0
    elif k == 1:
        return x1, s1
    elif k == 2:
        return x2, s2
    else:
        return x3, s3


@triton.jit
def _tap_partial(
    acc, rs, x_ptr, stride_xm, w_ptr, stride_wn, win_ptr, wtap_ptr, k: tl.constexpr, H, h_lo, h_hi,
    offs_m, offs_n, mask_m, mask_n, NORM: tl.constexpr, PRESCALED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, DOT_F32: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """acc + (x * rowscale * colscale) @ W_k^T over columns [h_lo, h_hi) of tap k -> [BM, BN]
    fp32, and (not PRESCALED) the partial |x|^2 and |x * g|^2 [BM]. rs: PRESCALED row factors."""
    ssr = tl.zeros((BLOCK_M,), dtype=tl.float32)
    ssw = tl.zeros((BLOCK_M,), dtype=tl.float32)
    rows = offs_m.to(tl.int64)[:, None] * stride_xm
    w_rows = offs_n.to(tl.int64)[None, :] * stride_wn
    for h in range(h_lo, h_hi, BLOCK_K):
        offs_k = h + tl.arange(0, BLOCK_K)
        mask_k = offs_k < h_hi
        x_mask = mask_m[:, None] & mask_k[None, :]
        x = tl.load(x_ptr + rows + offs_k[None, :], mask=x_mask, other=0.0)
        # W_k^T tile [BK, BN]: column k*H + offs_k of the row-major [N, K*H] weight
        w = tl.load(
            w_ptr + w_rows + (k * H + offs_k)[:, None],
            mask=mask_k[:, None] & mask_n[None, :],
            other=0.0,
        )
        if NORM == 0:
            a = x
        else:
            xf = x.to(tl.float32)
            if not PRESCALED:
                ssr += tl.sum(xf * xf, axis=1)
            if NORM == 1:
                g = tl.load(win_ptr + k * H + offs_k, mask=mask_k, other=0.0).to(tl.float32)
            elif NORM == 2:
                g = tl.load(wtap_ptr + k * H + offs_k, mask=mask_k, other=0.0).to(tl.float32)
            else:
                gi = tl.load(win_ptr + k * H + offs_k, mask=mask_k, other=0.0).to(tl.float32)
                if not PRESCALED:
                    xg = xf * gi[None, :]
                    ssw += tl.sum(xg * xg, axis=1)
                f = tl.load(wtap_ptr + k * H + offs_k, mask=mask_k, other=0.0).to(tl.float32)
                g = gi * f
            if PRESCALED:
                xf = xf * rs[:, None]
            a = (xf * g[None, :]).to(x.dtype)
        if DOT_F32:
            acc = tl.dot(a.to(tl.float32), w.to(tl.float32), acc, input_precision=PRECISION)
        else:
            acc = tl.dot(a, w, acc, input_precision=PRECISION)
    return acc, ssr, ssw


@triton.jit
def _tap_scale(NORM: tl.constexpr, ssr_k, ssw_k, r, H, eps):
    """Row factor of tap k's partial product [BM] (r: whole-row rstd for before_fc / both)."""
    if NORM == 1:
        return r
    elif NORM == 2:
        return tl.rsqrt(ssr_k / H + eps)
    else:  # both: fc_norm statistics of the input_norm output
        return r * tl.rsqrt(ssw_k * r * r / H + eps)


@triton.jit
def _store_out(
    acc, b_ptr, out_ptr, stride_om, offs_m, offs_n, mask_m, mask_n, HAS_BIAS: tl.constexpr
):
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    ptrs = out_ptr + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit(do_not_specialize=["T"])  # one compile for every token count, not T==1 / T%16==0
def _eagle3_fused_fc_kernel(
    x0, x1, x2, x3,  # tap bases, each [T, H] with unit column stride (PACKED: x0 only)
    w_ptr,  # [N, K*H] fc weight, unit column stride
    win_ptr,  # [K*H] input_norm weight (NORM 1, 3)
    wtap_ptr,  # [K, H] fc_norm weights, contiguous (NORM 2, 3)
    b_ptr,  # [N] bias (HAS_BIAS)
    out_ptr,  # [T, N], unit column stride
    ws_ptr,  # [K*C, T, N] fp32 partials (split only)
    ss_ptr,  # [2, K*C, T] fp32 partial sums of squares (split only)
    scale_ptr,  # [T, K] fp32 row factors (PRESCALED only)
    T, N, H, seg_stride, s0, s1, s2, s3, stride_wn, stride_om, eps,
    K: tl.constexpr, PACKED: tl.constexpr, NORM: tl.constexpr, HAS_BIAS: tl.constexpr,
    SPLIT_CHUNKS: tl.constexpr, PRESCALED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    DOT_F32: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    num_m = tl.cdiv(T, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    # grouped order: GROUP_M row tiles share each weight column tile while it is in L2
    group = pid // (GROUP_M * num_n)
    first_m = group * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * num_n)) % size_m
    pid_n = (pid % (GROUP_M * num_n)) // size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < T
    mask_n = offs_n < N

    if SPLIT_CHUNKS == 0:
        r = tl.zeros((BLOCK_M,), dtype=tl.float32)
        # both, inline: s_k needs the whole-row rstd before the first tap is combined
        if NORM == 3 and not PRESCALED:
            ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for k in tl.static_range(K):
                xk, sk = _tap_ptr(k, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED)
                for h in range(0, H, BLOCK_K):
                    offs_k = h + tl.arange(0, BLOCK_K)
                    xm = mask_m[:, None] & (offs_k < H)[None, :]
                    v_ptrs = xk + offs_m.to(tl.int64)[:, None] * sk + offs_k[None, :]
                    v = tl.load(v_ptrs, mask=xm, other=0.0).to(tl.float32)
                    ss += tl.sum(v * v, axis=1)
            r = tl.rsqrt(ss / (K * H) + eps)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        ss_all = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for k in tl.static_range(K):
            xk, sk = _tap_ptr(k, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED)
            if PRESCALED or NORM <= 1:  # one accumulator (before_fc: r applied at the end)
                rs = r
                if PRESCALED and NORM != 0:
                    rs = tl.load(scale_ptr + offs_m * K + k, mask=mask_m, other=0.0)
                acc, ssr, ssw = _tap_partial(
                    acc, rs, xk, sk, w_ptr, stride_wn, win_ptr, wtap_ptr, k, H, 0, H,
                    offs_m, offs_n, mask_m, mask_n, NORM, PRESCALED, BLOCK_M, BLOCK_K, DOT_F32,
                    PRECISION,
                )  # fmt: skip
                ss_all += ssr
            else:
                p, ssr, ssw = _tap_partial(
                    tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), r, xk, sk, w_ptr, stride_wn,
                    win_ptr, wtap_ptr, k, H, 0, H, offs_m, offs_n, mask_m, mask_n, NORM, False,
                    BLOCK_M, BLOCK_K, DOT_F32, PRECISION,
                )  # fmt: skip
                acc += p * _tap_scale(NORM, ssr, ssw, r, H, eps)[:, None]
        if NORM == 1 and not PRESCALED:
            acc = acc * tl.rsqrt(ss_all / (K * H) + eps)[:, None]
        _store_out(acc, b_ptr, out_ptr, stride_om, offs_m, offs_n, mask_m, mask_n, HAS_BIAS)
    else:
        split = tl.program_id(1)  # = k * SPLIT_CHUNKS + chunk
        chunk = split % SPLIT_CHUNKS
        h_step = tl.cdiv(tl.cdiv(H, SPLIT_CHUNKS), BLOCK_K) * BLOCK_K
        h_lo = chunk * h_step
        h_hi = tl.minimum(h_lo + h_step, H)
        ssr_zero = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for k in tl.static_range(K):
            if split // SPLIT_CHUNKS == k:
                xk, sk = _tap_ptr(k, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED)
                p, ssr, ssw = _tap_partial(
                    tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), ssr_zero, xk, sk, w_ptr,
                    stride_wn, win_ptr, wtap_ptr, k, H, h_lo, h_hi, offs_m, offs_n, mask_m,
                    mask_n, NORM, False, BLOCK_M, BLOCK_K, DOT_F32, PRECISION,
                )  # fmt: skip
                row = (split * T + offs_m).to(tl.int64)
                tl.store(
                    ws_ptr + row[:, None] * N + offs_n[None, :], p,
                    mask=mask_m[:, None] & mask_n[None, :],
                )  # fmt: skip
                if NORM != 0:  # one column tile writes the row statistics
                    ss_mask = mask_m & (pid_n == 0)
                    tl.store(ss_ptr + row, ssr, mask=ss_mask)
                    tl.store(ss_ptr + K * SPLIT_CHUNKS * T + row, ssw, mask=ss_mask)
