"""Hooks on SGLang's EAGLE-3 drafter: serve the network speculators trained, or refuse.

Imported only inside SGLang. Every training-time setting SGLang 0.5.23 would drop is either
honoured here (norm_before_residual, a trained embedding, input norms of later layers) or
refused at load with a WiringError naming the draft (tensors SGLang would skip, parameters
nothing fills). SGLang's MLA drafter (Eagle3DeepseekV2ForCausalLM) gets the same load-gap
refusal, trained-embedding rule and fc permutation. The rows are applied through SGLang's
HookRegistry by plugin.register().
"""

from __future__ import annotations

import os

import torch
from sglang.srt.plugins.hook_registry import HookType

from sglang_eagle3 import env_names
from sglang_eagle3.checkpoint.draft_weight_names import later_input_norm_layer, load_gaps
from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.capture import process_plan
from sglang_eagle3.hooks.fc_permute import permute_fc_blocks
from sglang_eagle3.log import get_logger

logger = get_logger()

EAGLE3 = "sglang.srt.models.llama_eagle3"
EAGLE3_LOAD = f"{EAGLE3}.LlamaForCausalLMEagle3.load_weights"
EAGLE3_SET_EMBED = f"{EAGLE3}.LlamaForCausalLMEagle3.set_embed"
EAGLE3_LAYER = f"{EAGLE3}.LlamaDecoderLayer.forward"
MLA = "sglang.srt.models.kimi_k25_eagle3"  # Eagle3DeepseekV2ForCausalLM, the MLA drafter
MLA_LOAD = f"{MLA}.Eagle3DeepseekV2ForCausalLM.load_weights"
MLA_SET_EMBED = f"{MLA}.Eagle3DeepseekV2ForCausalLM.set_embed"
NORM_FIX_ENV = env_names.NORM_BEFORE_RESIDUAL


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


def _renamed(weights, seen: list[str], renamed: list[str]):
    """Stream the checkpoint, recording names; a later layer's `input_layernorm` (speculators'
    stock Llama layers) goes to `hidden_norm`, the module SGLang's later layers normalise with,
    unless the checkpoint has that layer's `hidden_norm` itself (SGLang-trained drafts)."""
    held = []
    for name, tensor in weights:
        if later_input_norm_layer(name) is not None:
            held.append((name, tensor))  # a few vectors; decided once all names are known
            continue
        seen.append(name)
        yield name, tensor
    for name, tensor in held:
        alt = name.replace("input_layernorm", "hidden_norm")
        if alt not in seen:
            renamed.append(f"{name} -> {alt}")
            name = alt
        seen.append(name)
        yield name, tensor


def eagle3_load_weights(original, self, weights, *args, **kwargs):
    seen, renamed = [], []
    result = original(self, _renamed(weights, seen, renamed), *args, **kwargs)
    draft = getattr(self.config, "_name_or_path", None) or "the draft checkpoint"
    _keep_trained_embed(self, seen, draft)
    _refuse_load_gaps(self, seen, draft, mla=False)
    for line in renamed:
        logger.info("drafter: %s (speculators' later-layer input norm)", line)
    if getattr(self.config, "norm_before_residual", False):
        if os.environ.get(NORM_FIX_ENV, "1") == "0":  # to measure what stock SGLang serves
            logger.warning("drafter: norm_before_residual NOT honoured (%s=0)", NORM_FIX_ENV)
        else:
            self.model.layers[0].sglang_eagle3_norm_before_residual = True
            logger.info("drafter: norm_before_residual honoured (residual = hidden_norm(fc))")
    _permute_fc_for_plan(self.model)
    _maybe_install_fused_fc(self.model)
    return result


def mla_load_weights(original, self, weights, *args, **kwargs):
    """SGLang's MLA drafter: the same trained-embedding rule, load-gap refusal (its own names)
    and fc permutation; settings it cannot serve are refused. The fused fc kernel is not
    installed here, and the log says why (``MLA_NOT_COVERED``)."""
    draft = getattr(self.config, "_name_or_path", None) or "the draft checkpoint"
    _refuse_unserved_mla_flags(self.config, draft)
    seen: list[str] = []

    def recorded():
        for name, tensor in weights:
            seen.append(name)
            yield name, tensor

    result = original(self, recorded(), *args, **kwargs)
    _keep_trained_embed(self, seen, draft)
    _refuse_load_gaps(self, seen, draft, mla=True)
    _permute_fc_for_plan(self.model)
    from sglang_eagle3.ops.eagle3_fused_fc_patch import MLA_NOT_COVERED

    logger.info("drafter fc: %s", MLA_NOT_COVERED)
    return result


def _refuse_unserved_mla_flags(config, draft: str) -> None:
    """Eagle3MLAModel has no input_norm and keeps the un-normed fc output as the residual: a
    draft trained with norm_before_fc or norm_before_residual would be served otherwise."""
    eagle = getattr(config, "eagle_config", None) or {}
    eagle = eagle if isinstance(eagle, dict) else vars(eagle)
    for flag in ("norm_before_fc", "norm_before_residual"):
        if getattr(config, flag, False) or eagle.get(flag):
            raise WiringError(
                f"{flag} is true, but SGLang 0.5.23's Eagle3DeepseekV2ForCausalLM cannot "
                "serve it (no input_norm; its residual is the un-normed fc output)",
                path=draft,
                fix="retrain the MLA draft without it, or serve a Llama-style draft",
            )


def _keep_trained_embed(self, seen: list[str], draft: str) -> None:
    """Mark a draft trained with its own embedding, so set_embed keeps it; refuse one whose
    checkpoint lacks that embedding."""
    trained_embed = bool(getattr(self.config, "embed_requires_grad", False))
    has_embed = any(n.endswith("embed_tokens.weight") for n in seen)
    if trained_embed and not has_embed:
        raise WiringError(
            "the draft was trained with embed_requires_grad=true but its checkpoint has no "
            "embed_tokens.weight: SGLang would use the target's embedding instead",
            path=draft,
            fix="save the draft with its trained embedding (or retrain with it frozen)",
        )
    self.sglang_eagle3_own_embed = trained_embed


def _refuse_load_gaps(self, seen: list[str], draft: str, *, mla: bool) -> None:
    exempt = {"model.embed_tokens.weight"}  # SGLang shares the target's (see set_embed)
    if getattr(self, "load_lm_head_from_target", False):
        exempt.add("lm_head.weight")
    params = dict(self.named_parameters())
    dropped, missing = load_gaps(seen, params, exempt=exempt, mla=mla)
    if dropped or missing:
        parts = []
        if dropped:
            parts.append(f"tensors SGLang 0.5.23 would skip: {', '.join(dropped)}")
        if missing:
            parts.append(f"parameters no tensor fills: {', '.join(missing)}")
        raise WiringError(
            "the served drafter would differ from the trained one (" + "; ".join(parts) + ")",
            path=draft,
            fix="check the draft's tensor names against its config (speculators 0.9, "
            "SGLang-flat or Eagle3DeepseekV2), or convert it with python -m sglang_eagle3.launch",
        )


def _permute_fc_for_plan(model) -> None:
    plan = process_plan()
    if plan is not None and plan.needs_permutation:
        permute_fc_blocks(model, plan.fc_block_order)
        logger.info(
            "drafter fc: column blocks of taps %s moved to capture order (positions %s)",
            ", ".join(plan.taps),
            list(plan.fc_block_order),
        )


def eagle3_set_embed(original, self, embed):
    """SGLang's EAGLE-3 worker always swaps in the target's embedding; speculators trains the
    draft's own one when embed_requires_grad=true, so that one is kept."""
    if getattr(self, "sglang_eagle3_own_embed", False):
        logger.info("drafter: trained embedding kept (embed_requires_grad), target's not shared")
        return None
    return original(self, embed)


def _maybe_install_fused_fc(model) -> None:
    """The fused norm + concat + fc kernel, on Hopper/Blackwell only (after any permutation:
    it takes the norms over from the modules that permute_fc_blocks edits)."""
    if os.environ.get(env_names.FUSED_FC, "1") == "0" or not torch.cuda.is_available():
        return
    if torch.cuda.get_device_capability(model.fc.weight.device) < (9, 0):
        return
    from sglang_eagle3.ops.eagle3_fused_fc_patch import install_fused_fc

    if install_fused_fc(model):
        logger.info("drafter fc: eagle3_fused_fc installed (per-shape dispatch, CUDA >= sm_90)")


HOOKS = [
    (EAGLE3_LOAD, eagle3_load_weights, HookType.AROUND),
    (EAGLE3_SET_EMBED, eagle3_set_embed, HookType.AROUND),
    (EAGLE3_LAYER, eagle3_layer_forward, HookType.AROUND),
    (MLA_LOAD, mla_load_weights, HookType.AROUND),
    (MLA_SET_EMBED, eagle3_set_embed, HookType.AROUND),
]
