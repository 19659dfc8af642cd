"""The benchmark's prompts: a built-in set, or a user's JSONL file checked line by line (pure)."""

from __future__ import annotations

import json
from pathlib import Path

# Code openings: the tiny target and drafter were trained on Python sources, and code is where
# real EAGLE-3 drafters accept most, so these show speculation at its most useful.
BUILT_IN: tuple[str, ...] = (
    "def fibonacci(n):",
    "import os\nimport sys\n\n",
    "class Stack:\n    def __init__(self):",
    "for i in range(10):\n    ",
    "# Parse command-line arguments\n",
    "with open(path) as f:",
    "try:\n    import json\nexcept ImportError:",
    "def main():\n    args = ",
)


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
