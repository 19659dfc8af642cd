"""The settings the tuner scores: (steps, topk, draft tokens), as SGLang 0.5.23 would run them.

Pure. A setting is kept only when the launcher's own flag resolution accepts it with the
user's other flags (a tree under trtllm_mha, a draft-token count a tree cannot hold, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sglang_eagle3.draft_tree_size import max_draft_tokens
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.argv import argv_set
from sglang_eagle3.launch.spec_flags import DRAFT, STEPS, TOPK
from sglang_eagle3.launch.spec_resolve import resolve_spec_argv

_PART = re.compile(r"(\d+)(?:-(\d+))?\Z", re.ASCII)  # N or A-B, ASCII digits only


@dataclass(frozen=True, order=True)
class Setting:
    steps: int
    topk: int
    draft_tokens: int

    @property
    def flags(self) -> list[str]:
        return [STEPS, str(self.steps), TOPK, str(self.topk), DRAFT, str(self.draft_tokens)]

    @property
    def name(self) -> str:
        """The name of this setting's server (its log file, its outputs, the bench's rows)."""
        return f"s{self.steps}k{self.topk}n{self.draft_tokens}"

    def on(self, argv: list[str]) -> list[str]:
        """``argv`` with this setting's three flags (replacing any given)."""
        out = list(argv)
        for flag, value in zip(self.flags[::2], self.flags[1::2], strict=True):
            out = argv_set(out, flag, value)
        return out

    def __str__(self) -> str:
        return f"steps {self.steps}, topk {self.topk}, draft tokens {self.draft_tokens}"


def parse_range(text: str, flag: str, *, low: int = 1, high: int | None = None) -> tuple[int, ...]:
    """ "1-8", "1,2,4" or "3" -> the sorted values (a value given twice counts once); a
    WiringError naming the flag, the wrong part and the rule otherwise. Bounds are checked
    before a range is expanded, so "1-999999999" is refused, not built."""
    allowed = f"{low}-{high}" if high is not None else f">= {low}"

    def refuse(why: str) -> WiringError:
        return WiringError(f"{flag} {text!r}: {why}", path="command line",
                           fix=f'give whole numbers within {allowed}, e.g. {flag} '
                           f'{low}-{high or low + 3} or {flag} "{low},{low + 1}"')  # fmt: skip

    values: set[int] = set()
    for part in text.split(","):
        m = _PART.match(part.strip())
        if m is None:
            what = "an empty part" if not part.strip() else f"{part.strip()!r}"
            raise refuse(f"{what} is neither a whole number N nor a range A-B")
        a, b = int(m[1]), int(m[2] or m[1])
        if b < a:
            raise refuse(f"the range {part.strip()} runs backwards (write {b}-{a})")
        for v in (a, b):
            if v < low or (high is not None and v > high):
                raise refuse(f"{v} is outside the allowed {allowed}")
        values.update(range(a, b + 1))
    return tuple(sorted(values))


def grid(
    steps: tuple[int, ...], topks: tuple[int, ...], max_draft: int, argv: list[str],
    architecture: str,
) -> list[Setting]:  # fmt: skip
    """Every setting of the grid SGLang would run with ``argv``'s other flags; a WiringError
    naming the first one it would refuse (a tree where the backend allows only chains...)."""
    out = []
    for k in topks:
        for s in steps:
            if k == 1:
                drafts = [s + 1] if s + 1 <= max_draft else []
            else:
                # a tree needs steps + 1 slots (launch/spec_flags.py: fewer crashes SGLang)
                drafts = list(range(s + 1, min(max_draft, max_draft_tokens(s, k)) + 1))
            for d in drafts:
                setting = Setting(s, k, d)
                try:
                    resolve_spec_argv(setting.on(argv), architecture=architecture)
                except WiringError as err:
                    raise WiringError(
                        f"the grid holds {setting}, which SGLang would refuse with these "
                        f"flags: {err.message}",
                        path="command line",
                        fix="narrow the grid (e.g. --topk 1), or change the flag that forbids it",
                    ) from err
                out.append(setting)
    if not out:
        raise WiringError(
            f"no setting fits --max-draft-tokens {max_draft}",
            path="command line",
            fix="raise --max-draft-tokens (2 is a one-step chain)",
        )
    return out
