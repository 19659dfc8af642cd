"""The one error type for wrong user input: a message, where it came from, and how to fix it."""

from __future__ import annotations

import re

MAX_ITEMS = 8  # items of a long list kept in a message; the rest are counted
MAX_CHARS = 2000  # a message longer than this is cut in the middle
_LONG_LIST = re.compile(r"\[([^\[\]]{120,})\]")


def bounded(text: str) -> str:
    """``text`` as one readable line: each long ``[a, b, ...]`` list cut to its first items
    with "... and N more", and the whole cut to MAX_CHARS (450k ids made a 1.35 MB line)."""

    def cut(m: re.Match[str]) -> str:
        items = m.group(1).split(", ")
        if len(items) <= MAX_ITEMS:
            return m.group(0)
        return f"[{', '.join(items[:MAX_ITEMS])}, ... and {len(items) - MAX_ITEMS} more]"

    text = " ".join(_LONG_LIST.sub(cut, text).splitlines())
    if len(text) > MAX_CHARS:
        keep = MAX_CHARS // 2
        text = f"{text[:keep]} ... ({len(text) - 2 * keep} characters cut) ... {text[-keep:]}"
    return text


class WiringError(ValueError):
    """A user-facing wiring problem (bad config, bad ids, mismatched widths, ...).

    ``str()`` renders one readable line: ``"<path>: <message>. Fix: <fix>"``; the path and the
    fix parts are left out when unknown.
    """

    def __init__(self, message: str, *, path: str | None = None, fix: str | None = None) -> None:
        self.message = message
        self.path = None if path is None else str(path)
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        text = bounded(self.message.rstrip())
        if self.path:
            text = f"{self.path}: {text}"
        if self.fix:
            text = f"{text.rstrip('.')}. Fix: {bounded(self.fix.rstrip())}"
        return text

    def __str__(self) -> str:
        return self.render()

    def with_path(self, path: str | None) -> WiringError:
        """A copy that names ``path`` (used when a lower layer did not know the file)."""
        keep = path if self.path is None else self.path
        return WiringError(self.message, path=keep, fix=self.fix)

    def __reduce__(self):  # keep pickling (multiprocessing) working with keyword-only args
        return (_rebuild, (self.message, self.path, self.fix))


def _rebuild(message: str, path: str | None, fix: str | None) -> WiringError:
    return WiringError(message, path=path, fix=fix)


class AmbiguousIdsError(WiringError):
    """Ids that read validly in more than one convention, with nothing saying which.

    The plugin keeps stock SGLang's behaviour for these (and says so); the launcher refuses.
    """

    def with_path(self, path: str | None) -> AmbiguousIdsError:
        keep = path if self.path is None else self.path
        return AmbiguousIdsError(self.message, path=keep, fix=self.fix)

    def __reduce__(self):
        return (AmbiguousIdsError._rebuild_ambiguous, (self.message, self.path, self.fix))

    @staticmethod
    def _rebuild_ambiguous(message: str, path: str | None, fix: str | None) -> AmbiguousIdsError:
        return AmbiguousIdsError(message, path=path, fix=fix)
