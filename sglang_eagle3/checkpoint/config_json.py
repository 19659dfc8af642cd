"""Read a model directory's config.json as a dict, or fail with one WiringError (pure)."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_eagle3.errors import WiringError


def read_config_json(directory: str | Path, *, missing: str, fix: str) -> dict:
    """`missing` and `fix` word the error for a directory without config.json."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise WiringError(missing, path=str(directory), fix=fix)
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WiringError(f"config is not readable JSON ({err})", path=str(path)) from None
    if not isinstance(cfg, dict):
        raise WiringError("config must be a JSON object", path=str(path))
    return cfg


def read_draft_config_json(draft_dir: str | Path) -> dict:
    """A draft directory's config.json, worded the same for every reader of drafts."""
    return read_config_json(
        draft_dir,
        missing="no config.json: not a draft checkpoint directory",
        fix="point at the directory that holds the draft's config.json and weights",
    )
