"""One schema for an EAGLE-3 draft's config.json, in the formats this tool reads (pure).

- speculators 0.9 (``speculators_model_type: "eagle3"``): the Llama layer sits in
  ``transformer_layer_config``; the EAGLE-3 keys, ids and layout at top level.
- SGLang-flat and SpecForge (``architectures: ["LlamaForCausalLMEagle3"]``): everything at top
  level, ids and layout in ``eagle_config`` (the published contract, ``layout/schema.py``).

Both formats answer the same questions (``ids``, ``declared_layout``, ``num_aux``, ``flags``,
``layer`` ...), so the reader, the flat copy and the doctor read a draft one way (the doctor's
forward numbers: ``draft_config``). Real configs carry many more keys: ignored.
Types are strict (JSON has no "16" for 16); every problem is one WiringError naming the file
and the dotted field.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, Field, JsonValue, field_validator

from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.schema import LayoutKeys, LayoutTaps
from sglang_eagle3.layout.schema_base import JSON_STRICT, CheckedModel, SchemaModel

FLAT_ARCH = "LlamaForCausalLMEagle3"  # the architecture SGLang 0.5.23 serves drafts as

# the EAGLE-3 flags, described once for every model that carries them
NormBeforeFc = Annotated[
    bool, Field(description="One RMSNorm over the concatenated taps before fc (input_norm).")
]
FcNorm = Annotated[bool, Field(description="One RMSNorm per tap block before fc (fc_norm.{i}).")]
NormOutput = Annotated[
    bool, Field(description="Later draft steps are fed the normed output, not the pre-norm one.")
]
NormBeforeResidual = Annotated[
    bool,
    Field(description="The residual is hidden_norm(fc out), not fc out (speculators' default)."),
]
EmbedRequiresGrad = Annotated[
    bool, Field(description="The draft trained its own embedding (embed_tokens.weight).")
]
DraftVocab = Annotated[
    int | None,
    Field(ge=1, description="Rows of lm_head (d2t maps them to target ids); null: the target's."),
]


class Eagle3Flags(CheckedModel):
    """The EAGLE-3 switches of a draft, as the server must apply them."""

    norm_before_fc: NormBeforeFc = False
    fc_norm: FcNorm = False
    norm_output: NormOutput = False
    norm_before_residual: NormBeforeResidual = False


class TransformerLayerConfig(SchemaModel):
    """The Llama decoder-layer keys the wiring reads. The doctor's forward reads the whole
    layer, with transformers' defaults, as ``draft_config.LlamaLayer``."""

    model_config = JSON_STRICT

    hidden_size: int = Field(ge=1, description="The draft's hidden size (fc output width).")
    num_hidden_layers: int = Field(
        1, ge=1, description="Decoder layers in the draft; absent: 1 for the wiring."
    )
    vocab_size: int | None = Field(None, ge=1, description="The target vocabulary (embed rows).")
    sliding_window: int | None = Field(
        None, ge=1, description="Attention window, used when a layer slides."
    )
    # read for what they say, as loosely as SGLang reads them
    layer_types: JsonValue = Field(
        None, description="Per-layer attention kinds; 'sliding_attention' turns the window on."
    )
    use_sliding_window: JsonValue = Field(None, description="Truthy: the window is on.")

    @property
    def window(self) -> int | None:
        """The sliding window the draft was trained with, None when no layer slides."""
        sliding = "sliding_attention" in (self.layer_types or []) or self.use_sliding_window
        return self.sliding_window if sliding else None


class SpeculatorsVerifier(SchemaModel):
    model_config = JSON_STRICT

    name_or_path: str | None = Field(None, description="The target the draft was trained on.")


class SpeculatorsMeta(SchemaModel):
    model_config = JSON_STRICT

    verifier: SpeculatorsVerifier | None = Field(None, description="The verifier (target).")


class SpeculatorsDraftConfig(LayoutKeys):
    """A speculators 0.9 EAGLE-3 config.json. Its ids are input-to-layer."""

    model_config = ConfigDict(extra="ignore", title="speculators 0.9 EAGLE-3 draft config")
    ids_field: ClassVar[str] = "speculators top-level eagle_aux_hidden_state_layer_ids"
    verifier_is_final: ClassVar[bool] = True  # its data keeps the last captured tap as targets

    speculators_model_type: JsonValue = Field(description="'eagle3' (checked on format detection).")
    transformer_layer_config: TransformerLayerConfig = Field(description="The Llama layer.")
    target_hidden_size: int | None = Field(
        None, ge=1, description="The target's hidden width; null: the draft's hidden size."
    )
    draft_vocab_size: DraftVocab = None
    norm_before_fc: NormBeforeFc = False
    fc_norm: FcNorm = False
    norm_output: NormOutput = False
    norm_before_residual: NormBeforeResidual = False
    embed_requires_grad: EmbedRequiresGrad = False
    eagle_config: LayoutTaps | None = Field(
        None, description="Read for its layout when the top level states none."
    )
    speculators_config: SpeculatorsMeta | None = Field(None, description="Training metadata.")

    @property
    def layer(self) -> TransformerLayerConfig:
        return self.transformer_layer_config

    @property
    def null_target(self) -> bool:
        return self.target_hidden_size is None

    @property
    def declared_target_hidden(self) -> int:
        return self.target_hidden_size or self.layer.hidden_size

    @property
    def num_aux(self) -> int:
        return len(self.ids) if self.ids else 3  # speculators 0.9 sizes fc with len(ids) or 3

    @property
    def num_aux_source(self) -> str:
        return "len(eagle_aux_hidden_state_layer_ids)" if self.ids else "speculators default 3"

    @property
    def declared_layout(self) -> tuple[LayoutTaps, str]:
        """The keys that name the taps (top level first, then eagle_config) and their field."""
        if self.hidden_state_layout is not None:
            return self, "hidden_state_layout"
        return self.eagle_config or LayoutTaps(), "eagle_config.hidden_state_layout"

    @property
    def verifier_name(self) -> str | None:
        meta = self.speculators_config
        return None if meta is None or meta.verifier is None else meta.verifier.name_or_path

    def flags(self) -> Eagle3Flags:
        return Eagle3Flags(
            norm_before_fc=self.norm_before_fc,
            fc_norm=self.fc_norm,
            norm_output=self.norm_output,
            norm_before_residual=self.norm_before_residual,
        )


class FlatEagleConfig(LayoutKeys):
    """``eagle_config`` of an SGLang-flat / SpecForge config."""

    model_config = ConfigDict(extra="ignore", title="SGLang-flat eagle_config")

    norm_before_fc: bool | None = Field(None, description="SGLang reads it here first.")


class FlatDraftConfig(TransformerLayerConfig):
    """An SGLang-flat (LlamaForCausalLMEagle3) or SpecForge config.json."""

    model_config = ConfigDict(title="SGLang-flat / SpecForge EAGLE-3 draft config")
    ids_field: ClassVar[str] = "eagle_config.eagle_aux_hidden_state_layer_ids"
    verifier_is_final: ClassVar[bool] = False
    verifier_name: ClassVar[str | None] = None
    null_target: ClassVar[bool] = False  # a null target_hidden_size is refused

    architectures: JsonValue = Field(
        None, description="['LlamaForCausalLMEagle3'] (checked on format detection)."
    )
    target_hidden_size: int | None = Field(
        None, ge=1, description="The target's hidden width; absent: the draft's hidden size."
    )
    eagle_config: FlatEagleConfig | None = Field(None, description="Ids, layout and flags.")
    num_aux_hidden_states: int | None = Field(None, ge=1, description="Taps the fc takes.")
    draft_vocab_size: DraftVocab = None
    norm_before_fc: NormBeforeFc = False
    fc_norm: bool | None = Field(None, description="One RMSNorm per tap block before fc.")
    use_aux_norm: bool = Field(False, description="Another name for fc_norm.")
    norm_output: NormOutput = False
    norm_before_residual: NormBeforeResidual = False
    embed_requires_grad: EmbedRequiresGrad = False

    @field_validator("target_hidden_size", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise WiringError(
                "target_hidden_size is null; SGLang 0.5.23 multiplies it by the tap count and "
                "crashes",
                fix="set target_hidden_size to the target's hidden size, or remove the key",
            )
        return value

    @property
    def layer(self) -> TransformerLayerConfig:
        return self

    @property
    def declared_target_hidden(self) -> int:
        return self.target_hidden_size or self.hidden_size

    @property
    def ids(self) -> tuple[int, ...] | None:
        return None if self.eagle_config is None else self.eagle_config.ids

    @property
    def num_aux(self) -> int:
        # SGLang's order: num_aux_hidden_states, then len(eagle_config ids), then 3
        return self.num_aux_hidden_states or (len(self.ids) if self.ids else 3)

    @property
    def num_aux_source(self) -> str:
        if self.num_aux_hidden_states:
            return "num_aux_hidden_states"
        return "len(eagle_config ids)" if self.ids else "SGLang default 3"

    @property
    def declared_layout(self) -> tuple[LayoutTaps, str]:
        return self.eagle_config or LayoutTaps(), "eagle_config.hidden_state_layout"

    def flags(self) -> Eagle3Flags:
        eagle = None if self.eagle_config is None else self.eagle_config.norm_before_fc
        return Eagle3Flags(
            norm_before_fc=self.norm_before_fc if eagle is None else eagle,
            fc_norm=bool(self.fc_norm) or self.use_aux_norm,
            norm_output=self.norm_output,
            norm_before_residual=self.norm_before_residual,
        )


DraftFile = SpeculatorsDraftConfig | FlatDraftConfig


def load_draft_file(cfg: dict, where: str, *, speculators: bool) -> DraftFile:
    """``cfg`` (read from ``where``) as its format's model; problems are WiringErrors."""
    model = SpeculatorsDraftConfig if speculators else FlatDraftConfig
    return model.load(cfg, path=where)
