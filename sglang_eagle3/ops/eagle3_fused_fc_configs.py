"""The launch settings of the fused EAGLE-3 fc paths, and the token buckets they are keyed by.

``FusedFcConfig`` (``tiled``), ``GemvConfig`` (``gemv``) and ``NormCatConfig`` (``normcat``):
the dispatch's tile choice (``eagle3_fused_fc_tiles``) and the wins file's tuned GEMV tiles
(``eagle3_fused_fc_wins``) both build them, so they sit below both. No torch: the wins file can
be read and checked without it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# The token counts benchmarks/gpu_check.py and bench_eagle3_fused_fc.py measure (they import it).
T_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096)
DECODE_MAX_T = 16  # unmeasured shapes forced fused (env switch "1"): gemv up to here, then normcat


def t_bucket(tokens: int) -> int:
    """The smallest measured bucket >= tokens (the largest one beyond it)."""
    return next((b for b in T_BUCKETS if tokens <= b), T_BUCKETS[-1])


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def pow2_at_least(n: int, floor: int) -> int:
    return max(floor, 1 << max(0, n - 1).bit_length())


def _is_pow2(n: object) -> bool:
    return type(n) is int and n > 0 and n & (n - 1) == 0


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
        return 1 if not self.use_dot else min(64, pow2_at_least(tokens, 16))


@dataclass(frozen=True)
class NormCatConfig:
    """Launch of the ``normcat`` path's pass (``kernels/eagle3_fused_fc_normcat.py``)."""

    block_h: int = 1024  # row elements per loop step (8 per thread at 4 warps: 16-byte bf16)
    num_warps: int = 4
    block_m: int = 1  # token rows per program (one on a GPU: a row is K*H long)

    def __post_init__(self):
        if not all(_is_pow2(v) for v in (self.block_h, self.num_warps, self.block_m)):
            raise ValueError(f"NormCatConfig: every field must be a power of two: {self}")
