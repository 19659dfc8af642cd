"""Print SGLang 0.5.23's command-line options as the table sglang_eagle3/launch reads
(`sglang_options.json`): each option's strings, destination, arity and whether it sets a
boolean. Run with SGLang installed: `python tests/scripts/sglang_options.py`."""

from __future__ import annotations

import argparse
import json

from sglang.srt.server_args import ServerArgs


def options() -> list[dict]:
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    rows = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        negated = isinstance(action, argparse.BooleanOptionalAction)
        rows.append({
            "options": list(action.option_strings),
            "dest": action.dest,
            "nargs": "0" if action.nargs == 0 else str(action.nargs),
            # `--x` / `--no-x` set one destination to opposite values: never rewritten
            "negatable": negated,
        })  # fmt: skip
    return rows


def render() -> str:
    """The file's exact text: one option a line, so a pin move shows as a readable diff."""
    rows = ",\n".join(json.dumps(r) for r in options())
    return f'{{"sglang": "0.5.23", "options": [\n{rows}\n]}}\n'


if __name__ == "__main__":
    print(render(), end="")
