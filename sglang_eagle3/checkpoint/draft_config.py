"""The numbers a draft forward needs, read from a draft's config.json (any supported format).

speculators keeps the Llama fields in ``transformer_layer_config`` and the EAGLE-3 flags at top
level; SGLang-flat and SpecForge configs keep everything at top level (``norm_before_fc`` may
sit in ``eagle_config``). The EAGLE-3 flags are read by ``draft_spec``'s field readers, so the
doctor, the converter and this forward agree on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sglang_eagle3.checkpoint.config_json import read_config_json
from sglang_eagle3.checkpoint.draft_spec import DraftFields, flat_fields, speculators_fields
from sglang_eagle3.errors import WiringError

_ACTS = {"silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu}


@dataclass(frozen=True)
class DraftConfig:
    path: str  # the config.json it came from (for error messages)
    format: str  # "speculators" or "flat"
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_layers: int
    rms_norm_eps: float
    hidden_act: str
    vocab_size: int  # target vocabulary (embedding rows)
    draft_vocab_size: int
    target_hidden_size: int
    num_aux: int
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_output: bool = False
    norm_before_residual: bool = False
    tie_word_embeddings: bool = False
    hf: Any = field(default=None, repr=False, compare=False)  # transformers config (rotary)

    def __post_init__(self) -> None:
        for name in (
            "hidden_size",
            "intermediate_size",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "num_layers",
            "vocab_size",
            "draft_vocab_size",
            "target_hidden_size",
            "num_aux",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise WiringError(f"{name} must be an int >= 1, got {value!r}", path=self.path)
        if self.num_heads % self.num_kv_heads:
            raise WiringError(
                f"num_attention_heads {self.num_heads} is not a multiple of "
                f"num_key_value_heads {self.num_kv_heads}",
                path=self.path,
            )
        if self.hidden_act not in _ACTS:
            raise WiringError(
                f"hidden_act {self.hidden_act!r} is not supported (only {sorted(_ACTS)})",
                path=self.path,
            )
        if self.norm_before_fc and self.fc_norm:
            raise WiringError(
                "norm_before_fc and fc_norm are both set; they are mutually exclusive",
                path=self.path,
            )
        if not self.rms_norm_eps > 0:
            raise WiringError(f"rms_norm_eps must be > 0, got {self.rms_norm_eps}", path=self.path)

    def act(self, x: torch.Tensor) -> torch.Tensor:
        return _ACTS[self.hidden_act](x)

    def rotary_embedding(self) -> torch.nn.Module:
        """transformers' Llama rotary table for this config (default, llama3, yarn ...)."""
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        if self.hf is None:
            raise WiringError("this DraftConfig carries no transformers config", path=self.path)
        return LlamaRotaryEmbedding(self.hf)


def load_draft_config(draft_dir: str | Path) -> DraftConfig:
    """Parse ``draft_dir/config.json``; every problem is a WiringError naming the file."""
    where = str(Path(draft_dir) / "config.json")
    cfg = read_config_json(
        draft_dir,
        missing="no config.json: not a draft checkpoint directory",
        fix="point at the directory holding the draft's config.json and weights",
    )
    if "speculators_model_type" in cfg:
        fields: DraftFields = speculators_fields(cfg, where)
        llama = cfg.get("transformer_layer_config")
        fmt = "speculators"
    else:
        fields, llama, fmt = flat_fields(cfg, where), cfg, "flat"
    if not isinstance(llama, dict):
        raise WiringError("transformer_layer_config must be an object", path=where)
    conf = _hf_config(llama, where)
    numbers = _llama_numbers(conf, where)
    return DraftConfig(
        path=where,
        format=fmt,
        **numbers,
        draft_vocab_size=fields.draft_vocab or numbers["vocab_size"],
        target_hidden_size=fields.declared_target_hidden,
        num_aux=fields.num_aux,
        norm_before_fc=fields.norm_before_fc,
        fc_norm=fields.fc_norm,
        norm_output=fields.norm_output,
        norm_before_residual=fields.norm_before_residual,
        tie_word_embeddings=bool(getattr(conf, "tie_word_embeddings", False)),
        hf=conf,
    )


def _hf_config(d: dict, where: str) -> Any:
    """The transformers config class for ``model_type`` built from ``d``, so fields left out
    (speculators saves only the diff against the class defaults) take the class defaults."""
    from transformers import AutoConfig

    model_type = d.get("model_type", "llama")
    if model_type != "llama":
        raise WiringError(
            f"transformer layer model_type is {model_type!r}; only Llama-style EAGLE-3 drafts "
            "are supported (SGLang 0.5.23 serves them as LlamaForCausalLMEagle3)",
            path=where,
        )
    kwargs = {k: v for k, v in d.items() if k != "model_type"}
    try:
        return AutoConfig.for_model(model_type, **kwargs)
    except (TypeError, ValueError) as err:
        raise WiringError(f"cannot build a Llama config from it ({err})", path=where) from None


def _llama_numbers(conf: Any, where: str) -> dict[str, Any]:
    def num(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise WiringError(f"field {name} must be an int, got {value!r}", path=where)
        return value

    hidden = num("hidden_size", conf.hidden_size)
    heads = num("num_attention_heads", conf.num_attention_heads)
    head_dim = getattr(conf, "head_dim", None) or hidden // heads
    return {
        "hidden_size": hidden,
        "intermediate_size": num("intermediate_size", conf.intermediate_size),
        "num_heads": heads,
        "num_kv_heads": num("num_key_value_heads", conf.num_key_value_heads or heads),
        "head_dim": num("head_dim", head_dim),
        "num_layers": num("num_hidden_layers", conf.num_hidden_layers),
        "rms_norm_eps": float(conf.rms_norm_eps),
        "hidden_act": str(conf.hidden_act),
        "vocab_size": num("vocab_size", conf.vocab_size),
    }


def check_weights(c: DraftConfig, w: dict[str, torch.Tensor], embed: Any) -> None:
    """Every tensor the forward needs, with the shape ``c`` implies; ``embed`` is the
    embedding table (``hidden_size``, ``vocab_size``, ``path``)."""
    expect = {
        "fc.weight": (c.hidden_size, c.num_aux * c.target_hidden_size),
        "norm.weight": (c.hidden_size,),
        "lm_head.weight": (c.draft_vocab_size, c.hidden_size),
    }
    for i in range(c.num_layers):
        width = 2 * c.hidden_size if i == 0 else c.hidden_size
        p = f"layers.{i}."
        expect[p + "self_attn.q_proj.weight"] = (c.num_heads * c.head_dim, width)
        expect[p + "self_attn.k_proj.weight"] = (c.num_kv_heads * c.head_dim, width)
        expect[p + "self_attn.v_proj.weight"] = (c.num_kv_heads * c.head_dim, width)
        expect[p + "self_attn.o_proj.weight"] = (c.hidden_size, c.num_heads * c.head_dim)
        expect[p + "mlp.gate_proj.weight"] = (c.intermediate_size, c.hidden_size)
        expect[p + "mlp.up_proj.weight"] = (c.intermediate_size, c.hidden_size)
        expect[p + "mlp.down_proj.weight"] = (c.hidden_size, c.intermediate_size)
        expect[p + "input_layernorm.weight"] = (c.hidden_size,)
        expect[p + "post_attention_layernorm.weight"] = (c.hidden_size,)
    expect["layers.0.hidden_norm.weight"] = (c.hidden_size,)
    if c.norm_before_fc:
        expect["input_norm.weight"] = (c.num_aux * c.target_hidden_size,)
    if c.fc_norm:
        for i in range(c.num_aux):
            expect[f"fc_norm.{i}.weight"] = (c.target_hidden_size,)
    for name, shape in expect.items():
        if name not in w:
            raise WiringError(f"the weights have no {name}", path=c.path)
        if tuple(w[name].shape) != shape:
            raise WiringError(
                f"{name} has shape {list(w[name].shape)}, the config implies {list(shape)}",
                path=c.path,
                fix="the weights do not match config.json; use the matching pair",
            )
    if embed.hidden_size != c.hidden_size:
        raise WiringError(
            f"embedding rows are {embed.hidden_size} wide, the draft's hidden size is "
            f"{c.hidden_size}",
            path=str(embed.path),
        )
    d2t = w.get("d2t")
    if d2t is not None and tuple(d2t.shape) != (c.draft_vocab_size,):
        raise WiringError(f"d2t has shape {list(d2t.shape)}", path=c.path)
    if d2t is None and c.draft_vocab_size != embed.vocab_size:
        raise WiringError(
            f"draft vocab {c.draft_vocab_size} differs from the target vocab "
            f"{embed.vocab_size} but there is no d2t to map draft ids to target ids",
            path=c.path,
        )
