"""One prepared GPU check of the fused EAGLE-3 fc paths, one call of at most 6 minutes.

    PYTHONPATH=. python benchmarks/gpu_check.py --out gpu_check.json     # --budget-s 300
    python benchmarks/gpu_check.py --cpu-dry-run --out X   # every step, tiny, Triton interpreter

Every step has a deadline inside --budget-s (cold Triton caches included), so the whole call,
imports and CUDA start included, stays near budget + 20 s; what did not fit is listed, never
silently dropped. In order:

1. correctness (to 20 % of the budget): ``gemv`` (the dispatch's tiles, unsplit, FMA),
   ``normcat`` and last the ``tiled`` kernel against an fp64 reference at H = N = 7168, every norm;
2. graph: ``install_fused_fc`` on a stand-in of SGLang's LlamaModel fc block, captured in a CUDA
   graph and replayed, against eager (the fused path forced, and the dispatch's choice);
3. GEMV tiles (to 40 %): ``gemv_candidates`` timed per (H, taps, T bucket <= 16) for three
   drafters' fc blocks (norm none, the hardest to beat); the fastest correct tiles are installed
   for step 4 and written to ``gemv_tuning``, which the dispatch reads (``TUNED_GEMV``);
4. timing (to 85 %): every fused path (gemv up to T = 64, normcat) against norm + cat + cuBLAS,
   CUDA-graph replays, bf16, at the dispatch's T_BUCKETS, small T first. Each row gives the
   achieved bandwidth (essential bytes: weight + input + output + norm weights, over the time)
   and its fraction of the HBM peak (nominal from the memory clock and bus width, and the
   measured device-to-device copy rate) beside the speedup;
5. the interpreter tests' matrices (gemv / normcat cases first, then the tiled kernel's) while
   the budget lasts;
6. one JSON file; copied to sglang_eagle3/ops/eagle3_fused_fc_wins.json, its ``wins`` (each with
   the path that won it) become the dispatch's MEASURED_WINS / MEASURED_PATHS. Exit 1 when a
   check fails, 2 when it cannot run.
Imports torch, triton and sglang_eagle3.ops only: GPU machines may have no SGLang or network.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # runnable from a bare checkout
import bench_eagle3_fused_fc as bench  # noqa: E402  (the unfused path and its tolerances)

from sglang_eagle3.ops import eagle3_fused_fc_cases as fc_cases  # noqa: E402
from sglang_eagle3.ops import eagle3_fused_fc_dispatch as dispatch  # noqa: E402
from sglang_eagle3.ops.eagle3_fused_fc import NORMS, eagle3_fused_fc  # noqa: E402
from sglang_eagle3.ops.eagle3_fused_fc import eagle3_fused_fc_reference as reference  # noqa: E402
from sglang_eagle3.ops.eagle3_fused_fc_patch import install_fused_fc  # noqa: E402
from sglang_eagle3.ops.rms_norm import rms_norm  # noqa: E402

# (drafter, hidden H = fc output N, taps K) whose fc block is timed; bench.unfused takes K = 3
SHAPES = (("Kimi-K2.5", 7168, 3), ("Llama-3.1-70B", 8192, 3), ("Llama-3.1-8B", 4096, 3))
DRY_SCALE, DRY_MAX_T = 128, 64  # dry run: hidden / 128, T <= 64 (prefill takes seconds there)
GRAPH_T = (1, 64, 256)  # at H = 7168, forced: the split-K GEMV (T = 1), then normcat + cuBLAS
BF16, EPS = torch.bfloat16, bench.EPS
DEFAULT_BUDGET_S = 300.0  # + imports and CUDA start: one call inside 6 minutes, cold caches
# Deadlines, as fractions of the budget, of the steps that stop early when time runs out.
DEADLINES = {"correctness": 0.2, "gemv tiles": 0.4, "timing": 0.85, "interp": 1.0}
GEMV_MAX_T = 64  # the GEMV is timed up to this bucket (tuned up to 16: GEMV_TUNED_T)
TUNE_REP_MS, TIME_REP_MS = 5, 10  # do_bench_cudagraph repetition time per measurement
DRY_TUNE_CANDIDATES = 2  # a dry run tries this many GEMV tiles per shape


def interp_matrix() -> list[dict]:
    """The interpreter tests' cases (ops/eagle3_fused_fc_cases: one table): the gemv and normcat
    paths' first (tests/test_eagle3_fused_fc_gemv.py), then the tiled kernel's
    (tests/test_eagle3_fused_fc.py)."""
    return fc_cases.gemv_cases() + fc_cases.normcat_cases() + fc_cases.interp_cases()


def gpu_test_matrix(dev: torch.device) -> list[dict]:
    """Packed bf16, K = 3, H = N = 7168 (32 in a dry run), every norm: gemv at T = 1 and 16 with
    the dispatch's tiles, unsplit and FMA at T = 1; normcat at T = 64 and 300; then the tiled
    kernel (pick_config's tiles) at T = 1, 64, 300 (tests/test_eagle3_fused_fc.py's GPU test)."""
    h, first, last = 7168 if dev.type == "cuda" else 32, [], []
    variants = [("gemv", 1, None), ("gemv", 16, None), ("gemv", 1, (32, 128, 0, True)),
                ("gemv", 1, (32, 256, 0, False)), ("normcat", 64, None), ("normcat", 300, None),
                ("tiled", 1, None), ("tiled", 64, None), ("tiled", 300, None)]  # fmt: skip
    for path, t, tiles in variants:
        for norm in NORMS:
            cfg = None
            if tiles is not None:
                bn, bk, split, dot = tiles
                cfg = dict(block_n=bn, block_k=min(bk, h), split_chunks=split, num_warps=4,
                           num_stages=3, use_dot=dot)  # fmt: skip
            c = fc_cases.path_case(0, path, norm, "packed", "bf16", t, h, cfg, n=h)
            c.update(bias=False, strided_out=False, seed=t, tol=bench.TOL[norm != "none"])
            c["id"] = c["id"].replace("-biasTrue", "").replace("-biasFalse", "")
            (last if path == "tiled" else first).append(c)
    return first + last


def correctness(cases: list[dict], dev: torch.device, deadline: float, dry_every: int) -> dict:
    """Every case until the deadline (a dry run: T <= DRY_MAX_T, 1 case in ``dry_every``)."""
    results, skipped = [], []
    for i, case in enumerate(cases):
        if dry_every and (case["T"] > DRY_MAX_T or i % dry_every):
            skipped.append(dict(id=case["id"], why=f"dry run: T <= {DRY_MAX_T}, 1 in {dry_every}"))
        elif time.monotonic() > deadline:
            skipped.append(dict(id=case["id"], why="time budget"))
        else:
            results.append(fc_cases.check(case, dev))
    return dict(cases=results, skipped=skipped)


def _check(cid: str, fn) -> dict:
    """One check: ``fn`` returns its error ratio; an exception fails it."""
    try:
        ratio = fn()
    except Exception:
        return dict(id=cid, ok=False, ratio=None, why=traceback.format_exc(limit=4)[-1500:])
    finite = ratio < math.inf
    why = None if ratio <= 1 else "above tolerance" if finite else "output not finite (unwritten?)"
    return dict(id=cid, ok=ratio <= 1, ratio=round(ratio, 4) if finite else None, why=why)


_ratio = fc_cases.error_ratio


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


def _drafters(dev: torch.device, dry: bool) -> tuple[list[tuple[str, int, int]], dict]:
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
    an fp32 reference and timed; the fastest correct one goes into ``dispatch.TUNED_GEMV`` (what
    step 4 and, from the written file, the dispatch use)."""
    shapes, params = drafters
    timer = _timer(dry, TUNE_REP_MS)
    cap, sms = _cap_sms(dev)
    tuned, skipped, tol = [], [], bench.TOL[False]
    for t in dispatch.GEMV_TUNED_T:
        for name, h, k in shapes:
            key = dict(shape=name, H=h, K=k, N=h, T=t)
            if time.monotonic() > deadline:
                skipped.append(dict(key, why="time budget"))
                continue
            w, w32 = params[name][:2]
            x = torch.randn(t, k * h, device=dev).to(BF16)
            ref = reference(x.float(), w32, num_taps=k)
            out = torch.empty(t, h, device=dev, dtype=BF16)
            cands = dispatch.gemv_candidates(t, h, h, k, BF16, cap, sms)
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
            cfg = dispatch.GemvConfig(**best["config"])
            dispatch.TUNED_GEMV[(h, k, t)] = (h, cfg)
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
    cap, sms = _cap_sms(x.device)
    ref = reference(x.float(), w32, **dict(kw, norm_weight=win.float(), norm_weights=wtap.float()))
    tol = bench.TOL[norm != "none"]
    traffic, flops = _traffic(t, h, h, k, norm), 2 * t * h * k * h
    paths = {}
    for path in _paths_for(t, timer is None):

        def fused(path=path) -> torch.Tensor:
            return eagle3_fused_fc(x, w, out=out, backend="triton", path=path, **kw)

        cfg = (dispatch.pick_gemv_config(t, h, h, k, BF16, cap, sms, norm=norm) if path == "gemv"
               else dispatch.pick_normcat_config(h, BF16))  # fmt: skip
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
    for t in dispatch.T_BUCKETS:
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
    rows = [r for r in tim["rows"] if not dry and r["norm"] in fair and dispatch.row_is_win(r)]
    return [{f: r[f] for f in ("norm", "T", "H", "K", "path")} for r in rows]


class _RMSNorm(nn.Module):
    """What install_fused_fc reads of SGLang's RMSNorm, and its forward_native (default flags)."""

    def __init__(self, width: int, dev: torch.device):
        super().__init__()
        self.weight = nn.Parameter((torch.rand(width) + 0.5).to(dev, BF16))
        self.variance_epsilon = EPS

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, width]
        return rms_norm(x, self.weight, self.variance_epsilon, cast_before_weight=False)


class _FcBlock(nn.Module):
    """SGLang 0.5.23 LlamaModel's fc attributes and its forward's fc block (llama_eagle3.py
    L237-247), as tests/test_eagle3_fused_fc_patch.py's DraftModel (that module needs pytest)."""

    def __init__(self, norm: str, h: int, k: int, dev: torch.device):
        super().__init__()
        self.num_aux_hidden_states = k
        self.fc = nn.Linear(k * h, h, bias=norm == "none", device=dev, dtype=BF16)
        self.input_norm = _RMSNorm(k * h, dev) if norm in ("before_fc", "both") else None
        per_tap = norm in ("per_tap", "both")
        self.fc_norm = nn.ModuleList(_RMSNorm(h, dev) for _ in range(k)) if per_tap else None

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # [T, K*H] -> [T, H]
        if self.input_norm is not None:
            hidden_states = self.input_norm(hidden_states)
        if self.fc_norm is not None:
            chunks = hidden_states.chunk(self.num_aux_hidden_states, dim=-1)
            hidden_states = torch.cat([n(c) for n, c in zip(self.fc_norm, chunks)], dim=-1)  # noqa: B905
        return self.fc(hidden_states)


def _replay(fn, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:  # x1, x2: [T, K*H]
    """``fn`` captured in a CUDA graph on x1's buffer, replayed after x2 is copied in."""
    static, side = x1.clone(), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture: compiles, caches tap weights
        for _ in range(2):
            fn(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(static)
    static.copy_(x2)
    graph.replay()
    torch.cuda.synchronize()
    return out.clone()


def _graph_case(
    cid: str,
    model: nn.Module,  # patched _FcBlock
    x1: torch.Tensor,  # [T, K*H]: what the graph is captured on
    x2: torch.Tensor,  # [T, K*H]: what it is replayed on
    stock: torch.Tensor,  # [T, H]: the unpatched block on x2
    dry: bool,
) -> dict:
    """The patched block on x2 (eager) against the stock block, and on a GPU its graph (captured
    on x1, replayed on x2) against eager."""
    got, tol = {}, bench.TOL[True]

    def patched() -> float:
        got["eager"] = model(x2)
        return _ratio(got["eager"], stock, tol)

    def replayed() -> float:
        got["graph"] = _replay(model, x1, x2)
        return _ratio(got["graph"], got["eager"], tol)

    rec = _check(cid, patched)
    rec["patched_vs_stock_ratio"] = rec.pop("ratio")
    if dry or "eager" not in got:
        return rec
    g = _check(cid, replayed)
    bitwise = "graph" in got and torch.equal(got["graph"], got["eager"])
    return dict(rec, ok=rec["ok"] and g["ok"], why=rec["why"] or g["why"],
                graph_vs_eager_ratio=g["ratio"], graph_bitwise_equal=bitwise)  # fmt: skip


def graph_check(dev: torch.device, dry: bool) -> dict:
    """Per norm and T, with the kernel forced (env switch "1") and with the dispatch's choice."""
    name, h, k = SHAPES[0]
    h = h // DRY_SCALE if dry else h
    modes = {"dispatch default": None} if dry else {"fused forced": "1", "dispatch default": None}
    cases, saved = [], os.environ.pop(dispatch.ENV_SWITCH, None)
    try:
        for norm in NORMS:
            torch.manual_seed(0)
            model = _FcBlock(norm, h, k, dev)
            xs = {t: [torch.randn(t, k * h, device=dev).to(BF16) for _ in "ab"] for t in GRAPH_T}
            stock = {t: model(x[1]) for t, x in xs.items()}  # before the patch: SGLang's modules
            install_fused_fc(model)
            for mode, switch in modes.items():
                os.environ.pop(dispatch.ENV_SWITCH, None)
                os.environ.update({dispatch.ENV_SWITCH: switch} if switch else {})
                for t, (x1, x2) in xs.items():
                    rec = _graph_case(f"{norm}-T{t}-{mode}", model, x1, x2, stock[t], dry)
                    path = dispatch.fused_path(t, h, k, norm, dev)
                    cases.append(dict(rec, fused_path=path is not None, path=path))
    finally:
        os.environ.pop(dispatch.ENV_SWITCH, None)
        os.environ.update({dispatch.ENV_SWITCH: saved} if saved is not None else {})
    what = "each case captured in a CUDA graph on one input and replayed on another"
    if dry:
        what = "no CUDA graph was captured or replayed (dry run on CPU): the patched block ran "
        what += "eagerly (on CPU it takes SGLang's modules, not the kernel) against the stock one"
    return dict(captured=not dry, what=what, shape=dict(name=name, H=h, K=k),
                passed=all(c["ok"] for c in cases), cases=cases)  # fmt: skip


def _cap_sms(dev: torch.device) -> tuple[tuple[int, int], int]:
    if dev.type != "cuda":
        return (9, 0), 132  # pick_config's defaults (the interpreter ignores them)
    props = torch.cuda.get_device_properties(dev)
    return (props.major, props.minor), props.multi_processor_count


def _device(dev: torch.device) -> dict:
    import triton

    info = dict(torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda)
    if dev.type != "cuda":
        return dict(info, name="cpu (dry run: Triton interpreter)", capability=None, sms=None)
    (cap, sms), name = _cap_sms(dev), torch.cuda.get_device_name(dev)
    return dict(info, name=name, capability=list(cap), sms=sms)


def _summary(res: dict) -> list[str]:
    """The printed report: tuned GEMV tiles, then per row the best fused path against the
    unfused one, each with its bandwidth and fraction of the HBM peak."""
    rates = res["rates"]
    peak = f"{rates['peak']} {rates['peak_GBps']} GB/s" if rates["peak_GBps"] else "no peak"
    lines = [f"HBM: {peak}; measured copy {rates['copy_GBps']} GB/s"]

    def pct(v) -> str:
        return f"{100 * v:3.0f} %" if v is not None else "  - %"

    for r in res["gemv_tuning"]["tuned"]:
        c = r["config"]
        tiles = f"{c['block_n']}x{c['block_k']} C{c['split_chunks']} "
        tiles += f"{'dot' if c['use_dot'] else 'fma'} w{c['num_warps']} s{c['num_stages']}"
        lines.append(f"gemv tiles {r['shape']:14} T={r['T']:<3} {tiles:24} {r['us']:8.1f} us "
                     f"{r['GBps']:7.0f} GB/s {pct(r['peak_frac'])} of peak")  # fmt: skip
    for r in res["timing"]["rows"]:
        if r["path"] is None:
            fused = f"{'-':7} every fused path raised {'':14}"
        else:
            fused = f"{r['path']:7} {r['fused_us']:9.1f} us {r['fused_GBps']:7.0f} GB/s "
            fused += f"{pct(r['fused_peak_frac'])}"
        unf = f"unfused {r['unfused_us']:9.1f} us {r['unfused_GBps']:7.0f} GB/s "
        unf += f"{pct(r['unfused_peak_frac'])}"
        mark = "" if r["ok"] else " ERROR ABOVE TOLERANCE"
        speedup = f"{r['speedup']:5.2f}x" if r["speedup"] is not None else "    -"
        lines.append(f"{r['shape']:14} {r['norm']:9} T={r['T']:<5} {fused} | {unf} | "
                     f"{speedup}{mark}")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="for the whole run")
    p.add_argument("--cpu-dry-run", action="store_true", help="tiny sizes, Triton interpreter")
    args = p.parse_args(argv)
    if args.budget_s <= 0:
        p.error("--budget-s must be positive")
    if not args.out.parent.is_dir():
        p.error(f"--out {args.out}: no folder {args.out.parent}")
    if args.cpu_dry_run:
        if "triton" in sys.modules:  # the interpreter is chosen when triton is first imported
            p.error("triton was imported before TRITON_INTERPRET=1 could be set")
        os.environ["TRITON_INTERPRET"] = "1"
    elif os.environ.get("TRITON_INTERPRET") == "1":
        p.error("TRITON_INTERPRET=1 is set: unset it, or pass --cpu-dry-run")
    elif not torch.cuda.is_available():
        p.error("no CUDA device: run on a GPU machine, or pass --cpu-dry-run")
    dry, start, budget = args.cpu_dry_run, time.monotonic(), args.budget_s
    dev = torch.device("cpu") if dry else torch.device("cuda", torch.cuda.current_device())
    torch.set_grad_enabled(False)
    res = dict(format=dispatch.GPU_CHECK_FORMAT, dry_run=dry, passed=False, budget_s=budget)
    res.update(device=_device(dev), started_utc=time.strftime("%FT%TZ", time.gmtime()))
    res["steps_s"] = steps = {}

    def deadline(name: str) -> float:
        return start + DEADLINES[name] * budget

    def step(name: str) -> None:  # the file after every step: a run cut short leaves its part
        res["wall_s"] = steps[name] = round(time.monotonic() - start, 1)
        args.out.write_text(json.dumps(res, indent=1))
        print(f"[{res['wall_s']:6.1f} s] {name}", flush=True)

    gpu = correctness(gpu_test_matrix(dev), dev, deadline("correctness"), 1 if dry else 0)
    res["correctness"] = dict(passed=False, gpu_test_matrix=gpu)
    step("the GPU test's matrix")
    res["graph"] = graph_check(dev, dry)
    step("graph check")
    res["rates"] = rates = hbm_rates(dev, dry)
    drafters = _drafters(dev, dry)
    res["gemv_tuning"] = tune = tune_gemv(dev, dry, deadline("gemv tiles"), drafters, rates)
    step("gemv tiles")
    res["timing"] = tim = timing(dev, dry, deadline("timing"), drafters, rates)
    res.update(wins=wins_of(tim, dry), win_rule="correct and fused_us * 1.03 <= unfused_us")
    step("timing")
    del drafters
    interp = correctness(interp_matrix(), dev, deadline("interp"), 3 if dry else 0)
    bad = [c["id"] for c in gpu["cases"] + interp["cases"] if not c["ok"]]
    bad += [f"timing {r['shape']} {r['norm']} T={r['T']}" for r in tim["rows"] if not r["ok"]]
    for r in tune["tuned"] + [s for s in tune["skipped"] if "candidates" in s]:
        bad += [f"gemv tiles {r['shape']} T={r['T']} {c['config']}" for c in r["candidates"]
                if not c["ok"] and not c.get("infeasible")]  # fmt: skip
    res["correctness"].update(passed=not bad, failures=list(bad), interp_matrix=interp)
    bad += [f"graph {c['id']}" for c in res["graph"]["cases"] if not c["ok"]]
    bad += [f"timing error {e['shape']} {e['norm']} T={e['T']}" for e in tim["errors"]]
    res.update(passed=not bad, failures=bad)
    step("the interpreter tests' matrix")
    print("\n".join(_summary(res)))
    not_run = len(tim["skipped"]), len(tune["skipped"]), len(interp["skipped"])
    print("not timed: {}, gemv shapes not tuned: {}, not checked: {}; wins:".format(*not_run))
    print(f"{res['wins']}\n{'PASSED' if res['passed'] else 'FAILED'} {bad}; wrote {args.out}")
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
