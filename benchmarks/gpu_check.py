"""One prepared GPU check of the fused EAGLE-3 fc kernel, in under 8 minutes on one GPU.

    PYTHONPATH=. python benchmarks/gpu_check.py --out gpu_check.json
    python benchmarks/gpu_check.py --cpu-dry-run --out X   # every step, tiny, Triton interpreter

1. correctness: the kernel against an fp64 reference on the tests' shape matrices, every norm;
2. graph: ``install_fused_fc`` on a stand-in of SGLang's LlamaModel fc block, captured in a CUDA
   graph and replayed, against eager;
3. timing: fused against norm + cat + cuBLAS (CUDA-graph replays, bf16) at the dispatch's
   T_BUCKETS for three drafters' fc blocks, inside --budget-s (what did not fit is listed);
4. one JSON file; copied to sglang_eagle3/ops/eagle3_fused_fc_wins.json, its ``wins`` become the
   dispatch's MEASURED_WINS. Exit 1 when a check fails, 2 when it cannot run.
Imports torch, triton and sglang_eagle3.ops only: GPU machines may have no SGLang.
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

from sglang_eagle3.ops import eagle3_fused_fc_dispatch as dispatch  # noqa: E402
from sglang_eagle3.ops.eagle3_fused_fc import NORMS, eagle3_fused_fc  # noqa: E402
from sglang_eagle3.ops.eagle3_fused_fc import eagle3_fused_fc_reference as reference  # noqa: E402
from sglang_eagle3.ops.eagle3_fused_fc_cases import interp_cases  # noqa: E402
from sglang_eagle3.ops.eagle3_fused_fc_patch import install_fused_fc  # noqa: E402
from sglang_eagle3.ops.rms_norm import rms_norm  # noqa: E402

# (drafter, hidden H = fc output N, taps K) whose fc block is timed; bench.unfused takes K = 3
SHAPES = (("Kimi-K2.5", 7168, 3), ("Llama-3.1-70B", 8192, 3), ("Llama-3.1-8B", 4096, 3))
DRY_SCALE, DRY_MAX_T = 128, 64  # dry run: hidden / 128, T <= 64 (prefill takes seconds there)
GRAPH_T = (1, 64, 256)  # at H = 7168: the one-pass, split-reduction and prescaled launches
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
BF16, EPS = torch.bfloat16, bench.EPS


def interp_matrix() -> list[dict]:
    """tests/test_eagle3_fused_fc.py's interpreter cases (one table, ops/eagle3_fused_fc_cases)."""
    return interp_cases()


def gpu_test_matrix(dev: torch.device) -> list[dict]:
    """tests/test_eagle3_fused_fc.py::test_gpu_kernel_matches_fp64's cases: norm x T x split
    (None: pick_config's tiles), packed bf16, K = 3, H = N = 7168 (32 in a dry run)."""
    h, cases = 7168 if dev.type == "cuda" else 32, []
    for norm in NORMS:
        for t in (1, 64, 300):
            base = dispatch.pick_config(t, h, h, 3, BF16, *_cap_sms(dev))  # this GPU's tiles
            for split in (None, 0, 1):
                c = dict(norm=norm, layout="packed", dtype="bf16", T=t, H=h, K=3, N=h, bias=False)
                c.update(strided_out=False, split=split, prescale=False, seed=t)
                c.update(bm=base.block_m, bn=base.block_n, bk=base.block_k)
                cid = f"{norm}-T{t}-H{h}-split{split}"
                cases.append(dict(c, tol=bench.TOL[norm != "none"], id=cid))
    return cases


def _ratio(got: torch.Tensor, ref: torch.Tensor, tol: float) -> float:
    """Worst |got - ref| / (tol + tol |ref|): <= 1 passes; inf where got is not finite."""
    got, ref = got.double(), ref.double()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got - ref).abs() / (tol + tol * ref.abs())).max().item()


def _check(cid: str, fn) -> dict:
    """One check: ``fn`` returns its error ratio; an exception fails it."""
    try:
        ratio = fn()
    except Exception:
        return dict(id=cid, ok=False, ratio=None, why=traceback.format_exc(limit=4)[-1500:])
    finite = ratio < math.inf
    why = None if ratio <= 1 else "above tolerance" if finite else "output not finite (unwritten?)"
    return dict(id=cid, ok=ratio <= 1, ratio=round(ratio, 4) if finite else None, why=why)


def _layout(case: dict, gen: torch.Generator, dtype: torch.dtype):
    """K taps [T, H] laid out as the case says, and the packed [T, K*H] they hold (as the tests'
    runner, tests/scripts/eagle3_fused_fc_interp.py, lays them out on CPU)."""
    t, h, k, dev = case["T"], case["H"], case["K"], gen.device
    scale = torch.rand(k, generator=gen, device=dev) * 4 + 0.25  # taps of different magnitudes
    if case["layout"] == "taps":  # column slices of wider buffers: row stride > H
        bufs = [torch.randn(t, h + 8, generator=gen, device=dev) * s for s in scale]
        taps = [b.to(dtype)[:, 3 : 3 + h] for b in bufs]
        return taps, torch.cat(taps, -1)
    packed = torch.randn(t, k * h, generator=gen, device=dev) * scale.repeat_interleave(h)
    packed = packed.to(dtype)
    views = [packed[:, i * h : (i + 1) * h] for i in range(k)]
    layouts = {"slices": views, "scattered": [v.clone() for v in views], "packed": packed}
    return layouts[case["layout"]], packed


def run_case(case: dict, dev: torch.device) -> float:
    """One matrix case on ``dev``: the kernel's error ratio against the fp64 reference."""
    gen = torch.Generator(device=dev).manual_seed(case["seed"])
    dtype, norm, t, h, k, n = DTYPES[case["dtype"]], *(case[f] for f in "norm T H K N".split())
    inputs, packed = _layout(case, gen, dtype)

    def rand(*shape: int, normal: bool = False) -> torch.Tensor:
        draw = torch.randn if normal else torch.rand
        return draw(*shape, generator=gen, device=dev)

    w = (rand(n, k * h, normal=True) / (k * h) ** 0.5).to(dtype)
    win, wtap = (rand(k * h) + 0.5).to(dtype), (rand(k, h) + 0.5).to(dtype)
    bias = rand(n, normal=True).to(dtype) if case["bias"] else None
    out = torch.full((t, n + 5 * case["strided_out"]), math.nan, device=dev, dtype=dtype)
    out = out[:, :n]  # NaN-poisoned: an output the kernel never writes fails
    taps_w = wtap if case["seed"] % 2 else list(wtap.unbind(0))  # as the tests alternate
    kw = dict(norm=norm, eps=1e-5, num_taps=k, norm_weight=win, norm_weights=taps_w)
    tiles = (case["bm"], case["bn"], case["bk"], case["split"])  # split None: pick_config's
    cfg = None if tiles[3] is None else dispatch.FusedFcConfig(*tiles, prescale=case["prescale"])
    got = eagle3_fused_fc(inputs, w, bias=bias, out=out, backend="triton", config=cfg, **kw)
    if got.data_ptr() != out.data_ptr():
        raise RuntimeError("the result is not the given out tensor")
    kw.update(norm_weight=win.double(), norm_weights=wtap.double())
    b64 = bias.double() if bias is not None else None
    return _ratio(got, reference(packed.double(), w.double(), bias=b64, **kw), case["tol"])


def correctness(cases: list[dict], dev: torch.device, deadline: float, dry_every: int) -> dict:
    """Every case until the deadline (a dry run: T <= DRY_MAX_T, 1 case in ``dry_every``)."""
    results, skipped = [], []
    for i, case in enumerate(cases):
        if dry_every and (case["T"] > DRY_MAX_T or i % dry_every):
            skipped.append(dict(id=case["id"], why=f"dry run: T <= {DRY_MAX_T}, 1 in {dry_every}"))
        elif time.monotonic() > deadline:
            skipped.append(dict(id=case["id"], why="time budget"))
        else:
            results.append(_check(case["id"], lambda c=case: run_case(c, dev)))
    return dict(cases=results, skipped=skipped)


def _baseline_norm(dry: bool):
    """(rms, its name, whether it is one kernel per norm, as SGLang's sgl_kernel.rmsnorm is)."""
    if dry:
        return (lambda x, w: rms_norm(x, w, EPS, cast_before_weight=False)), "eager", False
    rms, name = bench._unfused_norm()  # eager only if torch.compile failed: norm wins void
    return rms, name, not name.startswith("eager")


def _wall_us(fn) -> tuple[torch.Tensor, float]:
    start = time.perf_counter()
    return fn(), (time.perf_counter() - start) * 1e6


def _time_row(key: dict, x: torch.Tensor, params: tuple, timer, rms) -> dict:
    """Fused (pick_config's tiles) against bench.unfused at one shape; x: [T, K*H] bf16."""
    (w, w32, win, wtap), norm, t, h, k = params, *(key[f] for f in ("norm", "T", "H", "K"))
    kw = dict(norm=norm, norm_weight=win, norm_weights=wtap, eps=EPS, num_taps=k)
    out = torch.empty(t, h, device=x.device, dtype=BF16)

    def fused() -> torch.Tensor:
        return eagle3_fused_fc(x, w, out=out, backend="triton", **kw)

    def unfused() -> torch.Tensor:
        return bench.unfused(x, w, win, wtap, norm, rms)

    ref = reference(x.float(), w32, **dict(kw, norm_weight=win.float(), norm_weights=wtap.float()))
    got, f_us = _wall_us(fused)  # a dry run's timing: the interpreter's wall clock, once
    err = _ratio(got, ref, bench.TOL[norm != "none"])
    f_us, u_us = (timer(fused), timer(unfused)) if timer else (f_us, _wall_us(unfused)[1])
    cfg = dispatch.pick_config(t, h, h, k, BF16, *_cap_sms(x.device))  # what launched
    row = dict(key, N=h, fused_us=round(f_us, 2), unfused_us=round(u_us, 2))
    row.update(speedup=round(u_us / f_us, 4), err_ratio=round(err, 4) if err < math.inf else None)
    return dict(row, ok=err <= 1, config=dataclasses.asdict(cfg))


def timing(dev: torch.device, dry: bool, deadline: float) -> dict:
    """Per T (small first: the budget cuts prefill sizes, not decode) x drafter x norm."""
    rms, norm_impl, fair = _baseline_norm(dry)
    timer, method = None, "dry run, hidden / 128: one eager call's wall clock on CPU (Triton "
    method += "interpreter), which says nothing about a GPU"
    if not dry:
        import triton.testing

        method = "CUDA-graph replays (triton.testing.do_bench_cudagraph, rep=10 ms, mean)"
        timer = lambda fn: 1e3 * triton.testing.do_bench_cudagraph(fn, rep=10)  # noqa: E731
    shapes, params = [(n, h // DRY_SCALE if dry else h, k) for n, h, k in SHAPES], {}
    for name, h, k in shapes:
        g = torch.Generator(device=dev).manual_seed(h)
        w = (torch.randn(h, k * h, generator=g, device=dev) / (k * h) ** 0.5).to(BF16)
        win = torch.rand(k * h, generator=g, device=dev) + 0.5
        wtap = torch.rand(k, h, generator=g, device=dev) + 0.5
        params[name] = (w, w.float(), win.to(BF16), wtap.to(BF16))
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
                        rows.append(_time_row(key, x, params[name], timer, rms))
                    except Exception:
                        errors.append(dict(key, error=traceback.format_exc(limit=4)[-1500:]))
    shapes = [dict(name=n, H=h, K=k, N=h) for n, h, k in shapes]
    return dict(method=method, dtype="bfloat16", unfused_norm=norm_impl, norm_baseline_fused=fair,
                shapes=shapes, rows=rows, skipped=skipped, errors=errors)  # fmt: skip


def wins_of(tim: dict, dry: bool) -> list[dict]:
    """The dispatch's rule (row_is_win); none from a dry run (not a measurement), and the norm
    modes only when the unfused norm was one kernel."""
    fair = NORMS if tim["norm_baseline_fused"] else ("none",)
    rows = [r for r in tim["rows"] if not dry and r["norm"] in fair and dispatch.row_is_win(r)]
    return [{f: r[f] for f in ("norm", "T", "H", "K")} for r in rows]


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
                    cases.append(dict(rec, fused_path=dispatch.use_fused(t, h, k, norm, dev)))
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    p.add_argument("--budget-s", type=float, default=420.0, help="for the whole run")
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

    def step(name: str) -> None:  # the file after every step: a run cut short leaves its part
        res["wall_s"] = round(time.monotonic() - start, 1)
        args.out.write_text(json.dumps(res, indent=1))
        print(f"[{res['wall_s']:6.1f} s] {name}", flush=True)

    gpu = correctness(gpu_test_matrix(dev), dev, start + 0.4 * budget, 1 if dry else 0)
    res["correctness"] = dict(passed=False, gpu_test_matrix=gpu)
    step("the GPU test's matrix")
    res["graph"] = graph_check(dev, dry)
    step("graph check")
    res["timing"] = tim = timing(dev, dry, deadline=start + 0.75 * budget)
    res.update(wins=wins_of(tim, dry), win_rule="correct and fused_us * 1.03 <= unfused_us")
    step("timing")
    interp = correctness(interp_matrix(), dev, start + budget, 3 if dry else 0)
    bad = [c["id"] for c in gpu["cases"] + interp["cases"] if not c["ok"]]
    bad += [f"timing {r['shape']} {r['norm']} T={r['T']}" for r in tim["rows"] if not r["ok"]]
    res["correctness"].update(passed=not bad, failures=list(bad), interp_matrix=interp)
    bad += [f"graph {c['id']}" for c in res["graph"]["cases"] if not c["ok"]]
    bad += [f"timing error {e['shape']} {e['norm']} T={e['T']}" for e in tim["errors"]]
    res.update(passed=not bad, failures=bad)
    step("the interpreter tests' matrix")
    for r in tim["rows"]:
        us = f"fused {r['fused_us']:9.1f} us, unfused {r['unfused_us']:9.1f} us"
        mark = "" if r["ok"] else " ERROR ABOVE TOLERANCE"
        print(f"{r['shape']:14} {r['norm']:9} T={r['T']:<5} {us}: {r['speedup']:5.2f}x{mark}")
    print(f"not timed: {len(tim['skipped'])}, not checked: {len(interp['skipped'])}; wins:")
    print(f"{res['wins']}\n{'PASSED' if res['passed'] else 'FAILED'} {bad}; wrote {args.out}")
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
