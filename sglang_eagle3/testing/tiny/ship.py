"""``python -m sglang_eagle3.testing.tiny.ship --write | --check``: the shipped tiny models.

``--write`` copies the cached builds of the trained target, drafter and MLA drafter into the
package (``embedded.py`` restores them); ``--check`` trains every one again in a fresh cache
with the shipped copies turned off (``$SGLANG_EAGLE3_TINY_EMBEDDED=0``) and compares the
bytes, so what ships is what the builder makes (about 15 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from sglang_eagle3 import env_names
from sglang_eagle3.testing.tiny import embedded


def _builds() -> dict[str, tuple[str, Path, list[str]]]:
    """(key, build directory, files to ship) of each kind, built or restored in the cache."""
    from sglang_eagle3.testing.tiny import cache, drafter, mla_drafter

    target_key = cache.recipe_key(cache.default_recipe())
    target = cache.tiny_target_dir()
    tiny = drafter.tiny_drafter()
    mla = mla_drafter.tiny_mla_drafter().parent

    def listed(base: Path, *subdirs: str, extra: tuple[str, ...] = ()) -> list[str]:
        names = [str(p.relative_to(base)) for d in subdirs for p in (base / d).rglob("*")]
        return [n for n in names if (base / n).is_file()] + list(extra)

    return {
        "target": (target_key, target, [p.name for p in target.iterdir() if p.is_file()]),
        "drafter": (
            drafter.drafter_key(drafter.DrafterRecipe(), target),
            tiny.draft_dir.parent,
            listed(tiny.draft_dir.parent, "draft", extra=(drafter.RECORD,)),
        ),
        "mla_drafter": (
            mla_drafter.mla_key(tiny.draft_dir.parent.name),
            mla,
            listed(mla, "draft", extra=(mla_drafter.RECORD,)),
        ),
    }


def check() -> int:
    """Train everything again in a fresh cache, embedded copies off; compare with what ships."""
    with tempfile.TemporaryDirectory(prefix="sglang-eagle3-rebuild-") as tmp:
        os.environ[env_names.CACHE] = tmp
        os.environ[env_names.TINY_EMBEDDED] = "0"
        bad = 0
        for kind, (key, built, _) in _builds().items():
            found = embedded.manifest(kind)
            if found is None or found["key"] != key:
                print(f"{kind}: embedded key {found and found['key']} != built {key}")
                bad += 1
                continue
            for rel, want in found["files"].items():
                if rel in embedded.NOT_COMPARED:
                    continue
                same = embedded.sha256(built / rel) == want
                bad += not same
                print(f"{kind}/{rel}: {'same bytes' if same else 'DIFFERENT'}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sglang_eagle3.testing.tiny.ship")
    act = p.add_mutually_exclusive_group(required=True)
    act.add_argument("--write", action="store_true", help="ship the cached builds")
    act.add_argument("--check", action="store_true", help="retrain and compare (~15 min)")
    args = p.parse_args(argv)
    if args.check:
        return check()
    for kind, (key, built, files) in _builds().items():
        out = embedded.write(kind, key, built, files)
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(f"{kind}: {len(files)} files, {size / 1e6:.2f} MB, key {key} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
