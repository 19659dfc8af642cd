"""SGLang's adaptive mode held at one step against the static chain of that step, and chain
depth at concurrency 1 and 8, on the demo's tiny models (CPU), each paired against plain.

    python benchmarks/bench_adaptive_held.py [--rounds 6] [--steps 2,3]

Per step s: the static chain (steps s, topk 1, s + 1 draft tokens) and SGLang's adaptive mode
with every slot at [s] (``{"1": {"candidate_steps": [s]}}``), so the two differ only in the
adaptive machinery. The trace is bench_live's c=1 and c=8 phases (mixed lengths, rounds of 2c
with c in flight, plain first every other round); a phase's figure is the median over its
rounds of the server's tok/s over plain's in the same round. Prints one line per server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a bare checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_live import launch_argv, requests, run_trace, trace  # noqa: E402

from sglang_eagle3.bench.servers import ServerSpec, live_server  # noqa: E402
from sglang_eagle3.tune.grid import Setting  # noqa: E402
from sglang_eagle3.tune.measure import plain_argv  # noqa: E402

CAP = 8  # the launcher's CPU default: the c=8 phase runs batches of 8


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6, help="rounds per phase (c=1: twice this)")
    p.add_argument("--steps", default="2,3", help="the chain steps compared")
    p.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/adaptive_held"))
    args = p.parse_args()
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    d = tiny_drafter()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    launch = launch_argv(d, CAP)
    subjects = []
    for s in (int(x) for x in args.steps.split(",")):
        chain = Setting(s, 1, s + 1)
        held = args.out_dir / f"held{s}.json"
        held.write_text(json.dumps({"1": {"candidate_steps": [s]}}))
        subjects += [(chain.name, chain.on(launch)), (f"adaptive-held{s}", [
            *chain.on(launch), "--speculative-adaptive", "--speculative-adaptive-config",
            str(held)])]  # fmt: skip
    phases = trace(8, args.rounds, [24, 64, 40, 56])[:2]  # c=1, then c=8
    reqs = requests(phases)
    os.environ["OMP_NUM_THREADS"] = "1"
    plain = ServerSpec("plain", None, str(d.target_dir), tuple(plain_argv(launch)))
    rows = {}
    with live_server(plain, args.out_dir / "logs") as ref:
        for name, argv in subjects:
            spec = ServerSpec(name, None, str(d.target_dir), tuple(argv))
            with live_server(spec, args.out_dir / "logs") as url:
                run_trace("warm-up", url, ref, phases[:1], [reqs[0][:2]], False)
                got = run_trace(name, url, ref, phases, reqs, False)
            rows[name] = ([statistics.median(a / b for a, b in ph["pairs"])
                           for ph in got["phases"]], got["lossless"])  # fmt: skip
    for name, (ratios, lossless) in rows.items():
        print(
            f"{name}: "
            + ", ".join(
                f"c={ph['concurrency']} {r:.3f}x plain"
                for ph, r in zip(phases, ratios, strict=True)
            )
            + f"; lossless {lossless}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
