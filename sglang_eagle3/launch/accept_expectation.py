"""`--expected-accept-length`: a number, JSON text, or the JSON file the doctor (or tuner)
wrote, checked against the server's own speculative settings before anything starts: a verify
yields at most steps + 1 tokens (the accepted drafts and its bonus token), so an expectation
above that could never be met and would warn on every window."""

from __future__ import annotations

import argparse
import json
import math
import shlex
from dataclasses import replace
from pathlib import Path

from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.accept_watch import WatchSettings
from sglang_eagle3.launch.plan import LaunchPlan
from sglang_eagle3.launch.spec_flags import STEPS

FLAG = "--expected-accept-length"
# Keys read from the JSON, first found wins: the tuner's pick, then the doctor's replay of
# serving's walk (within about 1 % of the served accept length), then its chain formula.
KEYS = ("expected_accept_length", "replay_accept_length", "predicted_accept_length")
FIX = f"give a number (e.g. {FLAG} 2.4), or the JSON of python -m sglang_eagle3.doctor --json"


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def _load(value: str) -> tuple[object, str]:
    """(the JSON ``value`` holds or names, where it came from) for a value that is no number."""
    text = value.strip()
    if text.startswith(("{", "[")):
        try:
            return json.loads(text), FLAG
        except ValueError as err:
            raise WiringError(f"{FLAG} {value!r} is not valid JSON ({err})",
                              path="command line", fix=FIX) from err  # fmt: skip
    path = Path(value)
    if not text or not _exists(path):
        raise WiringError(f"{FLAG} {value!r} is neither a number, nor JSON, nor an existing file",
                          path="command line", fix=FIX)  # fmt: skip
    try:
        return json.loads(path.read_text(encoding="utf-8")), str(path)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise WiringError(f"cannot read an expected accept length from it ({err})",
                          path=str(path), fix=FIX) from err  # fmt: skip


def _from_json(data: object, where: str, steps: int | None, topk: int | None) -> float:
    found = next((k for k in KEYS if isinstance(data, dict) and data.get(k)), None)
    if found is None:
        raise WiringError(f"no accept length in it (looked for {', '.join(KEYS)})",
                          path=where, fix=FIX)  # fmt: skip
    value = data[found]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WiringError(f"its {found} {json.dumps(value)} is not a number", path=where, fix=FIX)
    for key, served in (("steps", steps), ("topk", topk)):
        said = data.get(key)
        if said is None:
            continue
        if isinstance(said, bool) or not isinstance(said, int):
            raise WiringError(f"its {key} {json.dumps(said)} is not a whole number", path=where,
                              fix=f"write the {key} the expectation is for, e.g. 3")  # fmt: skip
        if served is not None and said != served:
            raise WiringError(
                f"the expectation is for {key}={said}, but this server runs "
                f"{key}={served}: its accept length would differ for that reason alone",
                path=where,
                fix=f"re-run the doctor with --{key} {served}, or give a number",
            )
    return float(value)


def expected_value(value: str, steps: int | None, topk: int | None) -> tuple[float, str]:
    """(the expected accept length, where it came from), checked against a server of
    ``steps`` drafting steps (None: not known, unchecked)."""
    try:
        expected, source, said = float(value), FLAG, f"{FLAG} {value.strip()}"
    except ValueError:
        data, source = _load(value)
        expected = _from_json(data, source, steps, topk)
        said = f"its accept length {expected:g}"
    where = "command line" if source == FLAG else source
    if not math.isfinite(expected):
        raise WiringError(f"{said} is not a finite number", path=where, fix=FIX)
    if steps is not None and expected > steps + 1:
        raise WiringError(
            f"{said} is more than a verify can yield with {STEPS} {steps}: at most "
            f"steps + 1 = {steps + 1} tokens (the accepted drafts and the bonus token)",
            path=where,
            fix=f"give at most {steps + 1} (e.g. the doctor's prediction at --steps {steps}), "
            f"or serve more {STEPS}",
        )
    return expected, source


def check_watch_options(fraction: float, window: int) -> None:
    """The watch's own options, given or not with an expectation: nan must not pass a range
    check (every comparison with it is false), inf is no fraction."""
    if not (math.isfinite(fraction) and 0 < fraction < 1):
        raise WiringError(f"--accept-watch-fraction {fraction} is not between 0 and 1",
                          path="command line", fix="use e.g. 0.8 (warn below 80 % of the "
                          "expected accept length)")  # fmt: skip
    if window < 1:
        raise WiringError(f"--accept-watch-window {window} is not a positive number of tokens",
                          path="command line", fix="use e.g. 2000")  # fmt: skip


def watch_from_args(
    value: str, *, fraction: float, window: int, steps: int | None, topk: int | None,
    doctor: list[str],
) -> WatchSettings:  # fmt: skip
    """The watch settings for `--expected-accept-length value` (a number, JSON, a JSON path)."""
    check_watch_options(fraction, window)
    expected, source = expected_value(value, steps, topk)
    return WatchSettings(expected, source, fraction, window, shlex.join(doctor))


def with_watch(plan: LaunchPlan, args: argparse.Namespace) -> LaunchPlan:
    """The plan with the accept-length watch's settings in the plugin's environment."""
    check_watch_options(args.accept_watch_fraction, args.accept_watch_window)
    if args.expected_accept_length is None:
        return plan
    if plan.resolution is None or plan.draft_src is None:
        raise WiringError(
            f"{FLAG} needs a speculative EAGLE-3 server with a draft",
            path="command line",
            fix="add --speculative-algorithm EAGLE3 --speculative-draft-model-path DRAFT, or "
            f"drop {FLAG}",
        )
    steps, topk, _ = plan.resolution.flags.as_tuple()
    adaptive = plan.resolution.adaptive
    if adaptive is not None:  # adaptive mode may run any candidate: the deepest bounds it
        steps = max(adaptive.candidates)
    doctor = ["python", "-m", "sglang_eagle3.doctor", "--draft", plan.draft_src, "--target",
              plan.target.path, "--steps", str(steps), "--topk", str(topk)]  # fmt: skip
    watch = watch_from_args(args.expected_accept_length, fraction=args.accept_watch_fraction,
                            window=args.accept_watch_window, steps=steps, topk=topk,
                            doctor=doctor)  # fmt: skip
    note = (
        f"accept-length watch: expected {watch.expected:.2f} (from {watch.source}); one "
        f"warning per {watch.window} verified tokens served below {watch.fraction:g} of it"
    )
    return replace(plan, env={**plan.env, **watch.to_env()}, notes=(*plan.notes, note))
