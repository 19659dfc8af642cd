"""The layout contract a draft's config.json states: the ``eagle_config`` keys that say which
target hidden states the draft's fc reads, as pydantic models and as a published JSON Schema.

Training tools write ``eagle_config.hidden_state_layout`` and check it against
``hidden_state_layout.schema.json`` (next to this file, shipped in the wheel). Print it with::

    python -m sglang_eagle3.layout.schema

The schema checks the spelling; what needs the target (tap counts, layer ranges, ids agreeing
with the layout) is checked when the draft is read against its target. Pure: pydantic only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict, Field, field_validator

from sglang_eagle3.layout.conventions import check_ids
from sglang_eagle3.layout.schema_base import SchemaModel
from sglang_eagle3.layout.taps import Tap, parse_taps

SCHEMA_FILE = Path(__file__).with_name("hidden_state_layout.schema.json")
TAP_PATTERN = r"^(embed|layer:(0|[1-9][0-9]*))$"  # taps.py's grammar, anchored

TapName = Annotated[
    str,
    Field(
        pattern=TAP_PATTERN,
        description="'embed' (the embedding output, HF hidden_states[0]) or 'layer:K': the "
        "output of decoder layer K counted from 0 (HF hidden_states[K+1])",
    ),
]


class LayoutTaps(SchemaModel):
    """The taps a draft reads, by name: no id convention involved."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    hidden_state_layout: list[TapName] | None = Field(
        None,
        min_length=1,
        json_schema_extra={"uniqueItems": True},
        description="The target hidden states the draft's fc consumes, concatenated in this "
        "order; one per fc input block. Wins over eagle_aux_hidden_state_layer_ids.",
        examples=[["embed", "layer:2", "layer:30"]],
    )
    verifier_tap: TapName | None = Field(
        None,
        description="The tap the draft's training targets (the verifier's logits) came from; "
        "usually the last layer's output.",
        examples=["layer:60"],
    )

    @field_validator("hidden_state_layout", mode="before")
    @classmethod
    def _parse_layout(cls, value: Any) -> Any:
        if isinstance(value, list):  # anything else: pydantic's "must be a list"
            parse_taps(value)
        return value

    @field_validator("verifier_tap", mode="before")
    @classmethod
    def _parse_verifier(cls, value: Any) -> Any:
        if isinstance(value, str):
            Tap.parse(value)
        return value

    @property
    def taps(self) -> tuple[Tap, ...] | None:
        layout = self.hidden_state_layout
        return None if layout is None else parse_taps(layout)

    @property
    def verifier(self) -> Tap | None:
        return None if self.verifier_tap is None else Tap.parse(self.verifier_tap)


class LayoutKeys(LayoutTaps):
    """The layout keys of an EAGLE-3 draft's eagle_config; other keys are left alone."""

    model_config = ConfigDict(title="EAGLE-3 draft eagle_config: hidden-state layout")

    eagle_aux_hidden_state_layer_ids: list[int] | None = Field(
        None,
        min_length=1,
        json_schema_extra={"uniqueItems": True},
        description="Numeric layer ids in no stated convention (-1 = embed exists only as "
        "output-of-layer, n = the last layer's output only as input-to-layer). Kept for tools "
        "that know only ids; when hidden_state_layout is present the ids must spell the same "
        "taps in one convention.",
        examples=[[-1, 2, 30]],
    )

    @field_validator("eagle_aux_hidden_state_layer_ids", mode="before")
    @classmethod
    def _check_ids(cls, value: Any) -> Any:
        if isinstance(value, list):
            check_ids(value, field="eagle_aux_hidden_state_layer_ids")
        return value

    @property
    def ids(self) -> tuple[int, ...] | None:
        ids = self.eagle_aux_hidden_state_layer_ids
        return None if ids is None else tuple(ids)


def layout_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``eagle_config``'s layout keys."""
    schema = LayoutKeys.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def schema_text() -> str:
    """The schema as the committed file holds it."""
    return json.dumps(layout_json_schema(), indent=2) + "\n"


def main() -> None:
    print(schema_text(), end="")


if __name__ == "__main__":
    main()
