"""The tiles each fused EAGLE-3 fc path launches with, per shape and device.

``pick_config`` (``tiled``), ``pick_gemv_config`` (``gemv``: the tiles benchmarks/gpu_check.py
tuned, ``TUNED_GEMV`` in ``eagle3_fused_fc_wins``, else a heuristic), ``pick_normcat_config``
(``normcat``), and ``gemv_candidates``, the GEMV tiles gpu_check.py times to tune them.
"""

from __future__ import annotations

import dataclasses

import torch

from sglang_eagle3.ops import eagle3_fused_fc_wins as fc_wins
from sglang_eagle3.ops.eagle3_fused_fc_configs import (
    DECODE_MAX_T,
    FusedFcConfig,
    GemvConfig,
    NormCatConfig,
    interpreting,
    pow2_at_least,
    t_bucket,
)


def _smem_budget(capability: tuple[int, int]) -> int:
    # sm_90 / sm_100: 227 KiB per block; sm_120 (consumer Blackwell) and others: about 99 KiB
    return 220 * 1024 if capability[0] in (9, 10) else 96 * 1024


def pick_config(
    tokens: int,
    n_out: int,
    hidden: int,
    taps: int,
    dtype: torch.dtype,
    capability: tuple[int, int] = (9, 0),
    num_sms: int = 132,
) -> FusedFcConfig:
    """Tiles per shape. Not tuned on a GPU yet (the benchmark sweeps alternatives at decode)."""
    if interpreting():  # fewest, largest programs: the interpreter's cost is per program
        return FusedFcConfig(pow2_at_least(min(tokens, 64), 16), 64, 32, prescale=tokens > 64)
    esize = dtype.itemsize
    big = capability[0] in (9, 10)  # wgmma / tcgen05 and 227 KiB of shared memory
    if tokens <= 64:
        # decode: memory bound on the weight; small tiles so that every SM streams weight rows
        bm, bn, bk, warps, stages = pow2_at_least(tokens, 16), 64, 128 if big else 64, 4, 4
        bn = 32 if tokens <= 16 else bn
    elif tokens <= 256:
        bm, bn, bk, warps, stages = 64, 128, 64, 4 if big else 8, 4
    else:  # sm_120 (mma.sync, 64 K registers): BK 32 keeps the A tile in registers unspilled
        bm, bn, bk, warps, stages = 128, 128, 64 if big else 32, 8, 3
    bk = bk * 2 // esize if esize > 2 else bk  # fp32: same bytes per stage
    bk = min(bk, pow2_at_least(hidden, 16))
    while stages > 2 and stages * (bm + bn) * bk * esize * 5 // 4 > _smem_budget(capability):
        stages -= 1
    split = 0
    tiles = -(-tokens // bm) * -(-n_out // bn)
    if tokens <= 64 and tiles < num_sms:  # too few output tiles: split the reduction over taps
        split = max(1, min(4, -(-2 * num_sms // (tiles * taps)), -(-hidden // bk)))
    # prefill: the inline shape's per-tap second accumulator spills at these tiles (AOT-checked)
    return FusedFcConfig(bm, bn, bk, split, 8, warps, stages, prescale=tokens > 64)


def _gemv_split(
    tokens: int, n_out: int, hidden: int, taps: int, cfg: GemvConfig, programs: int
) -> int:
    """The smallest chunk count C >= 1 giving at least ``programs`` GEMV programs (at most 16,
    and at most one chunk per BLOCK_K columns)."""
    tiles = -(-n_out // cfg.block_n) * taps * -(-tokens // cfg.block_t(tokens))
    return max(1, min(16, -(-programs // tiles), -(-hidden // cfg.block_k)))


def _fit_stages(cfg: GemvConfig, tokens: int, esize: int, capability: tuple[int, int]):
    stages = cfg.num_stages
    rows = cfg.block_n + (cfg.block_t(tokens) if cfg.use_dot else 0)
    while stages > 2 and stages * rows * cfg.block_k * esize * 5 // 4 > _smem_budget(capability):
        stages -= 1
    return dataclasses.replace(cfg, num_stages=stages)


def gemv_candidates(
    tokens: int,
    n_out: int,
    hidden: int,
    taps: int,
    dtype: torch.dtype = torch.bfloat16,
    capability: tuple[int, int] = (9, 0),
    num_sms: int = 132,
) -> list[GemvConfig]:
    """The GEMV tiles benchmarks/gpu_check.py times per (H, taps, T bucket): output tiles of 32
    to 256 rows, the weight split into enough chunks for 2 to 16 programs per SM (more programs:
    a smaller last wave, but a larger fp32 workspace for the reduce) and one unsplit launch, at
    T = 1 the FMA variant too; ``pick_gemv_config``'s default first. Tiles that differ only in
    the chunk count share one compiled kernel (C is a run-time argument)."""
    shapes = [  # (block_n, block_k, warps, stages, use_dot, programs per SM); 0: no split
        (64, 128, 4, 4, True, (2, 4, 8, 16)),
        (128, 128, 4, 4, True, (4, 8)),
        (32, 256, 4, 3, True, (4, 8)),
        (64, 256, 8, 3, True, (2, 4)),
        (32, 128, 4, 4, True, (0,)),
    ]
    if tokens >= 4:
        shapes.append((256, 64, 8, 4, True, (4, 8)))
    if tokens == 1:
        shapes += [(32, 256, 4, 3, False, (4, 8)), (16, 256, 4, 3, False, (0,))]
    out = [pick_gemv_config(tokens, n_out, hidden, taps, dtype, capability, num_sms, tuned=False)]
    for bn, bk, warps, stages, dot, per_sm_list in shapes:
        bk = min(bk * 2 // dtype.itemsize, pow2_at_least(hidden, 16))
        for per_sm in per_sm_list:
            cfg = GemvConfig(bn, bk, 0, warps, stages, dot)
            if per_sm:
                split = _gemv_split(tokens, n_out, hidden, taps, cfg, per_sm * num_sms)
                cfg = dataclasses.replace(cfg, split_chunks=split)
            cfg = _fit_stages(cfg, tokens, dtype.itemsize, capability)
            if cfg not in out:
                out.append(cfg)
    return out


def pick_gemv_config(
    tokens: int,
    n_out: int,
    hidden: int,
    taps: int,
    dtype: torch.dtype = torch.bfloat16,
    capability: tuple[int, int] = (9, 0),
    num_sms: int = 132,
    *,
    tuned: bool = True,
    norm: str = "none",
) -> GemvConfig:
    """The GEMV tiles gpu_check.py tuned for (H, taps, T bucket) at this N (``TUNED_GEMV``, timed
    without a norm); otherwise 64 x 128 weight tiles split into enough chunks for 4 programs per
    SM (T <= 16; 128 x 64 tiles and 2 per SM above). ``both`` over several tokens is always
    split: unsplit, every program would first read whole rows for the input_norm rstd."""
    cfg = None
    entry = fc_wins.TUNED_GEMV.get((hidden, taps, t_bucket(tokens))) if tuned else None
    if entry is not None and entry[0] == n_out and (entry[1].use_dot or tokens == 1):
        cfg = entry[1]
    elif interpreting():  # fewest programs: the interpreter's cost is per program
        cfg = GemvConfig(64, 32, 1 if hidden > 32 else 0, 4, 1, True)
    else:
        bn, bk, per_sm = (64, 128, 4) if tokens <= DECODE_MAX_T else (128, 64, 2)
        cfg = GemvConfig(bn, min(bk * 2 // dtype.itemsize, pow2_at_least(hidden, 16)), 0, 4, 4)
        split = _gemv_split(tokens, n_out, hidden, taps, cfg, per_sm * num_sms)
        cfg = _fit_stages(dataclasses.replace(cfg, split_chunks=split), tokens, dtype.itemsize,
                          capability)  # fmt: skip
    if norm == "both" and tokens > 1 and cfg.split_chunks == 0:
        cfg = dataclasses.replace(cfg, use_dot=True)
        split = _gemv_split(tokens, n_out, hidden, taps, cfg, 4 * num_sms)
        cfg = dataclasses.replace(cfg, split_chunks=split)
    return cfg


def pick_normcat_config(hidden: int, dtype: torch.dtype = torch.bfloat16) -> NormCatConfig:
    """16-byte loads per thread, at most one loop step past H; one row per program (16 under
    the interpreter, whose cost is per program)."""
    per_thread = 16 // dtype.itemsize
    block_h = min(pow2_at_least(hidden, 32), 128 * per_thread)
    return NormCatConfig(block_h, 4, 16 if interpreting() else 1)
