"""Training text that every machine already has: the Python standard library sources.

The tiny models must build with no network, so their tokenizer and their (optional) training run
read the interpreter's own ``.py`` files. The selection is a pure function of the file tree, so
two machines with the same Python build see the same text; ``corpus_digest`` fingerprints it so
a cache keyed on the digest is rebuilt when the interpreter (and therefore the text) changes.
"""

from __future__ import annotations

import hashlib
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# Test suites are huge and repetitive; encodings/ is mostly codec tables, not code.
_SKIP_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "encodings"}
)
# Every HELDOUT_EVERY-th file (in sorted order) is held out for evaluating the trained models.
HELDOUT_EVERY = 10
SPLITS = ("train", "heldout", "all")


@dataclass(frozen=True)
class CorpusFile:
    relpath: str  # POSIX path relative to the stdlib root: stable across machines
    path: Path


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


@lru_cache(maxsize=4)
def _all_files(root: Path) -> tuple[CorpusFile, ...]:
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if _SKIP_DIRS.intersection(rel.parts[:-1]) or not path.is_file():
            continue
        files.append(CorpusFile(rel.as_posix(), path))
    if not files:
        raise RuntimeError(f"no Python sources found under {root}")
    # Sort by the relative path, not by rglob order, which depends on the filesystem.
    return tuple(sorted(files, key=lambda f: f.relpath))


def stdlib_files(split: str = "train", root: Path | None = None) -> list[CorpusFile]:
    """The corpus files of one split, in sorted path order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    files = _all_files(root or stdlib_root())
    if split == "all":
        return list(files)
    want_heldout = split == "heldout"
    return [
        f for i, f in enumerate(files) if (i % HELDOUT_EVERY == HELDOUT_EVERY - 1) == want_heldout
    ]


def read_text(f: CorpusFile) -> str:
    # Decode leniently: a stray non-UTF-8 byte must not make the build machine-dependent.
    return f.path.read_bytes().decode("utf-8", errors="replace")


def shuffled_subset(files: list[CorpusFile], max_bytes: int) -> list[CorpusFile]:
    """A deterministic, well-mixed subset of at most ``max_bytes`` of source.

    Taking the first files in sorted order would over-represent a few packages (asyncio,
    ctypes, ...); ordering by a hash of the path mixes packages and is still a pure function
    of the file list.
    """
    if max_bytes <= 0:
        raise ValueError("max_bytes must be positive")
    order = sorted(files, key=lambda f: hashlib.sha256(f.relpath.encode()).hexdigest())
    chosen, total = [], 0
    for f in order:
        size = f.path.stat().st_size
        if total + size > max_bytes:
            continue
        chosen.append(f)
        total += size
    return sorted(chosen, key=lambda f: f.relpath)


def iter_texts(files: list[CorpusFile]) -> Iterator[str]:
    for f in files:
        yield read_text(f)


@lru_cache(maxsize=4)
def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for f in _all_files(root):
        h.update(f.relpath.encode())
        h.update(b"\0")
        h.update(hashlib.sha256(f.path.read_bytes()).digest())
    return h.hexdigest()


def corpus_digest(root: Path | None = None) -> str:
    """SHA-256 over every corpus file's path and content (about 12 MB; tens of ms)."""
    return _digest(root or stdlib_root())
