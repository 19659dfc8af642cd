"""`python -m sglang_eagle3.bench` (or `python benchmarks/bench_spec.py`): speculative decoding
against plain decoding on live SGLang servers, in one run.

    python -m sglang_eagle3.bench --server plain=http://127.0.0.1:30000 \\
        --server eagle3=http://127.0.0.1:30001 [--prompts FILE.jsonl] [--concurrency 1,4,8]
    python -m sglang_eagle3.bench --launch "plain=--model-path T --cpu --dtype float32" \\
        --launch "eagle3=--model-path T --cpu --dtype float32 --speculative-algorithm EAGLE3 \\
        --speculative-draft-model-path D ..." [--temperature 0.7 --seed 1] [--out DIR]

The first server is the baseline: ratios are against it (same mode, same concurrency), and
every other server's greedy outputs must be token-identical to its (losslessness; exit 1 if
not). `--launch` servers are started through the launcher one at a time and stopped before
the next starts. Per configuration (server x mode x concurrency), from our streaming client:
output tok/s (completion tokens / wall time of the batch), TTFT and inter-token latency
(median, p90; ITL per token: a chunk's gap divided by the tokens it carries, as
`sglang.benchmark.serving` counts), accept length (unbiased 1 + correct drafts / verify steps
next to SGLang's completion tokens / verify steps), accept rate and the histogram of accepted
drafts per verify step. `--load-client sglang` also runs `python -m sglang.benchmark.serving`
on every configuration and reports its figures in a second table.
Exit codes: 0 ok, 1 a greedy output differed or a request failed, 2 bad input (nothing started).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from sglang_eagle3.bench.checks import check_args
from sglang_eagle3.bench.client import run_batch, server_alive, stream_generate
from sglang_eagle3.bench.metrics import latency_stats, ratio, spec_stats
from sglang_eagle3.bench.prompts import BUILT_IN, PromptFileError, read_prompts
from sglang_eagle3.bench.servers import (
    ServerSpec,
    live_server,
)

REQUEST_TIMEOUT_S = 300.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench_spec", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--server",
        dest="servers",
        action="append",
        default=[],
        type=lambda v: ("url", v),
        metavar="NAME=URL",
        help="a running server; repeatable; the first is the baseline",
    )
    p.add_argument(
        "--launch",
        dest="servers",
        action="append",
        type=lambda v: ("launch", v),
        metavar="NAME='LAUNCHER ARGS'",
        help="start through sglang_eagle3.launch",
    )
    p.add_argument("--prompts", type=Path, help='JSONL, {"text": ...} per line (default: built-in)')
    p.add_argument("--num-prompts", type=int, help="use only the first N prompts")
    p.add_argument("--concurrency", default="1", help="comma-separated sweep, e.g. 1,4,8")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="> 0 adds a sampled run next to the greedy one",
    )
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, help="sampled mode: sampling_seed = SEED + prompt index")
    p.add_argument(
        "--load-client",
        choices=["own", "sglang"],
        default="own",
        help="sglang: also run sglang.benchmark.serving per configuration",
    )
    p.add_argument(
        "--tokenizer",
        help="with --load-client sglang and --server: the served model's local tokenizer "
        "(launched servers use their --model-path)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bench_spec_out"),
        help="results.json, results.md, PNG plots and server logs go here",
    )
    p.add_argument("--ready-timeout", type=float, default=600.0)
    p.add_argument(
        "--request-timeout",
        type=float,
        default=REQUEST_TIMEOUT_S,
        help="seconds one streamed request may stall before it counts as failed "
        f"(default {REQUEST_TIMEOUT_S:g})",
    )
    p.add_argument("--no-progress", action="store_true")
    return p


def _params(mode: str, args: argparse.Namespace):
    base = {"max_new_tokens": args.max_new_tokens, "ignore_eos": True}
    if mode == "greedy":
        return {**base, "temperature": 0.0}
    sampled = {**base, "temperature": args.temperature, "top_p": args.top_p}
    if args.seed is None:
        return sampled
    # SGLang 0.5.23 honours sampling_seed only with --enable-deterministic-inference.
    return lambda i: {**sampled, "sampling_seed": args.seed + i}


def _row(spec: ServerSpec, mode: str, temp: float, conc: int, batch) -> dict:
    ok = [r for r in batch.results if r.ok]
    stats = spec_stats(r.meta_info for r in ok)
    lat = latency_stats(r.timing for r in ok)
    reasons: dict[str, int] = {}
    for r in ok:
        kind = (r.meta_info.get("finish_reason") or {}).get("type", "none")
        reasons[kind] = reasons.get(kind, 0) + 1
    return {
        "name": spec.name, "mode": mode, "temperature": temp, "concurrency": conc,
        "tok_s": stats.completion_tokens / batch.wall_s if batch.wall_s else None,
        "wall_s": batch.wall_s, **stats.to_json(), **lat.to_json(),
        "finish_reasons": reasons, "errors": batch.errors,
        "failed_requests": [i for i, r in enumerate(batch.results) if not r.ok],
        "server_died": False,
    }  # fmt: skip


def _compare(rows: list[dict], outputs: dict, base: str) -> None:
    """Ratios against the baseline's row of the same mode and concurrency; losslessness for
    greedy rows over the prompts both servers answered whole (a failed request is counted
    as failed, not as a difference: a crash is not a correctness bug)."""
    index = {(r["name"], r["mode"], r["concurrency"]): r for r in rows}
    for r in rows:
        key = (base, r["mode"], r["concurrency"])
        b = index.get(key, {})  # missing where the baseline died before this row
        r["baseline"] = r["name"] == base
        r["speedup"] = ratio(r["tok_s"], b.get("tok_s"))
        r["ttft_ratio"] = ratio(r["ttft_ms_median"], b.get("ttft_ms_median"))
        r["itl_ratio"] = ratio(r["itl_ms_median"], b.get("itl_ms_median"))
        r["lossless"], r["mismatches"] = None, []
        if r["mode"] == "greedy" and not r["baseline"] and key in outputs:
            mine, ref = outputs[(r["name"], r["mode"], r["concurrency"])], outputs[key]
            pairs = [(i, a, c) for i, (a, c) in enumerate(zip(mine, ref, strict=True))
                     if a is not None and c is not None]  # fmt: skip
            r["mismatches"] = [i for i, a, c in pairs if a != c]
            r["lossless"] = not r["mismatches"] if pairs else None


class _ServerDied(Exception):
    """A server stopped answering mid-run: later measurements would all fail."""


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    specs, concs = check_args(args, p)
    try:
        prompts = read_prompts(args.prompts) if args.prompts else list(BUILT_IN)
    except PromptFileError as e:
        print(f"bench_spec: error: {e}", file=sys.stderr)
        return 2
    prompts = prompts[: args.num_prompts] if args.num_prompts else prompts
    modes = [("greedy", 0.0)] + ([("sampled", args.temperature)] if args.temperature > 0 else [])
    args.out.mkdir(parents=True, exist_ok=True)

    from tqdm import tqdm

    total = len(specs) * len(modes) * len(concs) * len(prompts)
    bar = tqdm(total=total, file=sys.stderr, unit="req", disable=args.no_progress)
    rows, outputs = [], {}
    try:
        for spec in specs:
            bar.set_description(f"{spec.name}: starting" if spec.launched else spec.name)
            with live_server(spec, args.out / "logs", args.ready_timeout) as url:
                # one full-length request first: lazy initialisation is not what we measure
                warm = stream_generate(url, prompts[0], _params("greedy", args))
                if not warm.ok:
                    raise RuntimeError(f"{spec.name} ({url}) failed its warm-up: {warm.error}")
                for mode, temp in modes:
                    for conc in concs:
                        bar.set_description(f"{spec.name} {mode} c={conc}")
                        batch = run_batch(url, prompts, _params(mode, args), conc,
                                          on_done=lambda: bar.update(1),
                                          timeout=args.request_timeout)  # fmt: skip
                        row = _row(spec, mode, temp, conc, batch)
                        outputs[(spec.name, mode, conc)] = [
                            r.output_ids if r.ok else None for r in batch.results
                        ]
                        if args.load_client == "sglang":
                            from sglang_eagle3.bench.sglang_client import run_sglang_serving

                            row["sglang_client"] = run_sglang_serving(
                                url, prompts, args.max_new_tokens, conc, temp,
                                args.out / "sglang_client" / spec.name,
                                spec.model_path or args.tokenizer,
                            )  # fmt: skip
                        rows.append(row)
                        if batch.errors and not server_alive(url):
                            row["server_died"] = True
                            print(f"bench_spec: error: server died: {spec.name} ({url}) stopped "
                                  f"answering during {mode} c={conc}; its rows are marked "
                                  "failed", file=sys.stderr)  # fmt: skip
                            raise _ServerDied
    except _ServerDied:
        pass  # the results gathered so far are still written; the exit code is 1
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM while a launched server runs
        from sglang_eagle3.launch.server_process import interrupted_by

        bar.close()
        why, code = interrupted_by(stop)
        print(f"bench_spec: stopped by {why}; every server it launched is stopped",
              file=sys.stderr)  # fmt: skip
        return code
    except (RuntimeError, TimeoutError) as e:
        bar.close()
        print(f"bench_spec: error: {e}", file=sys.stderr)
        if rows:  # what was measured before the failure is still written
            _finish(args, argv, specs, concs, modes, prompts, rows, outputs)
        return 1
    bar.close()
    return _finish(args, argv, specs, concs, modes, prompts, rows, outputs)


def _finish(args, argv, specs, concs, modes, prompts, rows, outputs) -> int:
    from sglang_eagle3.bench.report import (
        markdown_table,
        sglang_client_table,
        write_json,
        write_plots,
    )

    _compare(rows, outputs, specs[0].name)
    greedy_checked = [r for r in rows if r["lossless"] is not None]
    errors = sum(len(r["errors"]) for r in rows)
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["bench_spec", *(sys.argv[1:] if argv is None else argv)]),
        "servers": [s.describe() for s in specs],
        "baseline": specs[0].name,
        "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
        "modes": [{"mode": m, "temperature": t} for m, t in modes],
        "seed": args.seed, "concurrency": concs, "load_client": args.load_client,
        "lossless": all(r["lossless"] for r in greedy_checked),
        "server_died": [r["name"] for r in rows if r["server_died"]],
        "request_errors": errors, "rows": rows,
    }  # fmt: skip
    table = markdown_table(rows)
    if args.load_client == "sglang":
        table += "\n\n`python -m sglang.benchmark.serving` on the same configurations:\n\n"
        table += sglang_client_table(rows)
    write_json(args.out / "results.json", result)
    (args.out / "results.md").write_text(table + "\n")
    plots = write_plots(rows, args.out)
    print(table)
    print(f"\nwrote {args.out / 'results.json'}, results.md, "
          f"{', '.join(p.name for p in plots)} in {args.out}", file=sys.stderr)  # fmt: skip
    for r in rows:
        for err in r["errors"]:
            print(f"request failed ({r['name']} {r['mode']} c={r['concurrency']}): {err}",
                  file=sys.stderr)  # fmt: skip
        if r["lossless"] is False:
            print(f"NOT LOSSLESS: {r['name']} c={r['concurrency']}: greedy outputs differ from "
                  f"{specs[0].name} on prompts {r['mismatches']}", file=sys.stderr)  # fmt: skip
    died = any(r["server_died"] for r in rows)
    return 0 if result["lossless"] and errors == 0 and not died else 1
