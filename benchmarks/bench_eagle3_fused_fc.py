"""eagle3_fused_fc's paths against the unfused path (RMSNorm(s), cat, cuBLAS linear), bf16, K = 3.

    python benchmarks/bench_eagle3_fused_fc.py [--json PATH] [--budget-s 420]

For T in the dispatch's T_BUCKETS (1 ... 4096), H in {4096, 7168} (N = H) and every norm
variant: checks each fused path (``eagle3_fused_fc_gemv`` up to T = 64, with its tuning
candidates up to T = 16; ``eagle3_fused_fc_normcat``; the ``tiled`` kernel) against an fp32
reference, times them and the unfused path as CUDA-graph replays
(``triton.testing.do_bench_cudagraph``: GPU time without Python launch overhead, as SGLang's
drafter runs under CUDA graphs at decode), and gives each time's bandwidth (essential bytes /
time) and the roofline floor max(bytes / measured copy bandwidth, FLOPs / measured bf16 matmul
rate). Prints one Markdown table, writes JSON, and prints the ``MEASURED_WINS`` entries (shapes
where a path's default tiles beat the unfused path by >= 3 %); benchmarks/gpu_check.py writes
them into the file ``eagle3_fused_fc_wins`` reads. The unfused norm is sgl_kernel.rmsnorm
when installed (what SGLang runs on CUDA), else a torch.compile'd RMSNorm (one kernel too),
eager PyTorch only if that fails. Without CUDA it prints that and exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a bare checkout
# the buckets use_fused looks up, and its win rule: one source for them
from sglang_eagle3.ops.eagle3_fused_fc_configs import T_BUCKETS  # noqa: E402
from sglang_eagle3.ops.eagle3_fused_fc_wins import is_win  # noqa: E402

TOKENS = T_BUCKETS
DEFAULTS = ("tiled", "gemv", "normcat")  # each path's default tiles; the rest: candidates
HIDDENS = (4096, 7168)
NORMS = ("none", "before_fc", "per_tap", "both")
K, EPS, TOL = 3, 1e-6, {False: 2e-2, True: 4e-2}


def _unfused_norm():
    """(norm, its name): one kernel per RMSNorm, as SGLang's sgl_kernel.rmsnorm is; eager
    PyTorch (several kernels: it would flatter the fused kernel) only when nothing else runs."""
    from sglang_eagle3.ops.rms_norm import rms_norm

    try:
        from sgl_kernel import rmsnorm

        def norm(x, w):
            return rmsnorm(x if x.is_contiguous() else x.contiguous(), w, EPS)

        return norm, "sgl_kernel.rmsnorm"
    except ImportError:
        pass

    def eager(x, w):  # x: [T, W], w: [W]
        return rms_norm(x, w, EPS, cast_before_weight=False)

    try:
        for limit in ("recompile_limit", "cache_size_limit"):  # a graph per shape, stride kind
            if hasattr(torch._dynamo.config, limit):
                setattr(torch._dynamo.config, limit, 256)
        compiled = torch.compile(eager, dynamic=True)
        probe = torch.randn(5, 3, 96, device="cuda", dtype=torch.bfloat16)[:, 1]  # strided
        pw = torch.rand(96, device="cuda", dtype=torch.bfloat16) + 0.5
        torch.testing.assert_close(compiled(probe, pw), eager(probe, pw))
        return compiled, "torch.compile'd RMSNorm (one kernel per norm)"
    except Exception as e:
        return eager, f"eager PyTorch RMSNorm (torch.compile failed: {type(e).__name__}: {e})"[:300]


def unfused(x, w, win, wtap, norm, rms):
    """SGLang's llama_eagle3 fc block: input_norm, per-chunk fc_norm + cat, linear."""
    h = rms(x, win) if norm in ("before_fc", "both") else x
    if norm in ("per_tap", "both"):
        h = torch.cat([rms(c, wtap[i]) for i, c in enumerate(h.chunk(K, -1))], -1)
    return torch.nn.functional.linear(h, w)


def measure_rates(bench) -> tuple[float, float]:
    """(copy bandwidth in bytes/s, bf16 matmul rate in FLOP/s) on this device."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    bw = 2 * src.numel() / (bench(lambda: dst.copy_(src)) * 1e-3)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    rate = 2 * 8192**3 / (bench(lambda: a @ b) * 1e-3)
    return bw, rate


def candidate_configs(tokens, hidden, fc_tiles) -> dict[str, tuple[str, object]]:
    """name -> (path, tiles) of what is timed: each path's default tiles (what eagle3_fused_fc
    picks on this device), and at T <= 16 the GEMV's tuning candidates."""
    cap = torch.cuda.get_device_capability()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bf16 = torch.bfloat16
    cfgs = {
        "tiled": ("tiled", fc_tiles.pick_config(tokens, hidden, hidden, K, bf16, cap, sms)),
        "normcat": ("normcat", fc_tiles.pick_normcat_config(hidden, bf16)),
    }
    if tokens <= 64:
        cfgs["gemv"] = (
            "gemv",
            fc_tiles.pick_gemv_config(tokens, hidden, hidden, K, bf16, cap, sms),
        )
    if tokens <= 16:
        for cfg in fc_tiles.gemv_candidates(tokens, hidden, hidden, K, bf16, cap, sms)[1:]:
            name = f"gemv {cfg.block_n}x{cfg.block_k} C{cfg.split_chunks}"
            cfgs[name + ("" if cfg.use_dot else " fma")] = ("gemv", cfg)
    return cfgs


def run(budget_s: float) -> dict:
    import triton.testing

    from sglang_eagle3.ops import eagle3_fused_fc_tiles as fc_tiles
    from sglang_eagle3.ops.eagle3_fused_fc import eagle3_fused_fc, eagle3_fused_fc_reference

    start = time.monotonic()

    def bench(fn):
        return triton.testing.do_bench_cudagraph(fn, rep=10)  # ms

    rms, norm_impl = _unfused_norm()
    bw, rate = measure_rates(bench)
    rows, skipped = [], []
    for hidden in HIDDENS:
        g = torch.Generator(device="cuda").manual_seed(hidden)
        w = torch.randn(hidden, K * hidden, device="cuda", generator=g) / (K * hidden) ** 0.5
        w = w.to(torch.bfloat16)
        w32 = w.float()
        win = (torch.rand(K * hidden, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
        wtap = (torch.rand(K, hidden, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
        for tokens in TOKENS:
            x = torch.randn(tokens, K * hidden, device="cuda", generator=g).to(torch.bfloat16)
            nbytes = (w.numel() + x.numel() + tokens * hidden) * 2
            floor_us = max(nbytes / bw, 2 * tokens * hidden * K * hidden / rate) * 1e6
            for norm in NORMS:
                late = time.monotonic() - start > budget_s
                if time.monotonic() - start > budget_s + 45:  # keep within one device call
                    skipped.append((hidden, tokens, norm))
                    continue
                kw = dict(norm=norm, norm_weight=win, norm_weights=wtap, eps=EPS, num_taps=K)
                ref = eagle3_fused_fc_reference(
                    x.float(), w32, norm=norm, norm_weight=win.float(),
                    norm_weights=wtap.float(), eps=EPS, num_taps=K,
                )  # fmt: skip
                tol = TOL[norm != "none"]
                row = dict(H=hidden, T=tokens, norm=norm, floor_us=floor_us, configs={})
                args = (x, w, win, wtap, norm, rms)
                row["unfused_us"] = 1e3 * bench(lambda args=args: unfused(*args))
                row["unfused_GBps"] = nbytes / (row["unfused_us"] * 1e3)
                cfgs = candidate_configs(tokens, hidden, fc_tiles)
                for name, (path, cfg) in cfgs.items():
                    if late and name not in DEFAULTS:
                        continue
                    out = torch.empty(tokens, hidden, device="cuda", dtype=torch.bfloat16)

                    def fused(cfg=cfg, out=out, x=x, w=w, kw=kw, path=path):
                        return eagle3_fused_fc(
                            x, w, out=out, backend="triton", config=cfg, path=path, **kw
                        )

                    got = fused().float()
                    err = ((got - ref).abs() / (tol + tol * ref.abs())).max().item()
                    us = 1e3 * bench(fused)
                    timing = dict(path=path, cfg=dataclasses.asdict(cfg), us=us, err=err)
                    timing["GBps"] = nbytes / (us * 1e3)
                    row["configs"][name] = timing
                rows.append(row)
                del ref
    return dict(
        device=torch.cuda.get_device_name(),
        capability=list(torch.cuda.get_device_capability()),
        bandwidth_GBps=bw / 1e9,
        matmul_TFLOPs=rate / 1e12,
        unfused_norm=norm_impl,
        rows=rows,
        skipped_for_time=skipped,
        wall_s=time.monotonic() - start,
    )


def report(res: dict) -> str:
    lines = [
        f"{res['device']} (sm_{''.join(map(str, res['capability']))}): copy "
        f"{res['bandwidth_GBps']:.0f} GB/s, bf16 matmul {res['matmul_TFLOPs']:.0f} TFLOP/s; "
        f"unfused norm: {res['unfused_norm']}; times are CUDA-graph replays (us), bandwidth = "
        "essential bytes (weight + input + output) / time",
        "",
        "| H | T | norm | floor | unfused (GB/s) | tiled | gemv | normcat | best (GB/s, % of copy)"
        " | speedup | err/tol |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    wins = []
    for r in res["rows"]:
        c = r["configs"]
        best_name = min(c, key=lambda n: c[n]["us"])
        best = c[best_name]
        worst_err = max(v["err"] for v in c.values())
        cells = [f"{c[p]['us']:.1f}" if p in c else "-" for p in DEFAULTS]
        pct = 100 * best["GBps"] / res["bandwidth_GBps"]
        lines.append(
            f"| {r['H']} | {r['T']} | {r['norm']} | {r['floor_us']:.1f} | {r['unfused_us']:.1f} "
            f"({r['unfused_GBps']:.0f}) | {' | '.join(cells)} | {best['us']:.1f} {best_name} "
            f"({best['GBps']:.0f}, {pct:.0f} %) | {r['unfused_us'] / best['us']:.2f}x "
            f"| {worst_err:.2f} |"
        )
        path_best = min((p for p in DEFAULTS if p in c), key=lambda p: c[p]["us"])
        if is_win(c[path_best]["us"], r["unfused_us"]) and worst_err <= 1.0:
            wins.append((r["norm"], r["T"], r["H"], K, path_best))
    if res["skipped_for_time"]:
        lines += ["", f"not run (time budget): {res['skipped_for_time']}"]
    lines += ["", "MEASURED_WINS entries (a path's default tiles >= 3 % faster, correct):"]
    return "\n".join(lines + [repr(wins)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    out_dir = Path(os.environ.get("OUT", "."))
    parser.add_argument("--json", type=Path, default=out_dir / "bench_eagle3_fused_fc.json")
    parser.add_argument("--budget-s", type=float, default=420.0, help="then default tiles only")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to time")
        return 0
    res = run(args.budget_s)
    print(report(res))
    args.json.write_text(json.dumps(res, indent=1))
    print(f"\nwrote {args.json} ({res['wall_s']:.0f} s)")
    bad = [r for r in res["rows"] if any(c["err"] > 1.0 for c in r["configs"].values())]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
