"""The published layout contract: the JSON Schema file, its command and what it accepts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout import schema as layout_schema
from sglang_eagle3.layout.schema import SCHEMA_FILE, LayoutKeys, layout_json_schema, schema_text

ROOT = Path(__file__).resolve().parent.parent
WHERE = "/drafts/d/config.json"


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


# ---- the published layout contract ----------------------------------------------------------


def test_committed_schema_is_what_the_command_prints():
    out = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.layout.schema"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    committed = SCHEMA_FILE.read_text(encoding="utf-8")
    assert out.stdout == committed == schema_text(), (
        "regenerate: python -m sglang_eagle3.layout.schema > "
        "sglang_eagle3/layout/hidden_state_layout.schema.json"
    )
    assert json.loads(committed) == layout_json_schema()


def test_schema_ships_in_the_wheel_and_pydantic_is_declared():
    import tomllib  # Python 3.11+, like tests/test_packaging.py

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = project["tool"]["setuptools"]["package-data"]["sglang_eagle3.layout"]
    assert SCHEMA_FILE.name in data and SCHEMA_FILE.parent == ROOT / "sglang_eagle3" / "layout"
    assert any(
        dep.replace(" ", "").startswith("pydantic>=2") for dep in project["project"]["dependencies"]
    )


VALID = [
    {"hidden_state_layout": ["embed", "layer:2", "layer:30"], "verifier_tap": "layer:60"},
    {
        "eagle_aux_hidden_state_layer_ids": [-1, 2, 30],
        "hidden_state_layout": ["embed", "layer:2", "layer:30"],
        "use_aux_hidden_state": True,  # other eagle_config keys are allowed
    },
    {"eagle_aux_hidden_state_layer_ids": [0, 3, 6]},
    {"hidden_state_layout": ["layer:0"], "verifier_tap": None},
    {},
]
INVALID = [
    {"hidden_state_layout": ["embed", "layer:-1"]},
    {"hidden_state_layout": ["embed", "layer:02"]},
    {"hidden_state_layout": ["Layer:2"]},
    {"hidden_state_layout": ["embed", "embed"]},
    {"hidden_state_layout": []},
    {"hidden_state_layout": "embed,layer:2"},
    {"hidden_state_layout": [2]},
    {"verifier_tap": "layer: 60"},
    {"verifier_tap": 60},
    {"eagle_aux_hidden_state_layer_ids": [1.5, 2]},
    {"eagle_aux_hidden_state_layer_ids": []},
    {"eagle_aux_hidden_state_layer_ids": "1,2"},
]


@pytest.mark.parametrize("layout", VALID)
def test_schema_accepts_a_valid_layout(validator, layout):
    validator.validate(layout)
    assert LayoutKeys.load(layout, path=WHERE).hidden_state_layout == layout.get(
        "hidden_state_layout"
    )


@pytest.mark.parametrize("layout", INVALID)
def test_schema_rejects_an_invalid_layout(validator, layout):
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(layout)
    if layout.get("hidden_state_layout") == ["embed", "embed"]:
        return  # the pydantic model leaves duplicates to HiddenStateLayout (with context)
    with pytest.raises(WiringError) as info:
        LayoutKeys.load(layout, path=WHERE)
    assert info.value.path == WHERE


def test_schema_names_the_tap_grammar():
    props = layout_json_schema()["properties"]
    layout = next(b for b in props["hidden_state_layout"]["anyOf"] if b.get("type") == "array")
    assert layout["items"]["pattern"] == layout_schema.TAP_PATTERN
    assert all(props[key]["description"] for key in props)
