"""Fuzzing the launcher's and the doctor's input handling with mutated configs, headers and
flags: every case ends in a plan or in one WiringError line, never in another exception; the
doctor's own command line ends in argparse's usage error or in exit 2 with one line.

Pure logic over header-only files and 8 tokens of zero training data (no SGLang; the doctor's
cases stop at the draft's incomplete zero weights, before anything is scored): fast tier.
"""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import pytest
from conftest_helpers_layout import eagle_tensors, flat_config, write_json, write_safetensors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_eagle3.checkpoint.prestart import prestart_check
from sglang_eagle3.doctor.cli import main as doctor_main
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


# ---- the doctor's own command line ---------------------------------------------------

DOCTOR = "python -m sglang_eagle3.doctor"
# capsys is reset by hand for each example
DOCTOR_FUZZ = settings(FUZZ, max_examples=120,
                       suppress_health_check=[HealthCheck.too_slow,
                                              HealthCheck.function_scoped_fixture])  # fmt: skip
TARGET_CFG = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 8,
              "hidden_size": 16, "vocab_size": 64}  # fmt: skip


def number(lo: int, hi: int):
    """An integer option's value: in range most of the time, else any integer or not one."""
    junk = st.sampled_from(["", "x", "1.5", "0x10", " 2", "-"])
    return mostly(st.integers(lo, hi).map(str), st.integers(-(10**15), 10**15).map(str) | junk)


VALUES = {
    "--steps": number(1, 8), "--max-tokens": number(1, 64), "--topk": number(1, 3),
    "--draft-tokens": number(2, 9), "--threads": number(1, 2), "--num-layers": number(8, 8),
    "--served-by": st.sampled_from(["plugin", "stock", "Plugin", "", "sglang"]),
    "--dtype": st.sampled_from(["auto", "float32", "bfloat16", "float16", "int8", ""]),
    "--data-taps": st.just("embed,layer:2,layer:5,layer:7") | TAPS.map(str),
    "--device": st.sampled_from(["cpu", "meta", "bogus"]),
}  # fmt: skip
LONE = ["--json", "--search", "--allow-pickle", "--no-progress", "--unknown", "--t", "--dr",
        "stray", "--", "--json=1", "-x"]  # fmt: skip


def doctor_draft(root: Path, cfg: dict | None = None, drop: tuple[str, ...] = ()) -> Path:
    """A flat draft (taps embed, layer:2, layer:5 of 8) of zero weights, only part of its
    decoder layer: the doctor stops loading it with one line, after every input check."""
    d = write_json(root / "config.json", cfg or flat_config(hidden=16, ids=[-1, 2, 5])).parent
    tensors = {**eagle_tensors(draft_hidden=16, fc_in=48), "embed_tokens.weight": ("F16", [64, 16])}
    write_safetensors(d / "model.safetensors", {k: v for k, v in tensors.items() if k not in drop})
    return d


@pytest.fixture(scope="module")
def doctor_files(tmp_path_factory) -> dict[str, Path]:
    """Tiny real data (taps embed, layer:2, layer:5, layer:7 of an 8-layer target), a draft,
    a config-only target and paths that do not exist."""
    import torch

    from sglang_eagle3.data.writer import TrainDataWriter

    root = tmp_path_factory.mktemp("doctor_fuzz")
    with TrainDataWriter(root / "data", taps=["embed", "layer:2", "layer:5", "layer:7"],
                         num_layers=8) as w:  # fmt: skip
        w.add(torch.zeros(8, 4, 16), torch.arange(8))
    return {"data": root / "data", "draft": doctor_draft(root / "draft"),
            "target": write_json(root / "t" / "config.json", TARGET_CFG).parent,
            "missing": root / "missing"}  # fmt: skip


def doctor_ends_cleanly(argv: list[str], capsys) -> None:
    """Exit 2 with one `sglang_eagle3.doctor:` line, argparse's usage error, or a report."""
    capsys.readouterr()
    try:
        code = doctor_main(argv)
    except SystemExit as exc:  # argparse refuses before the doctor: usage, then one error line
        err = capsys.readouterr().err
        assert exc.code == 2 and err.splitlines()[-1].startswith(f"{DOCTOR}: error: "), err
        return
    err = capsys.readouterr().err
    if code == 2:
        assert err.startswith("sglang_eagle3.doctor: ") and err.count("\n") == 1, err
        assert len(err) < 2500, err[:300]
    else:
        assert code in (0, 1), (code, err)


@DOCTOR_FUZZ
@given(
    data=mostly(st.just("data"), st.just("missing")),
    draft=mostly(st.just("draft"), st.sampled_from(["missing", "data", "target"])),
    target=st.sampled_from([None, None, "target", "missing", "draft"]),
    options=st.fixed_dictionaries({}, optional=VALUES),
    lone=mostly(st.just([]), st.lists(st.sampled_from(LONE), min_size=1, max_size=2)),
    cut=mostly(st.just(False), st.just(True)),
    order=st.randoms(use_true_random=False),
)
def test_mutated_doctor_command_lines_end_in_one_line(
    doctor_files, capsys, data, draft, target, options, lone, cut, order
):  # fmt: skip
    argv = ["--draft", str(doctor_files[draft]), "--data", str(doctor_files[data])]
    if target is not None:
        argv += ["--target", str(doctor_files[target])]
    pairs = [[o, v] for o, v in options.items()] + [[t] for t in lone]
    order.shuffle(pairs)
    argv += [tok for pair in pairs for tok in pair]
    doctor_ends_cleanly(argv[:-1] if cut and pairs else argv, capsys)  # cut: a value missing


NAMES = ["embed", "layer:0", "layer:2", "layer:5", "layer:7", "layer:8", "layer:-1", "Layer:2",
         "embed ", "", "layer:02", "layer:2.0", "layer:+5", "layer:٣"]  # fmt: skip


@settings(DOCTOR_FUZZ, max_examples=60)
@given(taps=st.lists(st.sampled_from(NAMES), min_size=4, max_size=4).map(",".join)
       | TAPS.map(str), sep=st.sampled_from([",", ", ", ";"]))  # fmt: skip
def test_mutated_data_taps_end_in_one_line(doctor_files, capsys, taps, sep):
    argv = ["--draft", str(doctor_files["draft"]), "--data", str(doctor_files["data"]),
            "--num-layers", "8", "--data-taps", taps.replace(",", sep)]  # fmt: skip
    doctor_ends_cleanly(argv, capsys)


def test_data_taps_naming_one_tap_twice_end_in_one_line(doctor_files, capsys):
    argv = ["--draft", str(doctor_files["draft"]), "--data", str(doctor_files["data"]),
            "--num-layers", "8", "--data-taps", "embed,embed,layer:2,layer:5"]  # fmt: skip
    doctor_ends_cleanly(argv, capsys)


@DOCTOR_FUZZ
@given(layers=mostly(st.just(1), JUNK), hidden=mostly(st.just(16), JUNK),
       ids=mostly(st.sampled_from([[-1, 2, 5], [0, 3, 6], [5, -1, 2]]), IDS),
       vocab=mostly(st.just(64), st.one_of(st.sampled_from([32, 63, 100]), JUNK)),
       draft_vocab=mostly(st.sampled_from([32] * 4 + [64, None]), JUNK),
       target_hidden=mostly(st.just("absent"), st.one_of(st.just(None), JUNK)),
       tied=mostly(st.just(False), JUNK),
       drop=st.lists(st.sampled_from(["d2t", "t2d", "lm_head.weight", "embed_tokens.weight",
                                      "fc.weight"]), max_size=2, unique=True),
       with_target=st.booleans())  # fmt: skip
def test_mutated_draft_configs_through_the_doctor_end_in_one_line(
    doctor_files, capsys, layers, hidden, ids, vocab, draft_vocab, target_hidden, tied, drop,
    with_target,
):  # fmt: skip
    cfg = flat_config(hidden=16, ids=ids if isinstance(ids, list) else None,
                      target_hidden_size=target_hidden)  # fmt: skip
    if not isinstance(ids, list):
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
    cfg.update(num_hidden_layers=layers, hidden_size=hidden, vocab_size=vocab,
               draft_vocab_size=draft_vocab, tie_word_embeddings=tied)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        draft = doctor_draft(Path(tmp), cfg, tuple(drop))
        where = ["--target", str(doctor_files["target"])] if with_target else ["--num-layers", "8"]
        argv = ["--draft", str(draft), "--data", str(doctor_files["data"]), *where]
        doctor_ends_cleanly([*argv, "--no-progress", "--max-tokens", "16"], capsys)


# --- what a --server answers, and prompts files -------------------------------------------

ROUTE_GOOD = {"sglang_eagle3": "x", "sglang": "0.5.23", "capture_only": True,
              "layout": ["embed", "layer:2"], "capture_order": ["embed", "layer:2"],
              "num_layers": 8, "hidden_size": 64, "family": "deepseek_v2",
              "source": "env"}  # fmt: skip
ROUTE_BODIES = st.one_of(
    st.binary(max_size=64),
    st.recursive(JUNK, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
    .map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(sorted(ROUTE_GOOD)), JUNK, max_size=3)
    .map(lambda bad: json.dumps({**ROUTE_GOOD, **bad}).encode()),
)  # fmt: skip


@pytest.fixture(scope="module")
def answering_server():
    """One loopback HTTP server whose /sglang_eagle3/capture answers ``body["now"]``."""
    from http.server import BaseHTTPRequestHandler

    from loopback import serving

    body = {"now": b""}

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body["now"])))
            self.end_headers()
            self.wfile.write(body["now"])

        def log_message(self, *args) -> None:
            pass

    with serving(Answer) as url:
        yield url, body


@settings(FUZZ, max_examples=200)
@given(raw=ROUTE_BODIES)
def test_any_capture_route_answer_is_read_or_refused_in_one_line(answering_server, raw):
    """Whatever the capture route answers, the doctor reads a state with the fields it uses
    (the types it converts) or raises one WiringError naming --server."""
    from sglang_eagle3.doctor.server_capture import STATE_FIELDS, ServerClient, server_capture_state

    url, body = answering_server
    body["now"] = raw
    try:
        state = server_capture_state(ServerClient(url, timeout=5))
    except WiringError as err:
        assert err.path == "--server" and "\n" not in str(err), str(err)
        return
    for name, kind in STATE_FIELDS.items():
        assert isinstance(state[name], kind) and not isinstance(state[name], bool), state
    assert int(state["num_layers"]) >= 1 and all(isinstance(t, str) for t in state["capture_order"])


PROMPT_LINES = st.one_of(
    st.text(max_size=20),
    st.recursive(JUNK, lambda inner: st.dictionaries(st.sampled_from(["text", "prompt", "x"]),
                                                     inner, max_size=2), max_leaves=4)
    .map(json.dumps),
    st.text(max_size=20).map(lambda t: json.dumps({"text": t})),
)  # fmt: skip


@settings(FUZZ, max_examples=200)
@given(lines=st.lists(PROMPT_LINES, max_size=4), tail=st.binary(max_size=8))
def test_any_prompts_file_is_read_or_refused_in_one_line(lines, tail):
    """Arbitrary JSONL (and bytes) as --prompts (the doctor's and the tuner's reader): a list
    of strings, or one WiringError that names the file and says the format."""
    from sglang_eagle3.data.prompts import read_prompts_checked

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prompts.jsonl"
        path.write_bytes("\n".join(lines).encode() + tail)
        try:
            got = read_prompts_checked(str(path))
        except WiringError as err:
            assert str(path) in str(err) and "\n" not in str(err) and err.fix, str(err)
            return
    assert got and all(isinstance(p, str) for p in got)
