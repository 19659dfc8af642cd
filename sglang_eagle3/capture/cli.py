"""`python -m sglang_eagle3.capture`: EAGLE-3 training data from SGLang, with its taps recorded.

Captures the declared taps, and the verifier tap stored last (the last layer's output before
the final norm, what speculators trains its targets from), of every sample of a JSONL file
through capture-only SGLang servers: launched here through the launcher (``--model-path`` and
any launcher flags), or already running (``--server URL``, repeatable). Writes speculators
0.9's layout with a manifest (data/manifest.py); hidden states travel as files the scheduler
writes (hooks/capture_file.py), never as JSON. Killed, it resumes with ``--resume``. Bad input:
one message, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import parse_taps

PROG = "python -m sglang_eagle3.capture"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="JSONL: {'messages': [...]}, "
                   "{'text': ...} or {'input_ids': [...], 'loss_mask': [...]} a line")  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="the data set's directory")
    p.add_argument("--hidden-state-layout", required=True, metavar="TAPS",
                   help="the fc's taps in its input order, e.g. embed,layer:3,layer:31 "
                   "(layer:K = output of decoder layer K, 0-indexed)")  # fmt: skip
    p.add_argument("--server", action="append", default=[], metavar="URL",
                   help="a running capture server (repeatable); else one is launched")  # fmt: skip
    p.add_argument(
        "--regenerate",
        action="store_true",
        help="first replace each assistant "
        "turn with the target's own reply (greedy unless --regenerate-params)",
    )
    p.add_argument("--regenerate-params", metavar="JSON", default="{}",
                   help='SGLang sampling parameters of the replies, e.g. \'{"temperature": 0.7, '
                   '"max_new_tokens": 512}\' (default: greedy, 512 tokens)')  # fmt: skip
    p.add_argument("--tokenizer", help="the target's tokenizer (default: its --model-path)")
    p.add_argument("--resume", action="store_true", help="continue the run that wrote --out")
    p.add_argument("--max-samples", type=int, help="capture at most this many samples")
    p.add_argument("--max-tokens", type=int, help="stop before the total passes this")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight per server")
    p.add_argument("--keep-free", type=float, default=1.0, metavar="GIB",
                   help="disk to leave free on --out's file system (1 GiB)")  # fmt: skip
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds per sample")
    p.add_argument("--log-dir", type=Path, help="launched servers' logs (default: OUT/.capture)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print what it did as one JSON object")
    return p


def _positive(args: argparse.Namespace) -> None:
    for flag in ("max_samples", "max_tokens", "concurrency"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            name = "--" + flag.replace("_", "-")
            raise WiringError(f"{name} must be >= 1, got {value}", path="command line",
                              fix=f"give {name} a positive count")  # fmt: skip
    # nan compares false with everything: it would switch the disk check off
    if not math.isfinite(args.keep_free) or args.keep_free < 0:
        raise WiringError(f"--keep-free must be a number of GiB >= 0, got {args.keep_free}",
                          path="command line", fix="e.g. --keep-free 1")  # fmt: skip
    if not math.isfinite(args.request_timeout) or args.request_timeout <= 0:
        raise WiringError(f"--request-timeout must be a number of seconds > 0, got "
                          f"{args.request_timeout}", path="command line",
                          fix="e.g. --request-timeout 600")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args, rest = build_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    try:
        _positive(args)
        fc = parse_taps(args.hidden_state_layout, path="--hidden-state-layout")
        from sglang_eagle3.capture.run import capture, summary_line

        summary = capture(args, rest, fc)
    except WiringError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        from sglang_eagle3.launch.server_process import interrupted_by

        name, code = interrupted_by(stop)
        print(f"{PROG}: interrupted ({name}); --resume continues it", file=sys.stderr)
        return code
    print(json.dumps(summary) if args.json else summary_line(summary))
    return 0
