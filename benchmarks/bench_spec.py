"""Tokens/s and accept length, speculative against plain, on live SGLang servers.

    python benchmarks/bench_spec.py --server plain=http://127.0.0.1:30000 \
        --server eagle3=http://127.0.0.1:30001 [--prompts FILE.jsonl] [--concurrency 1,4,8]

The first server is the baseline: ratios are against it, and greedy outputs of every other
server must be token-identical to it (losslessness). Accept length is the unbiased
1 + correct drafts / verify steps, next to SGLang's completion tokens / verify steps.
Not yet: TTFT and inter-token latency (need streaming), sampled decoding, plots.

On a small CPU machine, keep only the server being measured alive: an idle SGLang scheduler
still takes CPU, and with two tiny servers up on 2 cores plain decoding measured 3.1 tok/s
instead of the 112 tok/s it reaches alone (`python -m sglang_eagle3.demo` measures one at a time).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_eagle3.bench_metrics import spec_stats  # noqa: E402

BUILT_IN = [
    "def fibonacci(n):",
    "import os\nimport sys\n\n",
    "class Stack:\n    def __init__(self):",
    "for i in range(10):\n    ",
    "# Parse command-line arguments\n",
    "with open(path) as f:",
    "try:\n    import json\nexcept ImportError:",
    "def main():\n    args = ",
]


def generate(url: str, text: str, max_new: int) -> dict:
    body = {
        "text": text,
        "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True},
    }
    req = urllib.request.Request(
        url + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def run(url: str, prompts: list[str], max_new: int, concurrency: int) -> dict:
    generate(url, prompts[0], 4)  # warm-up
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        outs = list(pool.map(lambda p: generate(url, p, max_new), prompts))
    wall = time.perf_counter() - t0
    stats = spec_stats(o["meta_info"] for o in outs)
    return {
        "tok_s": stats.completion_tokens / wall,
        "wall_s": wall,
        **stats.to_json(),
        "output_ids": [o["output_ids"] for o in outs],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", action="append", required=True, help="NAME=URL; first = baseline")
    p.add_argument("--prompts", type=Path, help='JSONL file with {"text": ...} per line')
    p.add_argument("--concurrency", default="1", help="comma-separated, e.g. 1,4,8")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    servers = [s.split("=", 1) for s in args.server]
    if any(len(s) != 2 for s in servers):
        p.error("--server takes NAME=URL")
    prompts = BUILT_IN
    if args.prompts:
        prompts = [
            json.loads(line)["text"]
            for line in args.prompts.read_text().splitlines()
            if line.strip()
        ]
    rows = []
    for conc in [int(c) for c in args.concurrency.split(",")]:
        base = None
        for name, url in servers:
            print(f"{name} @ concurrency {conc} ...", file=sys.stderr)
            r = run(url.rstrip("/"), prompts, args.max_new_tokens, conc)
            base = base or r
            r.update(
                name=name,
                concurrency=conc,
                speedup=r["tok_s"] / base["tok_s"],
                lossless=r["output_ids"] == base["output_ids"],
            )
            rows.append(r)
    print("| server | conc | tok/s | speedup | accept length | SGLang's | accept rate | lossless |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        al, sal = r["accept_length"], r["sglang_accept_length"]
        rate = r["accept_rate"]
        print(
            f"| {r['name']} | {r['concurrency']} | {r['tok_s']:.1f} | {r['speedup']:.2f}x | "
            f"{'-' if al is None else f'{al:.2f}'} | {'-' if sal is None else f'{sal:.2f}'} | "
            f"{'-' if rate is None else f'{rate:.2f}'} | {'yes' if r['lossless'] else 'NO'} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps([{k: v for k, v in r.items() if k != "output_ids"} for r in rows], indent=2)
        )
    return 0 if all(r["lossless"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
