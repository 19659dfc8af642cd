"""eagle3_fused_fc: the fused norm + concat + fc kernel of the EAGLE-3 drafter.

- Kernel numerics run under the Triton interpreter in ONE subprocess (TRITON_INTERPRET must be set
  before triton is imported, and this process must stay unaffected), against an fp64 reference.
- Ahead-of-time compilation for sm_90 / sm_100 / sm_120 with no GPU: which matrix instructions.
- Dispatch and the PyTorch fallback on CPU; GPU-only checks are marked ``gpu``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sglang_eagle3.ops import eagle3_fused_fc_configs as fc_configs
from sglang_eagle3.ops import eagle3_fused_fc_dispatch as dispatch
from sglang_eagle3.ops import eagle3_fused_fc_tiles as fc_tiles
from sglang_eagle3.ops import eagle3_fused_fc_wins as fc_wins
from sglang_eagle3.ops.eagle3_fused_fc import NORMS, eagle3_fused_fc, eagle3_fused_fc_reference
from sglang_eagle3.ops.eagle3_fused_fc_cases import TOL, interp_cases

SCRIPT = Path(__file__).parent / "scripts" / "eagle3_fused_fc_interp.py"
CASES = interp_cases()


@pytest.fixture(scope="module")
def interp_results() -> dict[str, dict]:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], input=json.dumps(CASES), env=env,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            results[row["id"]] = row
    assert results, f"interpreter run produced nothing:\n{proc.stderr[-4000:]}"
    return results


@pytest.mark.slow  # one Triton-interpreter run of every case: a minute or more on 2 cores
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_interpreter_matches_fp64_reference(case, interp_results):
    row = interp_results.get(case["id"])
    assert row is not None, "case did not run (subprocess died?)"
    assert row["ok"], f"ratio {row['ratio']} (tol {case['tol']}): {row['why']}"


# --------------------------------------------------------------------------------------------
# Dispatch and the CPU fallback


def _inputs(t=5, h=16, k=3, n=24, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, k * h, generator=g).to(dtype)
    w = torch.randn(n, k * h, generator=g).to(dtype)
    win = (torch.rand(k * h, generator=g) + 0.5).to(dtype)
    wtap = (torch.rand(k, h, generator=g) + 0.5).to(dtype)
    return x, w, win, wtap


@pytest.mark.parametrize("norm", NORMS)
def test_cpu_auto_takes_the_fallback_bit_for_bit(norm):
    x, w, win, wtap = _inputs(dtype=torch.bfloat16)
    assert not dispatch.use_fused(5, 16, 3, norm, "cpu")
    kw = dict(norm=norm, norm_weight=win, norm_weights=wtap, eps=1e-6, num_taps=3)
    got = eagle3_fused_fc(list(x.chunk(3, -1)), w, **kw)
    assert torch.equal(got, eagle3_fused_fc_reference(x, w, **kw))


def test_rms_norm_names_its_rounding():
    """One RMSNorm: HF/speculators round the normed input before the weight, SGLang after."""
    from sglang_eagle3.ops.rms_norm import rms_norm

    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(64, 32, generator=g).bfloat16(), (torch.rand(32, generator=g) + 0.5)
    w = w.bfloat16()
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)  # fp32 statistics
    hf, sglang = (rms_norm(x, w, 1e-6, cast_before_weight=c) for c in (True, False))
    assert torch.equal(hf, w * normed.bfloat16())
    assert torch.equal(sglang, (normed * w).bfloat16())
    assert not torch.equal(hf, sglang)  # bf16: one rounding apart somewhere
    same = [rms_norm(x32, w.float(), 1e-6, cast_before_weight=c) for c in (True, False)]
    assert torch.equal(same[0], same[1]) and torch.equal(same[0], normed * w.float())
    assert rms_norm(x.double(), w.double(), 1e-6, cast_before_weight=True).dtype == torch.float64


def test_reference_is_sglang_rmsnorm_order():
    """input_norm over the concat, then one norm per chunk, then fc (llama_eagle3.py L237-247)."""
    x, w, win, wtap = _inputs(dtype=torch.float64)

    def rms(v, g):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * g

    h = rms(x, win)
    h = torch.cat([rms(c, wtap[i]) for i, c in enumerate(h.chunk(3, -1))], -1)
    got = eagle3_fused_fc_reference(x, w, norm="both", norm_weight=win, norm_weights=wtap)
    torch.testing.assert_close(got, h @ w.T, rtol=1e-12, atol=1e-12)


def test_bad_arguments_are_refused():
    x, w, win, wtap = _inputs()
    with pytest.raises(ValueError, match="norm must be"):
        eagle3_fused_fc(x, w, norm="layer")
    with pytest.raises(ValueError, match="needs norm_weight"):
        eagle3_fused_fc(x, w, norm="before_fc")
    with pytest.raises(ValueError, match="2 fc_norm weights for 3 taps"):
        eagle3_fused_fc(list(x.chunk(3, -1)), w, norm="per_tap", norm_weights=wtap[:2])
    with pytest.raises(ValueError, match="does not take"):
        eagle3_fused_fc(x[:, :40], w, norm="per_tap", norm_weights=wtap)


@pytest.fixture
def fake_sm90(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(dispatch, "_triton_available", lambda: True)
    monkeypatch.delenv(dispatch.ENV_SWITCH, raising=False)


def test_use_fused_only_where_measured_and_env_switch(fake_sm90, monkeypatch):
    for norm, t, h, k in fc_wins.MEASURED_WINS:  # the checked-in GPU run's wins
        assert dispatch.use_fused(t, h, k, norm, "cuda:0")
    # every other shape that run timed was not >= 3 % faster fused: norm + cat + cuBLAS
    rows = json.loads(fc_wins.WINS_FILE.read_text())["timing"]["rows"]
    slower = {(r["norm"], r["T"], r["H"], r["K"]) for r in rows} - fc_wins.MEASURED_WINS
    assert slower and not any(dispatch.use_fused(t, h, k, n, "cuda:0") for n, t, h, k in slower)
    assert not dispatch.use_fused(1, 1234, 3, "per_tap", "cuda:0")  # never measured
    monkeypatch.setattr(fc_wins, "MEASURED_WINS", frozenset())
    assert not dispatch.use_fused(1, 4096, 3, "none", "cuda:0")  # nothing measured: fallback
    monkeypatch.setattr(fc_wins, "MEASURED_WINS", frozenset({("per_tap", 16, 7168, 3)}))
    assert dispatch.use_fused(9, 7168, 3, "per_tap", "cuda:0")  # bucket 16
    assert not dispatch.use_fused(17, 7168, 3, "per_tap", "cuda:0")  # bucket 64
    monkeypatch.setenv(dispatch.ENV_SWITCH, "0")
    assert not dispatch.use_fused(9, 7168, 3, "per_tap", "cuda:0")
    monkeypatch.setenv(dispatch.ENV_SWITCH, "1")
    assert dispatch.use_fused(300, 4096, 3, "none", "cuda:0")
    assert not dispatch.use_fused(300, 4096, 3, "none", "cpu")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert not dispatch.use_fused(300, 4096, 3, "none", "cuda:0")


def test_configs_split_only_when_output_tiles_are_few(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    decode = fc_tiles.pick_config(1, 7168, 7168, 3, torch.bfloat16)
    assert (decode.block_m, decode.block_n, decode.split_chunks) == (16, 32, 0)  # 224 tiles
    t64 = fc_tiles.pick_config(64, 7168, 7168, 3, torch.bfloat16)
    assert t64.split_chunks >= 1  # 112 tiles < 132 SMs
    assert fc_tiles.pick_config(8192, 7168, 7168, 3, torch.bfloat16).split_chunks == 0
    prefill = fc_tiles.pick_config(8192, 7168, 7168, 3, torch.bfloat16)
    assert prefill.prescale and (prefill.block_m, prefill.block_n) == (128, 128)
    small = fc_tiles.pick_config(64, 7168, 7168, 3, torch.bfloat16, capability=(12, 0))
    assert small.num_stages * (64 + 64) * small.block_k * 2 <= 96 * 1024  # sm_120: ~99 KiB


def test_bench_runs_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("has CUDA: the benchmark would really run")
    bench = Path(__file__).parents[1] / "benchmarks" / "bench_eagle3_fused_fc.py"
    proc = subprocess.run([sys.executable, str(bench)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no CUDA device: nothing to time" in proc.stdout


# --------------------------------------------------------------------------------------------
# GPU


@pytest.mark.gpu
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("tokens", [1, 64, 300])
@pytest.mark.parametrize("split", [None, 0, 1])
def test_gpu_kernel_matches_fp64(norm, tokens, split):
    x, w, win, wtap = (v.cuda() for v in _inputs(tokens, 7168, 3, 7168, torch.bfloat16, tokens))
    w = w / 7168**0.5
    kw = dict(norm=norm, norm_weight=win, norm_weights=wtap, eps=1e-6, num_taps=3)
    cfg = None
    if split is not None:
        base = fc_tiles.pick_config(tokens, 7168, 7168, 3, torch.bfloat16)
        cfg = fc_configs.FusedFcConfig(base.block_m, base.block_n, base.block_k, split)
    out = torch.full((tokens, 7168), float("nan"), device="cuda", dtype=torch.bfloat16)
    got = eagle3_fused_fc(x, w, out=out, backend="triton", config=cfg, path="tiled", **kw)
    ref = eagle3_fused_fc_reference(
        x.double(), w.double(), norm=norm, norm_weight=win.double(),
        norm_weights=wtap.double(), eps=1e-6, num_taps=3,
    )  # fmt: skip
    tol = TOL["bf16"][norm != "none"]
    torch.testing.assert_close(got.double(), ref, rtol=tol, atol=tol)
