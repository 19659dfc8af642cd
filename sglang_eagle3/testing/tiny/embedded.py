"""The trained tiny models, shipped in the package so that a fresh machine starts at once.

Training the tiny target, the drafter and the MLA drafter takes about 15 minutes on 2 cores;
a newcomer's first demo and CI's cold run should not pay that. Each entry under
``trained/`` (``target``, ``drafter``, ``mla_drafter``) is the builder's output for one
cache key, with ``embedded.json`` recording that key and the sha256 of every file. A build
whose key matches copies the entry instead of training (the drafter's data, about 90 MB, is
regenerated from the target: seconds); any other key, from an edited recipe or builder,
trains as before.

``python -m sglang_eagle3.testing.tiny.ship`` writes the entries and checks that the
builder reproduces them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from sglang_eagle3 import env_names

HERE = Path(__file__).resolve().parent / "trained"
MANIFEST = "embedded.json"
# Timings and host facts: written by every build, never the same twice, so not compared.
NOT_COMPARED = frozenset({"build_info.json", "tiny_drafter.json", "tiny_mla_drafter.json"})


def enabled() -> bool:
    return os.environ.get(env_names.TINY_EMBEDDED, "1") != "0"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(kind: str, root: Path | None = None) -> dict | None:
    path = (root or HERE) / kind / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def restore(kind: str, key: str, dest: Path) -> bool:
    """Copy the embedded ``kind`` into ``dest`` when it was built for ``key``; False (nothing
    copied) when it was not, or when the embedded copies are turned off."""
    found = manifest(kind)
    if not enabled() or found is None or found["key"] != key:
        return False
    for rel, want in found["files"].items():
        src, out = HERE / kind / rel, dest / rel
        if sha256(src) != want:
            raise RuntimeError(f"{src} does not match {HERE / kind / MANIFEST}; reinstall")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out)
    return True


def write(kind: str, key: str, built: Path, files: list[str], root: Path | None = None) -> Path:
    """Replace the shipped ``kind`` with ``files`` (relative to ``built``) of one build."""
    out = (root or HERE) / kind
    shutil.rmtree(out, ignore_errors=True)
    hashes = {}
    for rel in sorted(files):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built / rel, out / rel)
        hashes[rel] = sha256(out / rel)
    doc = {"key": key, "built_from": built.name, "files": hashes}
    (out / MANIFEST).write_text(json.dumps(doc, indent=2) + "\n")
    return out
