"""The tuner against brute force, side by side in one run, on the demo's tiny models (CPU).

    python benchmarks/bench_tune.py [--out-dir benchmarks/results/tune]

1. `python -m sglang_eagle3.tune` on the trained tiny target and drafter (its wall time).
2. Every setting of the same grid, plus the seed's (15 steps, topk 1, 16 draft tokens) and
   plain decoding, each on its own server through the launcher, one at a time, measured at
   each concurrency (the grid's wall time: one pass). ``--passes`` repeats the whole grid,
   every server started again, in reversed order every other pass; a setting's tok/s is its
   median over the passes. On 2 shared cores one server start can be 30 % off another of the
   same setting, and the best of 30 single starts is partly the luckiest one.
3. The tuner's pick against the grid's best measured tok/s, predicted against measured tok/s
   for every setting, and the two wall times. Writes bench_tune.json, bench_tune.md (the
   table benchmarks/README.md quotes) and bench_tune.png (predicted against measured).

Decode speed is per request: (tokens - 1) / (time after the first token), the median over a
concurrency's requests (every built-in prompt equally often, at least 3 x c; c in flight), after
one warm-up request per server, timed as the tuner times its own servers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a bare checkout

from sglang_eagle3.bench.client import run_batch  # noqa: E402
from sglang_eagle3.bench.prompts import BUILT_IN  # noqa: E402
from sglang_eagle3.bench.servers import ServerSpec, live_server  # noqa: E402
from sglang_eagle3.tune.grid import Setting, grid, parse_range  # noqa: E402
from sglang_eagle3.tune.measure import per_request, plain_argv, timed_prompts  # noqa: E402

SEED = Setting(15, 1, 16)  # the seed's slow try: 15 steps, 16 draft tokens


def tok_s(url: str, c: int, max_new_tokens: int, detail: dict) -> float:
    """Median decode tok/s per request; ``detail`` gets the median served accept length and
    seconds per verify (per decode step when plain), to tell acceptance from cost errors."""
    params = {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}
    run_batch(url, list(BUILT_IN[:1]), params, 1)  # warm-up
    batch = run_batch(url, timed_prompts(BUILT_IN, c), params, c)
    if batch.errors:
        raise RuntimeError(batch.errors[0])
    speeds, per = [], []
    for r in batch.results:
        first = next(t for t, n in r.timing.chunks if n > 0)
        speeds.append((int(r.meta_info["completion_tokens"]) - 1) / (r.end - first))
        per.append(per_request(r, speculative=bool(r.meta_info.get("spec_verify_ct"))))
    accepts = [a for _, a in filter(None, per) if a is not None]
    detail[c] = {"accept_length": statistics.median(accepts) if accepts else None,
                 "cycle_s": statistics.median(x for x, _ in filter(None, per))}  # fmt: skip
    return statistics.median(speeds)


def brute_force(args, launch: list[str], settings: list[Setting | None], detail: dict,
                walls: dict) -> dict:  # fmt: skip
    """One pass: each setting's server started, timed at each concurrency, stopped."""
    out = {}
    for s in settings:
        t0 = time.monotonic()
        name = "plain" if s is None else f"s{s.steps}k{s.topk}n{s.draft_tokens}"
        argv = plain_argv(launch) if s is None else s.on(launch)
        spec = ServerSpec(name, None, argv[argv.index("--model-path") + 1], tuple(argv))
        got = {}
        detail.setdefault(name, []).append(got)
        with live_server(spec, args.out_dir / "logs") as url:
            out[name] = {c: tok_s(url, c, args.max_new_tokens, got) for c in args.concurrency}
        walls[name] = time.monotonic() - t0
        print(f"{name}: " + ", ".join(f"c={c} {v:.1f} tok/s" for c, v in out[name].items()),
              flush=True)  # fmt: skip
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/tune"))
    p.add_argument("--concurrency", default="1,8")
    p.add_argument("--steps", default="1-4")
    p.add_argument("--topk", default="1-2")
    p.add_argument("--max-draft-tokens", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--passes", type=int, default=3, help="grid passes; medians are compared")
    args = p.parse_args()
    args.concurrency = parse_range(args.concurrency, "--concurrency")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    d = tiny_drafter()
    launch = ["--cpu", "--model-path", str(d.target_dir), "--dtype", "float32",
              "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
              str(d.draft_dir)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    tuned = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.tune", *launch, "--concurrency",
         ",".join(map(str, args.concurrency)), "--steps", args.steps, "--topk", args.topk,
         "--max-draft-tokens", str(args.max_draft_tokens), "--max-new-tokens",
         str(args.max_new_tokens), "--explain", "15,1,16", "--json", "--log-dir",
         str(args.out_dir / "tune-logs")],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    tune_wall = time.monotonic() - t0
    result = json.loads(tuned.stdout)
    settings = grid(parse_range(args.steps, "--steps"), parse_range(args.topk, "--topk"),
                    args.max_draft_tokens, [], "DeepseekV3ForCausalLM")  # fmt: skip
    if args.passes < 1:
        p.error("--passes must be >= 1")
    os.environ["OMP_NUM_THREADS"] = "1"
    detail: dict = {}
    passes, walls = [], []
    for i in range(args.passes):
        order = [None, *settings, SEED]
        walls.append({})
        passes.append(brute_force(args, launch, order[::-1] if i % 2 else order, detail,
                                  walls[-1]))  # fmt: skip
    measured = {name: {c: statistics.median(m[name][c] for m in passes) for c in args.concurrency}
                for name in passes[0]}  # fmt: skip
    # brute force costs one pass over plain and the grid (the seed is not in the grid)
    grid_wall = sum(w for name, w in walls[0].items() if name != _key(SEED))
    report = compare(result, measured, settings, args.concurrency, tune_wall, grid_wall)
    report["passes"] = [{k: {c: round(v, 2) for c, v in m.items()} for k, m in p_.items()}
                        for p_ in passes]  # fmt: skip
    report["pass_walls_s"] = [round(sum(w.values()), 1) for w in walls]
    report["grid_detail"] = detail  # served accept length and cycle time of every server start
    report["tuner"] = result  # its fit points, profile check and every prediction
    (args.out_dir / "bench_tune.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out_dir / "bench_tune.md").write_text(markdown(report))
    plot(report, args.out_dir / "bench_tune.png")
    print(markdown(report))
    return 0


def _key(s: Setting) -> str:
    return f"s{s.steps}k{s.topk}n{s.draft_tokens}"


def compare(result, measured, settings, concurrency, tune_wall, grid_wall) -> dict:
    rows, per_c = [], {}
    pred = {(p["steps"], p["topk"], p["draft_tokens"], p["concurrency"]): p["tok_s"]
            for p in result["predictions"]}  # fmt: skip
    for s in settings:
        for c in concurrency:
            got, want = measured[_key(s)][c], pred[(s.steps, s.topk, s.draft_tokens, c)]
            rows.append({"setting": str(s), "concurrency": c, "measured_tok_s": round(got, 2),
                         "predicted_tok_s": round(want, 2),
                         "error": round(want / got - 1, 3)})  # fmt: skip
    seed_pred = {e["concurrency"]: e["tok_s"] for e in result["explained"]}
    for c in concurrency:
        best = max(settings, key=lambda s: measured[_key(s)][c])
        b = result["per_concurrency"][str(c)]["best"]
        pick = Setting(b["steps"], b["topk"], b["draft_tokens"])
        per_c[str(c)] = {
            "pick": str(pick), "pick_measured_tok_s": round(measured[_key(pick)][c], 2),
            "grid_best": str(best), "grid_best_tok_s": round(measured[_key(best)][c], 2),
            "pick_vs_best": round(measured[_key(pick)][c] / measured[_key(best)][c], 3),
            "plain_tok_s": round(measured["plain"][c], 2),
            "seed_measured_tok_s": round(measured[_key(SEED)][c], 2),
            "seed_predicted_tok_s": round(seed_pred[c], 2),
        }  # fmt: skip
    within = sum(abs(r["error"]) <= 0.15 for r in rows) / len(rows)
    return {"per_concurrency": per_c, "rows": rows, "within_15pct": round(within, 3),
            "tune_wall_s": round(tune_wall, 1), "grid_wall_s": round(grid_wall, 1),
            "wall_ratio": round(tune_wall / grid_wall, 3), "model": result["model"],
            "accept_check": result.get("accept_check")}  # fmt: skip


def markdown(r: dict) -> str:
    head = (
        "| concurrency | tuner's pick | its measured tok/s | grid's best (measured) | "
        "pick / best | plain | seed 15,1,16 measured (predicted) |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]
    for c, v in r["per_concurrency"].items():
        lines.append(f"| {c} | {v['pick']} | {v['pick_measured_tok_s']} | {v['grid_best']}: "
                     f"{v['grid_best_tok_s']} | {v['pick_vs_best']} | {v['plain_tok_s']} | "
                     f"{v['seed_measured_tok_s']} ({v['seed_predicted_tok_s']}) |")  # fmt: skip
    lines += ["", f"Predicted within 15 % of measured: {r['within_15pct']:.0%} of "
              f"{len(r['rows'])} (setting, concurrency) pairs. Tuner wall {r['tune_wall_s']} s, "
              f"grid wall {r['grid_wall_s']} s (ratio {r['wall_ratio']}).", ""]  # fmt: skip
    lines += ["| setting | concurrency | measured | predicted | error |", "|---|---|---|---|---|"]
    lines += [f"| {x['setting']} | {x['concurrency']} | {x['measured_tok_s']} | "
              f"{x['predicted_tok_s']} | {x['error']:+.1%} |" for x in r["rows"]]  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    for c in sorted({x["concurrency"] for x in r["rows"]}):
        xs = [x for x in r["rows"] if x["concurrency"] == c]
        ax.scatter([x["measured_tok_s"] for x in xs], [x["predicted_tok_s"] for x in xs],
                   label=f"concurrency {c}", s=18)  # fmt: skip
    top = max(max(x["measured_tok_s"], x["predicted_tok_s"]) for x in r["rows"]) * 1.05
    ax.plot([0, top], [0, top], "k--", lw=0.8)
    ax.set(xlabel="measured tok/s per request", ylabel="predicted tok/s per request",
           title="tuner: predicted vs measured (tiny, CPU)")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
