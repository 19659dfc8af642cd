"""``python -m sglang_eagle3.tiny [--out DIR] [--train-steps N] [--seed S] [--num-layers L]``

Builds the tiny DeepSeek-V3 target and prints its directory: into ``--out`` when given,
otherwise into the recipe-keyed cache (reused if already built).

``python -m sglang_eagle3.tiny --drafter`` builds (or restores) the demo's tiny trained target
and drafter in the cache and prints ``TARGET=``, ``DRAFT=``, ``TRAIN=`` and ``EVAL=`` lines for
``eval "$(...)"``: the cache keeps one directory per recipe, so a glob may match several.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from sglang_eagle3.testing.tiny.train import DEFAULT_TRAIN_STEPS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_eagle3.tiny", description=__doc__)
    parser.add_argument("--out", type=Path, default=None, help="build here instead of the cache")
    parser.add_argument("--train-steps", type=int, default=DEFAULT_TRAIN_STEPS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-layers", type=int, default=8)
    parser.add_argument(
        "--drafter", action="store_true", help="the demo's target and drafter: shell variables"
    )
    args = parser.parse_args(argv)
    if args.drafter:
        from sglang_eagle3.testing.tiny.drafter import tiny_drafter

        d = tiny_drafter()
        paths = {"TARGET": d.target_dir, "DRAFT": d.draft_dir, "TRAIN": d.train_data,
                 "EVAL": d.eval_data}  # fmt: skip
        print("\n".join(f"{k}={shlex.quote(str(v))}" for k, v in paths.items()))
        return 0
    kwargs = {"seed": args.seed, "num_layers": args.num_layers, "train_steps": args.train_steps}
    if args.out is not None:
        from sglang_eagle3.testing.tiny.target import build_tiny_target

        path = build_tiny_target(args.out, **kwargs)
    else:
        from sglang_eagle3.testing.tiny.cache import tiny_target_dir

        path = tiny_target_dir(**kwargs)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
