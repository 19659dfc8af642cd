"""HiddenStateLayout: validation, description and JSON (pure)."""

from __future__ import annotations

import pytest

from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import (
    Convention,
)
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import Tap, parse_taps

OUT, IN, DS = (
    Convention.OUTPUT_OF_LAYER,
    Convention.INPUT_TO_LAYER,
    Convention.SGLANG_0_5_23_DEEPSEEK,
)


# ---- HiddenStateLayout ----------------------------------------------------------------------


def test_layout_describe_and_json():
    layout = HiddenStateLayout(parse_taps("embed,layer:2,layer:30"), 61, 7168)
    assert layout.describe() == (
        "embed, layer:2, layer:30 (HF hidden_states [0, 3, 31]; SGLang capture indices [0, 3, 31])"
    )
    assert layout.names() == ["embed", "layer:2", "layer:30"]
    assert layout.fc_in_features == 3 * 7168
    assert layout.is_ascending() and str(layout) == "embed, layer:2, layer:30"
    data = layout.to_dict()
    assert data == {
        "taps": ["embed", "layer:2", "layer:30"],
        "num_layers": 61,
        "hidden_size": 7168,
        "verifier": None,
    }
    assert HiddenStateLayout.from_dict(data) == layout
    odd = HiddenStateLayout(["layer:5", "embed", "layer:7"], 8, 64)
    assert not odd.is_ascending() and odd.uncapturable_taps() == (Tap(8),)
    assert "layer:7 not capturable by SGLang" in odd.describe()
    assert "not in ascending order" in odd.describe()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"taps": ()}, "at least one tap"),
        ({"taps": ("embed", "embed")}, "tap embed appears twice"),
        ({"taps": ("layer:8",)}, r"tap layer:8 does not exist in a 8-layer target"),
        ({"hidden_size": 0}, "hidden_size must be an int >= 1"),
        ({"num_layers": 0}, "num_layers must be an int >= 1"),
        ({"verifier": "layer:9"}, "verifier tap layer:9 does not exist"),
        ({"taps": ("layer:02",)}, "invalid tap"),
    ],
)
def test_layout_validation(kwargs, match):
    args = {"taps": ("embed",), "num_layers": 8, "hidden_size": 64, **kwargs}
    with pytest.raises(WiringError, match=match):
        HiddenStateLayout(**args)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"taps": "embed", "num_layers": 8, "hidden_size": 64}',
        '{"taps": ["embed"], "num_layers": 8}',
        '{"taps": ["embed"], "num_layers": 8, "hidden_size": 64, "extra": 1}',
        '{"taps": ["embed"], "num_layers": true, "hidden_size": 64}',
    ],
)
def test_layout_from_json_rejects_bad_input(text):
    with pytest.raises(WiringError) as info:
        HiddenStateLayout.from_json(text, path="layout.json")
    assert str(info.value).startswith("layout.json: ")
