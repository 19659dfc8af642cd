"""The settings the tuner scores: (steps, topk, draft tokens), as SGLang 0.5.23 would run them.

Pure. A setting is kept only when the launcher's own flag resolution accepts it with the
user's other flags (a tree under trtllm_mha, a draft-token count a tree cannot hold, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_eagle3.draft_tree_size import max_draft_tokens
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.argv import argv_set
from sglang_eagle3.launch.spec_flags import DRAFT, STEPS, TOPK, resolve_spec_argv


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


def parse_range(text: str, flag: str, *, low: int = 1) -> tuple[int, ...]:
    """ "1-8", "1,2,4" or "3" -> the sorted values; a WiringError naming the flag otherwise."""
    values: set[int] = set()
    try:
        for part in text.split(","):
            a, _, b = part.strip().partition("-")
            values.update(range(int(a), int(b or a) + 1))
    except ValueError:
        values = set()
    if not values or min(values) < low:
        raise WiringError(
            f"{flag} {text!r} is not a list of integers >= {low}",
            path="command line",
            fix=f'give e.g. {flag} 1-8 or {flag} "1,2,4"',
        )
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
