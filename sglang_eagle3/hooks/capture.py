"""Hooks that make the target capture exactly the declared taps (imported only inside SGLang).

Declared as (dotted target, hook, HookType) rows, applied through SGLang's HookRegistry.
"""

from __future__ import annotations

import functools
import os

from sglang.srt.plugins.hook_registry import HookType

from sglang_eagle3 import env_names
from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.plan import resolve_plan
from sglang_eagle3.layout.capture_plan import CapturePlan
from sglang_eagle3.layout.stock_note import stock_capture_note
from sglang_eagle3.log import get_logger

logger = get_logger()

DEEPSEEK_CAPTURE = (
    "sglang.srt.models.deepseek_v2.DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"
)


_PROCESS_PLAN: dict[str, CapturePlan] = {}


def _server_args():
    from sglang.srt.runtime_context import get_server_args

    return get_server_args()


@functools.cache
def _plan(num_layers: int, hidden_size: int) -> tuple[CapturePlan | None, str]:
    """The plan for this process (one server, one target): cached, resolved once."""
    draft = getattr(_server_args(), "speculative_draft_model_path", None)
    return resolve_plan(
        env_layout=os.environ.get(env_names.LAYOUT),
        draft_dir=draft,
        num_layers=num_layers,
        hidden_size=hidden_size,
    )


def deepseek_set_eagle3_layers_to_capture(original, self, layer_ids=None):
    original(self, layer_ids)
    if not self.pp_group.is_last_rank:
        return
    target = type(self).__name__
    if getattr(_server_args(), "enable_two_batch_overlap", False):
        raise WiringError(
            "two-batch overlap runs DeepSeek layers without hidden-state capture, so the "
            "drafter would get no taps",
            path="--enable-two-batch-overlap",
            fix="drop --enable-two-batch-overlap when serving an EAGLE-3 drafter",
        )
    n, hidden = self.config.num_hidden_layers, self.config.hidden_size
    plan, source = _plan(n, hidden)
    if plan is None:
        logger.info(stock_capture_note(target, layer_ids, n) + f" [{source}]")
        return
    self.model.layers_to_capture = list(plan.capture_indices)
    _PROCESS_PLAN["plan"] = plan
    logger.info(plan.log_line(target))


def process_plan() -> CapturePlan | None:
    """The plan this process's target applied (the target is built before the drafter)."""
    return _PROCESS_PLAN.get("plan")


HOOKS = [
    (DEEPSEEK_CAPTURE, deepseek_set_eagle3_layers_to_capture, HookType.AROUND),
]
