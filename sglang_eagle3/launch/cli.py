"""`python -m sglang_eagle3.launch`: SGLang with the hidden-state wiring applied and explained.

Takes every `python -m sglang.launch_server` argument unchanged, plus a few of its own.
Validates everything before any SGLang process exists (bad input: exit 2, one message),
prints the wiring table, then replaces itself with SGLang (exec), so Ctrl-C and SIGTERM
reach SGLang's own shutdown exactly as without the launcher.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from sglang_eagle3 import env_names
from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.accept_watch import DEFAULT_FRACTION, DEFAULT_WINDOW
from sglang_eagle3.launch.accept_expectation import with_watch
from sglang_eagle3.launch.cpu_env import (
    STOCK_SERVER,
    cpu_ranks,
    harness_env,
    rank_binding,
    server_module,
)
from sglang_eagle3.launch.plan import LaunchOptions, LaunchPlan, plan_launch
from sglang_eagle3.launch.sglang_argv import canonical_argv
from sglang_eagle3.launch.wiring_table import command_line, render

PROG = "python -m sglang_eagle3.launch"


class OneLineParser(argparse.ArgumentParser):
    """argparse whose refusal is one line and exit 2, as every other bad input here (its own
    prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}. Fix: see {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        add_help=False,
        description="Launch SGLang with EAGLE-3 hidden-state taps and speculative flags "
        "resolved consistently and explained. All other arguments go to "
        "`python -m sglang.launch_server` unchanged (see its --help).",
    )
    p.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    p.add_argument(
        "--hidden-state-layout",
        action="append",  # given twice with different values is an error (_once)
        metavar="TAPS",
        help="the taps the drafter's fc was trained on, in order, e.g. embed,layer:2,layer:30 "
        "(embed = embedding output; layer:K = output of decoder layer K, 0-indexed); required "
        "with --enable-return-aux-hidden-states (SGLang's capture-only mode: no draft, the "
        "server returns these taps in ascending capture order)",
    )
    p.add_argument(
        "--override-draft-layout",
        action="store_true",
        help="serve --hidden-state-layout even where it contradicts the draft config's own "
        "layout or ids (without it that is an error); the wiring table says 'overridden'",
    )
    p.add_argument(
        "--aux-layer-convention",
        action="append",
        choices=["output-of-layer", "input-to-layer"],
        help="how to read the draft config's eagle_aux_hidden_state_layer_ids when it does not "
        "say: output-of-layer (-1 = embed; SpecForge, SGLang llama/qwen) or input-to-layer "
        "(0 = embed; vLLM, speculators)",
    )
    p.add_argument(
        "--training-data",
        type=Path,
        metavar="DIR",
        help="the drafter's training data: when it has a capture manifest (python -m "
        "sglang_eagle3.capture writes one), refuse to start unless the served layout is the "
        "fc taps it holds",
    )
    p.add_argument(
        "--capture-dir",
        type=Path,
        metavar="DIR",
        help="with --enable-return-aux-hidden-states: capture requests (python -m "
        "sglang_eagle3.capture --server URL) get their taps, and the verifier tap last, as "
        "files written here by the scheduler instead of JSON rows",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, start nothing")
    p.add_argument(
        "--write-draft-only",
        action="store_true",
        help="write the flat copy of a speculators draft (for a patched SGLang fork), print the "
        "plan and the command, start nothing",
    )
    p.add_argument(
        "--for-plugin",
        action="store_true",
        help="with --write-draft-only: write the copy even where stock SGLang's id rule cannot "
        "express the layout (for SGLang with this plugin or its patches)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    p.add_argument(
        "--cpu",
        action="store_true",
        help="run on this machine's CPU with the reference kernels (tests and demos, not speed)",
    )
    p.add_argument(
        "--expected-accept-length",
        metavar="VALUE|JSON",
        help="watch the served accept length live: the value the drafter should reach (above "
        "1, at most --speculative-num-steps + 1), or the JSON of `python -m "
        "sglang_eagle3.doctor --json` (a file or its text: its replay or predicted value); "
        "one warning per window that falls below --accept-watch-fraction of it",
    )
    p.add_argument(
        "--accept-watch-fraction",
        type=float,
        default=DEFAULT_FRACTION,
        help="warn below this fraction (between 0 and 1) of the expected accept length "
        "(%(default)s)",
    )
    p.add_argument("--accept-watch-window", type=int, default=DEFAULT_WINDOW,
                   help="verified tokens per comparison (>= 1; %(default)s)")  # fmt: skip
    p.add_argument(
        "--draft-cache-dir",
        type=Path,
        default=LaunchOptions().cache_dir,
        help="where converted (flat) copies of speculators drafts are written "
        "(default: %(default)s)",
    )
    return p


def _write_draft(plan: LaunchPlan, *, stock_readable: bool = False) -> None:
    if plan.converted_draft:
        from sglang_eagle3.checkpoint.flat_draft import write_flat_draft

        write_flat_draft(plan.draft, Path(plan.draft_src), Path(plan.converted_draft),
                         family=plan.target.family, stock_readable=stock_readable)  # fmt: skip


def _start(plan: LaunchPlan, cpu: bool) -> None:
    _write_draft(plan)
    env = {**os.environ, **plan.env}
    module = STOCK_SERVER
    if cpu:
        env = harness_env(env)
        module = server_module(env)
    argv = [sys.executable, "-m", module, *plan.sglang_argv]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)


def _bind_cpu_ranks(plan: LaunchPlan) -> LaunchPlan:
    """More than one CPU rank and no SGLANG_CPU_OMP_THREADS_BIND: a core set per rank, shown
    in the plan (or a WiringError when there are fewer cores than ranks)."""
    name = env_names.CPU_OMP_THREADS_BIND
    if os.environ.get(name) or plan.env.get(name):
        return plan
    env = rank_binding({}, cpu_ranks(list(plan.sglang_argv)), sorted(os.sched_getaffinity(0)))
    if name not in env:
        return plan
    note = f"{name}={env[name]}: a core set per CPU rank (set it yourself to choose others)"
    return replace(plan, env={**plan.env, name: env[name]}, notes=(*plan.notes, note))


def _check_training_data(plan: LaunchPlan, data: Path | None) -> LaunchPlan:
    """The served layout against the taps the drafter's training data holds (its capture
    manifest): a mismatch is refused here, before anything starts."""
    if data is None:
        return plan
    if plan.draft is None or plan.draft.layout is None:
        raise WiringError(
            "--training-data checks the layout a draft is served with, and this launch serves "
            "no draft",
            path="command line",
            fix="drop --training-data, or serve an EAGLE-3 drafter (--speculative-algorithm "
            "EAGLE3 --speculative-draft-model-path DIR)",
        )
    if not data.exists():
        raise WiringError("training data not found", path=str(data),
                          fix="pass the drafter's training data directory")  # fmt: skip
    # data/manifest.py reads through data/arrow.py, which imports torch: only when asked
    from sglang_eagle3.data.manifest import manifest_mismatch, read_manifest, target_mismatch

    manifest = read_manifest(data)
    taps = plan.draft.layout.taps
    if manifest is None:
        note = f"--training-data {data} has no capture manifest: the layout was not checked"
    else:
        err = manifest_mismatch(manifest, taps, draft=str(plan.draft_src), data=str(data))
        err = err or target_mismatch(manifest, plan.target.architecture, plan.target.num_layers,
                                     target=str(plan.target.path), data=str(data))  # fmt: skip
        if err is not None:
            raise err
        note = (f"--training-data {data}: its manifest's fc taps are the served layout, "
                f"captured from a {manifest.target.architecture} of "
                f"{manifest.target.num_layers} layers, as served")  # fmt: skip
    return replace(plan, notes=(*plan.notes, note))


def _capture_dir(plan: LaunchPlan, folder: Path | None) -> LaunchPlan:
    """The plan with capture-to-files on (hooks/capture_file.py): capture-only servers only."""
    if folder is None:
        return plan
    if plan.capture is None or plan.draft is not None:
        raise WiringError("--capture-dir needs SGLang's capture-only mode", path="command line",
                          fix="add --enable-return-aux-hidden-states and --hidden-state-layout "
                          "TAPS, or drop --capture-dir")  # fmt: skip
    folder = folder.resolve()
    if folder.exists() and not folder.is_dir():
        raise WiringError("--capture-dir is not a directory", path=str(folder),
                          fix="give a directory (it is made when missing)")  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    note = (
        f"capture to files: requests with rid sglang_eagle3-capture-* get their taps, then "
        f"the verifier layer:{plan.target.num_layers - 1}, as {folder}/<rid>.safetensors"
    )
    env = {**plan.env, env_names.CAPTURE_DIR: str(folder)}
    return replace(plan, env=env, notes=(*plan.notes, note))


def _once(values: list[str] | None, flag: str) -> str | None:
    """The one value of a launcher flag; an error when given twice with different values
    (argparse would silently keep the last, as SGLang does for its own flags)."""
    if values and len(set(values)) > 1:
        raise WiringError(
            f"{flag} {values[0]} and {flag} {values[-1]} both set {flag}; "
            "which one the drafter was trained on cannot be guessed",
            path="command line",
            fix="give the option once",
        )
    return values[-1] if values else None


def sglang_flags(args: argparse.Namespace, rest: list[str]) -> list[str]:
    """SGLang's flags as its own parser will read them, with the CPU harness's defaults."""
    rest = canonical_argv(rest)
    if args.cpu:  # after --config is merged, so a file's value is not a default to fill
        from sglang_eagle3.launch.server_process import with_cpu_defaults

        rest = with_cpu_defaults(rest)
    return rest


def checked_plan(args: argparse.Namespace, sglang: list[str]) -> LaunchPlan:
    """Every check of the launcher on its own flags (``args``) and SGLang's (``sglang``, as
    ``sglang_flags`` gives them), before anything starts; the plan. WiringError on bad input
    (the tuner and the capture run it too)."""
    opts = LaunchOptions(
        _once(args.hidden_state_layout, "--hidden-state-layout"),
        _once(args.aux_layer_convention, "--aux-layer-convention"),
        args.draft_cache_dir,
        override_draft_layout=args.override_draft_layout,
    )
    plan = _check_training_data(plan_launch(sglang, opts), args.training_data)
    plan = _capture_dir(plan, args.capture_dir)
    if args.cpu:
        plan = _bind_cpu_ranks(plan)
    return with_watch(plan, args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as stop:  # OneLineParser's refusal: its line is printed
        return int(stop.code or 0)
    if args.help:
        parser.print_help()
        print(
            "\nEvery other argument is passed to `python -m sglang.launch_server`; run "
            "`python -m sglang.launch_server --help` for those."
        )
        return 0
    try:
        plan = checked_plan(args, sglang_flags(args, rest))
        if args.json:
            out = plan.to_json()
            out["command"] = command_line(plan)
            print(json.dumps(out, indent=2))
        else:
            print(render(plan))
            if args.dry_run or args.write_draft_only:
                print("command " + command_line(plan))
        if args.write_draft_only:
            _write_draft(plan, stock_readable=not args.for_plugin)
            return 0
        if args.dry_run:
            return 0
        _start(plan, args.cpu)
    except WiringError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    return 0  # not reached: exec replaced this process
