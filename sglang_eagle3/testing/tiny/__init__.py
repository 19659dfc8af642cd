"""Deterministic tiny models built locally with no network (tests and demos).

- ``tiny_target_dir()``: the cached tiny DeepSeek-V3 target directory (builds on first use).
- ``build_tiny_target(out_dir, seed=, num_layers=, train_steps=)``: build into a directory.
- ``load_hf_target(dir)``: reload a built target into HF ``DeepseekV3ForCausalLM``.

Imports are lazy so that ``import sglang_eagle3.testing.tiny`` does not pull in torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_tiny_target", "load_hf_target", "tiny_target_dir", "TargetRecipe"]

_WHERE = {
    "build_tiny_target": "sglang_eagle3.testing.tiny.target",
    "load_hf_target": "sglang_eagle3.checkpoint.hf_target",
    "tiny_target_dir": "sglang_eagle3.testing.tiny.cache",
    "TargetRecipe": "sglang_eagle3.testing.tiny.config",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'sglang_eagle3.testing.tiny' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)
