"""Speculation under changing load: a trace of phases on the demo's tiny models (CPU), in one run.

    python benchmarks/bench_live.py [--out-dir benchmarks/results/live] [--high 64] [--cap 64]

1. The trace: concurrency 1, then 8, then ``--high`` (where plain decoding catches up: at 64
   it beat the chains in run 3, never at the CPU default cap of 8), then 1 again; request
   lengths cycle through ``--lengths`` (mixed). A phase runs in rounds of 2c requests with c in
   flight (c=1: one request a round, 4x the rounds), so the batch stays near c. Every server,
   the tuner's included, runs at most ``--cap`` requests at once (``--max-running-requests``).
2. ``python -m sglang_eagle3.tune --trace`` on it: the cost model, the adaptive config, and one
   recommendation for the whole trace with its predicted tok/s, per phase and in all.
3. Servers, each through the launcher: every static setting of a small grid (trees included),
   the tuner's recommendation where it is another static one, SGLang's adaptive mode with its
   default config, and with the tuner's config. Each runs the whole trace in order (an adaptive
   server's state carries from phase to phase) against one plain server alive for the whole
   run, round by round, plain first every other round (bench_tune's pairing: drift hits both).
   A server's phase tok/s is the median over the phase's rounds of its tokens per second over
   plain's in the same round, times plain's median for that phase over the run; its whole-trace
   tok/s weighs the phases by their tokens (tune/mix.py's ``whole``).
4. Per adaptive server and phase: the steps SGLang ran, per batch size (GET /get_server_info,
   the plugin's ``sglang_eagle3_adaptive_steps``); per server: lossless (every request's greedy
   ids equal plain's). Writes bench_live.jsonl (one record per run), bench_live.md (the table
   benchmarks/README.md quotes) and bench_live.png.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a bare checkout

from bench_live_report import goals, markdown, plot  # noqa: E402

from sglang_eagle3.bench.client import run_batch  # noqa: E402
from sglang_eagle3.bench.prompts import BUILT_IN  # noqa: E402
from sglang_eagle3.bench.servers import ServerSpec, live_server  # noqa: E402
from sglang_eagle3.tune.grid import Setting  # noqa: E402
from sglang_eagle3.tune.measure import greedy, plain_argv  # noqa: E402
from sglang_eagle3.tune.mix import Phase, phase_of, whole  # noqa: E402

STATIC = "s1k1n2,s2k1n3,s2k2n6,s3k2n6"  # two chains, the tuner's tree, the demo's former tree
DEFAULT_STEPS = 3  # SGLang's own start within its default union [0, 1, 3, 5, 7] (the middle)
STEPS_KEY = "sglang_eagle3_adaptive_steps"


def launch_argv(drafter, cap: int) -> list[str]:
    """The launcher's flags for the tiny target and its trained drafter, ``cap`` requests at
    once: every server of a bench run starts from these."""
    return ["--cpu", "--model-path", str(drafter.target_dir), "--dtype", "float32",
            "--max-running-requests", str(cap), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(drafter.draft_dir)]  # fmt: skip


def trace(high: int, rounds: int, lengths: list[int]) -> list[dict]:
    """The phases, as the tuner's --trace reads them (lengths cycled per phase)."""
    out = []
    for c in (1, 8, high, 1):
        per_round = 1 if c == 1 else 2 * c
        # a lone request's round lasts about a second, where this machine's speed moves by
        # half (run 3: one server's paired c=1 rounds read 0.79x to 2.38x plain): 4x the rounds
        n = (rounds * 4 if c == 1 else rounds) * per_round
        out.append({"concurrency": c, "requests": n, "per_round": per_round,
                    "lengths": lengths})  # fmt: skip
    return out


def requests(phases: list[dict]) -> list[list[tuple[str, int]]]:
    """Per phase, its (prompt, max_new_tokens) in order: the same for every server."""
    out, i = [], 0
    for ph in phases:
        reqs, lengths = [], ph["lengths"]
        for j in range(ph["requests"]):
            reqs.append((BUILT_IN[i % len(BUILT_IN)], lengths[j % len(lengths)]))
            i += 1
        out.append(reqs)
    return out


def steps_table(url: str) -> Counter:
    import urllib.request

    with urllib.request.urlopen(f"{url}/get_server_info", timeout=30) as r:
        info = json.loads(r.read())
    table = info["internal_states"][0].get(STEPS_KEY, {})
    return Counter({(int(b), int(s)): n for b, row in table.items() for s, n in row.items()})


def one_round(url: str, batch: list[tuple[str, int]], c: int) -> tuple[float, list[list[int]]]:
    """(tokens a second over the round's wall, each request's output ids)."""
    got = run_batch(url, [p for p, _ in batch], lambda i: greedy(batch[i][1]), c)
    if got.errors:
        raise RuntimeError(f"{url}: {got.errors[0]}")
    tokens = sum(int(r.meta_info["completion_tokens"]) for r in got.results)
    return tokens / got.wall_s, [r.output_ids for r in got.results]


def run_trace(name: str, url: str, plain: str, phases, reqs, adaptive: bool) -> dict:
    """The whole trace on ``url`` against ``plain``, round by round; per phase the paired
    rounds, the steps run, and whether every output equals plain's."""
    out = {"name": name, "phases": [], "lossless": True}
    for k, (ph, batch) in enumerate(zip(phases, reqs, strict=True)):
        before = steps_table(url) if adaptive else Counter()
        c, size, pairs = ph["concurrency"], ph["per_round"], []
        for r in range(0, len(batch), size):
            part = batch[r : r + size]
            order = [url, plain] if (r // size + k) % 2 == 0 else [plain, url]
            got = {u: one_round(u, part, c) for u in order}
            pairs.append((got[url][0], got[plain][0]))
            out["lossless"] &= got[url][1] == got[plain][1]
        ran = steps_table(url) - before if adaptive else Counter()
        out["phases"].append({"concurrency": c, "pairs": pairs, "steps": {
            f"{b}:{s}": n for (b, s), n in sorted(ran.items())}})  # fmt: skip
        print(f"  {name} phase {k} (c={c}): {statistics.median(p / q for p, q in pairs):.3f}x "
              "plain", flush=True)  # fmt: skip
    return out


def tune(args, launch: list[str], trace_file: Path) -> dict:
    cmd = [sys.executable, "-m", "sglang_eagle3.tune", *launch, "--trace", str(trace_file),
           "--steps", "1-4", "--topk", "1-2", "--max-draft-tokens", "6", "--max-new-tokens",
           str(max(args.lengths)), "--explain", "5,1,6", "--explain", "7,1,8", "--json",
           "--adaptive-config", str(args.out_dir / "tuned-adaptive.json"), "--log-dir",
           str(args.out_dir / "tune-logs")]  # fmt: skip
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    if done.returncode:
        sys.exit(f"the tuner failed ({done.returncode}):\n{done.stderr[-3000:]}")
    # the tuner's own --json: sglang_eagle3/testing/tiny/tune_result.json is a copy (the demo
    # serves its pick at concurrency 1)
    (args.out_dir / "tune_result.json").write_text(done.stdout)
    result = json.loads(done.stdout)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    return result


def static(names: str) -> list[Setting]:
    out = []
    for name in names.split(","):
        s, rest = name.removeprefix("s").split("k")
        k, n = rest.split("n")
        out.append(Setting(int(s), int(k), int(n)))
    return out


def subjects(result: dict, launch: list[str], out_dir: Path, grid: list[Setting]):
    """(name, launcher argv) of every server the trace runs on."""
    out = [(s.name, s.on(launch)) for s in grid]
    rec = result["mix"]["recommended"]
    if rec not in ("plain", "adaptive") and rec not in {s.name for s in grid}:
        flags = result["mix"]["flags"].split()
        out.append((rec, [*launch, *flags]))
    out.append(("adaptive-default", [*launch, "--speculative-num-steps", str(DEFAULT_STEPS),
                                     "--speculative-eagle-topk", "1",
                                     "--speculative-adaptive"]))  # fmt: skip
    if result["adaptive_flags"]:
        out.append(("adaptive", [*launch, *result["adaptive_flags"].split(),
                                 "--speculative-adaptive-config",
                                 str(out_dir / "tuned-adaptive.json")]))  # fmt: skip
    return out


def predictions(result: dict, phases: list[Phase], served: dict) -> dict:
    """Per server name: predicted tok/s in all per concurrency, and over the whole trace;
    ``served``: the adaptive config the "adaptive" server ran (a refit's tuner may write
    another)."""
    from sglang.srt.speculative.adaptive_spec_params import DEFAULT_ADAPTIVE_CONFIG

    from sglang_eagle3.tune.predict_mix import adaptive_served
    from sglang_eagle3.tune.saved import model_of, profile_of

    mix = result["mix"]
    per = {n: {int(c): v for c, v in row.items()}
           for n, row in mix["per_concurrency_tok_s"].items()}  # fmt: skip
    model, profile = model_of(result), profile_of(result)
    cap, tokens = mix["running_cap"], mix["tokens_per_request"]
    per["adaptive-default"], _ = adaptive_served(model, profile, DEFAULT_ADAPTIVE_CONFIG, phases,
                                                 cap, tokens, initial=DEFAULT_STEPS)  # fmt: skip
    if served and served != result["adaptive_config"]:  # the tuner's own figure is another's
        per["adaptive"], _ = adaptive_served(model, profile, served, phases, cap, tokens)
    return {n: {"per_c": row, "whole": whole(phases, row)} for n, row in per.items()}


def refresh(args, launch: list[str], record: dict, trace_file: Path) -> dict:
    """The record's figures again with this tuner's predictions (its saved result re-read with
    --tune-result: no server starts) and this report's arithmetic; with ``--refit``, its cost
    model first fitted again to its own timings by this version's fit."""
    from sglang_eagle3.tune.saved import refit_of

    # the config the adaptive server ran, whatever the tuner would write now
    served = record.setdefault("served_adaptive_config", record["tune"]["adaptive_config"])
    saved = args.out_dir / "tune_result.json"
    tune = {k: v for k, v in record["tune"].items() if k != "wall_s"}
    if args.refit:
        tune["model"] = refit_of(tune).to_dict()
    saved.write_text(json.dumps(tune))
    cmd = [sys.executable, "-m", "sglang_eagle3.tune", *launch, "--trace", str(trace_file),
           "--steps", "1-4", "--topk", "1-2", "--max-draft-tokens", "6", "--tune-result",
           str(saved), "--json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"the tuner failed ({done.returncode}):\n{done.stderr[-3000:]}")
    fresh = json.loads(done.stdout)
    keep = {k: v for k, v in record["tune"].items() if k not in fresh}
    record["tune"] = {**keep, **fresh}
    mix = [phase_of(x) for x in fresh["mix"]["phases"]]
    record["predicted"] = predictions(record["tune"], mix, served)
    record["summary"] = goals(record)
    record["refreshed"] = time.strftime("%Y-%m-%d %H:%M") + (" (refit)" if args.refit else "")
    return record


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/live"))
    p.add_argument("--high", type=int, default=64, help="the high phase's concurrency")
    p.add_argument("--cap", type=int, default=64, help="--max-running-requests of every server "
                   "and the tuner's (SGLang's CPU default is 8; at 8 plain never leads on the "
                   "tiny models)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=3, help="rounds per phase (c=1: 4x this)")
    p.add_argument("--lengths", default="24,64,40,56", help="max_new_tokens, cycled")
    p.add_argument("--static", default=STATIC, help="the static settings served, as sSkKnN")
    p.add_argument("--tune-result", type=Path, help="the tuner's --json of an earlier run on "
                   "this trace (bench_live writes tune_result.json): skips the tuner")  # fmt: skip
    p.add_argument("--only", help="serve only these servers (comma-separated names, e.g. "
                   "adaptive,adaptive-default), plain always")  # fmt: skip
    p.add_argument("--rereport", action="store_true", help="no server: the last run's record "
                   "(bench_live.jsonl) with the tuner's predictions recomputed from its saved "
                   "result (its own trace and cap), and its report written again")  # fmt: skip
    p.add_argument("--refit", action="store_true", help="with --rereport: the cost model "
                   "fitted again to the record's own timings by this version's fit")  # fmt: skip
    args = p.parse_args()
    args.lengths = [int(x) for x in args.lengths.split(",")]
    if args.refit and not args.rereport:
        p.error("--refit re-reads a record: give it with --rereport")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    d = tiny_drafter()
    record = None
    if args.rereport:  # the record's own trace and cap (8, SGLang's CPU default, before --cap)
        lines = (args.out_dir / "bench_live.jsonl").read_text().splitlines()
        record = json.loads(lines[-1])
        args.cap = record.get("cap", 8)
    launch = launch_argv(d, args.cap)
    phases = record["trace"] if record else trace(args.high, args.rounds, args.lengths)
    trace_file = args.out_dir / "trace.json"
    trace_file.write_text(json.dumps({"phases": phases}, indent=2))
    if record is not None:
        record = refresh(args, launch, record, trace_file)
        (args.out_dir / "bench_live.md").write_text(markdown(record))
        plot(record, args.out_dir / "bench_live.png")
        with (args.out_dir / "bench_live.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(markdown(record))
        return 0
    t0 = time.monotonic()
    if args.tune_result is not None:  # the same trace, re-timed: the tuner's 25 min saved
        result = json.loads(args.tune_result.read_text())
        result["wall_s"] = "not run (--tune-result)"
        cs = [ph["concurrency"] for ph in result["mix"]["phases"]]
        if cs != [ph["concurrency"] for ph in phases]:
            sys.exit(f"{args.tune_result} was tuned for phases at {cs}, not this trace's")
        if result["mix"]["running_cap"] != args.cap:
            sys.exit(f"{args.tune_result} was tuned at --max-running-requests "
                     f"{result['mix']['running_cap']}, not --cap {args.cap}")  # fmt: skip
        (args.out_dir / "tuned-adaptive.json").write_text(json.dumps(result["adaptive_config"]))
    else:
        result = tune(args, launch, trace_file)
    print(f"tuner: {result['wall_s']} s; recommends {result['mix']['recommended']}", flush=True)
    mix = [phase_of(x) for x in result["mix"]["phases"]]
    reqs = requests(phases)
    os.environ["OMP_NUM_THREADS"] = "1"
    runs = []
    plain = ServerSpec("plain", None, str(d.target_dir), tuple(plain_argv(launch)))
    with live_server(plain, args.out_dir / "logs") as ref:
        one_round(ref, reqs[0][:4], 1)  # first-call costs are no phase's
        for name, argv in subjects(result, launch, args.out_dir, static(args.static)):
            if args.only and name not in args.only.split(","):
                continue
            spec = ServerSpec(name, None, str(d.target_dir), tuple(argv))
            with live_server(spec, args.out_dir / "logs") as url:
                one_round(url, reqs[0][:4], 1)
                runs.append(run_trace(name, url, ref, phases, reqs, "adaptive" in name))
    record = {"date": time.strftime("%Y-%m-%d %H:%M"), "wall_s": round(time.monotonic() - t0),
              "tune_result": str(args.tune_result) if args.tune_result else "run here",
              "trace": phases, "lengths": args.lengths, "cap": args.cap, "tune": result,
              "runs": runs,
              "predicted": predictions(result, mix, result["adaptive_config"])}  # fmt: skip
    record["summary"] = goals(record)
    with (args.out_dir / "bench_live.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
    (args.out_dir / "bench_live.md").write_text(markdown(record))
    plot(record, args.out_dir / "bench_live.png")
    print(markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
