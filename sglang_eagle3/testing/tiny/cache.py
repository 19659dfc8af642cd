"""On-disk cache of built tiny targets, one directory per recipe.

Layout: ``$SGLANG_EAGLE3_CACHE/tiny/<name>-<key>/`` (default root ``~/.cache/sglang_eagle3``),
where ``key`` hashes what the model is built from: the recipe, the stdlib corpus digest and
the code of every builder module (comments and docstrings excluded). Editing the recipe or a
builder therefore lands in a new directory; old ones are never overwritten. Library versions
are not in the key: a model is data, and another torch reads it the same. A key the package
ships a trained copy of (``embedded.py``) is restored instead of trained.

Builds go to a temporary sibling directory and are renamed into place, so a reader never sees
a half-written model. A file lock per key makes concurrent builders wait for the first one
instead of building twice.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from sglang_eagle3 import env_names
from sglang_eagle3.testing.tiny import corpus
from sglang_eagle3.testing.tiny.config import TargetRecipe
from sglang_eagle3.testing.tiny.train import DEFAULT_TRAIN_STEPS

ENV_VAR = env_names.CACHE
_BUILDER_MODULES = ("corpus", "tokenizer", "config", "train", "checkpoint", "target")
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tiny_recipe.json")


def cache_root() -> Path:
    """Root of the tiny-model cache (``$SGLANG_EAGLE3_CACHE/tiny`` or the home default)."""
    base = os.environ.get(ENV_VAR)
    root = Path(base).expanduser() if base else Path.home() / ".cache" / "sglang_eagle3"
    return root / "tiny"


def source_fingerprint(path: Path) -> str:
    """Hash of a module's code, ignoring comments, docstrings and formatting.

    Every distinct key costs a rebuild (minutes when training), so only edits that can change
    what the builder does should move it; the AST without docstrings captures exactly those.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def recipe_fingerprint(recipe: TargetRecipe) -> dict[str, Any]:
    here = Path(__file__).resolve().parent
    sources = {m: source_fingerprint(here / f"{m}.py") for m in _BUILDER_MODULES}
    return {
        "recipe": recipe.as_dict(),
        "corpus_digest": corpus.corpus_digest(),
        "sources": sources,
    }


def recipe_key(recipe: TargetRecipe) -> str:
    blob = json.dumps(recipe_fingerprint(recipe), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def entry_name(recipe: TargetRecipe) -> str:
    """Human-readable prefix plus the key, e.g. ``dsv3-l8-h128-s0-t600-0123abcd...``."""
    r = recipe
    return f"dsv3-l{r.num_layers}-h{r.hidden_size}-s{r.seed}-t{r.train.steps}-{recipe_key(r)}"


def is_complete(path: Path) -> bool:
    return path.is_dir() and all((path / f).is_file() for f in _REQUIRED_FILES)


def cached_build(
    root: Path, name: str, complete: Callable[[Path], bool], build: Callable[[Path], None]
) -> Path:
    """``root / name``, built by ``build(tmp)`` into a temp sibling and renamed into place
    under a file lock unless ``complete`` says it is there already (the module docstring)."""
    final = root / name
    if complete(final):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(root / f".{name}.lock"):
        if complete(final):  # another process finished while we waited
            return final
        # Only the lock holder builds, so any temp dir for this entry is a crashed build's.
        for stale in root.glob(f".{name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():
            shutil.rmtree(final)  # incomplete: damaged by hand, rebuild
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root))
        try:
            build(tmp)
            try:
                os.rename(tmp, final)
            except OSError:
                if not complete(final):  # lost a rename race to an equal build: keep theirs
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def default_recipe() -> TargetRecipe:
    """The trained target's recipe (the one the drafters, the demo and the package ship)."""
    return TargetRecipe.make(train_steps=DEFAULT_TRAIN_STEPS)


def tiny_target_dir(
    train_steps: int = DEFAULT_TRAIN_STEPS,
    *,
    seed: int = 0,
    num_layers: int = 8,
    recipe: TargetRecipe | None = None,
    root: Path | str | None = None,
) -> Path:
    """Path to the cached tiny target for this recipe, building it first if needed.

    ``recipe`` overrides ``train_steps`` / ``seed`` / ``num_layers``; ``root`` overrides
    ``cache_root()``. The default (``DEFAULT_TRAIN_STEPS``) is the package's shipped copy
    (trained here, about 8 minutes on 2 cores, when the recipe or a builder changed);
    ``train_steps=0`` gives the untrained model in seconds.
    """
    if recipe is None:
        recipe = TargetRecipe.make(seed=seed, num_layers=num_layers, train_steps=train_steps)
    from sglang_eagle3.testing.tiny import embedded
    from sglang_eagle3.testing.tiny.target import build_tiny_target

    def build(tmp: Path) -> None:
        if not embedded.restore("target", recipe_key(recipe), tmp):
            build_tiny_target(tmp, recipe=recipe)

    root = Path(root) if root is not None else cache_root()
    return cached_build(root, entry_name(recipe), is_complete, build)
