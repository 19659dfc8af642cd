"""Route an SGLang EAGLE-3 drafter's ``input_norm -> fc_norm -> fc`` block through
``eagle3_fused_fc``.

SGLang 0.5.23 ``srt/models/llama_eagle3.py`` ``LlamaModel.forward`` (L237-247) does::

    hidden_states = forward_batch.spec_info.hidden_states      # [T, K*H_in], packed taps
    if hidden_states.shape[-1] != embeds.shape[-1]:
        if self.input_norm is not None:
            hidden_states = self.input_norm(hidden_states)
        if self.fc_norm is not None:
            chunks = hidden_states.chunk(self.num_aux_hidden_states, dim=-1)
            hidden_states = torch.cat(
                [norm(chunk) for norm, chunk in zip(self.fc_norm, chunks)], dim=-1
            )
        hidden_states = self.fc(hidden_states)

``install_fused_fc`` keeps that forward untouched: it shadows ``input_norm`` / ``fc_norm`` with
``None`` in the instance ``__dict__`` (so the forward skips them) while the modules stay
registered in ``_modules`` (parameter names, ``load_weights`` and ``state_dict`` unchanged), and
gives ``fc`` an instance ``forward`` that computes the whole block from the raw packed taps:
the fused kernel where ``use_fused`` allows it, otherwise ``eagle3_fc_block`` (SGLang's own
modules, so the CPU path is bit-identical to stock SGLang).

The drafter's load hook permutes the fc input in the weight stream (``fc_permute``), so a
reload writes the registered modules directly whether or not this patch shadows them; it calls
``forget_cached_weights`` after every load.
"""

from __future__ import annotations

import torch

from sglang_eagle3.ops.eagle3_fused_fc import eagle3_fused_fc
from sglang_eagle3.ops.eagle3_fused_fc_dispatch import use_fused

# Why SGLang's MLA drafter (kimi_k25_eagle3.Eagle3MLAModel) keeps its own fc block: there the
# fc is a tensor-parallel ColumnParallelLinear (returns (out, bias), holds a weight shard, may
# carry a quant method) followed by a multimem all-gather; this patch replaces an nn.Linear.
MLA_NOT_COVERED = (
    "eagle3_fused_fc not installed on Eagle3DeepseekV2ForCausalLM: its fc is a tensor-parallel "
    "ColumnParallelLinear, the kernel's patch covers LlamaForCausalLMEagle3's nn.Linear block; "
    "fc_norm + fc run as SGLang's own modules"
)
_FLAG = "_eagle3_fused_fc_installed"
_CACHE = "_eagle3_fused_fc_tap_weights"


def _inner(model: torch.nn.Module) -> torch.nn.Module:
    """The module that owns ``fc`` (``LlamaForCausalLMEagle3.model``, or the model itself)."""
    inner = getattr(model, "model", None)
    return inner if inner is not None and hasattr(inner, "fc") else model


def _norm_modules(m: torch.nn.Module):
    """The real (registered) norms, whether or not ``install_fused_fc`` shadowed them."""
    return m._modules.get("input_norm"), m._modules.get("fc_norm")


def eagle3_fc_block(model: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    """SGLang's fc block on packed taps [T, K*H_in] -> [T, hidden], with SGLang's own modules.

    The caller has already checked SGLang's condition (width != embedding width)."""
    m = _inner(model)
    input_norm, fc_norm = _norm_modules(m)
    if input_norm is not None:
        hidden_states = input_norm(hidden_states)
    if fc_norm is not None:
        chunks = hidden_states.chunk(m.num_aux_hidden_states, dim=-1)
        pairs = zip(fc_norm, chunks, strict=True)
        hidden_states = torch.cat([norm(c) for norm, c in pairs], dim=-1)
    # the class forward: an installed instance forward would recurse into the fused path
    return type(m.fc).forward(m.fc, hidden_states)


def _plain_rms(norm: torch.nn.Module) -> float | None:
    """eps when ``norm`` is a plain weighted RMSNorm the kernel reproduces, else None."""
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    plain = (
        isinstance(getattr(norm, "weight", None), torch.Tensor)
        and not getattr(norm, "cast_x_before_out_mul", False)
        and getattr(norm, "variance_size_override", None) is None
        and getattr(norm, "override_orig_dtype", None) is None
    )
    return float(eps) if plain and eps is not None else None


def _block_norm(m: torch.nn.Module) -> tuple[str, float] | None:
    """(norm mode, eps) the kernel can run for this block, or None (use SGLang's modules)."""
    input_norm, fc_norm = _norm_modules(m)
    eps = [_plain_rms(n) for n in ([input_norm] if input_norm is not None else [])]
    eps += [_plain_rms(n) for n in (fc_norm if fc_norm is not None else [])]
    if any(e is None for e in eps) or len(set(eps)) > 1:
        return None
    mode = {(False, False): "none", (True, False): "before_fc"}.get(
        (input_norm is not None, fc_norm is not None),
        "both" if input_norm is not None else "per_tap",
    )
    return mode, (eps[0] if eps else 1e-6)


def _tap_weights(m: torch.nn.Module) -> torch.Tensor:
    """fc_norm weights stacked [K, H_in], cached until a weight is replaced or written to."""
    weights = [n.weight for n in m._modules["fc_norm"]]
    key = tuple((w.data_ptr(), w._version, w.dtype, w.device) for w in weights)
    cached = m.__dict__.get(_CACHE)
    if cached is None or cached[0] != key:
        cached = (key, torch.stack([w.detach() for w in weights]).contiguous())
        m.__dict__[_CACHE] = cached
    return cached[1]


def forget_cached_weights(model: torch.nn.Module) -> None:
    """Drop the stacked per-tap norm weights: SGLang's loaders write ``param.data``, which
    leaves the version counter that ``_tap_weights`` keys on unchanged."""
    _inner(model).__dict__.pop(_CACHE, None)


def fused_fc_forward(m: torch.nn.Module, packed: torch.Tensor) -> torch.Tensor:
    """The installed fc forward: packed raw taps [T, K*H_in] -> [T, hidden]."""
    k = m.num_aux_hidden_states
    spec = _block_norm(m)
    tokens = packed.numel() // max(1, packed.shape[-1])
    hidden_in = packed.shape[-1] // k
    if spec is None or not use_fused(tokens, hidden_in, k, spec[0], packed.device):
        return eagle3_fc_block(m, packed)
    norm, eps = spec
    input_norm, _ = _norm_modules(m)
    return eagle3_fused_fc(
        packed,
        m.fc.weight,
        norm=norm,
        norm_weight=input_norm.weight if input_norm is not None else None,
        norm_weights=_tap_weights(m) if norm in ("per_tap", "both") else None,
        eps=eps,
        bias=m.fc.bias,
        num_taps=k,
        backend="triton",
    )


def install_fused_fc(model: torch.nn.Module) -> bool:
    """Make ``model``'s fc block run through ``eagle3_fused_fc``. Idempotent; returns True when
    it changed something (False: already installed)."""
    m = _inner(model)
    if _FLAG in m.__dict__:
        return False
    shadowed = [n for n in ("input_norm", "fc_norm") if m._modules.get(n) is not None]
    for name in shadowed:  # instance-dict shadows: lookup finds them before nn.Module.__getattr__
        object.__setattr__(m, name, None)
    m.fc.__dict__["forward"] = lambda packed: fused_fc_forward(m, packed)
    m.__dict__[_FLAG] = True
    return True
