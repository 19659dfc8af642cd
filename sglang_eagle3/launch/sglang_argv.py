"""Read an SGLang command line the way SGLang 0.5.23's own parser will (pure).

The launcher validates flags by name (`--speculative-num-steps`, ...), but SGLang's argparse
also takes unique prefixes (`--speculative-algo`), aliases (`--speculative-draft-model`) and
repeated flags (the last one wins). Each recognised option is rewritten to its canonical
name, so what the launcher checks is what SGLang runs; a destination given twice with
different values is an error. A `--config FILE` is merged here as SGLang merges it
(sglang_config_file.py), and SGLang gets the merged flags instead of the file. The option
table, `sglang_options.json`, is SGLang's own parser dumped (`tests/scripts/sglang_options.py`;
a test keeps it equal).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.sglang_config_file import config_args, find_config, load_config

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


def _lookup(name: str, where: str = "command line") -> tuple[str, Option] | None:
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
            path=where,
            fix="write the option's full name",
        )
    return (hits[0], table[hits[0]]) if hits else None


def _takes(nargs: str, rest: Sequence[str]) -> int:
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


@dataclass(frozen=True)
class _Flag:
    """One option with its values as argparse reads them, or a token no option takes."""

    opt: Option | None
    said: str  # as written, for messages
    key: tuple[str, ...]  # what it sets: an equal repeat is harmless
    tokens: tuple[str, ...]  # under the canonical name
    start: int


def _flags(argv: Sequence[str], where: str = "command line") -> list[_Flag]:
    out: list[_Flag] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        name, eq, inline = tok.partition("=")
        found = _lookup(name, where) if tok.startswith("-") and not _NUMBER.match(tok) else None
        if found is None:  # a value, or an option SGLang will reject itself
            out.append(_Flag(None, tok, (), (tok,), i))
            i += 1
            continue
        written, opt = found
        n = 0 if eq else _takes(opt.nargs, argv[i + 1 :])
        values = (inline,) if eq else tuple(argv[i + 1 : i + 1 + n])
        key = (written,) + values if opt.negatable else values
        said = tok if eq else f"{tok} {' '.join(values)}".strip()
        head = written if opt.negatable else opt.canonical
        out.append(_Flag(opt, said, key, (f"{head}={inline}",) if eq else (head, *values), i))
        i += 1 + n
    return out


def _check_key(key: str, tokens: list[str], path: str) -> None:
    """Refuse a config key whose flags SGLang's parser would stop on or silently ignore."""
    if not tokens:  # false on a store_true option, an empty list: SGLang adds nothing
        return
    first, *rest = _flags(tokens, path)
    if first.opt is None:
        dashed = key.replace("_", "-")
        fix = "remove it (the launcher's own options go on the command line)"
        if dashed != key and _lookup(f"--{dashed}", path):
            fix = f"write the key with dashes, {dashed}: SGLang's parser knows no underscores"
        raise WiringError(f"config key {key!r} is no option of SGLang's: it would stop on "
                          f"{tokens[0]}", path=path, fix=fix)  # fmt: skip
    name = first.opt.canonical
    if first.opt.dest == "config":
        raise WiringError(
            f"config key {key!r} names another config file; SGLang reads one and would "
            "ignore this one",
            path=path,
            fix="copy that file's keys into this one",
        )
    if not rest:
        return
    left = " ".join(t for f in rest for t in f.tokens)
    if first.opt.nargs == "0":
        msg, fix = f"{name} takes no value", f"write `{name[2:]}: true` (the option's full name)"
    elif rest[0].opt is not None or tokens[1].startswith("-"):
        msg, fix = f"{left!r} reads as an option, not as {name}'s value", (
            f"give {name}={tokens[1]} on the command line")  # fmt: skip
    else:
        msg, fix = f"{name} takes one value, the key gives {len(tokens) - 1}", "give one value"
    raise WiringError(f"config key {key!r}: {msg}, so SGLang's parser would stop on {left!r}",
                      path=path, fix=fix)  # fmt: skip


def _config_tokens(path: str) -> list[str]:
    options = tuple(dict.fromkeys(_options().values()))
    out: list[str] = []
    for key, tokens in config_args(load_config(path), options, path):
        _check_key(key, tokens, path)
        out.extend(tokens)
    return out


def canonical_argv(argv: list[str]) -> list[str]:
    """``argv`` with every SGLang option under its canonical name (values untouched) and a
    `--config FILE` replaced by the file's flags (those the command line sets again dropped:
    SGLang puts the file first, so the command line wins); a WiringError for a destination
    given twice with different values in one place, an ambiguous prefix, or a config file
    SGLang would refuse or ignore."""
    path, cli = find_config(argv)
    pre = _config_tokens(path) if path is not None else []
    flags = _flags([*pre, *cli])
    seen: dict[tuple[bool, str], _Flag] = {}
    for f in flags:
        if f.opt is None:
            continue
        in_file, dest = f.start < len(pre), f.opt.dest
        if dest == "config":  # the bare `--config` was taken out above
            raise WiringError(
                f"{f.said}: SGLang reads a config file only after a bare `--config`; "
                "written this way it would ignore the file",
                path="command line",
                fix="write --config FILE (two words)",
            )
        prev = seen.get((in_file, dest))
        if prev is not None and prev.key != f.key:
            raise WiringError(
                f"{prev.said} and {f.said} both set {dest}; SGLang would take the last one",
                path=path if in_file else "command line",
                fix="give the option once",
            )
        seen[(in_file, dest)] = f
    cli_dests = {dest for in_file, dest in seen if not in_file}
    out: list[str] = []
    for f in flags:
        overridden = f.opt is not None and f.start < len(pre) and f.opt.dest in cli_dests
        if not overridden:
            out.extend(f.tokens)
    return out


def drop_options(argv: list[str], unwanted: Callable[[str], bool]) -> list[str]:
    """``argv`` without the SGLang options (and their values) whose canonical name is
    ``unwanted``; everything else as written."""
    flags = _flags(argv)
    ends = [f.start for f in flags[1:]] + [len(argv)]
    return [
        tok
        for f, end in zip(flags, ends, strict=True)
        if not (f.opt is not None and unwanted(f.opt.canonical))
        for tok in argv[f.start : end]
    ]
