"""A tune result saved with --json, read back for another traffic mix (--tune-result): only
for the target and drafter it was measured on.

The identity is cheap to recompute: the drafter's weights digest (checkpoint/draft_identity.py,
a drafter is small) and, for the target, the digest of its config.json with the names and
sizes of its weight files (a target's bytes can be hundreds of GB).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sglang_eagle3.checkpoint.draft_identity import WEIGHT_SUFFIXES, draft_weights_sha256
from sglang_eagle3.errors import WiringError
from sglang_eagle3.tune.cost import CostModel, Measured, fit
from sglang_eagle3.tune.grid import Setting
from sglang_eagle3.tune.rounds import ArrivalRound, fit_arrivals

NEEDED = ("identity", "model", "profile", "measured", "timing", "acceptance_source")


def target_digest(target: str | Path) -> str:
    folder = Path(target)
    h = hashlib.sha256((folder / "config.json").read_bytes())
    for p in sorted(folder.iterdir()):
        if p.suffix in WEIGHT_SUFFIXES:
            h.update(f"\0{p.name}\0{p.stat().st_size}".encode())
    return h.hexdigest()


def identity(target: str | Path, draft: str | Path) -> dict:
    return {"target": str(Path(target).resolve()), "target_sha256": target_digest(target),
            "draft": str(Path(draft).resolve()),
            "draft_weights_sha256": draft_weights_sha256(draft)}  # fmt: skip


def load(path: Path, target: str | Path, draft: str | Path) -> dict:
    """The saved result, checked to be this target's and this drafter's; one WiringError."""
    fix = ("run the tuner on this target and drafter (its --json output is the file), or give "
           "the --model-path and --speculative-draft-model-path it was measured with")  # fmt: skip
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WiringError(f"cannot read the tune result: {err}", path=str(path),
                          fix="give the file `python -m sglang_eagle3.tune --json` "
                          "printed") from None  # fmt: skip
    missing = [k for k in NEEDED if not isinstance(result, dict) or k not in result]
    if missing:
        raise WiringError(f"not a tune result of this version: no {', '.join(missing)}",
                          path=str(path), fix="run the tuner again with --json")  # fmt: skip
    mine, saved = identity(target, draft), result["identity"]
    for key, name, what in (("target_sha256", "target", "target"),
                            ("draft_weights_sha256", "draft", "drafter")):  # fmt: skip
        if saved.get(key) != mine[key]:
            raise WiringError(
                f"this tune result was measured on another {what} ({saved.get(name)}), not "
                f"{mine[name]}: its costs and acceptance do not hold here",
                path=str(path), fix=fix)  # fmt: skip
    return result


def model_of(result: dict) -> CostModel:
    return CostModel.from_dict(result["model"])


def profile_of(result: dict) -> dict[Setting, float]:
    return {Setting(p["steps"], p["topk"], p["draft_tokens"]): p["accept_length"]
            for p in result["profile"]}  # fmt: skip


def measured_of(result: dict) -> list[Measured]:
    return [Measured(**m) for m in result["measured"]]


def arrival_rounds_of(result: dict) -> list[ArrivalRound]:
    """The trace-like rounds the tuner timed (none in a result from before them)."""
    fields = ArrivalRound.__dataclass_fields__
    return [ArrivalRound(**{k: tuple(v) if k == "lengths" else v for k, v in r.items()
                            if k in fields}) for r in result.get("arrival_rounds", [])]  # fmt: skip


def refit_of(result: dict) -> CostModel:
    """The model fitted again to the result's own timings by this version's fit: a result
    saved before a change to the cost model, re-read with the change and nothing re-timed."""
    return fit_arrivals(fit(measured_of(result)), arrival_rounds_of(result))
