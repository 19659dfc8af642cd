"""`--config FILE` turned into flags as SGLang 0.5.23 does it (pure), mirroring
``ConfigArgumentMerger`` (``sglang/srt/utils/server_args_config_parser.py``):

- only the bare token ``--config`` makes SGLang read a file, and only one; the file must be
  named ``*.yaml``/``*.yml``, exist and hold a mapping (``yaml.safe_load``; empty: no keys);
- each key becomes ``--KEY`` spelled as written (SGLang's parser knows no underscore spelling:
  its merger normalizes keys only to look them up); ``true`` on a store_true option is the
  bare flag and ``false`` nothing; other booleans ``--KEY true|false``; a list its items
  (empty: nothing); a mapping one JSON value; anything else ``str(value)``;
- a key of a ``--x/--no-x`` switch or of a custom action is refused;
- the file's flags go before the command line's, so the command line wins.

The launcher merges the file itself and hands SGLang the merged flags, so what it validated
is what SGLang runs (sglang_argv.py); a test keeps this equal to SGLang's own merger.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_eagle3.errors import WiringError

if TYPE_CHECKING:
    from sglang_eagle3.launch.sglang_argv import Option

FLAG = "--config"
# SGLang actions the option table cannot tell from store_true / store (same arity) but the
# merger refuses: DeprecatedStoreTrueAction and LoRAPathAction are custom classes
CUSTOM_ACTIONS = frozenset({"--disable-cuda-graph", "--enable-dp-attention", "--lora-paths"})


def config_keys(opt: Option) -> set[str]:
    """The normalized keys a config file may name ``opt`` by (SGLang's ``_config_keys``)."""
    long = {s[2:].replace("-", "_") for s in opt.options if s.startswith("--")}
    return {opt.dest} | long


@functools.cache
def key_kinds(options: tuple[Option, ...]) -> tuple[frozenset[str], dict[str, Option]]:
    """(keys of store_true options, key -> option the merger refuses)."""
    supported = [
        o for o in options if not o.negatable and not CUSTOM_ACTIONS.intersection(o.options)
    ]
    store_true = frozenset(k for o in supported if o.nargs == "0" for k in config_keys(o))
    usable = {k for o in supported for k in config_keys(o)}  # a shared dest stays usable
    refused = {
        k: o
        for o in options
        if o not in supported and FLAG not in o.options
        for k in config_keys(o)
        if k not in usable
    }
    return store_true, refused


def find_config(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """(the file after the bare ``--config``, argv without the two), or (None, argv)."""
    at = [i for i, tok in enumerate(argv) if tok == FLAG]  # SGLang scans raw tokens
    if not at:
        return None, list(argv)
    if len(at) > 1:
        raise WiringError(
            f"--config is given {len(at)} times; SGLang reads one config file",
            path="command line",
            fix="merge the files into one and give --config once",
        )
    i = at[0]
    if i == len(argv) - 1:
        raise WiringError("--config has no file after it", path="command line",
                          fix="write --config FILE.yaml")  # fmt: skip
    return argv[i + 1], [*argv[:i], *argv[i + 2 :]]


def load_config(path: str) -> dict[Any, Any]:
    """The file's mapping, refused where SGLang would refuse it (checks in its order)."""
    p = Path(path)
    fix = "give --config a YAML file of `option-name: value` lines"
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise WiringError(
            f"SGLang reads --config files named *.yaml or *.yml, not {p.suffix or 'no suffix'}",
            path=path,
            fix=fix,
        )
    if not p.exists():
        raise WiringError("the --config file does not exist", path=path, fix=fix)
    try:
        import yaml  # SGLang's own dependency; needed only for --config
    except ImportError:
        raise WiringError("reading --config needs PyYAML", path=path,
                          fix="pip install pyyaml (SGLang installs it)") from None  # fmt: skip
    try:
        with p.open(encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError) as err:
        raise WiringError(f"cannot read the --config file ({err})", path=path, fix=fix) from None
    except yaml.YAMLError as err:
        raise WiringError(f"the --config file is not valid YAML ({err})", path=path,
                          fix=fix) from None  # fmt: skip
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise WiringError(
            f"the --config file holds a {type(data).__name__}, not a mapping of option: value",
            path=path,
            fix=fix,
        )
    return data


def config_args(
    data: dict[Any, Any], options: tuple[Option, ...], path: str
) -> list[tuple[str, list[str]]]:
    """Each key with the tokens SGLang's merger makes of it, in the file's order."""
    store_true, refused = key_kinds(options)
    out: list[tuple[str, list[str]]] = []
    for key, value in data.items():
        if not isinstance(key, str):  # SGLang's merger dies on key.replace
            raise WiringError(f"config key {key!r} is not a name", path=path,
                              fix="write keys as option names, e.g. model-path")  # fmt: skip
        norm = key.replace("-", "_")
        if norm in refused:
            opt = refused[norm]
            what = "a --x/--no-x switch" if opt.negatable else "an option of its own kind"
            raise WiringError(
                f"config key {key!r}: SGLang's config merger refuses {opt.canonical}, {what}",
                path=path,
                fix=f"give {opt.canonical} on the command line instead",
            )
        flag = f"--{key}"
        if isinstance(value, bool):
            if norm in store_true:
                tokens = [flag] if value else []
            else:
                tokens = [flag, str(value).lower()]
        elif isinstance(value, list):
            tokens = [flag, *(str(v) for v in value)] if value else []
        elif isinstance(value, dict):
            try:
                tokens = [flag, json.dumps(value)]
            except (TypeError, ValueError) as err:  # e.g. a YAML date inside
                raise WiringError(f"config key {key!r}: {err}", path=path) from None
        else:
            tokens = [flag, str(value)]
        out.append((key, tokens))
    return out
