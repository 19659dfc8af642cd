"""The speculative flags of an SGLang command line, resolved as SGLang 0.5.23 will run them:
static (launch/spec_flags.py), or adaptive when either adaptive flag is given
(launch/adaptive.py, whose steps may be 0). Pure Python."""

from __future__ import annotations

from sglang_eagle3.launch.adaptive import resolve_adaptive_argv
from sglang_eagle3.launch.argv import argv_has
from sglang_eagle3.launch.spec_flags import (
    ADAPTIVE,
    ADAPTIVE_CONFIG,
    Resolution,
    resolve_static_argv,
)


def resolve_spec_argv(argv: list[str], *, architecture: str) -> Resolution:
    """The launcher refuses before start what SGLang would raise on, or silently change."""
    if argv_has(argv, ADAPTIVE) or argv_has(argv, ADAPTIVE_CONFIG):
        return resolve_adaptive_argv(argv)
    return resolve_static_argv(argv, architecture=architecture)
