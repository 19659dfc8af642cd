"""The identity of a drafter's weights: one sha256 over its weight files, names and bytes.

Two servers that must serve the same drafter (the prefill and decode sides of a PD
deployment) compare this digest. It reads every byte once (about 1 s a GB), so a server
computes it once, at start. The config is left out on purpose: the taps it declares are
compared separately, and the launcher's cache copies rewrite it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sglang_eagle3.errors import WiringError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
_CHUNK = 1 << 22


def draft_weights_sha256(draft_dir: str | Path) -> str:
    """sha256 (hex) of the weight files of ``draft_dir``, in name order."""
    folder = Path(draft_dir)
    files = []
    if folder.is_dir():
        files = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    if not files:
        raise WiringError(
            "no weight files (*.safetensors, *.bin, *.pt) to identify the drafter by",
            path=str(folder),
            fix="pass --speculative-draft-model-path as a local directory holding the weights",
        )
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()
