"""The benchmark's prompts: a built-in set, or a user's JSONL file checked line by line (pure)."""

from __future__ import annotations

from sglang_eagle3.data.prompts import PromptFileError, read_prompts

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

__all__ = ["BUILT_IN", "PromptFileError", "read_prompts"]
