"""The tuner's own input checks, all before any server starts and before the doctor's imports:
the ranges its help states, the --explain settings (by the launcher's own flag rules), and the
files it writes at the very end (a run of minutes must not end on a path it cannot write).
Nothing here writes anything."""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

from sglang_eagle3.draft_tree_size import max_draft_tokens
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.spec_resolve import resolve_spec_argv
from sglang_eagle3.tune.grid import Setting

STEPS = (1, 8)  # --steps: the chain depths the grid scores
TOPK = (1, 4)  # --topk: the tree widths it scores
CONCURRENCY = (1, 1024)  # --concurrency: checked before a range is expanded
# --max-draft-tokens: 2 is a one-step chain; the top is the largest tree the grid can build
DRAFT_TOKENS = (2, max_draft_tokens(STEPS[1], TOPK[1]))
MIN_NEW_TOKENS = 2  # a timed request needs a token after its first (measure.per_request)
_PARTS = ("steps", "topk", "draft tokens")


def _refuse(message: str, fix: str) -> WiringError:
    return WiringError(message, path="command line", fix=fix)


def check_numbers(args: argparse.Namespace) -> None:
    """The tuner's integer options within the ranges its help states."""
    low, high = DRAFT_TOKENS
    if not low <= args.max_draft_tokens <= high:
        raise _refuse(f"--max-draft-tokens {args.max_draft_tokens} is outside {low}-{high} "
                      "(a one-step chain to the grid's largest tree, "
                      f"{STEPS[1]} steps of topk {TOPK[1]})",
                      fix="e.g. --max-draft-tokens 16")  # fmt: skip
    if args.max_tokens < 1:
        raise _refuse(f"--max-tokens {args.max_tokens} scores no draft position (it must be "
                      ">= 1)", fix="e.g. --max-tokens 2048")  # fmt: skip
    if args.max_new_tokens < MIN_NEW_TOKENS:
        raise _refuse(f"--max-new-tokens {args.max_new_tokens} leaves nothing to time after a "
                      f"request's first token (it must be >= {MIN_NEW_TOKENS})",
                      fix="e.g. --max-new-tokens 128")  # fmt: skip
    if not 0 <= args.arrival_rounds <= 16:
        raise _refuse(f"--arrival-rounds {args.arrival_rounds} is outside 0-16",
                      fix="e.g. --arrival-rounds 2 (0: priced as a batch-1 step)")  # fmt: skip


def explained_setting(text: str, sglang: list[str], architecture: str) -> Setting:
    """``--explain S,K,N`` as a Setting; a WiringError naming the wrong part and the rule
    (spec_flags.py's, the one the launcher refuses a server by)."""
    parts = text.split(",")
    fix = "give steps,topk,draft_tokens, e.g. --explain 15,1,16"
    if len(parts) != 3:
        raise _refuse(f"--explain {text!r} has {len(parts)} part(s); it takes three: "
                      "steps,topk,draft_tokens", fix)  # fmt: skip
    values = []
    for name, part in zip(_PARTS, parts, strict=True):
        p = part.strip()
        if not (p.isascii() and p.isdigit()) or int(p) < 1:
            raise _refuse(f"--explain {text!r}: {name} {part!r} is not a whole number >= 1", fix)
        values.append(int(p))
    setting = Setting(*values)
    err = _refusal(setting, sglang, architecture)
    if err is not None:
        s, k, n = values
        # the nearest SGLang runs: a tree kept within its bounds, the chain of these tokens
        tree = Setting(s, k, min(max(n, s + 1), max_draft_tokens(s, k)))
        chain = [Setting(n - 1, 1, n)] if n >= 2 else []
        near = [*([tree] if k > 1 else []), *chain, Setting(s, 1, s + 1)]
        ok = next((x for x in near if _refusal(x, sglang, architecture) is None), None)
        like = "" if ok is None else f"e.g. --explain {ok.steps},{ok.topk},{ok.draft_tokens} "
        raise _refuse(
            f"--explain {text!r} ({setting}) is a setting SGLang would not run as given: "
            f"{err.message}",
            f"{like}(as flags, {err.fix})",
        )
    return setting


def _refusal(setting: Setting, sglang: list[str], architecture: str) -> WiringError | None:
    try:
        resolve_spec_argv(setting.on(sglang), architecture=architecture)
    except WiringError as err:
        return err
    return None


def _file_out(path: Path, flag: str) -> None:
    folder = path.absolute().parent
    if path.is_dir():
        raise _refuse(f"{flag} {path} is a folder", fix=f"give {flag} a file path")
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise _refuse(f"{flag} {path}: its folder {folder} {what}",
                      fix=f"create the folder first, or give {flag} a path in an "
                      "existing one")  # fmt: skip
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise _refuse(f"{flag} {path} is not writable", fix=f"give {flag} a writable path")


def _folder_out(path: Path, flag: str) -> None:
    # made when missing, so the nearest existing folder above it must take a new folder
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise _refuse(f"{flag} {path}: {probe} is a file, not a folder",
                      fix=f"give {flag} a folder")  # fmt: skip
    if not os.access(probe, os.W_OK | os.X_OK):
        raise _refuse(f"{flag} {path}: {probe} is not writable",
                      fix=f"give {flag} a writable folder")  # fmt: skip


def check_outputs(args: argparse.Namespace) -> None:
    """Every path the tuner writes: it could be written at the end of the run."""
    files = {"--adaptive-config": args.adaptive_config, "--png": args.png}
    for flag, path, check in [*((f, p, _file_out) for f, p in files.items() if p is not None),
                              ("--log-dir", args.log_dir, _folder_out)]:  # fmt: skip
        try:
            check(path, flag)
        except OSError as err:  # a name too long for the file system, a NUL byte ...
            raise _refuse(f"{flag} {path}: {err.strerror or err}",
                          fix=f"give {flag} a shorter, plain path") from err  # fmt: skip
    if args.png is not None:
        if args.png.suffix.lower() != ".png":
            raise _refuse(f"--png {args.png}: the plot is written as PNG",
                          fix="give a path ending in .png")  # fmt: skip
        if importlib.util.find_spec("matplotlib") is None:
            raise _refuse("--png needs matplotlib, which is not installed",
                          fix="pip install matplotlib, or drop --png")  # fmt: skip
    named = {flag: p.resolve() for flag, p in files.items() if p is not None}
    if args.prompts:  # an input the run reads: writing over it would lose it
        named["--prompts"] = Path(args.prompts).resolve()
    for path in named.values():
        same = [f for f, p in named.items() if p == path]
        if len(same) > 1:
            raise _refuse(f"{' and '.join(same)} name the same file {path}",
                          fix="give each its own path")  # fmt: skip
