"""Fuzzing the launcher's and the doctor's input handling with mutated configs, headers and
flags: every case ends in a plan or in one WiringError line, never in another exception.

Pure logic over header-only files (no weights loaded, no SGLang), so it stays in the fast tier.
"""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

from conftest_helpers_layout import eagle_tensors, flat_config, write_json, write_safetensors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_eagle3.checkpoint.prestart import prestart_check
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.plan import LaunchOptions, plan_launch

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**13), 10**13), st.floats(allow_nan=True),
    st.text(max_size=8), st.lists(st.integers(-3, 12), max_size=5),
)  # fmt: skip


def mostly(valid, junk=JUNK):
    """Valid most of the time, so the cases reach deep into planning; junk the rest."""
    # one_of(valid, valid, valid, junk) would not do (equal branches merge), nor integers
    # (Hypothesis favours their bounds)
    return st.sampled_from([False] * 7 + [True]).flatmap(lambda bad: junk if bad else valid)


IDS = st.one_of(JUNK, st.lists(st.one_of(st.integers(-3, 12), st.booleans(), st.floats()),
                               max_size=6))  # fmt: skip
TAPS = st.one_of(
    st.none(),
    st.lists(st.sampled_from(["embed", "layer:0", "layer:2", "layer:5", "layer:7", "layer:9",
                              "layer:-1", "Layer:2", "", "embed "]), max_size=5)
    .map(",".join),
    st.text(max_size=12),
)  # fmt: skip


def _write_case(root: Path, target_cfg: dict, draft_cfg: dict, tensors: dict) -> list[str]:
    target = write_json(root / "t" / "config.json", target_cfg).parent
    write_json(root / "d" / "config.json", draft_cfg)
    write_safetensors(root / "d" / "model.safetensors", tensors)
    return ["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(root / "d")]  # fmt: skip


def _plan_or_one_line(argv: list[str], root: Path, layout: str | None = None) -> None:
    opts = LaunchOptions(hidden_state_layout=layout, cache_dir=root / "cache")
    try:
        plan_launch(argv, opts)
    except WiringError as err:
        text = str(err)
        assert "\n" not in text and len(text) < 2500, text[:300]


ARCHS = mostly(st.sampled_from(["DeepseekV3ForCausalLM", "LlamaForCausalLM", "GptOssForCausalLM"]),
               st.sampled_from(["MadeUp", 7]))  # fmt: skip


@FUZZ
@given(layers=mostly(st.integers(6, 12), st.one_of(st.integers(-2, 5), JUNK)),
       hidden=mostly(st.just(16)),
       ids=mostly(st.sampled_from([[-1, 2, 5], [-1, 1, 4], [5, -1, 2], [0, 3, 6]]), IDS),
       layout=mostly(st.none(), TAPS),
       fc_in=mostly(st.just(48), st.sampled_from([16, 100])), vocab=mostly(st.just(32)),
       arch=ARCHS)  # fmt: skip
def test_mutated_configs_end_in_a_plan_or_one_line(layers, hidden, ids, layout, fc_in, vocab,
                                                   arch):  # fmt: skip
    target = {"architectures": [arch], "num_hidden_layers": layers, "hidden_size": hidden}
    draft = flat_config(hidden=16, ids=ids if isinstance(ids, list) else None,
                        extra={"draft_vocab_size": vocab})  # fmt: skip
    if not isinstance(ids, list):
        draft["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        argv = _write_case(root, target, draft, eagle_tensors(draft_hidden=16, fc_in=fc_in))
        _plan_or_one_line(argv, root, layout)


@FUZZ
@given(
    dtype=st.sampled_from(["F16", "F32", "I64", "BOOL", "Q9", "", "F8_E4M3"]),
    shape=st.lists(st.integers(-2, 70), max_size=3),
    offsets=st.one_of(st.none(), st.lists(st.integers(-5, 10**6), min_size=0, max_size=3)),
    cut=st.integers(0, 64),
    d2t_len=st.integers(0, 40),
)
def test_mutated_safetensors_headers_end_in_one_line(dtype, shape, offsets, cut, d2t_len):
    tensors = eagle_tensors(draft_hidden=16, fc_in=48)
    tensors["d2t"] = ("I64", [d2t_len])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        argv = _write_case(root, {"architectures": ["DeepseekV3ForCausalLM"],
                                  "num_hidden_layers": 8, "hidden_size": 16},
                           flat_config(hidden=16, ids=[-1, 2, 5]), tensors)  # fmt: skip
        path = root / "d" / "model.safetensors"
        raw = path.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        entry = header["fc.weight"]
        entry["dtype"], entry["shape"] = dtype, shape
        if offsets is not None:
            entry["data_offsets"] = offsets
        body = json.dumps(header).encode()
        body += b" " * (-len(body) % 8)
        data = raw[8 + n :]
        path.write_bytes(struct.pack("<Q", len(body)) + body + data[: max(0, len(data) - cut)])
        _plan_or_one_line(argv, root)
        try:  # the doctor's pre-start check reads the same files
            prestart_check(root / "d", root / "t")
        except WiringError as err:
            assert "\n" not in str(err)
