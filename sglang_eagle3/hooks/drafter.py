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
from sglang_eagle3.hooks import drafter_update as update
from sglang_eagle3.hooks.capture import process_plan
from sglang_eagle3.hooks.fc_permute import FcPermutation, fc_geometry, permute_fc_stream
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


def _renamed(weights, seen: list[str], renamed: list[str], loaded: dict):
    """Stream the checkpoint, recording names and shapes; a later layer's `input_layernorm`
    (speculators' stock Llama layers) goes to `hidden_norm`, the module SGLang's later layers
    normalise with, unless the checkpoint has that layer's `hidden_norm` itself (SGLang-trained
    drafts)."""
    held = []
    for name, tensor in weights:
        if later_input_norm_layer(name) is not None:
            held.append((name, tensor))  # a few vectors; decided once all names are known
            continue
        seen.append(name)
        loaded[update.canonical(name)] = (name, tuple(tensor.shape))
        yield name, tensor
    for name, tensor in held:
        alt = name.replace("input_layernorm", "hidden_norm")
        final = name if alt in seen else alt
        if final == alt:
            renamed.append(f"{name} -> {alt}")
        seen.append(final)
        loaded[update.canonical(name)] = (final, tuple(tensor.shape))
        yield final, tensor


def _draft(self) -> str:
    return getattr(self.config, "_name_or_path", None) or "the draft checkpoint"


def _load(original, self, weights, args, kwargs, *, first_stream, after_first):
    """Every load path alike: the first load streams; an update is checked whole first. Either
    way the fc input is permuted in the stream, before SGLang writes it."""
    draft = _draft(self)
    first = not update.loaded_before(self)
    loaded: dict = {}
    if first:
        stream = first_stream(weights, loaded)
    else:
        stream = update.checked_update(self, weights, draft)
    perm = _fc_permutation(self.model, draft)
    if perm is not None:
        stream = permute_fc_stream(stream, perm)
        if not first:  # a quant tensor it cannot permute is refused before anything is written
            stream = list(stream)
    result = original(self, stream, *args, **kwargs)
    if first:
        after_first(loaded)
        update.remember(self, loaded)
    else:
        logger.info("drafter: weight update loaded and re-wired (%d tensors)", len(stream))
    return result


def eagle3_load_weights(original, self, weights, *args, **kwargs):
    seen, renamed = [], []
    draft = _draft(self)

    def after_first(loaded):
        _keep_trained_embed(self, seen, draft)
        _refuse_load_gaps(self, seen, draft, mla=False)
        for line in renamed:
            logger.info("drafter: %s (speculators' later-layer input norm)", line)

    result = _load(original, self, weights, args, kwargs, after_first=after_first,
                   first_stream=lambda w, loaded: _renamed(w, seen, renamed, loaded))  # fmt: skip
    if getattr(self.config, "norm_before_residual", False):
        if os.environ.get(NORM_FIX_ENV, "1") == "0":  # to measure what stock SGLang serves
            logger.warning("drafter: norm_before_residual NOT honoured (%s=0)", NORM_FIX_ENV)
        else:
            self.model.layers[0].sglang_eagle3_norm_before_residual = True
            logger.info("drafter: norm_before_residual honoured (residual = hidden_norm(fc))")
    _maybe_install_fused_fc(self.model)
    return result


def mla_load_weights(original, self, weights, *args, **kwargs):
    """SGLang's MLA drafter: the same trained-embedding rule, load-gap refusal (its own names)
    and fc permutation; settings it cannot serve are refused. The fused fc kernel is not
    installed here, and the log says why (``MLA_NOT_COVERED``)."""
    draft = _draft(self)
    _refuse_unserved_mla_flags(self.config, draft)
    seen: list[str] = []

    def recorded(weights, loaded):
        for name, tensor in weights:
            seen.append(name)
            loaded[update.canonical(name)] = (name, tuple(tensor.shape))
            yield name, tensor

    def after_first(loaded):
        _keep_trained_embed(self, seen, draft)
        _refuse_load_gaps(self, seen, draft, mla=True)

    result = _load(original, self, weights, args, kwargs, first_stream=recorded,
                   after_first=after_first)  # fmt: skip
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


def _fc_permutation(model, draft: str) -> FcPermutation | None:
    """How this process's capture plan reorders the fc input, or None when it does not."""
    plan = process_plan()
    if plan is None or not plan.needs_permutation:
        return None
    width, method = fc_geometry(model.fc)
    if not vars(model).get("_sglang_eagle3_fc_logged"):
        vars(model)["_sglang_eagle3_fc_logged"] = True
        logger.info(
            "drafter fc: column blocks of taps %s moved to capture order (positions %s), as "
            "the weights load (quant method: %s)",
            ", ".join(plan.taps),
            list(plan.fc_block_order),
            method,
        )
    return FcPermutation(tuple(plan.fc_block_order), width, method, draft)


def eagle3_set_embed(original, self, embed):
    """SGLang's EAGLE-3 worker always swaps in the target's embedding; speculators trains the
    draft's own one when embed_requires_grad=true, so that one is kept."""
    if getattr(self, "sglang_eagle3_own_embed", False):
        logger.info("drafter: trained embedding kept (embed_requires_grad), target's not shared")
        return None
    before = self.model.embed_tokens.weight
    result = original(self, embed)
    if self.model.embed_tokens.weight is not before:  # now the target's: updates leave it out
        update.mark_shared(self, "embed_tokens.weight")
    return result


def fused_fc_decision(weight: torch.Tensor) -> tuple[bool, str]:
    """(install, why) for the fused norm + concat + fc kernel, from the fc weight's own device:
    a GPU host may serve the drafter from CPU (--device cpu, offload)."""
    if os.environ.get(env_names.FUSED_FC_TEST_INSTALL) == "1":
        return True, f"{env_names.FUSED_FC_TEST_INSTALL}=1 (test only; PyTorch path off sm_90+)"
    if os.environ.get(env_names.FUSED_FC, "1") == "0":
        return False, f"{env_names.FUSED_FC}=0"
    device = weight.device
    if device.type != "cuda":
        return False, f"the fc weight is on {device}, not a CUDA device"
    capability = torch.cuda.get_device_capability(device)
    if capability < (9, 0):
        return False, f"{device} is sm_{capability[0]}{capability[1]}, below sm_90"
    return True, f"{device} is sm_{capability[0]}{capability[1]} (per-shape dispatch)"


def _maybe_install_fused_fc(model) -> None:
    """Install the fused fc block where it can run, and drop its cached weights after every
    load: an update writes the norms in place, which their version counters do not show."""
    from sglang_eagle3.ops.eagle3_fused_fc_patch import forget_cached_weights, install_fused_fc

    forget_cached_weights(model)
    install, why = fused_fc_decision(model.fc.weight)
    if install and install_fused_fc(model):
        logger.info("drafter fc: eagle3_fused_fc installed: %s", why)
    elif not install and not vars(model).get("_sglang_eagle3_fused_logged"):
        vars(model)["_sglang_eagle3_fused_logged"] = True
        logger.info("drafter fc: eagle3_fused_fc not installed: %s", why)


HOOKS = [
    (EAGLE3_LOAD, eagle3_load_weights, HookType.AROUND),
    (EAGLE3_SET_EMBED, eagle3_set_embed, HookType.AROUND),
    (EAGLE3_LAYER, eagle3_layer_forward, HookType.AROUND),
    (MLA_LOAD, mla_load_weights, HookType.AROUND),
    (MLA_SET_EMBED, eagle3_set_embed, HookType.AROUND),
]
