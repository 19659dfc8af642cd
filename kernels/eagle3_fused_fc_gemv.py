"""``eagle3_fused_fc_gemv``: the decode shape (T <= 16) of ``out = fc(norm(cat(h_1..h_K))) (+ b)``
as a split-K GEMV that streams the fc weight once.

Math, per token row t (x_k = tap k [T, H]; W = fc weight [N, K*H], W_k its k-th column block
[N, H]; g = input_norm weight [K*H], g_k its k-th block; f_k = fc_norm[k] weight [H]). The
weight is split into S = K * C column chunks (chunk c of tap k: columns [c*step, (c+1)*step) of
W_k, ``step`` a multiple of BLOCK_K), and program (n tile, s = k*C + c, t tile) computes

    P_s[t, n]  = sum_{j in chunk} a_k[t, j] * W[n, k*H + j]       (fp32 accumulator)
    a_k        = x_k (none) | x_k * g_k (before_fc) | x_k * f_k (per_tap) | x_k * g_k * f_k (both)
    Q_s[t]     = sum_{j in chunk} x_k[t, j]^2,     R_s[t] = sum_{j in chunk} (x_k[t, j] g_k[j])^2

so every program reads its weight tile once and its activation chunk once; the norms' column
weights are applied to the activations as they are loaded, and the statistics come from the same
loads (no extra pass over the input). ``_eagle3_fused_fc_gemv_reduce_kernel`` then applies each
row's factors once per tap, to the fp32 sum of that tap's chunks:

    none      out = sum_k sum_c P_{k,c}
    before_fc out = r * sum_k sum_c P_{k,c},            r   = rsqrt(sum_s Q_s / (K*H) + eps)
    per_tap   out = sum_k r_k * sum_c P_{k,c},          r_k = rsqrt(sum_c Q_{k,c} / H + eps)
    both      out = sum_k r s_k * sum_c P_{k,c},        s_k = rsqrt(r^2 sum_c R_{k,c} / H + eps)
    (+ bias), cast to the output dtype.

Every chunk lies inside one tap, so each partial carries one tap's row factor. Two launches, no
atomics: deterministic, nothing to zero between calls, CUDA-graph safe (the fp32 workspaces
[S, T, N] and [2, S, T] come from the caching allocator). With C = 0 (SPLIT false) one program per
(n tile, t tile) walks every tap and applies the factors itself (``both`` first sums |x|^2 over
the whole row for r): one launch, no workspace.

Rounding: a_k is rounded to the input dtype before tl.dot (USE_DOT) and kept in fp32 by the FMA
variant (USE_DOT false, T = 1: a [BLOCK_N, BLOCK_K] fp32 accumulator of w * a, summed once at
the end); the row factors multiply the fp32 accumulator. SGLang instead rounds x * rstd * g
before its GEMM: the two agree to input-dtype rounding (tests: 4e-2 with a norm in bf16).

Interpreter (TRITON_INTERPRET=1): bf16 arithmetic there works on raw bits, so DOT_F32 upcasts
the tl.dot operands to fp32; every tl.sum is over fp32 values.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _tap_base(k, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED: tl.constexpr):
    """Base pointer and row stride of tap k, k a run-time value (< 4 unless PACKED)."""
    if PACKED:
        xk = x0 + k * seg_stride
        sk = s0
    else:
        xk = x0
        sk = s0
        if k == 1:
            xk = x1
            sk = s1
        if k == 2:
            xk = x2
            sk = s2
        if k == 3:
            xk = x3
            sk = s3
    return xk, sk


@triton.jit
def _gemv_chunk(
    xk, sk, w_tap, w_rows, g_in, g_tap, h_lo, h_hi, offs_t, mask_t, mask_n,
    NORM: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, DOT_F32: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """P = a[:, h_lo:h_hi] @ W_k[:, h_lo:h_hi]^T -> [BLOCK_T, BLOCK_N] fp32, with the partial
    Q = |x|^2 and R = |x * g_in|^2 [BLOCK_T] over those columns (zeros for NORM 0 / not 3).

    xk, sk: tap k's [T, H] base and row stride; w_tap: W's column k*H; w_rows: [BLOCK_N, 1]
    row offsets into W; g_in, g_tap: tap k's input_norm / fc_norm weight blocks [H]."""
    # Up to 16 token rows the squares accumulate elementwise and are summed once after the loop
    # (one cross-thread reduction per chunk; each tl.sum is also a device-function call for the
    # interpreter); larger token tiles sum every step (a [64, BLOCK_K] fp32 tile would spill).
    if BLOCK_T <= 16:
        sq = tl.full((BLOCK_T, BLOCK_K), 0.0, tl.float32)
        sw = tl.full((BLOCK_T, BLOCK_K), 0.0, tl.float32)
    else:
        sq = tl.full((BLOCK_T,), 0.0, tl.float32)
        sw = tl.full((BLOCK_T,), 0.0, tl.float32)
    x_rows = xk + offs_t.to(tl.int64)[:, None] * sk  # [BLOCK_T, 1]
    if USE_DOT:
        acc = tl.full((BLOCK_T, BLOCK_N), 0.0, tl.float32)
    else:  # FMA: BLOCK_T == 1, one fp32 product tile summed once after the loop
        acc2 = tl.full((BLOCK_N, BLOCK_K), 0.0, tl.float32)
    for h in range(h_lo, h_hi, BLOCK_K):
        offs_k = h + tl.arange(0, BLOCK_K)
        mask_k = offs_k < h_hi
        x = tl.load(x_rows + offs_k[None, :], mask=mask_t[:, None] & mask_k[None, :], other=0.0)
        w = tl.load(  # [BLOCK_N, BLOCK_K], contiguous along K: coalesced weight rows
            w_tap + w_rows + offs_k[None, :], mask=mask_n[:, None] & mask_k[None, :], other=0.0
        )
        if NORM == 0:
            af = x.to(tl.float32)
        else:
            xf = x.to(tl.float32)
            if BLOCK_T <= 16:
                sq += xf * xf
            else:
                sq += tl.sum(xf * xf, axis=1)
            if NORM == 1:
                g = tl.load(g_in + offs_k, mask=mask_k, other=0.0).to(tl.float32)
            elif NORM == 2:
                g = tl.load(g_tap + offs_k, mask=mask_k, other=0.0).to(tl.float32)
            else:
                gi = tl.load(g_in + offs_k, mask=mask_k, other=0.0).to(tl.float32)
                xg = xf * gi[None, :]
                if BLOCK_T <= 16:
                    sw += xg * xg
                else:
                    sw += tl.sum(xg * xg, axis=1)
                g = gi * tl.load(g_tap + offs_k, mask=mask_k, other=0.0).to(tl.float32)
            af = xf * g[None, :]
        if USE_DOT:
            if DOT_F32:
                a = af if NORM == 0 else af.to(x.dtype).to(tl.float32)
                acc = tl.dot(a, tl.trans(w.to(tl.float32)), acc, input_precision=PRECISION)
            else:
                a = x if NORM == 0 else af.to(x.dtype)
                acc = tl.dot(a, tl.trans(w), acc, input_precision=PRECISION)
        else:
            acc2 += w.to(tl.float32) * af  # af: [1, BLOCK_K] broadcast over the weight rows
    if not USE_DOT:
        acc = tl.sum(acc2, axis=1)[None, :]
    ssq = tl.full((BLOCK_T,), 0.0, tl.float32)
    ssw = tl.full((BLOCK_T,), 0.0, tl.float32)
    if BLOCK_T <= 16:
        if NORM != 0:
            ssq = tl.sum(sq, axis=1)
        if NORM == 3:
            ssw = tl.sum(sw, axis=1)
    else:
        ssq = sq
        ssw = sw
    return acc, ssq, ssw


@triton.jit(do_not_specialize=["T", "n_chunks"])  # strides: launcher keeps them != 1
def _eagle3_fused_fc_gemv_kernel(
    x0, x1, x2, x3,  # tap bases, each [T, H] with unit column stride (PACKED: x0 = [T, K*H])
    w_ptr,  # [N, K*H] fc weight, unit column stride
    win_ptr,  # [K*H] input_norm weight (NORM 1, 3)
    wtap_ptr,  # [K, H] fc_norm weights, contiguous (NORM 2, 3)
    b_ptr,  # [N] bias (HAS_BIAS, one launch only: the reduce adds it when SPLIT)
    out_ptr,  # [T, N], unit column stride (not SPLIT)
    ws_ptr,  # [K*C, T, N] fp32 partials P (SPLIT)
    ss_ptr,  # [2, K*C, T] fp32 partial sums of squares Q, R (SPLIT, NORM != 0)
    T, N, H, n_chunks, seg_stride, s0, s1, s2, s3, stride_wn, stride_om, eps,
    K: tl.constexpr, PACKED: tl.constexpr, NORM: tl.constexpr, HAS_BIAS: tl.constexpr,
    SPLIT: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, DOT_F32: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Grid (cdiv(N, BLOCK_N), K*C if SPLIT else 1, cdiv(T, BLOCK_T)); math: module docstring."""
    pid_n = tl.program_id(0)
    offs_t = tl.program_id(2) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_t = offs_t < T
    mask_n = offs_n < N
    w_rows = offs_n.to(tl.int64)[:, None] * stride_wn  # [BLOCK_N, 1]
    if SPLIT:
        split = tl.program_id(1)  # = k * n_chunks + chunk
        k = split // n_chunks
        step = ((H + n_chunks - 1) // n_chunks + BLOCK_K - 1) // BLOCK_K * BLOCK_K  # cdiv, twice
        h_lo = (split % n_chunks) * step
        h_hi = tl.minimum(h_lo + step, H)  # an empty chunk (h_lo >= H) stores zeros
        xk, sk = _tap_base(k, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED)
        p, ssq, ssw = _gemv_chunk(
            xk, sk, w_ptr + k * H, w_rows, win_ptr + k * H, wtap_ptr + k * H, h_lo, h_hi,
            offs_t, mask_t, mask_n, NORM, BLOCK_T, BLOCK_N, BLOCK_K, USE_DOT, DOT_F32, PRECISION,
        )  # fmt: skip
        row = (split * T + offs_t).to(tl.int64)
        ws_ptrs = ws_ptr + row[:, None] * N + offs_n[None, :]
        tl.store(ws_ptrs, p, mask=mask_t[:, None] & mask_n[None, :])
        if NORM != 0:  # the first column tile writes the row statistics
            ss_mask = mask_t & (pid_n == 0)
            tl.store(ss_ptr + row, ssq, mask=ss_mask)
            tl.store(ss_ptr + K * n_chunks * T + row, ssw, mask=ss_mask)
    else:
        r = tl.full((BLOCK_T,), 0.0, tl.float32)
        if NORM == 3:  # s_k needs the whole-row rstd before the first tap is combined
            ss = tl.full((BLOCK_T, BLOCK_K), 0.0, tl.float32)
            for k in range(K):
                xk, sk = _tap_base(k, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED)
                x_rows = xk + offs_t.to(tl.int64)[:, None] * sk
                for h in range(0, H, BLOCK_K):
                    offs_k = h + tl.arange(0, BLOCK_K)
                    m = mask_t[:, None] & (offs_k < H)[None, :]
                    v = tl.load(x_rows + offs_k[None, :], mask=m, other=0.0).to(tl.float32)
                    ss += v * v
            r = tl.rsqrt(tl.sum(ss, axis=1) / (K * H) + eps)
        acc = tl.full((BLOCK_T, BLOCK_N), 0.0, tl.float32)
        ss_all = tl.full((BLOCK_T,), 0.0, tl.float32)
        for k in range(K):
            xk, sk = _tap_base(k, x0, x1, x2, x3, s0, s1, s2, s3, seg_stride, PACKED)
            p, ssq, ssw = _gemv_chunk(
                xk, sk, w_ptr + k * H, w_rows, win_ptr + k * H, wtap_ptr + k * H, 0, H, offs_t,
                mask_t, mask_n, NORM, BLOCK_T, BLOCK_N, BLOCK_K, USE_DOT, DOT_F32, PRECISION,
            )  # fmt: skip
            if NORM == 2:
                acc += p * tl.rsqrt(ssq / H + eps)[:, None]
            elif NORM == 3:
                acc += p * (r * tl.rsqrt(ssw * r * r / H + eps))[:, None]
            else:
                acc += p
                ss_all += ssq
        if NORM == 1:
            acc = acc * tl.rsqrt(ss_all / (K * H) + eps)[:, None]
        if HAS_BIAS:  # (helpers inlined here: each device-function call costs the interpreter)
            acc += tl.load(b_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
        out_ptrs = out_ptr + offs_t.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask_t[:, None] & mask_n[None, :])


@triton.jit(do_not_specialize=["T", "n_chunks"])
def _eagle3_fused_fc_gemv_reduce_kernel(
    ws_ptr,  # [K*C, T, N] fp32 partials P
    ss_ptr,  # [2, K*C, T] fp32 partial sums of squares Q, R (NORM != 0)
    b_ptr,  # [N] bias (HAS_BIAS)
    out_ptr,  # [T, N], unit column stride
    T, N, H, n_chunks, stride_om, eps,
    K: tl.constexpr, NORM: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """out = sum_k scale_k * sum_c P_{k,c} (+ bias): the split GEMV's second launch (the row
    factors r, r_k, s_k from the summed Q, R; module docstring). Grid (cdiv(T, BLOCK_T),
    cdiv(N, BLOCK_N)); C (n_chunks) is a run-time value: one compile for every split."""
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_t = offs_t < T
    mask_n = offs_n < N
    mask = mask_t[:, None] & mask_n[None, :]
    n_split = K * n_chunks
    r = tl.full((BLOCK_T,), 0.0, tl.float32)
    if NORM == 1 or NORM == 3:
        ss = tl.full((BLOCK_T,), 0.0, tl.float32)
        for s in range(n_split):
            ss += tl.load(ss_ptr + s * T + offs_t, mask=mask_t, other=0.0)
        r = tl.rsqrt(ss / (K * H) + eps)
    acc = tl.full((BLOCK_T, BLOCK_N), 0.0, tl.float32)
    for k in range(K):
        p = tl.full((BLOCK_T, BLOCK_N), 0.0, tl.float32)
        ssq = tl.full((BLOCK_T,), 0.0, tl.float32)
        ssw = tl.full((BLOCK_T,), 0.0, tl.float32)
        for c in range(n_chunks):
            row = ((k * n_chunks + c) * T + offs_t).to(tl.int64)
            p += tl.load(ws_ptr + row[:, None] * N + offs_n[None, :], mask=mask, other=0.0)
            if NORM == 2 or NORM == 3:
                ssq += tl.load(ss_ptr + row, mask=mask_t, other=0.0)
                ssw += tl.load(ss_ptr + n_split * T + row, mask=mask_t, other=0.0)
        if NORM == 0:
            acc += p
        elif NORM == 1:
            acc += p * r[:, None]
        elif NORM == 2:
            acc += p * tl.rsqrt(ssq / H + eps)[:, None]
        else:  # both: fc_norm statistics of the input_norm output x * r * g
            acc += p * (r * tl.rsqrt(ssw * r * r / H + eps))[:, None]
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    out_ptrs = out_ptr + offs_t.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def gemv_grid(tokens: int, n_out: int, taps: int, split_chunks: int, block_t: int, block_n: int):
    """The GEMV's launch grid: (N tiles, K*C splits or 1, T tiles)."""
    splits = taps * split_chunks if split_chunks else 1
    return (triton.cdiv(n_out, block_n), splits, triton.cdiv(tokens, block_t))
