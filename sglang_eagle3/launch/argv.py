"""Read and edit an SGLang command line without reinterpreting anything else in it (pure)."""

from __future__ import annotations

from sglang_eagle3.errors import WiringError


def _find(argv: list[str], flag: str) -> tuple[int, str | None] | None:
    for i, arg in enumerate(argv):
        if arg == flag:
            return i, argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith(flag + "="):
            return i, arg[len(flag) + 1 :]
    return None


def argv_get(argv: list[str], flag: str, default=None):
    """The value of `--flag V` or `--flag=V`; `default` when absent."""
    found = _find(argv, flag)
    return default if found is None else found[1]


def argv_has(argv: list[str], flag: str) -> bool:
    """Whether `--flag` (or `--flag=V`) is given: enough for SGLang's store_true flags."""
    return _find(argv, flag) is not None


def argv_set(argv: list[str], flag: str, value: str) -> list[str]:
    """A copy with `--flag value` set (replacing any existing occurrence in place)."""
    out = list(argv)
    found = _find(out, flag)
    if found is None:
        return out + [flag, value]
    i, _ = found
    if out[i] == flag:
        out[i + 1] = value
    else:
        out[i] = f"{flag}={value}"
    return out


def argv_int(argv: list[str], flag: str) -> int | None:
    value = argv_get(argv, flag)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise WiringError(f"{flag} must be an integer, got {value!r}", path=flag) from None
