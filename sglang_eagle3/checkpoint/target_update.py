"""Whether a target checkpoint on disk can replace the served one, checked before a byte of it
is loaded (`POST /update_weights_from_disk` on an EAGLE-3 server: hooks/disk_update.py).

The new checkpoint must be a local directory holding the served architecture at the served
depth and width, with the served checkpoint's tensors: the same names at the same shapes, each
file's header checked against its bytes (a truncated file is refused). SGLang's loader would
skip unknown names with a warning, or die on a fused parameter it cannot find, so comparing
with the served checkpoint's own headers is the test that does not re-implement its name
mapping. Pure: reads headers and configs, no tensor data.
"""

from __future__ import annotations

import json
from pathlib import Path

from sglang_eagle3.checkpoint.prestart import checked_tensors
from sglang_eagle3.checkpoint.target_config import read_target
from sglang_eagle3.errors import WiringError

_SHOWN = 4  # names quoted per kind of problem; the rest are counted

FIX = (
    "pass model_path as a local directory holding a checkpoint of the served target (its "
    "config.json and every weight file, same tensor names and shapes); the weights served "
    "before keep serving"
)


def _names(items: list[str]) -> str:
    more = f" ... and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more


def _architecture(folder: Path) -> str:
    try:
        names = json.loads((folder / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return "no readable config.json"
    return f"its config says {names[0]}" if names else "its config names no architecture"


def check_target_update(served: str | Path, new: str | Path) -> None:
    """Raise one WiringError (naming ``new``) unless ``new`` can replace ``served``."""
    path = str(new)
    if not Path(new).is_dir():
        raise WiringError(
            "no such directory (SGLang would try the name as a Hugging Face hub id)",
            path=path,
            fix=FIX,
        )
    old_t = read_target(served)
    try:
        new_t = read_target(new)
    except WiringError as err:
        raise WiringError(
            f"update refused: it is not a checkpoint of the served {old_t.architecture} "
            f"({_architecture(Path(new))}; {err.message})",
            path=err.path or path,
            fix=FIX,
        ) from None
    served_shape = (old_t.architecture, old_t.num_layers, old_t.hidden_size)
    new_shape = (new_t.architecture, new_t.num_layers, new_t.hidden_size)
    if served_shape != new_shape:
        raise WiringError(
            f"update refused: it holds {new_shape[0]} with {new_shape[1]} layers of width "
            f"{new_shape[2]}, the server serves {served_shape[0]} with {served_shape[1]} layers "
            f"of width {served_shape[2]}",
            path=path,
            fix=FIX,
        )
    try:
        got = {n: e.shape for n, (_, e) in checked_tensors(new).items()}
    except WiringError as err:
        raise WiringError(f"update refused: {err.message}", path=err.path or path,
                          fix=FIX) from None  # fmt: skip
    want = {n: e.shape for n, (_, e) in checked_tensors(served).items()}
    if not got:
        raise WiringError("update refused: no weight files", path=path, fix=FIX)
    problems = []
    missing = sorted(set(want) - set(got))
    unknown = sorted(set(got) - set(want))
    wrong = [f"{n} {list(got[n])} (served {list(want[n])})" for n in sorted(set(got) & set(want))
             if got[n] != want[n]]  # fmt: skip
    if missing:
        problems.append(f"{len(missing)} served tensors missing: {_names(missing)}")
    if unknown:
        problems.append(f"{len(unknown)} tensors the served target does not have: "
                        f"{_names(unknown)}")  # fmt: skip
    if wrong:
        problems.append(f"{len(wrong)} wrong shapes: {_names(wrong)}")
    if problems:
        raise WiringError("update refused: " + "; ".join(problems), path=path, fix=FIX)
