"""When to run the fused EAGLE-3 fc kernel, with which tiles, and how to launch it.

``use_fused`` decides per shape; ``pick_config`` chooses tiles; ``launch_eagle3_fused_fc`` runs
``sglang_eagle3.kernels.eagle3_fused_fc_kernel`` on tensors that ``eagle3_fused_fc`` has validated.
Triton is imported lazily so that CPU-only installs never need it.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from sglang_eagle3 import env_names

ENV_SWITCH = env_names.FUSED_FC  # "0": never fused; "1": fused for every shape on sm_90+
# The token counts benchmarks/gpu_check.py and bench_eagle3_fused_fc.py measure (they import it).
T_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096)
# the norm modes of eagle3_fused_fc (its NORMS), here because the wins file is read here
NORM_NAMES = ("none", "before_fc", "per_tap", "both")
WIN_MARGIN = 1.03  # a win: the fused kernel beat norm + cat + cuBLAS by >= 3 %
GPU_CHECK_FORMAT = "sglang_eagle3.gpu_check/1"  # benchmarks/gpu_check.py's JSON
# The checked-in copy of a GPU run of benchmarks/gpu_check.py (benchmarks/README.md).
WINS_FILE = Path(__file__).with_name("eagle3_fused_fc_wins.json")
Win = tuple[str, int, int, int]  # (norm, T bucket, H, K)


def is_win(fused_us: float, unfused_us: float) -> bool:
    return fused_us * WIN_MARGIN <= unfused_us


def row_is_win(row: object) -> bool:
    """A gpu_check timing row that makes its shape a win: correct and fused >= 3 % faster."""
    if not isinstance(row, dict) or row.get("ok") is not True:
        return False
    us = (row.get("fused_us"), row.get("unfused_us"))
    return all(isinstance(v, (int, float)) and v > 0 for v in us) and is_win(*us)


def wins_from_gpu_check(data: object, source: str = "gpu_check JSON") -> frozenset[Win]:
    """The ``MEASURED_WINS`` entries of a benchmarks/gpu_check.py result; ValueError naming
    ``source`` when it is not one, or when a win is not backed by its own measurements."""

    def bad(why: str) -> ValueError:
        return ValueError(f"{source}: {why}")

    if not isinstance(data, dict):
        raise bad("not a JSON object")
    if data.get("format") != GPU_CHECK_FORMAT:
        raise bad(f"format {data.get('format')!r}, expected {GPU_CHECK_FORMAT!r}")
    wins = data.get("wins")
    if not isinstance(wins, list):
        raise bad("'wins' must be a list")
    if wins and (data.get("dry_run") is not False or data.get("passed") is not True):
        raise bad("wins need a GPU run (dry_run: false) whose checks all passed (passed: true)")
    key_fields = ("norm", "T", "H", "K")
    timing = data.get("timing")
    rows = timing.get("rows") if isinstance(timing, dict) else None
    rows = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    out = set()
    for w in wins:
        key = tuple(w.get(f) for f in key_fields) if isinstance(w, dict) else None
        if key is None or key[0] not in NORM_NAMES or key[1] not in T_BUCKETS:
            raise bad(f"win {w!r}: needs norm in {NORM_NAMES} and T in {T_BUCKETS}")
        if not all(type(v) is int and v > 0 for v in key[1:]):
            raise bad(f"win {w!r}: T, H and K must be positive integers")
        if not any(row_is_win(r) and tuple(r.get(f) for f in key_fields) == key for r in rows):
            raise bad(f"win {w!r}: no timing row shows it (correct, fused >= 3 % faster)")
        out.add(key)
    return frozenset(out)


def load_measured_wins(path: Path | str) -> frozenset[Win]:
    """``wins_from_gpu_check`` of a JSON file; ValueError naming the file if it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable gpu_check JSON file ({e})") from e
    return wins_from_gpu_check(data, source=str(path))


# (norm, T bucket, H, K) where benchmarks/gpu_check.py measured the fused kernel faster than
# norm + cat + cuBLAS on an sm_90+ GPU, read from WINS_FILE (an H200 run, 2026-12-04: three
# small-T shapes without a norm; every other shape takes the PyTorch path).
MEASURED_WINS: frozenset[Win] = (
    load_measured_wins(WINS_FILE) if WINS_FILE.is_file() else frozenset()
)


def t_bucket(tokens: int) -> int:
    """The smallest measured bucket >= tokens (the largest one beyond it)."""
    return next((b for b in T_BUCKETS if tokens <= b), T_BUCKETS[-1])


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.cache
def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def use_fused(tokens: int, hidden: int, taps: int, norm: str, device: torch.device | str) -> bool:
    """True when the fused kernel should replace norm + cat + linear for this shape.

    Only CUDA devices of compute capability >= 9.0 (the kernel was written and AOT-checked for
    sm_90 / sm_100 / sm_120), only where measured faster (``MEASURED_WINS``), unless the env
    switch forces a choice. CPU tensors always take the PyTorch fallback.
    """
    device = torch.device(device)
    switch = os.environ.get(ENV_SWITCH, "")
    if switch == "0" or device.type != "cuda" or not _triton_available():
        return False
    if torch.cuda.get_device_capability(device) < (9, 0):
        return False
    if switch == "1":
        return True
    return (norm, t_bucket(tokens), hidden, taps) in MEASURED_WINS


@dataclass(frozen=True)
class FusedFcConfig:
    block_m: int
    block_n: int
    block_k: int
    split_chunks: int = 0  # 0: one pass; C >= 1: split the reduction into K*C parts + reduce
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    prescale: bool = False  # row factors from a first light pass (one accumulator in the GEMM)


def _pow2_at_least(n: int, floor: int) -> int:
    return max(floor, 1 << max(0, n - 1).bit_length())


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
        return FusedFcConfig(_pow2_at_least(min(tokens, 64), 16), 64, 32, prescale=tokens > 64)
    esize = dtype.itemsize
    big = capability[0] in (9, 10)  # wgmma / tcgen05 and 227 KiB of shared memory
    if tokens <= 64:
        # decode: memory bound on the weight; small tiles so that every SM streams weight rows
        bm, bn, bk, warps, stages = _pow2_at_least(tokens, 16), 64, 128 if big else 64, 4, 4
        bn = 32 if tokens <= 16 else bn
    elif tokens <= 256:
        bm, bn, bk, warps, stages = 64, 128, 64, 4 if big else 8, 4
    else:  # sm_120 (mma.sync, 64 K registers): BK 32 keeps the A tile in registers unspilled
        bm, bn, bk, warps, stages = 128, 128, 64 if big else 32, 8, 3
    bk = bk * 2 // esize if esize > 2 else bk  # fp32: same bytes per stage
    bk = min(bk, _pow2_at_least(hidden, 16))
    while stages > 2 and stages * (bm + bn) * bk * esize * 5 // 4 > _smem_budget(capability):
        stages -= 1
    split = 0
    tiles = -(-tokens // bm) * -(-n_out // bn)
    if tokens <= 64 and tiles < num_sms:  # too few output tiles: split the reduction over taps
        split = max(1, min(4, -(-2 * num_sms // (tiles * taps)), -(-hidden // bk)))
    # prefill: the inline shape's per-tap second accumulator spills at these tiles (AOT-checked)
    return FusedFcConfig(bm, bn, bk, split, 8, warps, stages, prescale=tokens > 64)


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
        rbm, rbn = min(64, _pow2_at_least(tokens, 16)), 128
        grid = (triton.cdiv(tokens, rbm), triton.cdiv(n_out, rbn))
        _eagle3_fused_fc_reduce_kernel[grid](
            ws, ss, bias if bias is not None else dummy, out,
            tokens, n_out, hidden, out.stride(0), eps,
            K=taps_k, NORM=code, HAS_BIAS=bias is not None, SPLIT_CHUNKS=config.split_chunks,
            BLOCK_M=rbm, BLOCK_N=rbn, num_warps=4,
        )  # fmt: skip
    return out
