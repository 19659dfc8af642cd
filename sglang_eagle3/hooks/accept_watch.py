"""The live accept-length watch: what the launcher hands the plugin, and the window logic.

Pure (no torch, no sglang): the launcher validates and writes the settings into one environment
variable; the scheduler's hook (hooks/accept_watch_hooks.py) feeds SGLang's own counters into
`AcceptWindow` each time SGLang closes a decode-stats interval, so nothing is added per token.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from sglang_eagle3 import env_names
from sglang_eagle3.errors import WiringError

DEFAULT_FRACTION = 0.8
DEFAULT_WINDOW = 2000  # verified tokens (accepted drafts + the bonus token of each verify)


@dataclass(frozen=True)
class WatchSettings:
    """What the plugin compares the served accept length with."""

    expected: float  # accept length the drafter should reach (tokens per verify, > 1)
    source: str  # where `expected` came from: a number, or a doctor/tune JSON path
    fraction: float = DEFAULT_FRACTION  # warn below fraction * expected
    window: int = DEFAULT_WINDOW  # verified tokens per comparison
    doctor: str = ""  # the doctor command the warning names

    def __post_init__(self) -> None:
        if not (math.isfinite(self.expected) and self.expected > 1):
            raise WiringError(
                f"expected accept length {self.expected} is not above 1 (every verify keeps "
                "at least its bonus token, so 1 means no speculation)",
                path=self.source,
                fix="give the accept length the doctor or tuner predicts, e.g. "
                "--expected-accept-length 2.4",
            )
        if not 0 < self.fraction < 1:
            raise WiringError(
                f"--accept-watch-fraction {self.fraction} is not between 0 and 1",
                fix="use e.g. 0.8 (warn below 80 % of the expected accept length)",
            )
        if self.window < 1:
            raise WiringError(
                f"--accept-watch-window {self.window} is not a positive number of tokens",
                fix="use e.g. 2000",
            )

    def to_env(self) -> dict[str, str]:
        return {env_names.ACCEPT_WATCH: json.dumps(asdict(self))}


def watch_settings(environ: Mapping[str, str]) -> WatchSettings | None:
    """The settings the launcher wrote, or None when no expectation was given."""
    raw = environ.get(env_names.ACCEPT_WATCH)
    if not raw:
        return None
    try:
        return WatchSettings(**json.loads(raw))
    except (TypeError, ValueError) as err:
        raise WiringError(
            f"${env_names.ACCEPT_WATCH} is not what the launcher writes: {err}",
            fix="set the expectation with python -m sglang_eagle3.launch --expected-accept-length",
        ) from err


@dataclass
class AcceptWindow:
    """Accumulates (verified tokens, verifies) until a window is full, then judges it once."""

    settings: WatchSettings
    tokens: int = 0
    verifies: int = 0
    last: float | None = None  # accept length of the last full window
    warnings: int = 0

    def feed(self, tokens: int, verifies: int) -> str | None:
        """Add one SGLang stats interval; the warning to log when a full window is low."""
        self.tokens += tokens
        self.verifies += verifies
        if self.tokens < self.settings.window or self.verifies == 0:
            return None
        self.last = self.tokens / self.verifies
        tokens, self.tokens, self.verifies = self.tokens, 0, 0
        s = self.settings
        doctor = s.doctor or "python -m sglang_eagle3.doctor"
        if self.last >= s.fraction * s.expected:
            return None
        self.warnings += 1
        return (
            f"served accept length {self.last:.2f} over the last {tokens} verified tokens is "
            f"below {s.fraction:g} x the expected {s.expected:.2f} (from {s.source}): the drafter "
            "may not get the taps it was trained on (a wrong layout after an update) or the "
            f"traffic has shifted. Check the wiring with: {doctor}"
        )
