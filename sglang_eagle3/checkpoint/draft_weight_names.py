"""Which draft tensors SGLang 0.5.23's EAGLE-3 drafter really loads (pure: no torch, no sglang).

The one copy of SGLang's load-time name mapping: the plugin's load check and the doctor's
weight loader (draft_weights) both read names through it.

`LlamaForCausalLMEagle3.load_weights` skips, without a word, every tensor whose name matches no
parameter, and leaves parameters no tensor matched as they were allocated. Both mean the server
runs a network other than the one trained; the plugin checks both at load and refuses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# llama_eagle3.py load_weights: legacy names, then the stacked (fused) projections
LEGACY_NAMES = {
    "midlayer": "layers.0",
    "aux_norm_low": "fc_norm.0",
    "aux_norm_mid": "fc_norm.1",
    "aux_norm_high": "fc_norm.2",
}
STACKED = (
    (".qkv_proj", ".q_proj"),
    (".qkv_proj", ".k_proj"),
    (".qkv_proj", ".v_proj"),
    (".gate_up_proj", ".gate_proj"),
    (".gate_up_proj", ".up_proj"),
)
VOCAB_MAPS = ("d2t", "t2d")  # read into hot_token_id / ignored on purpose
# Saved by some trainers, never needed to serve: RoPE caches (recomputed) and speculators'
# frozen copies of the verifier's head and final norm (serving uses the target's own).
NOT_SERVED = ("rotary_emb.inv_freq", "verifier_lm_head.", "verifier_norm.")
# kimi_k25_eagle3.py (Eagle3DeepseekV2ForCausalLM) load_weights: layers.0 -> midlayer, all but
# lm_head under model., gate/up stacked, and q_a_proj + kv_a_proj_with_mqa concatenated into
# fused_qkv_a_proj_with_mqa once both arrived (a lone half is held and never loaded)
MLA_STACKED = STACKED[3:]
MLA_FUSED_A = ("q_a_proj", "kv_a_proj_with_mqa")
MLA_FUSED_PARAM = "fused_qkv_a_proj_with_mqa"
_LATER_INPUT_NORM = re.compile(r"(?:model\.)?layers\.(\d+)\.input_layernorm\.weight")


def legacy_renamed(name: str) -> str:
    """``name`` after SGLang's legacy renames (SpecForge's ``midlayer``, ``aux_norm_*``)."""
    for legacy, new in LEGACY_NAMES.items():
        if legacy in name:
            name = name.replace(legacy, new)
    return name


def not_served(name: str) -> bool:
    """A tensor serving never reads: a RoPE cache or speculators' frozen verifier copies."""
    return any(v in name for v in NOT_SERVED)


def sglang_param_name(name: str, params: Iterable[str] | set[str]) -> str | None:
    """The parameter SGLang loads checkpoint tensor ``name`` into, or None when it drops it."""
    params = params if isinstance(params, set) else set(params)
    name = legacy_renamed(name)
    for fused, part in STACKED:
        if part in name:
            name = name.replace(part, fused)
            break
    for candidate in (name, f"model.{name}"):
        if candidate in params:
            return candidate
    return None


def sglang_mla_param_name(name: str, params: Iterable[str] | set[str]) -> str | None:
    """The parameter SGLang's MLA drafter loads ``name`` into, or None when it drops it."""
    params = params if isinstance(params, set) else set(params)
    name = re.sub(r"^layers\.0\.", "midlayer.", name)
    if not name.startswith("lm_head."):
        name = f"model.{name}"
    for fused, part in MLA_STACKED:
        if part in name and name.replace(part, fused) in params:
            return name.replace(part, fused)
    for part in MLA_FUSED_A:
        if part in name:
            name = name.replace(part, MLA_FUSED_PARAM)
            break
    return name if name in params else None


def _mla_partner(name: str) -> str | None:
    """The other half of a fused MLA a-projection tensor, None for any other tensor."""
    q, kv = MLA_FUSED_A
    if kv in name:
        return name.replace(kv, q)
    return name.replace(q, kv) if q in name else None


def later_input_norm_layer(name: str) -> int | None:
    """The layer index of ``layers.I.input_layernorm.weight`` for I >= 1, else None.

    speculators' decoder layers after the first are stock Llama layers: their input norm is
    ``input_layernorm``. SGLang's EAGLE-3 layers after the first normalise their input with
    ``hidden_norm`` (fused with the residual add) and never call ``input_layernorm``."""
    m = _LATER_INPUT_NORM.fullmatch(name)
    if m is None or int(m.group(1)) < 1:
        return None
    return int(m.group(1))


def unused_by_sglang(param: str) -> bool:
    """Parameters SGLang allocates but its EAGLE-3 forward never reads."""
    return later_input_norm_layer(param) is not None


def load_gaps(
    names: Iterable[str],
    params: Iterable[str],
    *,
    exempt: Iterable[str] = (),
    mla: bool = False,
) -> tuple[list[str], list[str]]:
    """(checkpoint tensors SGLang drops, parameters nothing loads), both sorted.

    ``exempt``: parameters filled later on purpose (the target's embedding, a shared lm_head).
    ``mla``: the names of SGLang's MLA drafter (Eagle3DeepseekV2ForCausalLM), not Llama's."""
    params, names = set(params), list(names)
    present = set(names)
    loaded, dropped = set(), []
    for name in names:
        if not_served(name) or any(v in name for v in VOCAB_MAPS):
            continue
        partner = _mla_partner(name) if mla else None
        if partner is not None and partner not in present:
            dropped.append(name)  # held for its other half, which never comes
            continue
        target = (sglang_mla_param_name if mla else sglang_param_name)(name, params)
        if target is None:
            dropped.append(name)
        else:
            loaded.add(target)
    skip = set(exempt)
    missing = [p for p in params if p not in loaded and p not in skip and not unused_by_sglang(p)]
    return sorted(dropped), sorted(missing)
