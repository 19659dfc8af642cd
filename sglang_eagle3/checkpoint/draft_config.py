"""The numbers a draft forward needs (``DraftArch``), from a draft's config.json in any
supported format: the EAGLE-3 keys through ``draft_schema``, the Llama layer through
``LlamaLayer``, whose defaults are transformers' LlamaConfig defaults (speculators saves only
what differs from them; tests/test_draft_schema.py keeps the two equal). An MLA draft
(``Eagle3DeepseekV2ForCausalLM``) keeps its parsed ``MlaDraftConfig`` in ``DraftArch.mla``.

Pure: the forward's torch and transformers bits (activation, rotary table) live next to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from sglang_eagle3.checkpoint.config_json import read_draft_config_json
from sglang_eagle3.checkpoint.draft_config_mla import mla_shapes
from sglang_eagle3.checkpoint.draft_schema import (
    DraftFile,
    FcNorm,
    NormBeforeFc,
    NormBeforeResidual,
    NormOutput,
    SpeculatorsDraftConfig,
    load_draft_file,
)
from sglang_eagle3.checkpoint.draft_schema_mla import MlaDraftConfig, is_mla_config
from sglang_eagle3.checkpoint.prestart import VocabMap, VocabMaps, check_vocab_maps
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.schema_base import JSON_STRICT, CheckedModel, SchemaModel

HIDDEN_ACTS = ("gelu", "silu")  # the activations the doctor's forward implements


class LlamaLayer(SchemaModel):
    """The Llama decoder layer as the doctor's forward reads it; keys left out take
    transformers' LlamaConfig defaults."""

    model_config = ConfigDict(**JSON_STRICT, protected_namespaces=())  # model_type is a key

    model_type: str = Field("llama", description="Only llama (SGLang serves LlamaForCausalLM).")
    hidden_size: int = Field(ge=1, description="The draft's hidden size.")
    intermediate_size: int = Field(11008, ge=1, description="MLP width.")
    num_hidden_layers: int = Field(32, ge=1, description="Decoder layers.")
    num_attention_heads: int = Field(32, ge=1, description="Query heads.")
    num_key_value_heads: int | None = Field(
        None, ge=1, description="Key/value heads; null: as many as query heads."
    )
    head_dim: int | None = Field(
        None, ge=1, description="Per-head width; null: hidden_size // num_attention_heads."
    )
    rms_norm_eps: float = Field(1e-6, gt=0, description="RMSNorm epsilon.")
    hidden_act: str = Field("silu", description="MLP activation.")
    vocab_size: int = Field(32000, ge=1, description="The target vocabulary (embedding rows).")
    tie_word_embeddings: bool = Field(False, description="lm_head shares the embedding.")

    @field_validator("model_type")
    @classmethod
    def _llama_only(cls, value: str) -> str:
        if value != "llama":
            raise WiringError(
                f"transformer layer model_type is {value!r}; only Llama-style EAGLE-3 drafts "
                "are supported (SGLang 0.5.23 serves them as LlamaForCausalLMEagle3)"
            )
        return value


def load_draft_config(draft_dir: str | Path) -> DraftArch:
    """Parse ``draft_dir/config.json``; every problem is a WiringError naming the file."""
    where = str(Path(draft_dir) / "config.json")
    cfg = read_draft_config_json(draft_dir)
    if is_mla_config(cfg):
        return DraftArch.from_mla(MlaDraftConfig.load(cfg, path=where), path=where, raw=cfg)
    speculators = "speculators_model_type" in cfg
    f = load_draft_file(cfg, where, speculators=speculators)
    raw = cfg["transformer_layer_config"] if speculators else cfg
    prefix = "transformer_layer_config." if speculators else ""
    layer = LlamaLayer.load(raw, path=where, prefix=prefix)
    return DraftArch.from_file(f, path=where, layer=layer, layer_config=raw)


class DraftArch(CheckedModel):
    """The numbers the doctor's reference forward needs: the Llama layer with transformers'
    defaults filled in, the EAGLE-3 widths and flags."""

    path_field: ClassVar[str] = "path"

    path: str = Field(description="The config.json it came from (for error messages).")
    format: Literal["speculators", "flat"] = Field(description="Where the layer keys sit.")
    hidden_size: int = Field(ge=1, description="The draft's hidden size.")
    intermediate_size: int = Field(ge=1, description="MLP width.")
    num_heads: int = Field(ge=1, description="num_attention_heads.")
    num_kv_heads: int = Field(ge=1, description="num_key_value_heads.")
    head_dim: int = Field(ge=1, description="Per-head width.")
    num_layers: int = Field(ge=1, description="Decoder layers.")
    rms_norm_eps: float = Field(gt=0, description="RMSNorm epsilon.")
    hidden_act: str = Field(description=f"MLP activation, one of {list(HIDDEN_ACTS)}.")
    vocab_size: int = Field(ge=1, description="The target vocabulary (embedding rows).")
    draft_vocab_size: int = Field(ge=1, description="Rows of lm_head.")
    target_hidden_size: int = Field(ge=1, description="Width of each tap.")
    num_aux: int = Field(ge=1, description="Taps the fc takes.")
    norm_before_fc: NormBeforeFc = False
    fc_norm: FcNorm = False
    norm_output: NormOutput = False
    norm_before_residual: NormBeforeResidual = False
    tie_word_embeddings: bool = Field(False, description="lm_head shares the embedding.")
    layer_config: dict[str, Any] = Field(
        default_factory=dict,
        repr=False,
        description="The layer keys as config.json states them (for transformers' rotary).",
    )
    mla: MlaDraftConfig | None = Field(
        None,
        repr=False,
        description="An Eagle3DeepseekV2ForCausalLM draft's config (MLA attention); None: Llama.",
    )

    @classmethod
    def from_file(
        cls, f: DraftFile, *, path: str, layer: LlamaLayer, layer_config: Mapping[str, Any]
    ) -> DraftArch:
        """The forward's numbers for draft ``f`` with Llama layer ``layer`` (as
        ``layer_config`` states it), read from ``path``."""
        heads = layer.num_attention_heads
        return cls(
            path=path,
            format="speculators" if isinstance(f, SpeculatorsDraftConfig) else "flat",
            hidden_size=layer.hidden_size,
            intermediate_size=layer.intermediate_size,
            num_heads=heads,
            num_kv_heads=layer.num_key_value_heads or heads,
            head_dim=layer.head_dim or layer.hidden_size // heads,
            num_layers=layer.num_hidden_layers,
            rms_norm_eps=layer.rms_norm_eps,
            hidden_act=layer.hidden_act,
            vocab_size=layer.vocab_size,
            draft_vocab_size=f.draft_vocab_size or layer.vocab_size,
            target_hidden_size=f.declared_target_hidden,
            num_aux=f.num_aux,
            **f.flags().model_dump(),
            tie_word_embeddings=layer.tie_word_embeddings,
            layer_config=dict(layer_config),
        )

    @classmethod
    def from_mla(cls, f: MlaDraftConfig, *, path: str, raw: Mapping[str, Any]) -> DraftArch:
        """The forward's numbers for an MLA draft ``f`` (config.json ``raw``, at ``path``)."""
        if f.vocab_size is None:
            raise WiringError(
                "vocab_size is missing; SGLang sizes the MLA draft's embedding from it",
                path=path,
                fix="set vocab_size to the target's vocabulary size",
            )
        return cls(
            path=path,
            format="flat",
            hidden_size=f.hidden_size,
            intermediate_size=f.intermediate_size,
            num_heads=f.num_attention_heads,
            num_kv_heads=f.num_attention_heads,
            head_dim=f.qk_nope_head_dim + f.qk_rope_head_dim,
            num_layers=f.num_hidden_layers,
            rms_norm_eps=f.rms_norm_eps,
            hidden_act=f.hidden_act,
            vocab_size=f.vocab_size,
            draft_vocab_size=f.draft_vocab_size or f.vocab_size,
            target_hidden_size=f.declared_target_hidden,
            num_aux=f.num_aux,
            **f.flags().model_dump(),
            tie_word_embeddings=f.tie_word_embeddings,
            layer_config=dict(raw),
            mla=f,
        )

    @field_validator("hidden_act")
    @classmethod
    def _known_act(cls, value: str) -> str:
        if value not in HIDDEN_ACTS:
            raise WiringError(f"hidden_act {value!r} is not supported (only {sorted(HIDDEN_ACTS)})")
        return value

    @model_validator(mode="after")
    def _heads_divide(self) -> DraftArch:
        if self.num_heads % self.num_kv_heads:
            raise WiringError(
                f"num_attention_heads {self.num_heads} is not a multiple of "
                f"num_key_value_heads {self.num_kv_heads}",
                path=self.path,
            )
        return self

    @model_validator(mode="after")
    def _mla_has_no_input_norm(self) -> DraftArch:
        if self.mla is not None and self.norm_before_fc:
            raise WiringError(
                "norm_before_fc is set, but SGLang 0.5.23's Eagle3DeepseekV2ForCausalLM has "
                "no input_norm: it would feed the fc un-normed taps",
                path=self.path,
                fix="serve this draft as trained elsewhere, or retrain without norm_before_fc",
            )
        return self

    @model_validator(mode="after")
    def _one_fc_norm(self) -> DraftArch:
        if self.norm_before_fc and self.fc_norm:
            raise WiringError(
                "norm_before_fc and fc_norm are both set; they are mutually exclusive",
                path=self.path,
            )
        return self


def expected_shapes(c: DraftArch) -> dict[str, tuple[int, ...]]:
    """Every tensor the forward needs, with the shape ``c`` implies."""
    expect = {
        "fc.weight": (c.hidden_size, c.num_aux * c.target_hidden_size),
        "norm.weight": (c.hidden_size,),
        "lm_head.weight": (c.draft_vocab_size, c.hidden_size),
    }
    if c.mla is not None:
        return {**expect, **mla_shapes(c.mla, c.num_aux)}
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    for i in range(c.num_layers):
        width = 2 * c.hidden_size if i == 0 else c.hidden_size
        p = f"layers.{i}."
        expect[p + "self_attn.q_proj.weight"] = (q, width)
        expect[p + "self_attn.k_proj.weight"] = (kv, width)
        expect[p + "self_attn.v_proj.weight"] = (kv, width)
        expect[p + "self_attn.o_proj.weight"] = (c.hidden_size, q)
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
    return expect


def check_weights(c: DraftArch, w: Mapping[str, Any], embed: Any) -> None:
    """``w``: name -> tensor (anything with ``.shape``); ``embed`` is the embedding table
    (``hidden_size``, ``vocab_size``, ``path``)."""
    for name, shape in expected_shapes(c).items():
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
    # the vocab rules are prestart's, the launcher's and the doctor's gate: one copy
    check_vocab_maps(
        VocabMaps(
            draft_vocab=c.draft_vocab_size,
            trained_vocab=c.vocab_size,
            target_vocab=embed.vocab_size,
            target_source=f"the embedding's rows, {embed.path}",
            has_weights=True,
            d2t=_vocab_map(w.get("d2t"), values=True),
            t2d=_vocab_map(w.get("t2d"), values=False),
        ),
        path=c.path,
    )


def _vocab_map(t: Any, *, values: bool) -> VocabMap | None:
    """A loaded ``d2t``/``t2d`` tensor (anything with ``shape``, ``dtype``, ``tolist``)."""
    if t is None:
        return None
    dtype = str(t.dtype).removeprefix("torch.")
    integer = "int" in dtype  # int8 .. int64, uint8: what SGLang can add to arange ids
    shape = tuple(t.shape)
    read = values and integer and len(shape) == 1
    return VocabMap(shape, dtype, integer, t.tolist() if read else None)
