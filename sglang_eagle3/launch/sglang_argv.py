"""Read an SGLang command line the way SGLang 0.5.23's own parser will (pure).

The launcher validates flags by name (`--speculative-num-steps`, ...), but SGLang's argparse
also takes unique prefixes (`--speculative-algo`), aliases (`--speculative-draft-model`) and
repeated flags (the last one wins). Each recognised option is rewritten to its canonical
name, so what the launcher checks is what SGLang runs; a destination given twice with
different values is an error. The option table, `sglang_options.json`, is SGLang's own
parser dumped (`tests/scripts/sglang_options.py`; a test keeps it equal).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3.errors import WiringError

TABLE = Path(__file__).with_name("sglang_options.json")
_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse reads these as values, not options


@dataclass(frozen=True)
class Option:
    options: tuple[str, ...]
    dest: str
    nargs: str  # "None" (one value), "0", "?", "*", "+"
    negatable: bool

    @property
    def canonical(self) -> str:
        return self.options[0]


@functools.cache
def _options() -> dict[str, Option]:
    rows = json.loads(TABLE.read_text(encoding="utf-8"))["options"]
    out: dict[str, Option] = {}
    for r in rows:
        opt = Option(tuple(r["options"]), r["dest"], r["nargs"], r["negatable"])
        out.update({name: opt for name in opt.options})
    return out


def _lookup(name: str) -> tuple[str, Option] | None:
    """(option string, its option) as argparse resolves ``name``: exact, else the one long
    option it is a unique prefix of; None when it is no option of SGLang's."""
    table = _options()
    if name in table:
        return name, table[name]
    if not name.startswith("--"):
        return None
    hits = sorted(s for s in table if s.startswith(name))
    if len(hits) > 1:  # argparse refuses any prefix of two option strings
        raise WiringError(
            f"{name} is ambiguous: it could be {', '.join(hits[:6])}"
            + (f" and {len(hits) - 6} more" if len(hits) > 6 else ""),
            path="command line",
            fix="write the option's full name",
        )
    return (hits[0], table[hits[0]]) if hits else None


def _takes(nargs: str, rest: list[str]) -> int:
    """How many of the following tokens are this option's values."""
    if nargs == "0":
        return 0
    values = 0
    for tok in rest:
        if tok.startswith("-") and not _NUMBER.match(tok):
            break
        values += 1
        if nargs in ("None", "?"):
            break
    return values


def canonical_argv(argv: list[str]) -> list[str]:
    """``argv`` with every SGLang option under its canonical name (values untouched), or a
    WiringError for a destination given twice with different values, an ambiguous prefix,
    or `--config` (its file is merged by SGLang at start, out of the launcher's sight)."""
    out: list[str] = []
    seen: dict[str, tuple[str, tuple[str, ...]]] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        name, eq, inline = tok.partition("=")
        found = _lookup(name) if tok.startswith("-") and not _NUMBER.match(tok) else None
        if found is None:  # a value, or an option SGLang will reject itself
            out.append(tok)
            i += 1
            continue
        written, opt = found
        if opt.dest == "config":
            raise WiringError(
                f"{tok}: SGLang merges a config file into its flags at start, after the "
                "launcher has checked them",
                path="command line",
                fix="write the file's flags on the command line instead",
            )
        n = 0 if eq else _takes(opt.nargs, argv[i + 1 :])
        values = (inline,) if eq else tuple(argv[i + 1 : i + 1 + n])
        key = (written,) + values if opt.negatable else values
        said = f"{tok} {' '.join(values)}".strip() if not eq else tok
        if opt.dest in seen and seen[opt.dest][1] != key:
            raise WiringError(
                f"{seen[opt.dest][0]} and {said} both set {opt.dest}; SGLang would take the "
                "last one",
                path="command line",
                fix="give the option once",
            )
        seen[opt.dest] = (said, key)
        head = written if opt.negatable else opt.canonical
        out.extend([f"{head}={inline}"] if eq else [head, *values])
        i += 1 + n
    return out
