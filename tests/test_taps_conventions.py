"""Taps, id conventions, stock SGLang 0.5.23 replay and HiddenStateLayout (pure Python)."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import (
    Convention,
    id_range,
    ids_from_taps,
    stock_sglang_deepseek_capture,
    taps_from_ids,
)
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import Tap, format_taps, parse_taps

OUT, IN, DS = (
    Convention.OUTPUT_OF_LAYER,
    Convention.INPUT_TO_LAYER,
    Convention.SGLANG_0_5_23_DEEPSEEK,
)


def test_layout_modules_stay_pure_python():
    """The layout contract must load without torch, sglang or safetensors."""
    code = (
        "import sys\n"
        "import sglang_eagle3.checkpoint.draft_readers, sglang_eagle3.checkpoint.flat_draft\n"
        "import sglang_eagle3.layout.hidden_state_layout\n"
        "heavy = {'torch', 'sglang', 'safetensors', 'numpy', 'transformers'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- taps ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hf"), [("embed", 0), ("layer:0", 1), ("layer:2", 3), ("layer:60", 61)]
)
def test_tap_parse_and_print(text, hf):
    tap = Tap.parse(text)
    assert tap.hf_index == hf
    assert str(tap) == text
    assert Tap.parse(str(tap)) == tap


@pytest.mark.parametrize(
    "bad",
    ["layer:-1", "layer:02", "layer:+2", " embed", "embed ", "layer: 2", "Layer:2", "layer:",
     "layer:2.0", "", "EMBED", "layer:\u0662", "layer2", "layer:1e3"],
)  # fmt: skip
def test_tap_parse_rejects_non_canonical(bad):
    with pytest.raises(WiringError, match="invalid tap") as info:
        Tap.parse(bad)
    assert "Fix: write 'embed' or 'layer:K'" in str(info.value)


def test_tap_properties():
    assert Tap.embed().is_embed and Tap.embed().layer is None
    assert Tap.layer_output(7) == Tap.parse("layer:7") and Tap.parse("layer:7").layer == 7
    assert Tap.parse("layer:6").capture_index(8) == 7
    assert Tap.parse("layer:6").is_capturable(8)
    assert not Tap.parse("layer:7").is_capturable(8)  # the last layer's output
    assert Tap.parse("layer:7").capture_index(8) == 8  # reported, but loop never reaches it
    with pytest.raises(WiringError, match="does not exist in a 8-layer target"):
        Tap.parse("layer:8").capture_index(8)
    for bad in (-1, True, 1.0):
        with pytest.raises(WiringError):
            Tap(bad)
    assert sorted([Tap(3), Tap(0), Tap(1)]) == [Tap(0), Tap(1), Tap(3)]


def test_parse_taps():
    assert parse_taps("embed,layer:2,layer:30") == (Tap(0), Tap(3), Tap(31))
    assert parse_taps("embed, layer:2") == (Tap(0), Tap(3))
    assert parse_taps(["embed", Tap(3)]) == (Tap(0), Tap(3))
    for bad in ("", "embed,,layer:2", "embed;layer:2"):
        with pytest.raises(WiringError):
            parse_taps(bad)
    assert format_taps(parse_taps("embed,layer:2")) == "embed, layer:2"


def test_wiring_error_rendering_and_pickle():
    err = WiringError("bad ids", path="/d/config.json", fix="use other ids")
    assert str(err) == "/d/config.json: bad ids. Fix: use other ids"
    assert str(WiringError("plain")) == "plain"
    assert isinstance(err, ValueError)
    again = pickle.loads(pickle.dumps(err))
    assert (again.message, again.path, again.fix) == ("bad ids", "/d/config.json", "use other ids")
    assert err.with_path("/other").path == "/d/config.json"
    assert WiringError("m").with_path("/p").path == "/p"


def test_convention_parse():
    assert Convention.parse("output-of-layer") is OUT
    assert str(IN) == "input-to-layer"
    with pytest.raises(WiringError, match="unknown id convention 'output_of_layer'"):
        Convention.parse("output_of_layer")


# ---- conversions: properties ------------------------------------------------------------


@st.composite
def layouts(draw, min_layers: int = 1):
    n = draw(st.integers(min_layers, 96))
    hf = draw(st.lists(st.integers(0, n), min_size=1, max_size=min(n + 1, 8), unique=True))
    return n, tuple(Tap(i) for i in hf)


@settings(max_examples=300, deadline=None)
@given(layouts(), st.sampled_from([OUT, IN]))
def test_round_trip_every_valid_layout(case, conv):
    n, taps = case
    ids = ids_from_taps(taps, conv)
    lo, hi = id_range(conv, n)
    assert all(lo <= i <= hi for i in ids)
    assert taps_from_ids(list(ids), conv, n) == taps
    layout = HiddenStateLayout(taps, n, 64)
    assert HiddenStateLayout.from_json(layout.to_json()) == layout
    assert HiddenStateLayout.from_ids(ids, conv, n, 64) == layout
    assert parse_taps(",".join(layout.names())) == taps
    assert layout.capture_indices() == layout.hf_indices() == [t.hf_index for t in taps]
    assert layout.is_capturable() == all(t.hf_index < n for t in taps)


@settings(max_examples=200, deadline=None)
@given(layouts(min_layers=2))
def test_deepseek_ids_reproduce_taps_on_stock_sglang(case):
    n, taps = case
    taps = tuple(sorted(t for t in taps if t.hf_index <= n - 1))
    if not taps or taps == (Tap(1),):
        return
    ids = ids_from_taps(taps, DS, num_layers=n)
    cap = stock_sglang_deepseek_capture(list(ids), n)
    assert cap.crash is None and cap.taps == taps
    assert taps_from_ids(list(ids), DS, n) == taps


def _bad_id(conv: Convention, n: int, draw) -> int:
    lo, hi = id_range(conv, n)
    return draw(st.one_of(st.integers(hi + 1, hi + 500), st.integers(lo - 500, lo - 1)))


@settings(max_examples=300, deadline=None)
@given(layouts(), st.sampled_from([OUT, IN]), st.data())
def test_out_of_range_ids_are_rejected_naming_id_and_range(case, conv, data):
    n, taps = case
    ids = list(ids_from_taps(taps, conv))
    bad = _bad_id(conv, n, data.draw)
    ids.insert(data.draw(st.integers(0, len(ids))), bad)
    with pytest.raises(WiringError) as info:
        taps_from_ids(ids, conv, n)
    msg = str(info.value)
    lo, hi = id_range(conv, n)
    assert re.search(rf"(?<![\d-]){bad}(?!\d)", msg), msg
    assert f"{lo}..{hi}" in msg


@settings(max_examples=200, deadline=None)
@given(layouts(), st.sampled_from([OUT, IN]), st.data())
def test_duplicate_ids_are_rejected_naming_the_id(case, conv, data):
    n, taps = case
    ids = list(ids_from_taps(taps, conv))
    dup = data.draw(st.sampled_from(ids))
    ids.insert(data.draw(st.integers(0, len(ids))), dup)
    with pytest.raises(WiringError, match=rf"{conv} id {dup} appears twice") as info:
        taps_from_ids(ids, conv, n)
    lo, hi = id_range(conv, n)
    assert f"{lo}..{hi}" in str(info.value)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 96), st.sampled_from([OUT, IN]), st.data())
def test_mixed_ids_are_rejected_in_every_convention(n, conv, data):
    middle = data.draw(st.lists(st.integers(0, n - 1), max_size=4, unique=True))
    ids = data.draw(st.permutations([-1, n, *middle]))
    with pytest.raises(WiringError, match="mix conventions") as info:
        taps_from_ids(ids, conv, n)
    msg = str(info.value)
    assert f"id -1 exists only as output-of-layer (valid -1..{n - 1})" in msg
    assert f"id {n} only as input-to-layer (valid 0..{n})" in msg


@pytest.mark.parametrize("ids", [[True, 2], [2.0, 3], ["2"], "2,3", [], None, [[1]]])
def test_non_int_ids_rejected(ids):
    with pytest.raises(WiringError):
        taps_from_ids(ids, OUT, 61)


def test_negative_input_to_layer_id_points_at_the_other_convention():
    with pytest.raises(WiringError) as info:
        taps_from_ids([-1, 2, 30], IN, 61)
    assert "input-to-layer id -1 is out of range for a 61-layer target" in str(info.value)
    assert "valid input-to-layer ids: 0..61" in str(info.value)
    assert "-1 would be valid as an output-of-layer id" in str(info.value)


def test_minus_one_with_zero_is_valid_output_of_layer():
    # embed and layer:0 are two different hidden states: not "mixed"
    assert taps_from_ids([-1, 0], OUT, 4) == (Tap(0), Tap(1))


# ---- stock SGLang 0.5.23 on DeepSeek ------------------------------------------------------


def test_stock_capture_default_and_shift_rule():
    default = stock_sglang_deepseek_capture(None, 61)
    assert default.capture_indices == (2, 30, 58) and default.crash is None
    assert format_taps(default.taps) == "layer:1, layer:29, layer:57"
    assert "default [2, n//2, n-3] used as is" in default.describe()
    assert "(input-to-layer ids)" in default.describe()
    shifted = stock_sglang_deepseek_capture([1, 29, 57], 61)
    assert shifted.shifted and shifted.capture_indices == (2, 30, 58)
    assert shifted.taps == default.taps
    literal = stock_sglang_deepseek_capture([0, 3, 8], 8)  # 8 is never reached
    assert literal.crash == "RuntimeError: captured 2 of 3 aux hidden states"
    assert "indices [8] are outside 0..7" in literal.describe()
    order = stock_sglang_deepseek_capture([5, 0, 3], 8)  # packed in loop (ascending) order
    assert order.taps == (Tap(0), Tap(3), Tap(5))


def test_stock_capture_duplicates_and_nothing_captured():
    tiny = stock_sglang_deepseek_capture(None, 4)  # default [2, 2, 1] repeats 2
    assert tiny.crash == "RuntimeError: captured 2 of 3 aux hidden states"
    assert "indices [2] repeat but are captured once" in tiny.describe()
    none = stock_sglang_deepseek_capture([-1, 99], 8)
    assert none.taps is None and "no aux hidden state was captured" in none.crash
    with pytest.raises(WiringError, match="stock SGLang 0.5.23"):
        taps_from_ids([-1, 2, 30], DS, 61)


def test_deepseek_ids_from_taps_edge_cases():
    assert ids_from_taps((Tap(1), Tap(4)), DS) == (4, 1)  # a leading 1 would shift all
    with pytest.raises(WiringError, match="layer:0 alone"):
        ids_from_taps((Tap(1),), DS)
    with pytest.raises(WiringError, match="ascending"):
        ids_from_taps((Tap(4), Tap(1)), DS)
    with pytest.raises(WiringError, match="cannot be captured|not capturable|does not exist"):
        ids_from_taps((Tap(0), Tap(9)), DS, num_layers=8)
