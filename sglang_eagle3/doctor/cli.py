"""``python -m sglang_eagle3.doctor --draft DIR (--data PATH | --target DIR | --server URL) ...``

Scores an EAGLE-3 draft under several candidate hidden-state layouts (declared, served,
shifted, default ...) and says whether the layout that would be served is the one the draft
works with. The evidence is the draft's training data (--data), or, with no data, the target's
own greedy continuation of prompts (--prompts, else a built-in chat/code/prose/maths set) with
the hidden states the doctor captures itself: from --target (Hugging Face transformers in
process, or --engine sglang: a capture server the doctor starts and stops), or from a live
SGLang in capture mode (--server), started with

  python -m sglang_eagle3.launch --model-path TARGET --enable-return-aux-hidden-states \\
      --hidden-state-layout TAPS --disable-radix-cache

where TAPS covers the candidates' taps (the doctor names the exact list when one is missing).
Exit codes: 0 fine (or cannot tell), 1 the served layout scores clearly below the best
candidate (or would not start), or no layout beats the taps-zeroed floor; 2 bad input
(non-finite draft weights included).

"Clearly below": at least 5 points under the best candidate's step-1 top-1 accuracy, on the same
tokens, with a paired (McNemar) z of at least 4. Not a ratio: drafts trained with
``norm_before_residual`` (speculators' default) fall back on the token embedding when fed the
wrong taps, so a wrong layout keeps most of the accuracy a draft has without any taps (shown
as the "taps zeroed" floor row) and loses only what the taps add.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from sglang_eagle3.doctor.candidates import SERVED_BY
from sglang_eagle3.doctor.options import DoctorOptions
from sglang_eagle3.doctor.run import MIN_GAP, MIN_Z, run_doctor, target_family
from sglang_eagle3.errors import WiringError

__all__ = ["MIN_GAP", "MIN_Z", "DoctorOptions", "main", "parse_args", "run_doctor",
           "target_family"]  # fmt: skip


def parse_args(argv: list[str] | None) -> tuple[DoctorOptions, bool]:
    """(options, print JSON)."""
    p = argparse.ArgumentParser(
        prog="python -m sglang_eagle3.doctor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--draft", required=True, help="draft checkpoint directory")
    p.add_argument("--data", help="speculators data directory (or hs_*.safetensors); without "
                   "it the doctor captures its own from --target or --server")  # fmt: skip
    p.add_argument("--target", help="target model directory (its head gives the true tokens; "
                   "without --data the doctor runs it in process)")  # fmt: skip
    p.add_argument("--server", metavar="URL", help="a live target in capture mode (no --data): "
                   "see the command above")  # fmt: skip
    p.add_argument("--prompts", metavar="FILE", help='no --data: JSONL, one {"text": ...} a line '
                   "(default: a built-in chat, code, prose and maths set)")  # fmt: skip
    p.add_argument("--max-new-tokens", type=int, default=64,
                   help="no --data: the target's greedy continuation per prompt (64)")  # fmt: skip
    p.add_argument("--request-timeout", type=float, default=300.0,
                   help="--server: seconds per request (300)")  # fmt: skip
    p.add_argument("--server-time-limit", type=float, default=1800.0,
                   help="--server: seconds for all requests (1800)")  # fmt: skip
    p.add_argument("--engine", default="auto", choices=("auto", "hf", "sglang"),
                   help="--target without --data: hf (transformers, in process), sglang (the "
                   "doctor starts a capture server through the launcher) or auto (sglang with "
                   "a GPU --device and a family SGLang serves, else hf)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--steps", type=int, default=3, help="chained draft steps to score (3)")
    p.add_argument("--max-tokens", type=int, default=4096, help="draft positions to score")
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="read .pt data with torch.load(weights_only=True): tensors and plain containers only",
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto", help="auto (as stored), float32, bfloat16")
    p.add_argument("--served-by", default="plugin", choices=SERVED_BY)
    p.add_argument("--data-taps", help="taps the data stores, e.g. embed,layer:2,layer:5,layer:7")
    p.add_argument("--num-layers", type=int, help="the target's decoder layers (no --target)")
    p.add_argument("--search", action="store_true", help="also score every plausible layout "
                   "(each id convention and family rule, shifted by one, each stock default) "
                   "and every K-subset of a small tap range; print the winner's flags")  # fmt: skip
    p.add_argument("--threads", type=int, help="torch threads (default: 1 for small drafts)")
    p.add_argument("--topk", type=int, default=1, help="the server's --speculative-eagle-topk")
    p.add_argument(
        "--draft-tokens", type=int, help="the server's --speculative-num-draft-tokens (steps + 1)"
    )
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    opts = DoctorOptions(
        draft=a.draft,
        data=a.data,
        target=a.target,
        steps=a.steps,
        max_tokens=a.max_tokens,
        allow_pickle=a.allow_pickle,
        device=a.device,
        dtype=a.dtype,
        served_by=a.served_by,
        data_taps=a.data_taps,
        num_layers=a.num_layers,
        topk=a.topk,
        draft_tokens=a.draft_tokens,
        search=a.search,
        progress=False if a.no_progress else None,
        threads=a.threads,
        server=a.server,
        prompts=a.prompts,
        max_new_tokens=a.max_new_tokens,
        request_timeout=a.request_timeout,
        server_time_limit=a.server_time_limit,
        engine=a.engine,
    )
    return opts, a.json


def main(argv: list[str] | None = None) -> int:
    start = time.monotonic()
    try:
        opts, as_json = parse_args(argv)
        report = run_doctor(opts)
    except WiringError as err:
        print(f"sglang_eagle3.doctor: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM while a server of ours runs
        from sglang_eagle3.launch.server_process import interrupted_by

        why, code = interrupted_by(stop)
        print(f"sglang_eagle3.doctor: stopped by {why}; no process it started is left running",
              file=sys.stderr)  # fmt: skip
        return code
    seconds = round(time.monotonic() - start, 1)
    if as_json:
        print(json.dumps({**report.to_dict(), "wall_seconds": seconds}, indent=2))
    else:
        print(report.render())
        print(f"doctor wall time: {seconds} s")
    return report.exit_code
