"""Hooks that make SGLang capture exactly the declared taps (imported only inside SGLang).

Declared as (dotted target, hook, HookType) rows, applied through SGLang's HookRegistry.
"""

from __future__ import annotations

import functools
import os

import torch
from sglang.srt.plugins.hook_registry import HookType

from sglang_eagle3.capture_plan import CapturePlan, resolve_plan
from sglang_eagle3.errors import WiringError
from sglang_eagle3.fc_permute import permute_fc_blocks
from sglang_eagle3.log import get_logger
from sglang_eagle3.stock_note import stock_capture_note

logger = get_logger()

DEEPSEEK_CAPTURE = (
    "sglang.srt.models.deepseek_v2.DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"
)
EAGLE3_LOAD = "sglang.srt.models.llama_eagle3.LlamaForCausalLMEagle3.load_weights"
EAGLE3_LAYER = "sglang.srt.models.llama_eagle3.LlamaDecoderLayer.forward"
NORM_FIX_ENV = "SGLANG_EAGLE3_NORM_BEFORE_RESIDUAL"


_PROCESS_PLAN: dict[str, CapturePlan] = {}


def _server_args():
    from sglang.srt.runtime_context import get_server_args

    return get_server_args()


@functools.cache
def _plan(num_layers: int, hidden_size: int) -> tuple[CapturePlan | None, str]:
    """The plan for this process (one server, one target): cached, resolved once."""
    draft = getattr(_server_args(), "speculative_draft_model_path", None)
    return resolve_plan(
        env_layout=os.environ.get("SGLANG_EAGLE3_LAYOUT"),
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


def eagle3_layer_forward(original, self, positions, embeds, hidden_states, forward_batch, residual):
    """SGLang 0.5.23's first draft layer, with speculators' `norm_before_residual` honoured.

    Stock SGLang keeps the un-normed fc output as the residual; speculators (default
    norm_before_residual=True) trains with residual = hidden_norm(fc output).
    """
    if not (self.is_input_layer and getattr(self, "sglang_eagle3_norm_before_residual", False)):
        return original(self, positions, embeds, hidden_states, forward_batch, residual)
    hidden_states = self.hidden_norm(hidden_states)
    residual = hidden_states
    hidden_states = torch.cat([self.input_layernorm(embeds), hidden_states], dim=-1)
    hidden_states = self.self_attn(
        positions=positions, hidden_states=hidden_states, forward_batch=forward_batch
    )
    hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
    return self.mlp(hidden_states), residual


def eagle3_load_weights(result, self, *args, **kwargs):
    if getattr(self.config, "norm_before_residual", False):
        if os.environ.get(NORM_FIX_ENV, "1") == "0":  # to measure what stock SGLang serves
            logger.warning("drafter: norm_before_residual NOT honoured (%s=0)", NORM_FIX_ENV)
        else:
            self.model.layers[0].sglang_eagle3_norm_before_residual = True
            logger.info("drafter: norm_before_residual honoured (residual = hidden_norm(fc))")
    # The target model (and its capture hook) is built before the draft worker loads.
    plan = _PROCESS_PLAN.get("plan")
    if plan is not None and plan.needs_permutation:
        permute_fc_blocks(self.model, plan.fc_block_order)
        logger.info(
            "drafter fc: column blocks of taps %s moved to capture order (positions %s)",
            ", ".join(plan.taps),
            list(plan.fc_block_order),
        )
    _maybe_install_fused_fc(self.model)
    return result


def _maybe_install_fused_fc(model) -> None:
    """The fused norm + concat + fc kernel, on Hopper/Blackwell only (after any permutation:
    it takes the norms over from the modules that permute_fc_blocks edits)."""
    if os.environ.get("SGLANG_EAGLE3_FUSED_FC", "1") == "0" or not torch.cuda.is_available():
        return
    if torch.cuda.get_device_capability(model.fc.weight.device) < (9, 0):
        return
    from sglang_eagle3.fused_fc_patch import install_fused_fc

    if install_fused_fc(model):
        logger.info("drafter fc: eagle3_fused_fc installed (per-shape dispatch, CUDA >= sm_90)")


HOOKS = [
    (DEEPSEEK_CAPTURE, deepseek_set_eagle3_layers_to_capture, HookType.AROUND),
    (EAGLE3_LOAD, eagle3_load_weights, HookType.AFTER),
    (EAGLE3_LAYER, eagle3_layer_forward, HookType.AROUND),
]
