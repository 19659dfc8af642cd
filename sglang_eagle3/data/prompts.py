"""Prompts files: one JSON object a line with a non-empty string "text" (pure).

Read by the benchmark, the tuner and the doctor's data-free mode, so one file feeds all three.
"""

from __future__ import annotations

import json
from pathlib import Path

from sglang_eagle3.errors import WiringError


class PromptFileError(ValueError):
    """A prompts file that cannot be used; `str()` names the file and, when known, the line."""

    def __init__(self, path: str | Path, line: int | None, reason: str) -> None:
        self.path, self.line, self.reason = str(path), line, reason
        where = self.path if line is None else f"{self.path}, line {line}"
        super().__init__(f"prompts file {where}: {reason}")


def read_prompts(path: str | Path) -> list[str]:
    """Every non-blank line of `path` must be a JSON object with a non-empty string "text"."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise PromptFileError(path, None, f"cannot read it ({e})") from e
    prompts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise PromptFileError(path, number, f"not valid JSON ({e.msg})") from e
        if not isinstance(obj, dict) or "text" not in obj:
            raise PromptFileError(path, number, 'expected an object like {"text": "..."}')
        text = obj["text"]
        if not isinstance(text, str) or not text:
            raise PromptFileError(path, number, '"text" must be a non-empty string')
        prompts.append(text)
    if not prompts:
        raise PromptFileError(path, None, "no prompts in it")
    return prompts


def read_prompts_checked(path: str | Path) -> list[str]:
    """``read_prompts`` for a command's input: a WiringError naming the file and line."""
    try:
        return read_prompts(path)
    except PromptFileError as err:
        where = err.path if err.line is None else f"{err.path}, line {err.line}"
        raise WiringError(err.reason, path=where, fix='one {"text": "..."} object a line') from None
