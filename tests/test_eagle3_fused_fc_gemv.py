"""eagle3_fused_fc_gemv (the decode split-K GEMV) and eagle3_fused_fc_normcat (the prefill norm +
concat pass, then cuBLAS), and the dispatch that picks between them and the fallback.

- Numerics (``slow``): ``gemv_cases`` + ``normcat_cases`` (ops/eagle3_fused_fc_cases.py, the
  table benchmarks/gpu_check.py runs on a GPU too) through the Triton interpreter in ONE
  subprocess, against an fp64 reference: every norm mode, T not a multiple of the token tile, H
  not a multiple of 128 nor of the K tile, N not a multiple of the N tile, split-K with uneven
  and empty chunks, every tap layout, bf16 / fp16 / fp32. About 10 s on 2 cores.
- Ahead-of-time compilation for sm_90 and sm_100 with no GPU (``slow``): shared memory, spills,
  16-byte weight loads.
- Dispatch (fast): paths and tuned tiles read from a gpu_check file, the fallback wherever no
  path was measured faster, the tile heuristics, and the op's input validation.
- GPU (``gpu``): both paths at H = 7168 against fp64.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

import sglang_eagle3.ops.eagle3_fused_fc as fc_op
from sglang_eagle3.ops import eagle3_fused_fc_dispatch as dispatch
from sglang_eagle3.ops import eagle3_fused_fc_launch as fc_launch
from sglang_eagle3.ops import eagle3_fused_fc_tiles as fc_tiles
from sglang_eagle3.ops import eagle3_fused_fc_wins as fc_wins
from sglang_eagle3.ops.eagle3_fused_fc import NORMS, eagle3_fused_fc, eagle3_fused_fc_reference
from sglang_eagle3.ops.eagle3_fused_fc_cases import gemv_cases, normcat_cases, path_case, run_case
from sglang_eagle3.ops.eagle3_fused_fc_configs import GemvConfig, NormCatConfig

GEMV_CASES, NORMCAT_CASES = gemv_cases(), normcat_cases()


@pytest.fixture(scope="module")
def interp_results() -> dict[str, dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.ops.eagle3_fused_fc_cases"],
        input=json.dumps(GEMV_CASES + NORMCAT_CASES), env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            results[row["id"]] = row
    assert results, (
        f"interpreter run produced nothing (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    )
    return results


def _assert_passed(case: dict, results: dict) -> None:
    row = results.get(case["id"])
    assert row is not None, "case did not run (subprocess died?)"
    assert row["ok"], f"ratio {row['ratio']} (tol {case['tol']}): {row['why']}"


@pytest.mark.slow  # one Triton-interpreter run of both tables: about 10 s on 2 cores
@pytest.mark.parametrize("case", GEMV_CASES, ids=[c["id"] for c in GEMV_CASES])
def test_eagle3_fused_fc_gemv_matches_fp64_reference(case, interp_results):
    _assert_passed(case, interp_results)


@pytest.mark.slow
@pytest.mark.parametrize("case", NORMCAT_CASES, ids=[c["id"] for c in NORMCAT_CASES])
def test_eagle3_fused_fc_normcat_matches_fp64_reference(case, interp_results):
    _assert_passed(case, interp_results)


def test_case_tables_cover_every_norm_and_the_split_edges():
    for table in (GEMV_CASES, NORMCAT_CASES):
        assert {c["norm"] for c in table} == set(NORMS)
        assert {c["dtype"] for c in table} == {"bf16", "fp16", "fp32"}
        assert {"packed", "taps", "slices", "scattered"} <= {c["layout"] for c in table}
        assert any(c["H"] % 128 and c["T"] > 1 for c in table)
        assert len({c["id"] for c in table}) == len(table)
    tiles = [c["config"] for c in GEMV_CASES if c["config"]]
    assert {t["split_chunks"] for t in tiles} >= {0, 1, 2, 3, 4} and not all(
        t["use_dot"] for t in tiles
    )
    # an empty chunk: 4 chunks of ceil(40 / 4) rounded up to 16 columns = [0, 16, 32, 48) over 40
    assert any(c["H"] == 40 and t["split_chunks"] == 4 and t["block_k"] == 16
               for c, t in ((c, c["config"]) for c in GEMV_CASES if c["config"]))  # fmt: skip
    assert any(c["T"] > 64 for c in GEMV_CASES)  # two token tiles
    assert any(c["config"] is None for c in GEMV_CASES + NORMCAT_CASES)  # the dispatch's tiles


# --------------------------------------------------------------------------------------------
# Ahead-of-time compilation (no GPU): what the interpreter lets through


@pytest.fixture(scope="module")
def aot():
    pytest.importorskip("triton")
    from test_eagle3_fused_fc_aot import SMEM_LIMIT, _compile, _spill_bytes

    return _compile, _spill_bytes, SMEM_LIMIT


GEMV_AOT = dict(
    K=3, PACKED=True, NORM=3, HAS_BIAS=False, SPLIT=True, BLOCK_T=16, BLOCK_N=64, BLOCK_K=128,
    USE_DOT=True, DOT_F32=False, PRECISION="tf32",
)  # fmt: skip
_interp_env = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") == "1", reason="compiles real kernels"
)


@pytest.mark.slow  # ptxas: about 1 s per target
@_interp_env
@pytest.mark.parametrize("cc", [90, 100])
def test_eagle3_fused_fc_gemv_compiles(cc, aot):
    """The split-K GEMV (both, packed) streams the weight through 16-byte cp.async copies into a
    pipelined mma.sync (M = 16 tokens), without spills, on Hopper and Blackwell."""
    from sglang_eagle3.kernels.eagle3_fused_fc_gemv import _eagle3_fused_fc_gemv_kernel

    compile_, spills, smem = aot
    kernel = compile_(_eagle3_fused_fc_gemv_kernel, GEMV_AOT, cc, "bf16", 4, 4)
    ptx = kernel.asm["ptx"]
    assert kernel.metadata.shared <= smem[cc] and spills(ptx, cc) <= 16
    assert re.search(r"cp\.async\.cg\.shared\.global \[[^\]]+\], \[[^\]]+\], 0x10", ptx)
    assert "mma.sync" in ptx


@pytest.mark.slow
@_interp_env
def test_eagle3_fused_fc_gemv_fma_and_reduce_compile(aot):
    """The T = 1 FMA variant (one launch, pointer taps, bias) loads 16 bytes per thread; the
    reduce compiles for every chunk count at once (C is a run-time value)."""
    from sglang_eagle3.kernels.eagle3_fused_fc_gemv import (
        _eagle3_fused_fc_gemv_kernel,
        _eagle3_fused_fc_gemv_reduce_kernel,
    )

    compile_, spills, smem = aot
    fma = dict(GEMV_AOT, PACKED=False, NORM=2, HAS_BIAS=True, SPLIT=False, BLOCK_T=1,
               BLOCK_N=32, BLOCK_K=256, USE_DOT=False)  # fmt: skip
    kernel = compile_(_eagle3_fused_fc_gemv_kernel, fma, 90, "bf16", 4, 3)
    assert "ld.global.v4" in kernel.asm["ptx"] and spills(kernel.asm["ptx"], 90) <= 16
    constexprs = dict(K=3, NORM=3, HAS_BIAS=True, BLOCK_T=16, BLOCK_N=128)
    kernel = compile_(_eagle3_fused_fc_gemv_reduce_kernel, constexprs, 90, "bf16", 4, 1)
    assert kernel.metadata.shared <= smem[90]


@pytest.mark.slow
@_interp_env
@pytest.mark.parametrize("cc", [90, 100])
def test_eagle3_fused_fc_normcat_compiles(cc, aot):
    """The norm + concat pass (both, the heaviest: three reads of each row) moves 16 bytes per
    thread both ways."""
    from sglang_eagle3.kernels.eagle3_fused_fc_normcat import _eagle3_fused_fc_normcat_kernel

    compile_, spills, smem = aot
    constexprs = dict(K=3, PACKED=True, NORM=3, BLOCK_M=1, BLOCK_H=1024)
    kernel = compile_(_eagle3_fused_fc_normcat_kernel, constexprs, cc, "bf16", 4, 1)
    ptx = kernel.asm["ptx"]
    assert "ld.global.v4" in ptx and "st.global.v4" in ptx and spills(ptx, cc) <= 16


# --------------------------------------------------------------------------------------------
# The measured table: paths and tiles


def _row(norm, t, path, fused_us, unfused_us, h=7168):
    return dict(norm=norm, T=t, H=h, K=3, path=path, fused_us=fused_us, unfused_us=unfused_us,
                ok=True)  # fmt: skip


def _gpu_run(rows, wins, tuned=None, **top) -> dict:
    data = dict(format=fc_wins.GPU_CHECK_FORMAT, dry_run=False, passed=True, wins=wins,
                timing=dict(rows=rows))  # fmt: skip
    if tuned is not None:
        data["gemv_tuning"] = dict(tuned=tuned)
    return dict(data, **top)


TILES = dict(block_n=128, block_k=64, split_chunks=3, num_warps=8, num_stages=4, use_dot=True)


def test_parse_reads_each_wins_path_and_the_tuned_tiles():
    rows = [_row("per_tap", 1, "gemv", 70.0, 95.0), _row("both", 1024, "normcat", 480.0, 600.0),
            _row("none", 64, "gemv", 90.0, 85.0)]  # fmt: skip
    wins = [
        dict(norm="per_tap", T=1, H=7168, K=3, path="gemv"),
        dict(norm="both", T=1024, H=7168, K=3),
    ]  # fmt: skip  (no path: the row's)
    tuned = [dict(H=7168, K=3, T=16, N=7168, config=TILES),
             dict(H=7168, K=3, T=1, N=7168, config=dict(TILES, use_dot=False))]  # fmt: skip
    got = fc_wins.parse_gpu_check(_gpu_run(rows, wins, tuned))
    assert got.wins == {("per_tap", 1, 7168, 3), ("both", 1024, 7168, 3)}
    assert got.paths == {("per_tap", 1, 7168, 3): "gemv", ("both", 1024, 7168, 3): "normcat"}
    assert got.gemv_tiles == {
        (7168, 3, 16): (7168, GemvConfig(**TILES)),
        (7168, 3, 1): (7168, GemvConfig(**dict(TILES, use_dot=False))),
    }
    # a dry run's (or a failed run's) tiles are no measurement: ignored, like its wins refused
    assert fc_wins.parse_gpu_check(_gpu_run([], [], tuned, dry_run=True)).gemv_tiles == {}
    # the first runs' wins carry no path and their rows none: the tiled kernel won them
    legacy = _gpu_run([dict(_row("none", 4, None, 28.0, 31.0), path=None)],
                      [dict(norm="none", T=4, H=7168, K=3)])  # fmt: skip
    assert fc_wins.parse_gpu_check(legacy).paths == {("none", 4, 7168, 3): "tiled"}


@pytest.mark.parametrize(
    "wins, tuned, why",
    [
        ([dict(norm="per_tap", T=1, H=7168, K=3, path="normcat")], None, "no timing row shows"),
        ([dict(norm="per_tap", T=1, H=7168, K=3, path="cublas")], None, "path must be one of"),
        ([dict(norm="none", T=64, H=7168, K=3)], None, "no timing row shows"),  # measured slower
        ([], [dict(H=7168, K=3, T=4, N=7168, config=dict(TILES, use_dot=False))], "T = 1 only"),
        ([], [dict(H=7168, K=3, T=16, N=7168, config=dict(TILES, block_n=96))], "power of two"),
        ([], [dict(H=7168, K=3, T=16, N=7168, config={"block_n": 64})], "config fields"),
        ([], [dict(H=7168, K=3, T=8, N=7168, config=TILES)], "needs T in"),
        ([], {"H": 7168}, "'tuned' list"),
    ],
)
def test_parse_refuses_unbacked_paths_and_malformed_tiles(wins, tuned, why):
    rows = [_row("per_tap", 1, "gemv", 70.0, 95.0), _row("none", 64, "gemv", 90.0, 85.0)]
    data = _gpu_run(rows, wins)
    if tuned is not None:
        data["gemv_tuning"] = tuned if isinstance(tuned, dict) else dict(tuned=tuned)
    with pytest.raises(ValueError, match=re.escape(why)):
        fc_wins.parse_gpu_check(data, source="the file")


def test_checked_in_file_paths_and_tiles_are_what_the_dispatch_uses():
    data = json.loads(fc_wins.WINS_FILE.read_text())
    measured = fc_wins.load_measured(fc_wins.WINS_FILE)
    assert fc_wins.MEASURED_PATHS == measured.paths and set(measured.paths) == measured.wins
    assert fc_wins.TUNED_GEMV == measured.gemv_tiles
    for w in data["wins"]:  # a win without a path is the tiled kernel's (the first runs)
        key = (w["norm"], w["T"], w["H"], w["K"])
        assert fc_wins.MEASURED_PATHS[key] == w.get("path", fc_wins.LEGACY_PATH)


# --------------------------------------------------------------------------------------------
# Path choice and fallback


@pytest.fixture
def fake_sm90(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(dispatch, "_triton_available", lambda: True)
    monkeypatch.delenv(dispatch.ENV_SWITCH, raising=False)


def test_fused_path_is_the_measured_winner_else_the_fallback(fake_sm90, monkeypatch):
    wins = {("per_tap", 1, 7168, 3): "gemv", ("both", 1024, 7168, 3): "normcat"}
    monkeypatch.setattr(fc_wins, "MEASURED_WINS", frozenset(wins))
    monkeypatch.setattr(fc_wins, "MEASURED_PATHS", wins)
    assert dispatch.fused_path(1, 7168, 3, "per_tap", "cuda:0") == "gemv"
    assert dispatch.fused_path(700, 7168, 3, "both", "cuda:0") == "normcat"  # bucket 1024
    # measured but not faster (not a win), or never measured: norm + cat + cuBLAS
    for t, norm, h in ((1, "none", 7168), (4, "per_tap", 7168), (1, "per_tap", 4096)):
        assert dispatch.fused_path(t, h, 3, norm, "cuda:0") is None
        assert not dispatch.use_fused(t, h, 3, norm, "cuda:0")
    assert dispatch.fused_path(1, 7168, 3, "per_tap", "cpu") is None
    monkeypatch.setenv(dispatch.ENV_SWITCH, "1")  # forced: the measured path, else the default
    assert dispatch.fused_path(700, 7168, 3, "both", "cuda:0") == "normcat"
    assert dispatch.fused_path(16, 4096, 3, "none", "cuda:0") == "gemv"
    assert dispatch.fused_path(17, 4096, 3, "none", "cuda:0") == "normcat"
    monkeypatch.setenv(dispatch.ENV_SWITCH, "0")
    assert dispatch.fused_path(1, 7168, 3, "per_tap", "cuda:0") is None


def test_op_launches_the_chosen_path(monkeypatch):
    """The op's wiring, on CPU with the launchers recorded: auto takes fused_path's choice, a
    config its own path, and more than 4 scattered taps go packed."""
    calls = []

    def record(name):
        def launch(taps, packed, k, hidden, w, norm, win, wtap, eps, bias, out, config):
            shape = None if wtap is None else tuple(wtap.shape)
            calls.append(dict(path=name, packed=packed, k=k, hidden=hidden, norm=norm,
                              config=config, wtap=shape))  # fmt: skip
            return out

        return launch

    monkeypatch.setattr(fc_op, "interpreting", lambda: True)  # CPU tensors reach the kernels
    for name in fc_op._LAUNCH:
        monkeypatch.setitem(fc_op._LAUNCH, name, record(name))
    monkeypatch.setattr(fc_op, "fused_path", lambda *a: "normcat")
    x, w = torch.randn(5, 48), torch.randn(8, 48)
    wtap = [torch.ones(16)] * 3
    eagle3_fused_fc(x, w, num_taps=3, norm="per_tap", norm_weights=wtap)
    eagle3_fused_fc(list(x.chunk(3, -1)), w, backend="triton", config=GemvConfig(32, 16, 1))
    eagle3_fused_fc([t.clone() for t in torch.randn(1, 80).chunk(5, -1)], torch.randn(8, 80),
                    backend="triton", path="gemv")  # fmt: skip
    monkeypatch.setattr(fc_op, "fused_path", lambda *a: None)
    eagle3_fused_fc(x, w, num_taps=3)  # not measured faster: the reference, no launch
    assert [(c["path"], c["packed"], c["k"], c["hidden"]) for c in calls] == [
        ("normcat", True, 3, 16), ("gemv", False, 3, 16), ("gemv", True, 5, 16)
    ]  # fmt: skip
    assert calls[0]["wtap"] == (3, 16) and calls[1]["config"] == GemvConfig(32, 16, 1)


def test_gemv_tiles_tuned_first_then_enough_programs(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(fc_wins, "TUNED_GEMV", {})
    for t in (1, 4, 16, 64):
        cfg = fc_tiles.pick_gemv_config(t, 7168, 7168, 3)
        tiles = -(-7168 // cfg.block_n) * 3 * cfg.split_chunks
        assert cfg.use_dot and cfg.split_chunks >= 1 and tiles >= (4 if t <= 16 else 2) * 132
    tuned = GemvConfig(**TILES)
    monkeypatch.setattr(fc_wins, "TUNED_GEMV", {(7168, 3, 16): (7168, tuned)})
    assert fc_tiles.pick_gemv_config(9, 7168, 7168, 3) == tuned  # bucket 16, the tuned N
    assert fc_tiles.pick_gemv_config(9, 4096, 7168, 3) != tuned  # another N: the heuristic
    assert fc_tiles.pick_gemv_config(17, 7168, 7168, 3) != tuned  # bucket 64
    unsplit = GemvConfig(32, 128, 0)  # both over several rows: split (no whole-row pre-pass)
    monkeypatch.setattr(fc_wins, "TUNED_GEMV", {(7168, 3, 16): (7168, unsplit)})
    assert fc_tiles.pick_gemv_config(9, 7168, 7168, 3, norm="per_tap") == unsplit
    assert fc_tiles.pick_gemv_config(9, 7168, 7168, 3, norm="both").split_chunks >= 1
    for t in (1, 16):
        cands = fc_tiles.gemv_candidates(t, 7168, 7168, 3, torch.bfloat16, (12, 0), 188)
        assert cands[0] == fc_tiles.pick_gemv_config(t, 7168, 7168, 3, torch.bfloat16, (12, 0),
                                                     188, tuned=False)  # fmt: skip
        assert len(set(cands)) == len(cands) >= 5
        assert any(c.split_chunks == 0 for c in cands)  # one launch, no reduce
        assert any(not c.use_dot for c in cands) == (t == 1)  # the FMA variant: T = 1 only
        for c in cands:  # sm_120: about 99 KiB of shared memory per block
            rows = c.block_n + (c.block_t(t) if c.use_dot else 0)
            assert c.num_stages * rows * c.block_k * 2 <= 96 * 1024 or c.num_stages == 2


def test_tap_strides_stay_specializable():
    """Row strides reach the kernels specialized (16-byte loads), so never as 1."""
    taps = list(torch.randn(5, 3 * 16).chunk(3, -1))
    x, packed, strides = fc_launch._tap_slots(taps, False, 5)
    assert not packed and strides == [48, 48, 48, 48] and len(x) == 4
    assert fc_launch._tap_slots(taps, False, 1)[2] == [16] * 4  # one row: its stride is unused
    columns = [t[:, :1] for t in taps]  # width-1 taps of a [5, 1] shape: row stride 48, fine
    assert fc_launch._tap_slots(columns, False, 5)[1] is False
    narrow = [t.reshape(5, 1) for t in torch.randn(3, 5)]  # contiguous rows: stride (1, 1)
    x, packed, strides = fc_launch._tap_slots(narrow, False, 5)
    assert packed and x[0].shape == (5, 3) and 1 not in strides


def test_configs_refuse_bad_tiles():
    for bad in (dict(block_n=48), dict(block_k=0), dict(split_chunks=-1), dict(num_stages=9),
                dict(use_dot=1), dict(num_warps=3)):  # fmt: skip
        with pytest.raises(ValueError, match="GemvConfig"):
            GemvConfig(**bad)
    with pytest.raises(ValueError, match="NormCatConfig"):
        NormCatConfig(block_h=1000)
    assert GemvConfig(use_dot=False).block_t(1) == 1 and GemvConfig().block_t(5) == 16
    assert GemvConfig().block_t(33) == 64 and GemvConfig().block_t(300) == 64


def _operands(t=5, h=16, k=3, n=8, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(t, k * h, generator=g).to(dtype)
    return x, torch.randn(n, k * h, generator=g).to(dtype)


@pytest.mark.parametrize(
    "change, error, why",
    [
        (dict(path="fast"), ValueError, "path must be one of"),
        (dict(path="normcat", config=GemvConfig()), ValueError, "'normcat' with a GemvConfig"),
        (dict(config=(16, 32)), TypeError, "config must be one of"),
        (dict(backend="cuda"), ValueError, "backend must be"),
        (dict(config=GemvConfig(use_dot=False)), ValueError, "use_dot=False"),  # T = 5
        (dict(bias=torch.zeros(9, dtype=torch.bfloat16)), ValueError, "bias has shape"),
        (dict(out=torch.empty(5, 8)), ValueError, "out must be a torch.bfloat16 tensor"),
        (dict(norm="per_tap", norm_weights=torch.ones(3, 15)), ValueError, "norm_weights has 45"),
        (dict(norm="before_fc", norm_weight=torch.ones(40)), ValueError, "norm_weight has 40"),
    ],
)
def test_op_refuses_bad_paths_and_operands(change, error, why):
    x, w = _operands()
    kw = {"num_taps": 3, "backend": "triton", **change}
    with pytest.raises(error, match=re.escape(why)):
        eagle3_fused_fc(x, w, **kw)


def test_op_refuses_mismatched_taps_and_dtypes():
    x, w = _operands()
    taps = list(x.chunk(3, -1))
    with pytest.raises(ValueError, match="tap 1 is"):
        eagle3_fused_fc([taps[0], taps[1][:4], taps[2]], w, backend="triton")
    with pytest.raises(ValueError, match="fc_weight must be a 2-D torch.bfloat16"):
        eagle3_fused_fc(taps, w.float(), backend="triton")
    with pytest.raises(TypeError, match="the fused kernels take"):
        eagle3_fused_fc(x.to(torch.int32), w.to(torch.int32), num_taps=3, backend="triton")
    # valid operands on CPU without the interpreter: checked, then the PyTorch fallback
    assert torch.equal(
        eagle3_fused_fc(taps, w, backend="triton", path="gemv"),
        eagle3_fused_fc_reference(x, w, num_taps=3),
    )


# --------------------------------------------------------------------------------------------
# GPU


@pytest.mark.gpu
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("path, tokens", [("gemv", 1), ("gemv", 16), ("normcat", 64),
                                          ("normcat", 300)])  # fmt: skip
def test_gpu_paths_match_fp64(norm, path, tokens):
    case = path_case(0, path, norm, "packed", "bf16", tokens, 7168, None, n=7168)
    assert run_case(case, torch.device("cuda")) <= 1.0
