"""The hook that makes every target family capture exactly the declared taps (inside SGLang).

SGLang 0.5.23 switches capture on in one place for every family: the target's ModelRunner
calls `configure_aux_hidden_state_capture(model=...)`, which calls the model's
`set_eagle3_layers_to_capture(ids)` with that family's id rule. We wrap that one call: stock
SGLang sets itself up with its own in-range default, then the plan's capture indices are
written where that family's loop reads them (layout/families.py): the `layers_to_capture`
list, and for flag families the per-layer flags, cleared first (stock never clears them).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

from sglang.srt.plugins.hook_registry import HookType

from sglang_eagle3 import env_names
from sglang_eagle3.checkpoint.target_config import read_target
from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.plan import resolve_plan
from sglang_eagle3.hooks.rank_check import check_ranks_agree, plan_statement
from sglang_eagle3.layout.capture_plan import CapturePlan, check_family
from sglang_eagle3.layout.families import Family, Switch, family_for
from sglang_eagle3.layout.stock_note import stock_capture_note
from sglang_eagle3.log import get_logger

logger = get_logger()

CONFIGURE_CAPTURE = "sglang.srt.model_executor.model_runner.configure_aux_hidden_state_capture"
FLAG = "_is_layer_to_capture"

_PROCESS_PLAN: dict[str, CapturePlan] = {}


def _server_args():
    from sglang.srt.runtime_context import get_server_args

    return get_server_args()


@functools.cache
def _plan(
    num_layers: int, hidden_size: int, family: Family | None
) -> tuple[CapturePlan | None, str]:
    """The plan for this process (one server, one target): cached, resolved once."""
    draft = getattr(_server_args(), "speculative_draft_model_path", None)
    return resolve_plan(
        env_layout=os.environ.get(env_names.LAYOUT),
        draft_dir=draft,
        num_layers=num_layers,
        hidden_size=hidden_size,
        family=family,
    )


def _resolve(model, path: str):
    for name in path.split("."):
        model = getattr(model, name)
    return model


def _write(stack, family: Family, indices: Sequence[int]) -> None:
    stack.layers_to_capture = list(indices)
    layers = getattr(stack, "layers", None) or ()
    if family.switch is Switch.FLAGS or any(getattr(layer, FLAG, False) for layer in layers):
        for i, layer in enumerate(layers):
            setattr(layer, FLAG, i in indices)


def _world_cpu_group():
    from sglang.srt.distributed import parallel_state

    try:
        return parallel_state.get_world_group().cpu_group
    except AssertionError:  # no distributed world (a single process outside a server)
        return None


def _pipeline_stages() -> int:
    from sglang.srt.distributed import parallel_state

    try:
        return parallel_state.get_pp_group().world_size
    except AssertionError:
        return 1


def configure_aux_hidden_state_capture(original, *args, **kwargs):
    model = kwargs.get("model")
    if not kwargs.get("eagle_use_aux_hidden_state") or model is None:
        return original(*args, **kwargs)
    target = type(model).__name__
    config = getattr(model.config, "text_config", None) or model.config
    n, hidden = config.num_hidden_layers, config.hidden_size
    family = family_for(target)
    plan, source = _plan(n, hidden, family)
    predicted = _PROCESS_PLAN.get("predicted")
    if predicted is not None and predicted != plan:  # the drafter's fc was ordered for it
        raise WiringError(
            f"{target}: the drafter was loaded for capture plan {predicted.log_line(target)}, "
            f"but the target resolves {plan.log_line(target) if plan else 'stock capture'}",
            path=source,
            fix="pass --model-path as a local directory whose config.json is the model served",
        )
    # every rank passes here, pipeline stages included: agree before anyone diverges
    ranks = check_ranks_agree(plan_statement(plan, target), _world_cpu_group())
    if plan is None:
        ids = kwargs.get("eagle_aux_hidden_state_layer_ids")
        logger.info(stock_capture_note(family, target, ids, n) + f" [{source}]")
        return original(*args, **kwargs)
    tbo = bool(getattr(_server_args(), "enable_two_batch_overlap", False))
    family = check_family(family, target, path=plan.source, two_batch_overlap=tbo,
                          pipeline_stages=_pipeline_stages())  # fmt: skip
    # Stock sets itself up (capture switched on) with its own default, which is in range.
    result = original(*args, **{**kwargs, "eagle_aux_hidden_state_layer_ids": None})
    _write(_resolve(model, family.stack), family, plan.capture_indices)
    _PROCESS_PLAN["plan"] = plan
    logger.info(plan.log_line(target) + (f" [all {ranks} ranks agree]" if ranks > 1 else ""))
    return result


def process_plan() -> CapturePlan | None:
    """The plan this process's target applies. SGLang 0.5.23 loads the drafter before the
    target sets its capture up (init_attention_backends runs after both loads), so until then
    it is resolved from the target's config.json by the same cached function, and the capture
    set-up refuses to apply any other."""
    if "plan" in _PROCESS_PLAN:
        return _PROCESS_PLAN["plan"]
    model_path = getattr(_server_args(), "model_path", None)
    if not model_path or not Path(model_path).is_dir():
        return None  # no server, or a hub id: only the capture set-up can say
    target = read_target(model_path)
    plan = _plan(target.num_layers, target.hidden_size, target.family)[0]
    _PROCESS_PLAN["predicted"] = plan
    return plan


HOOKS = [
    (CONFIGURE_CAPTURE, configure_aux_hidden_state_capture, HookType.AROUND),
]
