"""The bench's input checks: everything that can be wrong before any server starts (exit 2)."""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from pathlib import Path

from sglang_eagle3.bench.servers import ServerSpec, ServerSpecError, parse_launch, parse_server


def check_args(args: argparse.Namespace, p: argparse.ArgumentParser) -> tuple[list, list[int]]:
    """Everything that can be wrong with the input, before any server starts (exit 2)."""
    if not args.servers:
        p.error("give at least one --server NAME=URL or --launch NAME='ARGS'")
    try:
        specs = [parse_server(v) if k == "url" else parse_launch(v) for k, v in args.servers]
    except ServerSpecError as e:
        p.error(str(e))
    if len({s.name for s in specs}) != len(specs):
        p.error("server names must be unique")
    try:
        conc = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        p.error(f"--concurrency takes integers like 1,4,8, got {args.concurrency!r}")
    if len(set(conc)) != len(conc):
        p.error(f"--concurrency lists a value twice: {args.concurrency!r}")
    if any(c < 1 for c in conc) or args.max_new_tokens < 1:
        p.error("concurrency and --max-new-tokens must be >= 1")
    if not math.isfinite(args.temperature) or args.temperature < 0:
        p.error(f"--temperature must be a finite number >= 0, got {args.temperature}")
    if not 0 < args.top_p <= 1:
        p.error(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.num_prompts is not None and args.num_prompts < 1:
        p.error(f"--num-prompts must be >= 1, got {args.num_prompts}")
    for flag in ("ready_timeout", "request_timeout"):
        value = getattr(args, flag)
        if not math.isfinite(value) or value <= 0:
            p.error(f"--{flag.replace('_', '-')} must be a number of seconds > 0, got {value}")
    if args.load_client == "sglang":
        remote = [s.name for s in specs if not s.launched]
        if remote and not args.tokenizer:
            p.error(f"--load-client sglang against --server {', '.join(remote)}: SGLang's client "
                    "would fetch a tokenizer from a hub; add --tokenizer DIR (the served "
                    "model's local tokenizer)")  # fmt: skip
    _check_out(args.out, p)
    for spec in specs:
        if spec.launched:
            _dry_run(spec, p)
    return specs, conc


def _check_out(out: Path, p: argparse.ArgumentParser) -> None:
    # checked without creating anything: bad input must leave nothing behind
    probe = out.absolute()
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        p.error(f"--out {out}: {probe} is a file, not a folder; give a writable folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        p.error(f"--out {out}: {probe} is not writable; give a writable folder")


def _dry_run(spec: ServerSpec, p: argparse.ArgumentParser) -> None:
    """The launcher's own dry run of a --launch, so a bad one stops the run before any server
    starts (and before a good server's measurements could be thrown away)."""
    argv = [sys.executable, "-m", "sglang_eagle3.launch", "--dry-run",
            "--model-path", spec.model_path, *spec.launch_args]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        p.error(f"--launch {spec.name}: the launcher refuses it: {why}")
