"""`--expected-accept-length`: a number, or the JSON the doctor (or tuner) wrote, checked
against the server's own speculative settings before anything starts."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.accept_watch import WatchSettings

# Keys read from a JSON file, first found wins: the tuner's pick, then the doctor's replay of
# serving's walk (within about 1 % of the served accept length), then its chain formula.
KEYS = ("expected_accept_length", "replay_accept_length", "predicted_accept_length")


def _from_json(path: Path, steps: int | None, topk: int | None) -> float:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise WiringError(
            f"cannot read an expected accept length from it ({err})",
            path=str(path),
            fix="give a number, or the JSON of python -m sglang_eagle3.doctor --json",
        ) from err
    value = next((data[k] for k in KEYS if isinstance(data, dict) and data.get(k)), None)
    if not isinstance(value, int | float):
        raise WiringError(
            f"no accept length in it (looked for {', '.join(KEYS)})",
            path=str(path),
            fix="give a number, or the JSON of python -m sglang_eagle3.doctor --json",
        )
    for key, served in (("steps", steps), ("topk", topk)):
        said = data.get(key)
        if isinstance(said, int) and served is not None and said != served:
            raise WiringError(
                f"the expectation is for {key}={said}, but this server runs "
                f"{key}={served}: its accept length would differ for that reason alone",
                path=str(path),
                fix=f"re-run the doctor with --{key} {served}, or give a number",
            )
    return float(value)


def watch_from_args(
    value: str, *, fraction: float, window: int, steps: int | None, topk: int | None,
    doctor: list[str],
) -> WatchSettings:  # fmt: skip
    """The watch settings for `--expected-accept-length value` (a number or a JSON path)."""
    try:
        expected, source = float(value), "--expected-accept-length"
    except ValueError:
        path = Path(value)
        expected, source = _from_json(path, steps, topk), str(path)
    return WatchSettings(expected, source, fraction, window, shlex.join(doctor))
