"""Online weight updates of a served drafter, checked in full before SGLang writes a tensor.

SGLang 0.5.23 reloads a drafter through its ``load_weights`` for ``update_weights_from_tensor``,
``_from_distributed`` and ``_from_disk``. The first load records every checkpoint tensor's name
and shape; an update is then held in memory and refused, with nothing written, unless each of
its tensors is one the drafter was loaded with, at the same shape, and the fc's tensors (weight
and its quant scales) come together. A partial update may carry any other subset. A tensor the
drafter shares with the target (its embedding, or lm_head when SGLang takes the target's) is
left out: writing it would overwrite the target's weights.

The refusal reaches the caller as SGLang's own (success=False, message) answer: hooks on
SGLang's WeightUpdater turn it into one, so a bad update never ends the scheduler. A disk
update on an EAGLE-3 server loads the target only (hooks/disk_update.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

import torch
from sglang.srt.plugins.hook_registry import HookType

from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.fc_permute import LEGACY_FC_NORM
from sglang_eagle3.log import get_logger

logger = get_logger()

LOADED = "sglang_eagle3_loaded"  # on the drafter: {canonical name: (checkpoint name, shape)}
SHARED = "sglang_eagle3_shared"  # on the drafter: canonical names it shares with the target
_FC_TENSOR = re.compile(r"^fc\.\w+$")
UPDATER = "sglang.srt.model_executor.model_runner_components.weight_updater.WeightUpdater"
FIX = (
    "send tensors the drafter was loaded with (the names and shapes of its checkpoint), the "
    "fc's weight together with its scales; the old weights keep serving"
)


def canonical(name: str) -> str:
    """A drafter tensor's name as its checkpoint or SGLang's module tree may spell it."""
    name = name.removeprefix("model.")
    for legacy, new in LEGACY_FC_NORM.items():
        name = name.replace(legacy, new)
    return name


def loaded_before(model) -> bool:
    return LOADED in vars(model)


def remember(model, loaded: dict[str, tuple[str, tuple[int, ...]]]) -> None:
    """Record the first load: {canonical name: (name as loaded, shape)}."""
    vars(model)[LOADED] = dict(loaded)


def mark_shared(model, name: str) -> None:
    vars(model).setdefault(SHARED, set()).add(canonical(name))


def checked_update(
    model, weights: Iterable[tuple[str, torch.Tensor]], draft: str
) -> list[tuple[str, torch.Tensor]]:
    """The update's tensors under the names the first load used, once all of them are checked;
    raises WiringError (nothing written) otherwise."""
    loaded: dict = vars(model)[LOADED]
    shared: set = vars(model).get(SHARED, set())
    if getattr(model, "load_lm_head_from_target", False):
        shared = shared | {"lm_head.weight"}
    unknown, wrong, kept, left_out = [], [], [], []
    for name, tensor in weights:  # held: nothing is written before every tensor is seen
        key = canonical(name)
        if key not in loaded:
            unknown.append(name)
        elif tuple(tensor.shape) != loaded[key][1]:
            wrong.append(f"{name} {list(tensor.shape)} (served {list(loaded[key][1])})")
        elif key in shared:
            left_out.append(name)
        else:
            kept.append((loaded[key][0], tensor))
    problems = []
    if unknown:
        problems.append(f"tensors the served drafter does not have: {', '.join(unknown)}")
    if wrong:
        problems.append(f"wrong shapes: {', '.join(wrong)}")
    fc_all = {k for k in loaded if _FC_TENSOR.match(k) and k not in shared}
    fc_sent = {canonical(n) for n, _ in kept if _FC_TENSOR.match(canonical(n))}
    if fc_sent and fc_sent != fc_all:
        problems.append(
            f"the fc's tensors change together: sent {sorted(fc_sent)}, "
            f"missing {sorted(fc_all - fc_sent)}"
        )
    if problems:
        raise WiringError("weight update refused: " + "; ".join(problems), path=draft, fix=FIX)
    for name in left_out:
        logger.info("drafter update: %s left out (shared with the target; not overwritten)", name)
    return kept


def _answer_refusal(original, self, *args, **kwargs):
    """SGLang's weight-update entry points: a WiringError (raised before any write) becomes
    SGLang's (False, message) answer instead of an exception that ends the scheduler."""
    try:
        return original(self, *args, **kwargs)
    except WiringError as err:
        logger.error("%s", err)
        return False, str(err)


def _hook(name: str):
    @functools.wraps(_answer_refusal)
    def hook(original, self, *args, **kwargs):
        return _answer_refusal(original, self, *args, **kwargs)

    hook.__name__ = f"refuse_{name}"
    return hook


# update_weights_from_disk: hooks/disk_update.py (it also restores a failed load)
UPDATE_ENTRY_POINTS = ("update_weights_from_tensor", "load_weights_from_distributed")
HOOKS = [(f"{UPDATER}.{n}", _hook(n), HookType.AROUND) for n in UPDATE_ENTRY_POINTS]
