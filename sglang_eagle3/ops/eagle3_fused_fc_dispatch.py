"""When to run the fused EAGLE-3 fc, through which kernel path and tiles, and how to launch it.

Three fused paths compute ``fc(norm(cat(taps)))`` (math: the kernels' docstrings):

- ``gemv``    ``eagle3_fused_fc_gemv``: split-K GEMV streaming the weight once (decode, T <= 16);
- ``normcat`` ``eagle3_fused_fc_normcat``: one norm + concat pass writing the fc input, then
              cuBLAS (``torch.mm``; prefill, T >= 64);
- ``tiled``   ``eagle3_fused_fc`` (``kernels/eagle3_fused_fc_kernel.py``): the first fused kernel,
              one tiled GEMM with the norms inline; kept for the measurements that chose it.

``fused_path`` decides per shape from the measured table (``MEASURED_WINS`` / ``MEASURED_PATHS``,
read from ``WINS_FILE``, benchmarks/gpu_check.py's output): the path that run measured fastest,
only where it beat norm + cat + cuBLAS by ``WIN_MARGIN``; everywhere else None, and the caller
falls back to PyTorch. ``pick_gemv_config`` reads the GEMV tiles that run tuned per
(H, taps, T bucket) (``TUNED_GEMV``); ``launch_eagle3_fused_fc*`` run the kernels on tensors that
``eagle3_fused_fc`` has validated. Triton is imported lazily so that CPU-only installs never
need it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import NamedTuple

import torch

from sglang_eagle3 import env_names

ENV_SWITCH = env_names.FUSED_FC  # "0": never fused; "1": fused for every shape on sm_90+
# The token counts benchmarks/gpu_check.py and bench_eagle3_fused_fc.py measure (they import it).
T_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096)
# the norm modes of eagle3_fused_fc (its NORMS), here because the wins file is read here
NORM_NAMES = ("none", "before_fc", "per_tap", "both")
WIN_MARGIN = 1.03  # a win: the fused kernel beat norm + cat + cuBLAS by >= 3 %
# The fused paths (module docstring); a win without a "path" is the tiled kernel's (the first
# gpu_check runs timed only that one).
PATHS = ("gemv", "normcat", "tiled")
LEGACY_PATH = "tiled"
DECODE_MAX_T = 16  # unmeasured shapes forced fused (env switch "1"): gemv up to here, then normcat
GEMV_TUNED_T = (1, 4, 16)  # the T buckets whose GEMV tiles gpu_check.py tunes
GPU_CHECK_FORMAT = "sglang_eagle3.gpu_check/1"  # benchmarks/gpu_check.py's JSON
# The checked-in copy of a GPU run of benchmarks/gpu_check.py (benchmarks/README.md).
WINS_FILE = Path(__file__).with_name("eagle3_fused_fc_wins.json")
Win = tuple[str, int, int, int]  # (norm, T bucket, H, K)
GemvKey = tuple[int, int, int]  # (H, K, T bucket)


def is_win(fused_us: float, unfused_us: float) -> bool:
    return fused_us * WIN_MARGIN <= unfused_us


def row_is_win(row: object) -> bool:
    """A gpu_check timing row that makes its shape a win: correct and fused >= 3 % faster."""
    if not isinstance(row, dict) or row.get("ok") is not True:
        return False
    us = (row.get("fused_us"), row.get("unfused_us"))
    return all(isinstance(v, (int, float)) and v > 0 for v in us) and is_win(*us)


class Measured(NamedTuple):
    """What one benchmarks/gpu_check.py result lets the dispatch do."""

    wins: frozenset[Win]  # shapes where a fused path was correct and >= 3 % faster
    paths: dict[Win, str]  # each win's path (the fastest measured there)
    gemv_tiles: dict[GemvKey, tuple[int, GemvConfig]]  # (N tuned for, tiles)


def parse_gpu_check(data: object, source: str = "gpu_check JSON") -> Measured:
    """The wins, their paths and the tuned GEMV tiles of a benchmarks/gpu_check.py result;
    ValueError naming ``source`` when it is not one, or when a win is not backed by its own
    measurements. Tiles are read only from a GPU run whose checks all passed."""

    def bad(why: str) -> ValueError:
        return ValueError(f"{source}: {why}")

    if not isinstance(data, dict):
        raise bad("not a JSON object")
    if data.get("format") != GPU_CHECK_FORMAT:
        raise bad(f"format {data.get('format')!r}, expected {GPU_CHECK_FORMAT!r}")
    wins = data.get("wins")
    if not isinstance(wins, list):
        raise bad("'wins' must be a list")
    measured = data.get("dry_run") is False and data.get("passed") is True
    if wins and not measured:
        raise bad("wins need a GPU run (dry_run: false) whose checks all passed (passed: true)")
    key_fields = ("norm", "T", "H", "K")
    timing = data.get("timing")
    rows = timing.get("rows") if isinstance(timing, dict) else None
    rows = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    out, paths = set(), {}
    for w in wins:
        key = tuple(w.get(f) for f in key_fields) if isinstance(w, dict) else None
        if key is None or key[0] not in NORM_NAMES or key[1] not in T_BUCKETS:
            raise bad(f"win {w!r}: needs norm in {NORM_NAMES} and T in {T_BUCKETS}")
        if not all(type(v) is int and v > 0 for v in key[1:]):
            raise bad(f"win {w!r}: T, H and K must be positive integers")
        path = w.get("path")
        if path is not None and path not in PATHS:
            raise bad(f"win {w!r}: path must be one of {PATHS}")
        backing = [r for r in rows if row_is_win(r) and tuple(r.get(f) for f in key_fields) == key]
        if path is not None:  # a row that names its path must name the same one
            backing = [r for r in backing if r.get("path", path) == path]
        if not backing:
            raise bad(f"win {w!r}: no timing row shows it (correct, fused >= 3 % faster)")
        out.add(key)
        paths[key] = path or backing[0].get("path") or LEGACY_PATH
        if paths[key] not in PATHS:
            raise bad(f"win {w!r}: its timing row's path {paths[key]!r} is not one of {PATHS}")
    tiles = _gemv_tiles(data.get("gemv_tuning"), bad) if measured else {}
    return Measured(frozenset(out), paths, tiles)


def _gemv_tiles(tuning: object, bad) -> dict[GemvKey, tuple[int, GemvConfig]]:
    """``gemv_tuning.tuned`` of a gpu_check result: (H, K, T bucket) -> (N, GemvConfig)."""
    if tuning is None:
        return {}
    tuned = tuning.get("tuned") if isinstance(tuning, dict) else None
    if not isinstance(tuned, list):
        raise bad("'gemv_tuning' must be an object with a 'tuned' list")
    names = {f.name for f in fields(GemvConfig)}
    out = {}
    for entry in tuned:
        dims = tuple(entry.get(f) for f in ("H", "K", "T", "N")) if isinstance(entry, dict) else ()
        cfg = entry.get("config") if isinstance(entry, dict) else None
        if len(dims) != 4 or not all(type(v) is int and v > 0 for v in dims):
            raise bad(f"gemv tiles {entry!r}: H, K, T and N must be positive integers")
        if dims[2] not in T_BUCKETS or not isinstance(cfg, dict) or set(cfg) != names:
            raise bad(f"gemv tiles {entry!r}: needs T in {T_BUCKETS} and config fields {names}")
        try:
            config = GemvConfig(**cfg)
        except (TypeError, ValueError) as e:
            raise bad(f"gemv tiles {entry!r}: {e}") from e
        if not config.use_dot and dims[2] != 1:
            raise bad(f"gemv tiles {entry!r}: the FMA variant (use_dot false) is for T = 1 only")
        out[dims[:3]] = (dims[3], config)
    return out


def wins_from_gpu_check(data: object, source: str = "gpu_check JSON") -> frozenset[Win]:
    """The ``MEASURED_WINS`` entries of a benchmarks/gpu_check.py result (``parse_gpu_check``)."""
    return parse_gpu_check(data, source).wins


def load_measured(path: Path | str) -> Measured:
    """``parse_gpu_check`` of a JSON file; ValueError naming the file if it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable gpu_check JSON file ({e})") from e
    return parse_gpu_check(data, source=str(path))


def load_measured_wins(path: Path | str) -> frozenset[Win]:
    """``wins_from_gpu_check`` of a JSON file; ValueError naming the file if it is not one."""
    return load_measured(path).wins


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


def default_path(tokens: int) -> str:
    """The path for a shape nothing was measured at: the GEMV at decode sizes, else normcat."""
    return "gemv" if tokens <= DECODE_MAX_T else "normcat"


def choose_path(tokens: int, hidden: int, taps: int, norm: str) -> str:
    """The measured path of this shape (``MEASURED_PATHS``), else ``default_path``."""
    key = (norm, t_bucket(tokens), hidden, taps)
    return MEASURED_PATHS.get(key, default_path(tokens))


def fused_path(
    tokens: int, hidden: int, taps: int, norm: str, device: torch.device | str
) -> str | None:
    """The fused path that should replace norm + cat + linear for this shape, or None.

    Only CUDA devices of compute capability >= 9.0 (the kernels were written and AOT-checked for
    sm_90 / sm_100 / sm_120), and only where one was measured faster (``MEASURED_WINS``; that
    run's fastest path, ``MEASURED_PATHS``): a shape measured slower, or not measured, falls
    back (None). The env switch forces a choice: "0" never, "1" every shape (its measured path,
    else ``default_path``). CPU tensors always take the PyTorch fallback.
    """
    device = torch.device(device)
    switch = os.environ.get(ENV_SWITCH, "")
    if switch == "0" or device.type != "cuda" or not _triton_available():
        return None
    if torch.cuda.get_device_capability(device) < (9, 0):
        return None
    key = (norm, t_bucket(tokens), hidden, taps)
    if switch != "1" and key not in MEASURED_WINS:
        return None
    return choose_path(tokens, hidden, taps, norm)


def use_fused(tokens: int, hidden: int, taps: int, norm: str, device: torch.device | str) -> bool:
    """True when a fused path should replace norm + cat + linear for this shape (``fused_path``)."""
    return fused_path(tokens, hidden, taps, norm, device) is not None


@dataclass(frozen=True)
class FusedFcConfig:
    """Tiles of the ``tiled`` path (``kernels/eagle3_fused_fc_kernel.py``)."""

    block_m: int
    block_n: int
    block_k: int
    split_chunks: int = 0  # 0: one pass; C >= 1: split the reduction into K*C parts + reduce
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    prescale: bool = False  # row factors from a first light pass (one accumulator in the GEMM)


def _is_pow2(n: object) -> bool:
    return type(n) is int and n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class GemvConfig:
    """Tiles of the ``gemv`` path (``kernels/eagle3_fused_fc_gemv.py``). The token tile is not a
    field: 1 for the FMA variant (T = 1 only), else the next power of two >= T, 16 to 64."""

    block_n: int = 64  # weight rows (outputs) per program
    block_k: int = 128  # weight columns per loop step
    split_chunks: int = 2  # C: each tap's columns in C chunks, K*C partials + a reduce; 0: none
    num_warps: int = 4
    num_stages: int = 4
    use_dot: bool = True  # tl.dot on tensor cores; False: fp32 FMA, one token row (T = 1)

    def __post_init__(self):
        for name in ("block_n", "block_k", "num_warps"):
            if not _is_pow2(getattr(self, name)):
                raise ValueError(f"GemvConfig.{name} must be a power of two, got {self!r}")
        if type(self.split_chunks) is not int or not 0 <= self.split_chunks <= 64:
            raise ValueError(f"GemvConfig.split_chunks must be an int in [0, 64], got {self!r}")
        if type(self.num_stages) is not int or not 1 <= self.num_stages <= 8:
            raise ValueError(f"GemvConfig.num_stages must be an int in [1, 8], got {self!r}")
        if type(self.use_dot) is not bool:
            raise ValueError(f"GemvConfig.use_dot must be a bool, got {self!r}")

    def block_t(self, tokens: int) -> int:
        """Token rows per program for ``tokens`` rows."""
        return 1 if not self.use_dot else min(64, _pow2_at_least(tokens, 16))


@dataclass(frozen=True)
class NormCatConfig:
    """Launch of the ``normcat`` path's pass (``kernels/eagle3_fused_fc_normcat.py``)."""

    block_h: int = 1024  # row elements per loop step (8 per thread at 4 warps: 16-byte bf16)
    num_warps: int = 4
    block_m: int = 1  # token rows per program (one on a GPU: a row is K*H long)

    def __post_init__(self):
        if not all(_is_pow2(v) for v in (self.block_h, self.num_warps, self.block_m)):
            raise ValueError(f"NormCatConfig: every field must be a power of two: {self}")


# (norm, T bucket, H, K) where benchmarks/gpu_check.py measured a fused path faster than
# norm + cat + cuBLAS on an sm_90+ GPU, read from WINS_FILE (an H200 run, 2026-12-04: three
# small-T shapes without a norm, all the tiled kernel's; every other shape takes the PyTorch
# path), the path that won each, and the GEMV tiles it tuned (none in that run).
_MEASURED = load_measured(WINS_FILE) if WINS_FILE.is_file() else Measured(frozenset(), {}, {})
MEASURED_WINS: frozenset[Win] = _MEASURED.wins
MEASURED_PATHS: dict[Win, str] = _MEASURED.paths
TUNED_GEMV: dict[GemvKey, tuple[int, GemvConfig]] = _MEASURED.gemv_tiles


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
        bk = min(bk * 2 // dtype.itemsize, _pow2_at_least(hidden, 16))
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
    entry = TUNED_GEMV.get((hidden, taps, t_bucket(tokens))) if tuned else None
    if entry is not None and entry[0] == n_out and (entry[1].use_dot or tokens == 1):
        cfg = entry[1]
    elif interpreting():  # fewest programs: the interpreter's cost is per program
        cfg = GemvConfig(64, 32, 1 if hidden > 32 else 0, 4, 1, True)
    else:
        bn, bk, per_sm = (64, 128, 4) if tokens <= DECODE_MAX_T else (128, 64, 2)
        cfg = GemvConfig(bn, min(bk * 2 // dtype.itemsize, _pow2_at_least(hidden, 16)), 0, 4, 4)
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
    block_h = min(_pow2_at_least(hidden, 32), 128 * per_thread)
    return NormCatConfig(block_h, 4, 16 if interpreting() else 1)


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
            rbt, rbn = min(16, _pow2_at_least(tokens, 1)), 128
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
        rbm, rbn = min(64, _pow2_at_least(tokens, 16)), 128
        grid = (triton.cdiv(tokens, rbm), triton.cdiv(n_out, rbn))
        _eagle3_fused_fc_reduce_kernel[grid](
            ws, ss, bias if bias is not None else dummy, out,
            tokens, n_out, hidden, out.stride(0), eps,
            K=taps_k, NORM=code, HAS_BIAS=bias is not None, SPLIT_CHUNKS=config.split_chunks,
            BLOCK_M=rbm, BLOCK_N=rbn, num_warps=4,
        )  # fmt: skip
    return out
