"""`python -m sglang_eagle3.tune`: the fastest speculative settings for this target, drafter and
hardware, predicted from an acceptance profile (the doctor's evidence) and a cost model fitted
on three servers (plain and two speculative settings), with the reasons.

Every other argument is the launcher's (`python -m sglang_eagle3.launch`): the servers it
measures start through it. On CPU (or with --paired) a plain server stays alive beside each
speculative one and the two are timed in alternating rounds, so that the machine's drift
cancels (tune/measure.py). Bad input: exit 2 with one message, nothing started.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.cli import OneLineParser
from sglang_eagle3.tune.checks import (
    CONCURRENCY,
    DRAFT_TOKENS,
    MIN_NEW_TOKENS,
    STEPS,
    TOPK,
    check_numbers,
    check_outputs,
    explained_setting,
)
from sglang_eagle3.tune.grid import Setting, grid, parse_range
from sglang_eagle3.tune.mix import running

PROG = "python -m sglang_eagle3.tune"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    span = "{0[0]}-{0[1]}".format
    p.add_argument("--concurrency", default="1,8,32",
                   help=f"concurrent requests to predict for ({span(CONCURRENCY)})")  # fmt: skip
    p.add_argument("--steps", default=span(STEPS),
                   help=f"--speculative-num-steps to consider ({span(STEPS)})")  # fmt: skip
    p.add_argument("--topk", default=span(TOPK),
                   help=f"--speculative-eagle-topk to consider ({span(TOPK)})")  # fmt: skip
    p.add_argument("--max-draft-tokens", type=int, default=16,
                   help=f"largest draft tokens ({span(DRAFT_TOKENS)}; default 16)")  # fmt: skip
    p.add_argument("--data", help="the drafter's training data (default: the target's own "
                   "greedy continuations, as the doctor's data-free mode)")  # fmt: skip
    p.add_argument(
        "--engine",
        default="auto",
        choices=("auto", "hf", "sglang"),
        help="data-free: run the target in HF or SGLang (the doctor's --engine)",
    )
    p.add_argument(
        "--prompts",
        help='JSONL, one {"text": ...} a line: the traffic timed and, '
        "without --data, profiled (default: the bench's built-in code prompts)",
    )
    p.add_argument("--max-tokens", type=int, default=2048,
                   help="draft positions scored (>= 1; default 2048)")  # fmt: skip
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=128,
        help=f"tokens per timed request (>= {MIN_NEW_TOKENS}; default 128)",
    )
    p.add_argument(
        "--explain",
        action="append",
        default=[],
        metavar="S,K,N",
        help="also predict and explain this setting, e.g. 15,1,16 (repeatable)",
    )
    p.add_argument("--weights", help="the traffic mix: each --concurrency's share of the "
                   "generated tokens, e.g. 0.5,0.3,0.2 (default: equal)")  # fmt: skip
    p.add_argument("--trace", type=Path, help='the traffic mix as a JSON file of phases, '
                   '{"phases": [{"concurrency": 1, "requests": 16, "max_new_tokens": 64}, ...]} '
                   "(replaces --concurrency and --weights)")  # fmt: skip
    p.add_argument("--tune-result", type=Path, help="a result this tuner printed with --json "
                   "for this target and drafter: predict another mix, timing nothing")  # fmt: skip
    p.add_argument("--no-steps0", dest="steps0", action="store_false",
                   help="do not time SGLang's adaptive steps 0 (it is then modelled)")  # fmt: skip
    p.add_argument("--arrival-rounds", type=int, default=2, help="trace-like rounds per "
                   "server that time what an arriving request costs (0-16; 0: price it as "
                   "one batch-1 step; default 2)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--png", type=Path, help="plot predicted tok/s against steps and topk "
                   "(a .png in an existing folder)")  # fmt: skip
    p.add_argument("--adaptive-config", type=Path, help="write SGLang's adaptive config JSON "
                   "(in an existing folder)")  # fmt: skip
    p.add_argument("--log-dir", type=Path, default=Path("tune-logs"),
                   help="server logs (made when missing)")  # fmt: skip
    p.add_argument(
        "--paired",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="time each speculative server against a plain one alive beside it, to cancel "
        "the machine's drift (two servers' memory at once; default: on with --cpu)",
    )
    return p


def _plan(rest: list[str]):
    """The launcher's own checks of the user's flags, all of them (its --training-data and
    --expected-accept-length too) before any server starts; (plan, SGLang argv, its args)."""
    from sglang_eagle3.launch.cli import build_parser as launcher_parser
    from sglang_eagle3.launch.cli import checked_plan, sglang_flags

    largs, others = launcher_parser().parse_known_args(rest)
    for flag in ("dry_run", "write_draft_only"):
        if getattr(largs, flag):
            name = "--" + flag.replace("_", "-")
            raise WiringError(f"{name}: the tuner starts and times its servers itself",
                              path="command line", fix=f"drop {name}")  # fmt: skip
    sglang = sglang_flags(largs, others)
    plan = checked_plan(largs, sglang)
    if plan.resolution is None or plan.draft_src is None:
        raise WiringError("the tuner needs an EAGLE-3 server with a draft", path="command line",
                          fix="add --speculative-algorithm EAGLE3 "
                          "--speculative-draft-model-path DRAFT")  # fmt: skip
    return plan, sglang, largs


def _check_servers(rest: list[str], largs, sglang: list[str], settings: list[Setting],
                   steps0: bool) -> None:  # fmt: skip
    """The launcher's checks of every server the run starts: the plain one (without the
    draft's flags), each timed setting (an --expected-accept-length above a shorter chain's
    steps + 1 ...) and the steps-0 one, so that none is refused after the profile and the
    first ran."""
    import tempfile

    from sglang_eagle3.launch.cli import build_parser as launcher_parser
    from sglang_eagle3.launch.cli import checked_plan, sglang_flags
    from sglang_eagle3.tune.measure import STEPS0_CONFIG, plain_argv, steps0_argv

    pargs, pothers = launcher_parser().parse_known_args(plain_argv(rest))
    servers = [("the plain server", pargs, sglang_flags(pargs, pothers))]
    servers += [(f"the server of {s}", largs, s.on(sglang)) for s in settings]
    with tempfile.TemporaryDirectory() as tmp:
        zero = Path(tmp) / "steps0.json"
        zero.write_text(json.dumps(STEPS0_CONFIG))
        if steps0:
            servers.append(("SGLang's adaptive steps 0", largs, steps0_argv(sglang, zero)))
        for name, args, argv in servers:
            try:
                checked_plan(args, argv)
            except WiringError as err:
                why = f"the tuner times {name}, which the launcher would refuse: {err.message}"
                raise WiringError(why, path=err.path, fix=err.fix) from err


def _measured_settings(settings: list[Setting]) -> list[Setting]:
    """The two speculative servers the fit runs: the shortest chain and the grid's largest
    tree within 4 steps (different step counts and widths pin down the drafter's costs)."""
    low = min(settings, key=lambda s: (s.steps, s.topk, s.draft_tokens))
    near = [s for s in settings if s.steps <= 4] or settings
    high = max(near, key=lambda s: (s.topk * s.draft_tokens, s.steps))
    return [low, high] if high != low else [low, max(settings)]


def _mix(args: argparse.Namespace):
    """(concurrencies, phases) of the traffic mix, checked."""
    from sglang_eagle3.tune.mix import from_weights, read_trace

    if args.trace is not None:
        if args.weights is not None:
            raise WiringError("--trace and --weights both give the mix", path="command line",
                              fix="give one of them")  # fmt: skip
        phases = read_trace(args.trace, args.max_new_tokens, top=CONCURRENCY[1])
        return tuple(sorted({p.concurrency for p in phases})), phases
    concurrency = parse_range(args.concurrency, "--concurrency", high=CONCURRENCY[1])
    return concurrency, from_weights(concurrency, args.weights)


def run(args: argparse.Namespace, rest: list[str]) -> dict:
    # every check first, in the order of the command line's cost: nothing starts on bad input
    check_numbers(args)
    check_outputs(args)
    concurrency, phases = _mix(args)
    steps = parse_range(args.steps, "--steps", low=STEPS[0], high=STEPS[1])
    topks = parse_range(args.topk, "--topk", low=TOPK[0], high=TOPK[1])
    plan, sglang, largs = _plan(rest)
    arch = plan.target.architecture
    from sglang_eagle3.tune.saved import identity, load

    serving = _serving(args, sglang, largs, phases)
    if args.tune_result is not None:
        saved = load(args.tune_result, plan.target.path, plan.draft_src)
        return _finish(saved, concurrency, phases, serving, saved=args.tune_result)
    settings = grid(steps, topks, args.max_draft_tokens, sglang, arch)
    explained = [explained_setting(e, sglang, arch) for e in args.explain]
    timed = _measured_settings(settings)
    _check_servers(rest, largs, sglang, timed, args.steps0)
    prompts = _prompts(args.prompts)
    ident = identity(plan.target.path, plan.draft_src)
    # torch and the doctor only once the input is known good: a refusal costs no import
    from sglang_eagle3.doctor.options import DoctorOptions
    from sglang_eagle3.tune.cost import accept_scale, fit
    from sglang_eagle3.tune.measure import STEPS0_CONFIG, measure_launched, timing_text
    from sglang_eagle3.tune.profile import acceptance_profile
    from sglang_eagle3.tune.report import measured_rows
    from sglang_eagle3.tune.rounds import fit_arrivals, per_request_cost

    # data-free, the profile scores the very prompts the servers are timed on, continued as
    # far: its accept lengths then are the served ones (the doctor's replay matches a server
    # within about 1 %), at every depth; another text set moves deep drafts unlike shallow ones
    free = {} if args.data else {"prompt_texts": tuple(prompts),
                                 "max_new_tokens": args.max_new_tokens}  # fmt: skip
    opts = DoctorOptions(plan.draft_src, data=args.data, target=plan.target.path,
                         max_tokens=args.max_tokens, engine=args.engine, **free)  # fmt: skip
    profile = acceptance_profile(opts, sorted(set(settings) | set(explained)))
    model_path = plan.target.path
    launch_args = list(rest)
    # more points than asked for: a cycle's cost against batch size needs a few of them
    # no more than the server runs at once: more concurrent requests only queue
    asked = {running(c, serving[0]) for c in concurrency}
    fitted = sorted(asked | {c for c in (1, 2, 4) if c <= max(asked)})
    paired = args.paired if args.paired is not None else largs.cpu
    zero = args.log_dir / "steps0-adaptive.json" if args.steps0 else None
    if zero is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
        zero.write_text(json.dumps(STEPS0_CONFIG) + "\n")
    arrival = (max(fitted), serving[0], args.arrival_rounds) if args.arrival_rounds else None
    measured, outputs, arrivals = measure_launched(
        model_path, launch_args, timed, args.log_dir, prompts,
        fitted, args.max_new_tokens, paired, steps0=zero, arrival=arrival,
    )  # fmt: skip
    model = fit_arrivals(fit(measured), arrivals)
    served = [(profile[Setting(m.steps, m.topk, m.draft_tokens)], m.accept_length)
              for m in measured if m.steps and m.accept_length]  # fmt: skip
    scale = accept_scale(served)
    scaled = {s: 1 + scale * (a - 1) for s, a in profile.items()}
    source = (
        f"training data {args.data}"
        if args.data
        else "the target's own greedy "
        f"continuations of the timed prompts ({args.prompts or 'built-in'})"
    )
    source += f", drafts per verify scaled by {scale:.3f} to what the measured servers served"
    plain = outputs.pop("plain")
    base = {
        "identity": ident,
        "timing": timing_text(paired),
        "acceptance_source": source,
        "model": model.to_dict(),
        "profile": [
            {
                "steps": s.steps,
                "topk": s.topk,
                "draft_tokens": s.draft_tokens,
                "accept_length": round(a, 6),
                "explained": s not in settings,
            }
            for s, a in sorted(scaled.items())
        ],  # fmt: skip
        "measured": measured_rows(measured),
        "arrival_rounds": [
            {**vars(r), "per_request_s": round(per_request_cost(model, r), 6)} for r in arrivals
        ],  # fmt: skip
        "accept_scale": round(scale, 4),
        "accept_check": [  # the profile (unscaled) against what the servers served
            {
                "setting": str(Setting(m.steps, m.topk, m.draft_tokens)),
                "concurrency": m.concurrency,
                "profile": round(profile[Setting(m.steps, m.topk, m.draft_tokens)], 3),
                "served": round(m.accept_length, 3),
            }
            for m in measured
            if m.steps and Setting(m.steps, m.topk, m.draft_tokens) in profile
        ],  # fmt: skip
        "lossless": {name: got == plain for name, got in outputs.items()},
        "plain_outputs": plain,
    }
    return _finish(base, concurrency, phases, serving)


def _serving(args, sglang: list[str], largs, phases) -> tuple[int | None, float]:
    """(the running-batch cap the servers get, a request's mean generated tokens)."""
    from sglang_eagle3.launch.argv import argv_int
    from sglang_eagle3.launch.server_process import with_cpu_defaults

    flags = with_cpu_defaults(sglang) if largs.cpu else sglang
    cap = argv_int(flags, "--max-running-requests")
    lengths = [p.max_new_tokens for p in phases if p.max_new_tokens]
    tokens = sum(lengths) / len(lengths) if lengths else float(args.max_new_tokens)
    return cap, tokens


def _finish(base: dict, concurrency, phases, serving, saved: Path | None = None) -> dict:
    """The predictions for this mix from a measured (or saved) model and profile; the batch
    never exceeds the running cap, so the per-concurrency figures are at min(c, cap)."""
    from sglang_eagle3.tune.predict_mix import mix_result
    from sglang_eagle3.tune.report import build_result
    from sglang_eagle3.tune.saved import measured_of, model_of, profile_of

    cap, tokens = serving
    model, profile = model_of(base), profile_of(base)
    concurrency = sorted({running(c, cap) for c in concurrency})
    settings = [s for s, p in zip(profile, base["profile"], strict=True) if not p["explained"]]
    explained = [s for s, p in zip(profile, base["profile"], strict=True) if p["explained"]]
    result = build_result(
        model, profile, settings, explained, measured_of(base), concurrency,
        timing=base["timing"], acceptance_source=base["acceptance_source"],
    )  # fmt: skip
    keep = {k: v for k, v in base.items() if k not in result}
    result = {**keep, **result}
    result["mix"] = mix_result(model, profile, settings, result["adaptive_config"], phases,
                               cap, tokens)  # fmt: skip
    if saved is not None:
        result["from_tune_result"] = str(saved)
    return result


def _prompts(path: str | None) -> list[str]:
    from sglang_eagle3.bench.prompts import BUILT_IN
    from sglang_eagle3.data.prompts import read_prompts_checked

    return list(BUILT_IN) if path is None else read_prompts_checked(path)


def main(argv: list[str] | None = None) -> int:
    try:
        args, rest = build_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as stop:  # --help, or argparse's one-line refusal (OneLineParser)
        return int(stop.code or 0)
    try:
        result = run(args, rest)
    except WiringError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        from sglang_eagle3.launch.server_process import interrupted_by

        name, code = interrupted_by(stop)
        print(f"{PROG}: interrupted ({name}); every server it started is stopped",
              file=sys.stderr)  # fmt: skip
        return code
    from sglang_eagle3.tune.report import render

    # the report first: a file that cannot be written after all (the disk filled up during
    # the run) must not lose the minutes of measurement it holds
    print(json.dumps(result, indent=2) if args.json else render(result), flush=True)
    try:
        if args.adaptive_config:
            text = json.dumps(result["adaptive_config"], indent=2) + "\n"
            args.adaptive_config.write_text(text)
        if args.png:
            from sglang_eagle3.tune.plot import plot

            plot(result, args.png)
    except OSError as err:
        print(f"{PROG}: error: cannot write {err.filename}: {err.strerror}; the report above "
              "holds every result", file=sys.stderr)  # fmt: skip
        return 1
    return 0
