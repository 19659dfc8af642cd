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
Steps 2 (graph) and 3-4 (GEMV tiles, timing) live in gpu_check_graph.py and gpu_check_timing.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # runnable from a bare checkout
import bench_eagle3_fused_fc as bench  # noqa: E402  (the unfused path and its tolerances)
from gpu_check_graph import graph_check  # noqa: E402
from gpu_check_timing import (  # noqa: E402
    DRY_MAX_T,
    cap_sms,
    hbm_rates,
    make_drafters,
    timing,
    tune_gemv,
    wins_of,
)

from sglang_eagle3.ops import eagle3_fused_fc_cases as fc_cases  # noqa: E402
from sglang_eagle3.ops import eagle3_fused_fc_wins as fc_wins  # noqa: E402
from sglang_eagle3.ops.eagle3_fused_fc import NORMS  # noqa: E402

DEFAULT_BUDGET_S = 300.0  # + imports and CUDA start: one call inside 6 minutes, cold caches
# Deadlines, as fractions of the budget, of the steps that stop early when time runs out.
DEADLINES = {"correctness": 0.2, "gemv tiles": 0.4, "timing": 0.85, "interp": 1.0}


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


def _device(dev: torch.device) -> dict:
    import triton

    info = dict(torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda)
    if dev.type != "cuda":
        return dict(info, name="cpu (dry run: Triton interpreter)", capability=None, sms=None)
    (cap, sms), name = cap_sms(dev), torch.cuda.get_device_name(dev)
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
    res = dict(format=fc_wins.GPU_CHECK_FORMAT, dry_run=dry, passed=False, budget_s=budget)
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
    drafters = make_drafters(dev, dry)
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
