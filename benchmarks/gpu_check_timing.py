"""benchmarks/gpu_check.py's steps 3 and 4: GEMV tile tuning, then every fused path timed against
norm + cat + cuBLAS, with bytes moved, GB/s and the share of the HBM peak.

Imported by gpu_check.py once it has put the repository and benchmarks/ on ``sys.path``.
"""

from __future__ import annotations

import dataclasses
import math
import time
import traceback

import bench_eagle3_fused_fc as bench  # the unfused path and its tolerances
import torch

from sglang_eagle3.ops import eagle3_fused_fc_cases as fc_cases
from sglang_eagle3.ops import eagle3_fused_fc_configs as fc_configs
from sglang_eagle3.ops import eagle3_fused_fc_tiles as fc_tiles
from sglang_eagle3.ops import eagle3_fused_fc_wins as fc_wins
from sglang_eagle3.ops.eagle3_fused_fc import NORMS, eagle3_fused_fc
from sglang_eagle3.ops.eagle3_fused_fc import eagle3_fused_fc_reference as reference
from sglang_eagle3.ops.rms_norm import rms_norm

# (drafter, hidden H = fc output N, taps K) whose fc block is timed; bench.unfused takes K = 3
SHAPES = (("Kimi-K2.5", 7168, 3), ("Llama-3.1-70B", 8192, 3), ("Llama-3.1-8B", 4096, 3))
DRY_SCALE, DRY_MAX_T = 128, 64  # dry run: hidden / 128, T <= 64 (prefill takes seconds there)
BF16, EPS = torch.bfloat16, bench.EPS
GEMV_MAX_T = 64  # the GEMV is timed up to this bucket (tuned up to 16: GEMV_TUNED_T)
TUNE_REP_MS, TIME_REP_MS = 5, 10  # do_bench_cudagraph repetition time per measurement
DRY_TUNE_CANDIDATES = 2  # a dry run tries this many GEMV tiles per shape

_ratio = fc_cases.error_ratio


def cap_sms(dev: torch.device) -> tuple[tuple[int, int], int]:
    if dev.type != "cuda":
        return (9, 0), 132  # pick_config's defaults (the interpreter ignores them)
    props = torch.cuda.get_device_properties(dev)
    return (props.major, props.minor), props.multi_processor_count


def _baseline_norm(dry: bool):
    """(rms, its name, whether it is one kernel per norm, as SGLang's sgl_kernel.rmsnorm is)."""
    if dry:
        return (lambda x, w: rms_norm(x, w, EPS, cast_before_weight=False)), "eager", False
    rms, name = bench._unfused_norm()  # eager only if torch.compile failed: norm wins void
    return rms, name, not name.startswith("eager")


def _wall_us(fn) -> tuple[torch.Tensor, float]:
    start = time.perf_counter()
    return fn(), (time.perf_counter() - start) * 1e6


def _timer(dry: bool, rep_ms: int):
    """GPU time of one call in us (CUDA-graph replays), or None in a dry run."""
    if dry:
        return None
    import triton.testing

    return lambda fn: 1e3 * triton.testing.do_bench_cudagraph(fn, rep=rep_ms)


def hbm_rates(dev: torch.device, dry: bool) -> dict:
    """The HBM peak rows are compared with: nominal (2 x memory clock x bus width, from the
    device properties) and a measured device-to-device copy of 1 GiB (read + write)."""
    if dry:
        return dict(nominal_GBps=None, copy_GBps=None, peak_GBps=None, peak="none (dry run)")
    props = torch.cuda.get_device_properties(dev)
    clock_khz, bus_bits = (getattr(props, f, 0) for f in ("memory_clock_rate", "memory_bus_width"))
    nominal = 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9 if clock_khz and bus_bits else None
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy = 2 * src.numel() / (_timer(False, TIME_REP_MS)(lambda: dst.copy_(src)) * 1e3)
    peak, name = (nominal, "nominal") if nominal else (copy, "measured copy")
    return dict(nominal_GBps=nominal and round(nominal), copy_GBps=round(copy),
                peak_GBps=round(peak), peak=name)  # fmt: skip


def _traffic(t: int, n: int, h: int, k: int, norm: str, esize: int = 2) -> int:
    """Essential bytes of the fc block: weight, input, output and the norm weights it reads."""
    norm_w = k * h * ((norm in ("before_fc", "both")) + (norm in ("per_tap", "both")))
    return (n * k * h + t * k * h + t * n + norm_w) * esize


def _rates(us: float, nbytes: int, flops: int, rates: dict) -> dict:
    gbps = nbytes / (us * 1e3)
    out = dict(GBps=round(gbps, 1), TFLOPs=round(flops / (us * 1e6), 2))
    for name in ("peak", "copy"):
        ref = rates.get(f"{name}_GBps")
        out[f"{name}_frac"] = round(gbps / ref, 4) if ref else None
    return out


def make_drafters(dev: torch.device, dry: bool) -> tuple[list[tuple[str, int, int]], dict]:
    """(name, H, K) of the timed fc blocks, and per name (w, w32, win, wtap) on ``dev``."""
    shapes, params = [(n, h // DRY_SCALE if dry else h, k) for n, h, k in SHAPES], {}
    for name, h, k in shapes:
        g = torch.Generator(device=dev).manual_seed(h)
        w = (torch.randn(h, k * h, generator=g, device=dev) / (k * h) ** 0.5).to(BF16)
        win = torch.rand(k * h, generator=g, device=dev) + 0.5
        wtap = torch.rand(k, h, generator=g, device=dev) + 0.5
        params[name] = (w, w.float(), win.to(BF16), wtap.to(BF16))
    return shapes, params


def tune_gemv(dev: torch.device, dry: bool, deadline: float, drafters, rates: dict) -> dict:
    """Per (H, K, T bucket <= 16): every ``gemv_candidates`` tiling, norm none, checked against
    an fp32 reference and timed; the fastest correct one goes into ``fc_wins.TUNED_GEMV`` (what
    step 4 and, from the written file, the dispatch use)."""
    shapes, params = drafters
    timer = _timer(dry, TUNE_REP_MS)
    cap, sms = cap_sms(dev)
    tuned, skipped, tol = [], [], bench.TOL[False]
    for t in fc_wins.GEMV_TUNED_T:
        for name, h, k in shapes:
            key = dict(shape=name, H=h, K=k, N=h, T=t)
            if time.monotonic() > deadline:
                skipped.append(dict(key, why="time budget"))
                continue
            w, w32 = params[name][:2]
            x = torch.randn(t, k * h, device=dev).to(BF16)
            ref = reference(x.float(), w32, num_taps=k)
            out = torch.empty(t, h, device=dev, dtype=BF16)
            cands = fc_tiles.gemv_candidates(t, h, h, k, BF16, cap, sms)
            tried = []
            for cfg in cands[:DRY_TUNE_CANDIDATES] if dry else cands:
                if time.monotonic() > deadline:
                    break

                def fused(cfg=cfg, x=x, w=w, out=out, k=k) -> torch.Tensor:
                    return eagle3_fused_fc(x, w, out=out, num_taps=k, backend="triton", config=cfg)

                rec = dict(config=dataclasses.asdict(cfg))
                try:
                    got, us = _wall_us(fused)
                    rec["err_ratio"] = round(min(_ratio(got, ref, tol), 1e9), 4)
                    rec["ok"] = rec["err_ratio"] <= 1
                    rec["us"] = round(timer(fused) if timer else us, 2)
                except Exception as e:  # out of shared memory: a tiling this GPU cannot run
                    rec.update(ok=False, error=traceback.format_exc(limit=3)[-800:])
                    rec["infeasible"] = type(e).__name__ == "OutOfResources"
                tried.append(rec)
            good = [r for r in tried if r["ok"]]
            if not good:
                skipped.append(dict(key, why="no candidate ran correctly", candidates=tried))
                continue
            best = min(good, key=lambda r: r["us"])
            cfg = fc_configs.GemvConfig(**best["config"])
            fc_wins.TUNED_GEMV[(h, k, t)] = (h, cfg)
            traffic = _traffic(t, h, h, k, "none")
            tuned.append(dict(key, config=best["config"], us=best["us"],
                              **_rates(best["us"], traffic, 2 * t * h * k * h, rates),
                              candidates=tried))  # fmt: skip
    method = "one call's wall clock under the Triton interpreter (a dry run: says nothing)"
    if not dry:
        method = f"CUDA-graph replays (do_bench_cudagraph, rep={TUNE_REP_MS} ms, mean), norm none"
    return dict(method=method, tuned=tuned, skipped=skipped)


def _paths_for(t: int, dry: bool) -> list[str]:
    """The fused paths timed at T: gemv up to GEMV_MAX_T, normcat everywhere. A dry run (the
    interpreter's cost is per program, normcat runs one per row) takes normcat at T = 1 only."""
    if dry:
        return ["gemv", "normcat"] if t == 1 else ["gemv"]
    return ["gemv", "normcat"] if t <= GEMV_MAX_T else ["normcat"]


def _time_row(key: dict, x: torch.Tensor, params: tuple, timer, rms, rates: dict) -> dict:
    """Every fused path against bench.unfused at one shape; x: [T, K*H] bf16."""
    (w, w32, win, wtap), norm, t, h, k = params, *(key[f] for f in ("norm", "T", "H", "K"))
    kw = dict(norm=norm, norm_weight=win, norm_weights=wtap, eps=EPS, num_taps=k)
    out = torch.empty(t, h, device=x.device, dtype=BF16)
    cap, sms = cap_sms(x.device)
    ref = reference(x.float(), w32, **dict(kw, norm_weight=win.float(), norm_weights=wtap.float()))
    tol = bench.TOL[norm != "none"]
    traffic, flops = _traffic(t, h, h, k, norm), 2 * t * h * k * h
    paths = {}
    for path in _paths_for(t, timer is None):

        def fused(path=path) -> torch.Tensor:
            return eagle3_fused_fc(x, w, out=out, backend="triton", path=path, **kw)

        cfg = (fc_tiles.pick_gemv_config(t, h, h, k, BF16, cap, sms, norm=norm) if path == "gemv"
               else fc_tiles.pick_normcat_config(h, BF16))  # fmt: skip
        rec = dict(config=dataclasses.asdict(cfg))
        try:
            got, us = _wall_us(fused)  # a dry run's timing: the interpreter's wall clock, once
            err = _ratio(got, ref, tol)
            rec.update(err_ratio=round(err, 4) if err < math.inf else None, ok=err <= 1)
            rec["us"] = round(timer(fused) if timer else us, 2)
            rec.update(_rates(rec["us"], traffic, flops, rates))
        except Exception:
            rec.update(ok=False, err_ratio=None, error=traceback.format_exc(limit=3)[-800:])
        paths[path] = rec

    def unfused() -> torch.Tensor:
        return bench.unfused(x, w, win, wtap, norm, rms)

    u_us = timer(unfused) if timer else _wall_us(unfused)[1]
    timed = {p: r for p, r in paths.items() if "us" in r}
    good = {p: r for p, r in timed.items() if r["ok"]} or timed
    best = min(good, key=lambda p: good[p]["us"]) if good else None
    b = paths[best] if best else dict(us=None, err_ratio=None, config=None)  # all raised
    row = dict(key, N=h, path=best, fused_us=b["us"], unfused_us=round(u_us, 2))
    speedup = round(u_us / b["us"], 4) if best else None
    row.update(speedup=speedup, err_ratio=b["err_ratio"], bytes=traffic)
    row.update({f"fused_{f}": b.get(f) for f in ("GBps", "peak_frac", "copy_frac", "TFLOPs")})
    row.update({f"unfused_{f}": v for f, v in _rates(u_us, traffic, flops, rates).items()})
    return dict(row, ok=all(r["ok"] for r in paths.values()), config=b["config"], paths=paths)


def timing(dev: torch.device, dry: bool, deadline: float, drafters, rates: dict) -> dict:
    """Per T (small first: the budget cuts prefill sizes, not decode) x drafter x norm."""
    rms, norm_impl, fair = _baseline_norm(dry)
    timer, method = _timer(dry, TIME_REP_MS), "dry run, hidden / 128: one eager call's wall "
    method += "clock on CPU (Triton interpreter), which says nothing about a GPU"
    if not dry:
        method = f"CUDA-graph replays (triton.testing.do_bench_cudagraph, rep={TIME_REP_MS} ms, "
        method += "mean)"
    shapes, params = drafters
    rows, skipped, errors = [], [], []
    for t in fc_configs.T_BUCKETS:
        for name, h, k in shapes:
            x = torch.randn(t, k * h, device=dev).to(BF16)
            for norm in NORMS:
                key = dict(shape=name, norm=norm, T=t, H=h, K=k)
                if dry and t > DRY_MAX_T:
                    skipped.append(dict(key, why=f"dry run: T > {DRY_MAX_T} not timed"))
                elif time.monotonic() > deadline:
                    skipped.append(dict(key, why="time budget"))
                else:
                    try:
                        rows.append(_time_row(key, x, params[name], timer, rms, rates))
                    except Exception:
                        errors.append(dict(key, error=traceback.format_exc(limit=4)[-1500:]))
    shapes = [dict(name=n, H=h, K=k, N=h) for n, h, k in shapes]
    bytes_are = "weight + input + output + norm weights, bf16 (each read or written once)"
    return dict(method=method, dtype="bfloat16", unfused_norm=norm_impl, norm_baseline_fused=fair,
                bytes=bytes_are, shapes=shapes, rows=rows, skipped=skipped,
                errors=errors)  # fmt: skip


def wins_of(tim: dict, dry: bool) -> list[dict]:
    """The dispatch's rule (row_is_win), with the path that won; none from a dry run (not a
    measurement), and the norm modes only when the unfused norm was one kernel."""
    fair = NORMS if tim["norm_baseline_fused"] else ("none",)
    rows = [r for r in tim["rows"] if not dry and r["norm"] in fair and fc_wins.row_is_win(r)]
    return [{f: r[f] for f in ("norm", "T", "H", "K", "path")} for r in rows]
