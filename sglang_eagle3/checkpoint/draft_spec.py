"""DraftSpec: a draft checkpoint read against its target, with everything wiring needs.

A frozen pydantic model (the config.json side lives in ``draft_schema``). Building one by hand
runs the same checks as the reader and fails with a WiringError naming the config file.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

from pydantic import Field, InstanceOf, field_validator, model_validator

from sglang_eagle3.checkpoint.draft_schema import (
    DraftVocab,
    EmbedRequiresGrad,
    FcNorm,
    NormBeforeFc,
    NormBeforeResidual,
    NormOutput,
)
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import Convention
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.schema_base import CheckedModel

DraftFormat = Literal["sglang-flat", "speculators", "specforge", "sglang-mla"]
FORMATS: tuple[str, ...] = get_args(DraftFormat)
STOCK_DEFAULT_SOURCE = "none (stock SGLang default)"


class DraftSpec(CheckedModel):
    """A parsed, target-checked draft. ``layout`` is None when the draft does not say which
    taps it reads (stock SGLang then uses its default); ``layout_source`` says where the
    layout came from, ``convention`` in which convention ``raw_ids`` were read."""

    error_prefix: ClassVar[str] = "DraftSpec."
    path_field: ClassVar[str] = "config_path"

    config_path: str = Field(description="The draft's config.json.")
    format: DraftFormat = Field(
        description="The checkpoint format (specforge: flat config, midlayer.* weights; "
        "sglang-mla: Eagle3DeepseekV2ForCausalLM)."
    )
    layout: InstanceOf[HiddenStateLayout] | None = Field(
        description="The taps the fc reads, in order; None: the draft does not say."
    )
    convention: Convention | None = Field(description="How raw_ids were read, if they were.")
    layout_source: str = Field(description="Where the layout came from, for humans.")
    raw_ids: tuple[int, ...] | None = Field(strict=False, description="The ids as written.")
    draft_hidden_size: int = Field(ge=1, description="The draft's hidden size.")
    target_hidden_size: int = Field(ge=1, description="The target's hidden size (tap width).")
    num_aux: int = Field(ge=1, description="Taps the fc takes.")
    fc_in_features: int | None = Field(ge=1, description="fc.weight's in_features, if read.")
    draft_vocab_size: DraftVocab
    target_vocab_size: int | None = Field(ge=1, description="The target vocabulary size.")
    norm_before_fc: NormBeforeFc = False
    fc_norm: FcNorm = False
    norm_output: NormOutput = False
    norm_before_residual: NormBeforeResidual = False
    has_d2t: bool = Field(False, description="The weights hold d2t (draft -> target ids).")
    has_t2d: bool = Field(False, description="The weights hold t2d.")
    sliding_window: int | None = Field(None, ge=1, description="The trained attention window.")
    verifier_name: str | None = Field(None, description="The target it was trained on.")
    notes: tuple[str, ...] = Field((), strict=False, description="What the reader decided.")
    embed_requires_grad: EmbedRequiresGrad = False
    has_embed: bool = Field(False, description="The checkpoint holds embed_tokens.weight.")
    draft_layers: int = Field(1, ge=1, description="Decoder layers in the draft.")
    null_target_hidden: bool = Field(
        False, description="target_hidden_size: null (speculators' default)."
    )

    @field_validator("convention", mode="before")
    @classmethod
    def _parse_convention(cls, value: Any) -> Any:
        return value if value is None else Convention.parse(value)

    # the reader reports these with more context; these keep hand-built specs honest
    @model_validator(mode="after")
    def _layout_fits(self) -> DraftSpec:
        if self.layout is None:
            return self
        if len(self.layout.taps) != self.num_aux:
            raise WiringError(
                f"layout has {len(self.layout.taps)} taps but the fc takes {self.num_aux}",
                path=self.config_path,
            )
        if self.layout.hidden_size != self.target_hidden_size:
            raise WiringError(
                f"layout hidden_size {self.layout.hidden_size} != target_hidden_size "
                f"{self.target_hidden_size}",
                path=self.config_path,
            )
        return self

    @model_validator(mode="after")
    def _fc_width(self) -> DraftSpec:
        want = self.num_aux * self.target_hidden_size
        if self.fc_in_features is not None and self.fc_in_features != want:
            raise WiringError(
                f"fc in_features {self.fc_in_features} != {self.num_aux} taps x "
                f"{self.target_hidden_size} = {want}",
                path=self.config_path,
            )
        return self

    def replace(self, **changes: Any) -> DraftSpec:
        """A copy with ``changes``, checked again."""
        return DraftSpec(**{**dict(self), **changes})

    @property
    def ids_convention_text(self) -> str:
        """The raw ids with their convention, e.g. ``[-1, 2, 30] (output-of-layer)``."""
        if self.raw_ids is None:
            return "none"
        return f"{list(self.raw_ids)} ({self.convention or 'convention unknown'})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (for the doctor and logs)."""
        out = dict(self)
        out["layout"] = None if self.layout is None else self.layout.to_dict()
        out["convention"] = None if self.convention is None else str(self.convention)
        out["raw_ids"] = None if self.raw_ids is None else list(self.raw_ids)
        out["notes"] = list(self.notes)
        return out

    def describe(self) -> str:
        """A few lines for humans."""
        layout = "none declared" if self.layout is None else self.layout.describe()
        fc = (
            "" if self.fc_in_features is None else f" (fc.weight in_features {self.fc_in_features})"
        )
        lines = [
            f"draft {self.config_path} ({self.format})",
            f"  layout: {layout}",
            f"  layout source: {self.layout_source}; ids {self.ids_convention_text}",
            f"  fc: {self.num_aux} taps x {self.target_hidden_size} -> {self.draft_hidden_size}"
            + fc,
        ]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)
