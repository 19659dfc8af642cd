"""Ahead-of-time compilation of the eagle3_fused_fc kernels for sm_90 / sm_100 / sm_120, no GPU.

``triton.compile`` runs the whole backend (TTGIR passes, LLVM, ptxas from the wheel), which
catches what the interpreter lets through (layouts, shared memory, unsupported ops). The
divisibility attributes are the ones the JIT gives these arguments at run time for H = 7168
(pointers from the caching allocator, widths and strides multiples of 16); without them Triton
cannot use cp.async and the loads are not pipelined.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from sglang_eagle3.ops.eagle3_fused_fc_tiles import pick_config

triton = pytest.importorskip("triton")
pytestmark = [
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="compiles real kernels"),
    pytest.mark.slow,  # ptxas for three targets: about 45 s on 2 cores without a Triton cache
]

H = N = 7168
SMEM_LIMIT = {90: 232448, 100: 232448, 120: 101376}  # max dynamic shared memory per block
UNALIGNED = ("T", "eps")  # token count: any value; eps: a float


def _compile(fn, constexprs: dict, cc: int, dtype: str, warps: int, stages: int):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fp32_bufs = ("ws_ptr", "ss_ptr", "scale_ptr")
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            sig[name] = "constexpr"
            continue
        if name == "eps":
            sig[name] = "fp32"
        elif name.endswith("_ptr") or name in ("x0", "x1", "x2", "x3"):
            sig[name] = "*fp32" if name in fp32_bufs else f"*{dtype}"
        else:
            sig[name] = "i32"
        if name not in UNALIGNED:
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn, sig, constexprs, attrs)
    opts = dict(num_warps=warps, num_stages=stages)
    return triton.compile(src, target=GPUTarget("cuda", cc, 32), options=opts)


def _spill_bytes(ptx: str, cc: int) -> int:
    """Spill stores reported by the ptxas Triton itself uses for this target."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        arch = f"-arch=sm_{cc}a"
        cmd = [get_ptxas(cc).path, arch, "-v", str(src), "-o", str(src.with_suffix(".o"))]
        log = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    return int(re.search(r"(\d+) bytes spill stores", log).group(1))


CASES = [  # (tokens, norm, bias, dtype): decode one pass, decode split, mid, prefill
    (1, "per_tap", False, "bf16"),
    (64, "before_fc", True, "bf16"),
    (256, "per_tap", False, "bf16"),
    (8192, "both", False, "bf16"),
    (8192, "none", True, "bf16"),
]


@pytest.mark.parametrize("cc", [90, 100, 120])
@pytest.mark.parametrize("tokens,norm,bias,dtype", CASES)
def test_main_kernel_compiles(cc, tokens, norm, bias, dtype):
    from sglang_eagle3.kernels.eagle3_fused_fc_kernel import NORM_CODES, _eagle3_fused_fc_kernel

    cfg = pick_config(tokens, N, H, 3, getattr(torch, {"bf16": "bfloat16"}[dtype]), (cc // 10, 0))
    constexprs = dict(
        K=3, PACKED=True, NORM=NORM_CODES[norm], HAS_BIAS=bias, SPLIT_CHUNKS=cfg.split_chunks,
        PRESCALED=cfg.prescale and norm != "none", BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m, DOT_F32=False, PRECISION="tf32",
    )  # fmt: skip
    kernel = _compile(_eagle3_fused_fc_kernel, constexprs, cc, dtype, cfg.num_warps, cfg.num_stages)
    ptx = kernel.asm["ptx"]
    assert kernel.metadata.shared <= SMEM_LIMIT[cc]
    assert _spill_bytes(ptx, cc) <= 16  # the inline shape spilled hundreds at prefill tiles
    assert "cp.async" in ptx  # loads pipelined through shared memory
    if cfg.block_m < 64:  # decode tiles: M = 16 is below wgmma's 64, mma.sync it is
        assert "mma.sync" in ptx
    elif cc == 90:
        assert "wgmma.mma_async" in ptx
    elif cc == 100:
        assert "tcgen05.mma" in ptx
    else:  # sm_120 has neither wgmma nor tcgen05: warp-level mma
        assert "mma.sync" in ptx


def test_packed_pointer_taps_and_fp32_compile_for_sm90():
    from sglang_eagle3.kernels.eagle3_fused_fc_kernel import _eagle3_fused_fc_kernel

    for dtype, precision in (("bf16", "tf32"), ("fp32", "tf32x3")):
        constexprs = dict(
            K=3, PACKED=False, NORM=3, HAS_BIAS=True, SPLIT_CHUNKS=0, PRESCALED=False,
            BLOCK_M=64, BLOCK_N=128, BLOCK_K=64 if dtype == "bf16" else 32, GROUP_M=8,
            DOT_F32=dtype == "fp32", PRECISION=precision,
        )  # fmt: skip
        kernel = _compile(_eagle3_fused_fc_kernel, constexprs, 90, dtype, 4, 3)
        assert "wgmma.mma_async" in kernel.asm["ptx"]
        assert kernel.metadata.shared <= SMEM_LIMIT[90]


@pytest.mark.parametrize("cc", [90, 120])
def test_reduce_and_stats_kernels_compile(cc):
    from sglang_eagle3.kernels.eagle3_fused_fc_aux_kernels import (
        _eagle3_fused_fc_reduce_kernel,
        _eagle3_fused_fc_stats_kernel,
    )

    constexprs = dict(K=3, NORM=3, HAS_BIAS=True, SPLIT_CHUNKS=2, BLOCK_M=16, BLOCK_N=128)
    kernel = _compile(_eagle3_fused_fc_reduce_kernel, constexprs, cc, "bf16", 4, 1)
    assert kernel.metadata.shared <= SMEM_LIMIT[cc]
    for norm in (1, 2, 3):
        constexprs = dict(K=3, PACKED=False, NORM=norm, BLOCK_M=16, BLOCK_H=256)
        kernel = _compile(_eagle3_fused_fc_stats_kernel, constexprs, cc, "bf16", 4, 1)
        assert kernel.metadata.shared <= SMEM_LIMIT[cc]
