"""The tuner against brute force, side by side in one run, on the demo's tiny models (CPU).

    python benchmarks/bench_tune.py [--out-dir benchmarks/results/tune]

1. `python -m sglang_eagle3.tune` on the trained tiny target and drafter (its wall time).
2. Every setting of the same grid, plus the seed's (15 steps, topk 1, 16 draft tokens), each on
   its own server through the launcher, one at a time, timed as the tuner times its servers:
   in rounds against one plain reference server alive for the whole run (the grid's wall time:
   one pass). A setting's tok/s is the median over its rounds of its speed over the
   reference's in the same round, times the reference's median over the run (drift on these
   2 shared cores moves one server's batch medians by up to 50 % within two minutes; a round
   pairs two batches seconds apart). ``--passes`` repeats the grid, every server started
   again, in reversed order every other pass, and pools each setting's rounds.
3. Where the tuner's pick is not the grid's best: the two side by side, both servers alive, in
   paired rounds (``--h2h-passes`` passes of the tuner's schedule). The grid's best is the
   maximum of noisy one-pass measurements, so its own tok/s is biased high (the winner's curse:
   bench_tune run 8's c=1 top five were within 3 %); a fresh paired measurement is not.
4. The tuner's pick against the grid's best measured tok/s (one pass, and head to head),
   predicted against measured tok/s for every setting (and predicted against measured speedup
   over plain, each over the plain server timed with it), and the two wall times. Writes
   bench_tune.json, bench_tune.md (the table benchmarks/README.md quotes) and bench_tune.png
   (predicted against measured).

Decode speed is per request: (tokens - 1) / (time after the first token), the median over a
round's requests (c in flight), after one warm-up pass over the prompts per server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a bare checkout

from sglang_eagle3.bench.client import BatchResult  # noqa: E402
from sglang_eagle3.bench.prompts import BUILT_IN  # noqa: E402
from sglang_eagle3.bench.servers import ServerSpec, live_server  # noqa: E402
from sglang_eagle3.tune.grid import Setting, grid, parse_range  # noqa: E402
from sglang_eagle3.tune.measure import (  # noqa: E402
    drift_corrected,
    greedy,
    per_request,
    plain_argv,
    timed_rounds,
    warm_up,
)

SEED = Setting(15, 1, 16)  # the seed's slow try: 15 steps, 16 draft tokens


def speed(batch: BatchResult) -> tuple[float, float | None, float]:
    """(median tok/s per request, median accept length, median seconds per verify or step)."""
    speeds, per = [], []
    for r in batch.results:
        first = next(t for t, n in r.timing.chunks if n > 0)
        speeds.append((int(r.meta_info["completion_tokens"]) - 1) / (r.end - first))
        per.append(per_request(r, speculative=bool(r.meta_info.get("spec_verify_ct"))))
    accepts = [a for _, a in filter(None, per) if a is not None]
    return (statistics.median(speeds), statistics.median(accepts) if accepts else None,
            statistics.median(x for x, _ in filter(None, per)))  # fmt: skip


def spec_of(s: Setting, launch: list[str], suffix: str = "") -> ServerSpec:
    argv = s.on(launch)
    return ServerSpec(s.name + suffix, None, argv[argv.index("--model-path") + 1], tuple(argv))


def head_to_head(args, launch: list[str], pick: Setting, best: Setting, c: int) -> dict:
    """The pick's tok/s over the grid's best's, both servers alive: per round the same c
    prompts on each, one after the other (ABBA order); the median over rounds."""
    params, ratios = greedy(args.max_new_tokens), []
    with ExitStack() as alive:
        urls = [alive.enter_context(live_server(spec_of(s, launch, "-h2h"), args.out_dir / "logs"))
                for s in (pick, best)]  # fmt: skip
        for u in urls:
            warm_up(u, BUILT_IN, params)
        for _ in range(args.h2h_passes):
            ratios += [speed(a)[0] / speed(b)[0]
                       for a, b in timed_rounds(urls[0], urls[1], BUILT_IN, c, params)]  # fmt: skip
    ratio = statistics.median(ratios)
    print(f"c={c}: {pick} / {best}, head to head: {ratio:.3f} over {len(ratios)} rounds",
          flush=True)  # fmt: skip
    return {"pick": str(pick), "grid_best": str(best), "ratio": round(ratio, 3),
            "rounds": [round(x, 4) for x in ratios]}  # fmt: skip


def brute_force(args, launch: list[str], ref: str, settings: list[Setting], rounds: dict,
                ref_speeds: dict, walls: dict) -> None:  # fmt: skip
    """One pass: each setting's server started, timed at each concurrency in rounds against
    the reference, stopped; ``rounds[name][c]`` gets (subject, reference) tok/s per round."""
    params = greedy(args.max_new_tokens)
    for s in settings:
        t0 = time.monotonic()
        name = s.name
        with live_server(spec_of(s, launch), args.out_dir / "logs") as url:
            warm_up(url, BUILT_IN, params)
            for c in args.concurrency:
                got = rounds.setdefault(name, {}).setdefault(c, [])
                for sub, rb in timed_rounds(url, ref, BUILT_IN, c, params):
                    a, r = speed(sub), speed(rb)
                    got.append({"tok_s": a[0], "ref_tok_s": r[0], "accept_length": a[1],
                                "cycle_s": a[2]})  # fmt: skip
                    ref_speeds[c].append(r[0])
        walls[name] = time.monotonic() - t0
        ups = {c: statistics.median(x["tok_s"] / x["ref_tok_s"] for x in rounds[name][c])
               for c in args.concurrency}  # fmt: skip
        print(f"{name}: " + ", ".join(f"c={c} {u:.3f}x plain" for c, u in ups.items()), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/tune"))
    p.add_argument("--concurrency", default="1,8")
    p.add_argument("--steps", default="1-4")
    p.add_argument("--topk", default="1-2")
    p.add_argument("--max-draft-tokens", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--passes", type=int, default=1, help="grid passes (rounds pooled)")
    p.add_argument("--h2h-passes", type=int, default=3, help="the pick against the grid's "
                   "best: passes of the tuner's round schedule")  # fmt: skip
    args = p.parse_args()
    if args.passes < 1 or args.h2h_passes < 1:
        p.error("--passes and --h2h-passes must be >= 1")
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
    os.environ["OMP_NUM_THREADS"] = "1"
    rounds: dict = {}
    ref_speeds: dict = {c: [] for c in args.concurrency}
    walls: list[dict] = []
    t0 = time.monotonic()
    plain = ServerSpec("plain", None, str(d.target_dir), tuple(plain_argv(launch)))
    with live_server(plain, args.out_dir / "logs") as ref:
        warm_up(ref, BUILT_IN, greedy(args.max_new_tokens))
        plain_start = time.monotonic() - t0
        for i in range(args.passes):
            order = [*settings, SEED]
            walls.append({})
            brute_force(args, launch, ref, order[::-1] if i % 2 else order, rounds, ref_speeds,
                        walls[-1])  # fmt: skip
    level = {c: statistics.median(v) for c, v in ref_speeds.items()}
    measured = {name: {c: drift_corrected([(x["tok_s"], x["ref_tok_s"]) for x in per_c[c]],
                                          level[c]) for c in args.concurrency}
                for name, per_c in rounds.items()}  # fmt: skip
    measured["plain"] = level
    # brute force costs one pass over plain and the grid (the seed is not in the grid)
    grid_wall = plain_start + sum(w for name, w in walls[0].items() if name != SEED.name)
    h2h = {}
    for c in args.concurrency:
        pick, best = picked(result, c), grid_best(settings, measured, c)
        if pick != best:  # the same setting: 1.0 by definition
            h2h[c] = head_to_head(args, launch, pick, best, c)
    served = {name: {c: statistics.median(x["accept_length"] for x in per_c[c])
                     for c in args.concurrency} for name, per_c in rounds.items()}  # fmt: skip
    report = compare(result, measured, settings, args.concurrency, tune_wall, grid_wall, h2h,
                     served)  # fmt: skip
    report["pass_walls_s"] = [round(sum(w.values()), 1) for w in walls]
    report["grid_rounds"] = rounds  # every round: tok/s of the setting and of the reference
    report["tuner"] = result  # its fit points, profile check and every prediction
    (args.out_dir / "bench_tune.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out_dir / "bench_tune.md").write_text(markdown(report))
    plot(report, args.out_dir / "bench_tune.png")
    print(markdown(report))
    return 0


def picked(result: dict, c: int) -> Setting:
    b = result["per_concurrency"][str(c)]["best"]
    return Setting(b["steps"], b["topk"], b["draft_tokens"])


def grid_best(settings: list[Setting], measured: dict, c: int) -> Setting:
    return max(settings, key=lambda s: measured[s.name][c])


def compare(result, measured, settings, concurrency, tune_wall, grid_wall, h2h, served) -> dict:
    rows, per_c = [], {}
    pred = {(p["steps"], p["topk"], p["draft_tokens"], p["concurrency"]): p
            for p in result["predictions"]}  # fmt: skip
    for s in settings:
        for c in concurrency:
            got, want = measured[s.name][c], pred[(s.steps, s.topk, s.draft_tokens, c)]
            up = got / measured["plain"][c]
            rows.append({"setting": str(s), "concurrency": c, "measured_tok_s": round(got, 2),
                         "predicted_tok_s": round(want["tok_s"], 2),
                         "error": round(want["tok_s"] / got - 1, 3),
                         "measured_speedup": round(up, 3),
                         "predicted_speedup": round(want["speedup"], 3),
                         "speedup_error": round(want["speedup"] / up - 1, 3),
                         "served_accept": round(served[s.name][c], 3),
                         "predicted_accept": round(want["accept_length"], 3)})  # fmt: skip
    seed_pred = {e["concurrency"]: e["tok_s"] for e in result["explained"]}
    for c in concurrency:
        best, pick = grid_best(settings, measured, c), picked(result, c)
        per_c[str(c)] = {
            "pick": str(pick), "pick_measured_tok_s": round(measured[pick.name][c], 2),
            "grid_best": str(best), "grid_best_tok_s": round(measured[best.name][c], 2),
            "pick_vs_best": round(measured[pick.name][c] / measured[best.name][c], 3),
            "pick_vs_best_head_to_head": h2h[c]["ratio"] if c in h2h else 1.0,
            "plain_tok_s": round(measured["plain"][c], 2),
            "seed_measured_tok_s": round(measured[SEED.name][c], 2),
            "seed_predicted_tok_s": round(seed_pred[c], 2),
        }  # fmt: skip
    within = sum(abs(r["error"]) <= 0.15 for r in rows) / len(rows)
    within_up = sum(abs(r["speedup_error"]) <= 0.15 for r in rows) / len(rows)
    return {"per_concurrency": per_c, "rows": rows, "within_15pct": round(within, 3),
            "speedup_within_15pct": round(within_up, 3),
            "plain_tok_s": {"tuner": {c: result["per_concurrency"][str(c)]["plain_tok_s"]
                                      for c in concurrency},
                            "grid": {c: round(measured["plain"][c], 2) for c in concurrency}},
            "tune_wall_s": round(tune_wall, 1), "grid_wall_s": round(grid_wall, 1),
            "wall_ratio": round(tune_wall / grid_wall, 3), "model": result["model"],
            "head_to_head": {str(c): v for c, v in h2h.items()},
            "accept_check": result.get("accept_check")}  # fmt: skip


def markdown(r: dict) -> str:
    head = (
        "| concurrency | tuner's pick | its measured tok/s | grid's best (measured) | "
        "pick / best: one pass, head to head | plain | seed 15,1,16 measured (predicted) |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]
    for c, v in r["per_concurrency"].items():
        lines.append(f"| {c} | {v['pick']} | {v['pick_measured_tok_s']} | {v['grid_best']}: "
                     f"{v['grid_best_tok_s']} | {v['pick_vs_best']}, "
                     f"{v['pick_vs_best_head_to_head']} | {v['plain_tok_s']} | "
                     f"{v['seed_measured_tok_s']} ({v['seed_predicted_tok_s']}) |")  # fmt: skip
    plain = r["plain_tok_s"]
    lines += ["", f"Predicted within 15 % of measured: tok/s {r['within_15pct']:.0%}, speedup over "
              f"plain {r['speedup_within_15pct']:.0%}, of {len(r['rows'])} (setting, "
              f"concurrency) pairs. Plain tok/s per request, the tuner's against the grid's: "
              + ", ".join(f"c={c} {plain['tuner'][c]} / {plain['grid'][c]}" for c in plain["grid"])
              + f". Tuner wall {r['tune_wall_s']} s, grid wall {r['grid_wall_s']} s (ratio "
              f"{r['wall_ratio']}).", ""]  # fmt: skip
    lines += ["| setting | concurrency | measured tok/s | predicted | error | measured speedup | "
              "predicted | error | accept length served, predicted |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += [f"| {x['setting']} | {x['concurrency']} | {x['measured_tok_s']} | "
              f"{x['predicted_tok_s']} | {x['error']:+.1%} | {x['measured_speedup']} | "
              f"{x['predicted_speedup']} | {x['speedup_error']:+.1%} | {x['served_accept']}, "
              f"{x['predicted_accept']} |"
              for x in r["rows"]]  # fmt: skip
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
