"""Capture for training against the same server's plain prefill, side by side in one run (CPU).

    python benchmarks/bench_capture.py [--samples 64] [--rounds 3] [--out-dir DIR]

One capture-only server on the trained tiny target (files mode, fp32, taps layer:5,embed,layer:2
plus the verifier layer:7), and corpus samples of --chars characters. Each round, in turn:
1. plain prefill: the same token ids, `max_new_tokens` 1, no hidden states (tokens/s);
2. stock JSON capture: the same requests with `return_hidden_states` (bytes a token on the wire);
3. `python -m sglang_eagle3.capture --server URL --json` into a fresh directory (its own
   capture-loop tokens/s and the bytes it wrote a token).
Then the memory check: the capture CLI's peak RSS and Python heap peak (tracemalloc) for N and
4N short samples, against the index (ids and masks) it holds. One JSONL record per round; the
medians go to bench_capture.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a bare checkout

from sglang_eagle3.launch.server_process import sglang_server  # noqa: E402

FC = "layer:5,embed,layer:2"
CONCURRENCY = 8
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def corpus(n: int, chars: int) -> list[str]:
    from sglang_eagle3.testing.tiny.corpus import iter_texts, stdlib_files

    text = ""
    for t in iter_texts(stdlib_files("heldout")):
        text += t
        if len(text) >= n * chars:
            break
    return [text[i * chars : (i + 1) * chars] for i in range(n)]


def post(url: str, body: dict) -> bytes:
    import urllib.request

    req = urllib.request.Request(url + "/generate", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.read()


def timed_requests(url: str, ids: list[list[int]], hidden: bool) -> tuple[float, int]:
    """(seconds, answer bytes) for every sample, CONCURRENCY in flight."""

    def one(i):
        body = {"input_ids": i, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
        return len(post(url, {**body, "return_hidden_states": True} if hidden else body))

    start = time.monotonic()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        sizes = list(pool.map(one, ids))
    return time.monotonic() - start, sum(sizes)


def run_capture(url: str, data: Path, out: Path) -> dict:
    got = subprocess.run([sys.executable, "-m", "sglang_eagle3.capture", "--data", str(data),
                          "--out", str(out), "--hidden-state-layout", FC, "--server", url,
                          "--concurrency", str(CONCURRENCY), "--no-progress", "--json"],
                         capture_output=True, text=True, env=ENV, timeout=1800)  # fmt: skip
    if got.returncode:
        raise RuntimeError(got.stderr[-2000:])
    return json.loads(got.stdout)


# The CLI in a child under tracemalloc: its Python heap peak, imports included (the same for N
# and 4N samples, so the difference is what the samples hold).
TRACED = ("import sys, tracemalloc; tracemalloc.start(); "
          "from sglang_eagle3.capture.cli import main; rc = main(sys.argv[1:]); "
          "print('traced-peak', tracemalloc.get_traced_memory()[1], file=sys.stderr); "
          "sys.exit(rc)")  # fmt: skip


def peak_memory(url: str, data: Path, out: Path) -> tuple[int, int, dict]:
    """(peak RSS in bytes, sampled every 20 ms; traced Python heap peak; summary) of one
    capture CLI run."""
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", TRACED, "--data", str(data), "--out",
                             str(out), "--hidden-state-layout", FC, "--server", url,
                             "--no-progress", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV, text=True)  # fmt: skip
    ps, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    stdout, stderr = proc.communicate()
    if proc.returncode:
        raise RuntimeError(stderr[-2000:])
    traced = int(stderr.rsplit("traced-peak", 1)[1].split()[0])
    return peak, traced, json.loads(stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--chars", type=int, default=2000, help="characters a sample")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--memory-samples",
        type=int,
        default=1000,
        help="memory check: N and 4N samples (N >= 1000, one index record batch)",
    )
    p.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/capture"))
    args = p.parse_args()
    from transformers import AutoTokenizer

    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    target = tiny_drafter().target_dir
    args.out_dir.mkdir(parents=True, exist_ok=True)
    texts = corpus(args.samples, args.chars)
    data = args.out_dir / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(str(target))
    ids = [tok(t, add_special_tokens=True)["input_ids"] for t in texts]
    tokens = sum(map(len, ids))
    folder = args.out_dir / "server-files"
    folder.mkdir(exist_ok=True)
    flags = ["--cpu", "--dtype", "float32", "--enable-return-aux-hidden-states",
             "--hidden-state-layout", FC, "--disable-radix-cache",
             "--capture-dir", str(folder)]  # fmt: skip
    srv = sglang_server(target, flags, args.out_dir / "server.log", env=ENV,
                        module="sglang_eagle3.launch")  # fmt: skip
    records = []
    try:
        srv.start().wait_ready(timeout=600)
        timed_requests(srv.url, ids[:CONCURRENCY], hidden=False)  # warm-up
        run_capture(srv.url, data, args.out_dir / "warm")  # first-use costs (imports, files)
        for r in range(args.rounds):
            plain_s, _ = timed_requests(srv.url, ids, hidden=False)
            json_s, json_bytes = timed_requests(srv.url, ids, hidden=True)
            cap = run_capture(srv.url, data, args.out_dir / f"round{r}")
            rec = {"round": r, "samples": len(ids), "tokens": tokens,
                   "plain_prefill_tok_s": tokens / plain_s, "json_tok_s": tokens / json_s,
                   "json_bytes_per_token": json_bytes / tokens, "capture": cap,
                   "capture_vs_plain": cap["tok_s"] / (tokens / plain_s),
                   "file_bytes_vs_raw": cap["bytes_per_token"] / cap["raw_bytes_per_token"],
                   "json_bytes_vs_raw": json_bytes / tokens / cap["raw_bytes_per_token"],
                   }  # fmt: skip
            records.append(rec)
            print(json.dumps({k: v for k, v in rec.items() if k != "capture"}), flush=True)
        short = args.out_dir / "short.jsonl"
        rows = corpus(args.memory_samples * 4, 40)
        mem = {}
        for n in (args.memory_samples, args.memory_samples * 4):
            short.write_text("".join(json.dumps({"text": t}) + "\n" for t in rows[:n]))
            mem[n] = peak_memory(srv.url, short, args.out_dir / f"mem{n}")
    finally:
        srv.stop()
    (n1, (rss1, heap1, s1)), (n4, (rss4, heap4, s4)) = mem.items()
    per_sample = (rss4 - rss1) / (n4 - n1)
    heap_per_sample = (heap4 - heap1) / (n4 - n1)
    import numpy as np

    # the CLI's index: int32 ids and uint8 masks a sample, each array with its object header
    index = 5 * (s4["tokens"] - s1["tokens"]) / (n4 - n1) + 2 * sys.getsizeof(np.zeros(0))
    med = {k: statistics.median(r[k] for r in records)
           for k in ("plain_prefill_tok_s", "json_tok_s", "capture_vs_plain", "file_bytes_vs_raw",
                     "json_bytes_vs_raw")}  # fmt: skip
    med["capture_tok_s"] = statistics.median(r["capture"]["tok_s"] for r in records)
    summary = {"medians": med, "memory": {"samples": [n1, n4], "peak_rss": [rss1, rss4],
               "rss_per_extra_sample": per_sample, "traced_peak": [heap1, heap4],
               "traced_per_extra_sample": heap_per_sample,
               "index_bytes_per_sample": index}}  # fmt: skip
    with (args.out_dir / "bench_capture.jsonl").open("w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
        f.write(json.dumps(summary) + "\n")
    md = [f"{len(ids)} samples, {tokens} tokens (fp32, hidden 128, 4 taps stored: raw "
          f"{records[0]['capture']['raw_bytes_per_token']} bytes a token); medians of "
          f"{args.rounds} rounds, concurrency {CONCURRENCY}", "",
          "| path | tokens/s | vs plain prefill | bytes a token / raw |", "|---|---|---|---|",
          f"| plain prefill (no hidden states) | {med['plain_prefill_tok_s']:.0f} | 1.00 | - |",
          f"| stock JSON (`return_hidden_states`) | {med['json_tok_s']:.0f} | "
          f"{med['json_tok_s'] / med['plain_prefill_tok_s']:.2f} | "
          f"{med['json_bytes_vs_raw']:.2f} |",
          f"| `python -m sglang_eagle3.capture` (files) | {med['capture_tok_s']:.0f} | "
          f"{med['capture_vs_plain']:.2f} | {med['file_bytes_vs_raw']:.3f} |", "",
          f"Memory: peak RSS {rss1 / 2**20:.0f} MiB for {n1} samples, {rss4 / 2**20:.0f} MiB for "
          f"{n4}: {per_sample:.0f} bytes a sample more. Python heap peak (tracemalloc) "
          f"{heap1 / 2**20:.1f} MiB and {heap4 / 2**20:.1f} MiB: {heap_per_sample:.0f} bytes a "
          f"sample more, against an index of {index:.0f} bytes a sample."]  # fmt: skip
    (args.out_dir / "bench_capture.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
