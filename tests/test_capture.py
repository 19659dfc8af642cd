"""`python -m sglang_eagle3.capture` against real CPU SGLang: the taps it writes equal HF's, the
data reads in speculators' own dataset class, a killed run resumes to the same data, and bad
input is refused with exit 2 and nothing written.

Two capture servers of the trained tiny target (files mode, taps layer:5,embed,layer:2 + the
verifier layer:7) serve the module, the second only for a run across both; the launch mode runs
once, in the refusals (it refuses before starting anything).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sglang_eagle3.data.manifest import read_manifest
from sglang_eagle3.testing.tiny.drafter import tiny_drafter

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

FC = "layer:5,embed,layer:2"  # not ascending, embed included
HF_INDEX = [6, 0, 3]  # hs[k] = HF output_hidden_states[k]: layer:5 = hs[6], embed = hs[0]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def capture(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_eagle3.capture", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=ENV)  # fmt: skip


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def corpus_rows(n: int, chars: int = 240) -> list[dict]:
    from sglang_eagle3.testing.tiny.corpus import iter_texts, stdlib_files

    text = "".join(t for _, t in zip(range(8), iter_texts(stdlib_files("heldout")), strict=False))
    return [{"text": text[i * chars : (i + 1) * chars]} for i in range(n)]


@pytest.fixture(scope="module")
def target() -> Path:
    return tiny_drafter().target_dir


def _files_server(factory, target: Path, folder: Path, name: str):
    return factory(
        target, ["--cpu", "--dtype", "float32", "--enable-return-aux-hidden-states",
                 "--hidden-state-layout", FC, "--disable-radix-cache",
                 "--capture-dir", str(folder)],
        name=name, module="sglang_eagle3.launch",
    )  # fmt: skip


@pytest.fixture(scope="module")
def files_server(module_server_factory, target, tmp_path_factory):
    return _files_server(module_server_factory, target,
                         tmp_path_factory.mktemp("capture-files"), "capture-files")  # fmt: skip


@pytest.fixture(scope="module")
def second_server(module_server_factory, target, tmp_path_factory):
    """Another server of the same target, writing to its own folder (several --server)."""
    return _files_server(module_server_factory, target,
                         tmp_path_factory.mktemp("capture-files-2"), "capture-files-2")  # fmt: skip


def hf_taps(target: Path, ids: torch.Tensor) -> torch.Tensor:
    """[seq, 4, hidden]: HF's hidden states at the fc taps, then the last layer's output taken
    before the final norm (HF's own last hidden state is after it)."""
    from sglang_eagle3.doctor.target import load_hf, target_config

    model = load_hf(target, target_config(target))
    pre = []
    hook = model.model.norm.register_forward_hook(lambda m, i, o: pre.append(i[0]))
    with torch.no_grad():
        hs = model(ids[None], output_hidden_states=True).hidden_states
    hook.remove()
    return torch.stack([*(hs[k][0] for k in HF_INDEX), pre[0][0]], 1)


def test_captured_taps_equal_hf_and_speculators_reads_the_data(
    files_server, target, tmp_path, figures
):
    from safetensors.torch import load_file
    from speculators.train.data import ArrowDataset
    from transformers import AutoTokenizer

    rows = [
        {"messages": [{"role": "user", "content": "def add(a, b):"},
                      {"role": "assistant", "content": "return a + b"}]},
        {"text": "import os\nimport sys\n"},
        {"messages": [{"role": "system", "content": "Python only."},
                      {"role": "user", "content": "a loop"},
                      {"role": "assistant", "content": "for i in range(3):"},
                      {"role": "user", "content": "and print"},
                      {"role": "assistant", "content": "    print(i)"}]},
    ]  # fmt: skip
    route = files_server.get("/sglang_eagle3/capture")  # files mode: the folder and verifier
    assert route["capture_dir"] and Path(route["capture_dir"]).is_dir(), route
    assert (route["verifier"], route["capture_order"][-1]) == ("layer:7", "layer:7"), route
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    out = tmp_path / "out"
    got = capture("--data", data, "--out", out, "--hidden-state-layout", FC,
                  "--server", files_server.url, "--no-progress")  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    worst = 0.0
    for i in range(len(rows)):
        f = load_file(str(out / "hidden_states" / f"hs_{i}.safetensors"))
        want = hf_taps(target, f["token_ids"])
        assert f["hidden_states"].shape == want.shape
        worst = max(worst, (f["hidden_states"] - want).abs().max().item())
    # the right taps agree to fp32 noise; a tap one layer off differs by ~0.05 (test_family_capture)
    assert worst < 1e-4
    figures.record("capture: max |diff| file taps (fc + pre-norm verifier) vs HF", f"{worst:.1e}")
    m = read_manifest(out)
    assert (m.fc_taps, m.verifier, m.samples) == (tuple(FC.split(",")), "layer:7", 3)
    assert m.target.architecture == "DeepseekV3ForCausalLM" and m.dtype == "float32"
    # speculators' own reader: fc input, verifier and the loss masks
    ds = ArrowDataset(4096, str(out), on_missing="raise", hidden_states_dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(target))
    for i, row in enumerate(rows):
        item = ds._get_raw_data(i)
        f = load_file(str(out / "hidden_states" / f"hs_{i}.safetensors"))
        assert torch.equal(item["hidden_states"], f["hidden_states"][:, :-1].flatten(1))
        assert torch.equal(item["verifier_last_hidden_states"], f["hidden_states"][:, -1])
        masked = tok.decode(item["input_ids"][item["loss_mask"].bool()])
        if "text" in row:
            assert bool(item["loss_mask"].all())
        else:  # the assistant turns, and nothing the user said
            said = [m["content"] for m in row["messages"] if m["role"] != "assistant"]
            for m in row["messages"]:
                if m["role"] == "assistant":
                    assert m["content"].strip() in masked
            assert not any(s in masked for s in said), masked
    # a request without the capture rid still gets stock JSON rows: 3 taps + the verifier
    plain = files_server.post("/generate", {"text": "x = 1", "return_hidden_states": True,
                                            "sampling_params": {"max_new_tokens": 1}})  # fmt: skip
    assert len(plain["meta_info"]["hidden_states"][0][0]) == 4 * 128


def test_a_killed_capture_resumes_to_the_same_data(files_server, second_server, tmp_path):
    """The uninterrupted run uses two servers (each writes its own files, one index is
    built), the killed and resumed one a single server: the same data either way."""
    from safetensors.torch import load_file

    from sglang_eagle3.data.arrow import read_rows

    data = write_jsonl(tmp_path / "data.jsonl", corpus_rows(48))
    common = ["--data", data, "--hidden-state-layout", FC, "--server", files_server.url,
              "--concurrency", "1", "--no-progress"]  # fmt: skip
    whole = capture(*common, "--server", second_server.url, "--out", tmp_path / "whole", "--json")
    assert whole.returncode == 0, whole.stderr[-3000:]
    split = json.loads(whole.stdout)["per_server"]
    assert split == [{"url": files_server.url, "samples": 24},
                     {"url": second_server.url, "samples": 24}]  # fmt: skip
    for srv in (files_server, second_server):  # every file adopted from both folders
        assert not list(Path(srv.get("/sglang_eagle3/capture")["capture_dir"]).iterdir())
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "sglang_eagle3.capture", *map(str, common),
                             "--out", str(out)], env=ENV, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 120
    while len(list((out / "hidden_states").glob("hs_*"))) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = len(list((out / "hidden_states").glob("hs_*")))
    assert 6 <= before < 48 and not (out / "state.json").exists()
    again = capture(*common, "--out", out)  # no --resume: refused, nothing touched
    assert again.returncode == 2 and "--resume" in again.stderr
    resumed = capture(*common, "--out", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "already in" in resumed.stdout and "(0 already in)" not in resumed.stdout
    names = sorted(p.name for p in (out / "hidden_states").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "whole" / "hidden_states").iterdir())
    assert len(names) == 48
    for name in names:
        a = load_file(str(tmp_path / "whole" / "hidden_states" / name))
        b = load_file(str(out / "hidden_states" / name))
        assert torch.equal(a["token_ids"], b["token_ids"])
        assert a["hidden_states"].shape == b["hidden_states"].shape
        assert (a["hidden_states"] - b["hidden_states"]).abs().max() < 1e-4
    rows_a = [(i.tolist(), m.tolist()) for _, i, m in read_rows(tmp_path / "whole")]
    assert rows_a == [(i.tolist(), m.tolist()) for _, i, m in read_rows(out)]
    assert read_manifest(out) == read_manifest(tmp_path / "whole")
    assert not list((out / ".capture").glob("incoming/*"))
    # resuming a complete set starts no server (launch mode: none is running for it)
    done = capture("--data", data, "--hidden-state-layout", FC, "--model-path",
                   files_server.argv[files_server.argv.index("--model-path") + 1], "--cpu",
                   "--out", out, "--resume", "--no-progress", timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("nothing to capture: all 48 samples were already in")
    assert "(no server started)" in done.stdout and "None" not in done.stdout
    assert not (out / ".capture" / "capture-server.log").exists()


def test_bad_input_is_one_message_and_exit_2_with_nothing_written(
    files_server, plain_tiny_server, target, tmp_path, capsys
):
    """In process, as test_more_bad_input_before_any_server (the interpreter's exit code is
    test_a_killed_capture_resumes_to_the_same_data's refused re-run)."""
    from sglang_eagle3.capture.cli import main

    good = write_jsonl(tmp_path / "good.jsonl", corpus_rows(2))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n\n{"messages": [{"role": "user"}]}\n', encoding="utf-8")
    mask = write_jsonl(tmp_path / "mask.jsonl", [{"input_ids": [5, 6, 7], "loss_mask": [1, 0]}])
    vocab = write_jsonl(tmp_path / "vocab.jsonl", [{"input_ids": [5, 10**7]}])
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    srv = ["--server", files_server.url]
    cases = {
        "cannot capture": (["--data", good, "--hidden-state-layout", "layer:12,embed",
                            "--model-path", target, "--cpu"], "layer:12"),
        "line number": (["--data", bad, "--hidden-state-layout", FC, *srv], "line 3"),
        "not empty": (["--data", good, "--hidden-state-layout", FC, *srv], "not empty"),
        "not capture mode": (["--data", good, "--hidden-state-layout", FC, "--server",
                              plain_tiny_server.url], "capture"),
        "other taps": (["--data", good, "--hidden-state-layout", "embed,layer:2", *srv],
                       "layer:5, embed, layer:2"),
        "disk": (["--data", good, "--hidden-state-layout", FC, *srv, "--keep-free", "1e12"],
                 "GiB"),
        "loss mask": (["--data", mask, "--hidden-state-layout", FC, *srv],
                      'line 1: "loss_mask" must be a list of 3'),
        "vocabulary": (["--data", vocab, "--hidden-state-layout", FC, *srv],
                       "input id 10000000 is outside the target's vocabulary"),
        "server twice": (["--data", good, "--hidden-state-layout", FC, *srv, *srv],
                         "given twice"),
        "launcher flag": (["--data", good, "--hidden-state-layout", FC, "--model-path", target,
                           "--cpu", "--training-data", tmp_path], "this launch serves no draft"),
    }  # fmt: skip
    for name, (args, words) in cases.items():
        out = used if name == "not empty" else tmp_path / f"out-{name.replace(' ', '-')}"
        code = main([*map(str, args), "--out", str(out), "--no-progress"])
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 2, (name, lines[-20:])
        assert len(lines) == 1 and lines[0].startswith("python -m sglang_eagle3.capture: error:")
        assert words in lines[0], (name, lines[0])
        if name == "not empty":
            assert sorted(p.name for p in used.iterdir()) == ["keep.txt"]
        else:
            assert not out.exists(), name


def test_more_bad_input_before_any_server(target, tmp_path, capsys):
    """In process (no interpreter start each): each refused with one line, exit 2, before a
    server starts, and nothing left that blocks a re-run."""
    import socket

    from sglang_eagle3.capture.cli import main

    good = write_jsonl(tmp_path / "good.jsonl", corpus_rows(2))
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
                                                           "content": "yo"}]}  # fmt: skip
    role = write_jsonl(
        tmp_path / "role.jsonl",
        [
            {
                "messages": [
                    {"role": "customer", "content": "hi"},
                    {"role": "assistant", "content": "yo"},
                ]
            }
        ],
    )
    chats = write_jsonl(tmp_path / "chats.jsonl", [chat])
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    launch = ["--model-path", str(target), "--cpu"]
    cases = {
        "port taken": ([*launch, "--port", str(taken.getsockname()[1])], "is taken on"),
        "port range": ([*launch, "--port", "70000"], "is not a TCP port (1-65535)"),
        "host": ([*launch, "--host", "0.0.0.0"], "--host: the capture server is driven"),
        "out is a file": ([*launch], "--out is a file, not a directory"),
        "out unwritable": ([*launch], "cannot write in /proc"),
        "keep-free nan": ([*launch, "--keep-free", "nan"], "--keep-free must be a number"),
        "timeout 0": ([*launch, "--request-timeout", "0"], "--request-timeout must be"),
        "no chats": ([*launch, "--regenerate"], "no line holds \"messages\""),
        "regen params": ([*launch, "--regenerate", "--regenerate-params",
                          '{"max_new_tokens": -5}'], "max_new_tokens -5 must be an int >= 1"),
        "role": ([*launch], "role 'customer' is not one SGLang's chat API takes"),
    }  # fmt: skip
    outs = {"out is a file": a_file, "out unwritable": Path("/proc/sglang_eagle3_x")}
    data = {"role": role, "regen params": chats}
    try:
        for name, (args, words) in cases.items():
            out = outs.get(name, tmp_path / f"out-{name.replace(' ', '-')}")
            code = main(["--data", str(data.get(name, good)), "--hidden-state-layout", FC,
                         "--out", str(out), "--no-progress", *args])  # fmt: skip
            err = capsys.readouterr().err.strip().splitlines()
            assert code == 2 and len(err) == 1, (name, err)
            assert words in err[0], (name, err[0])
            assert a_file.read_text() == "mine"
            assert name in outs or not out.exists(), name
    finally:
        taken.close()


def test_capture_roles_are_sglangs_chat_roles():
    import typing

    from sglang.srt.entrypoints.openai import protocol

    from sglang_eagle3.capture.inputs import CHAT_ROLES

    assert set(CHAT_ROLES) == {"user", *typing.get_args(protocol._GenericMessageRole)}


def test_regenerate_captures_the_targets_own_replies(files_server, target, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from sglang_eagle3.data.arrow import read_rows

    rows = [{"messages": [{"role": "user", "content": "def parse(text):"},
                          {"role": "assistant", "content": "a reply the target never gave"}]},
            {"text": "import re\n"},
            {"input_ids": [3, 9, 4, 11], "loss_mask": [0, 1, 1, 0]}]  # fmt: skip
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    out = tmp_path / "out"
    params = {"temperature": 0, "max_new_tokens": 12}
    got = capture("--data", data, "--out", out, "--hidden-state-layout", FC, "--server",
                  files_server.url, "--regenerate", "--regenerate-params", json.dumps(params),
                  "--no-progress")  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    tok = AutoTokenizer.from_pretrained(str(target))
    prompt = tok.apply_chat_template(rows[0]["messages"][:1], tokenize=True,
                                     add_generation_prompt=True, return_dict=False)  # fmt: skip
    reply = files_server.post("/generate", {"input_ids": prompt, "sampling_params": params})
    saved = json.loads((out / ".capture" / "regenerated" / "0.json").read_text())
    assert saved["messages"][1] == {"role": "assistant", "content": reply["text"]}
    want = tok.apply_chat_template(saved["messages"], tokenize=True, return_dict=False)
    assert load_file(str(out / "hidden_states" / "hs_0.safetensors"))["token_ids"].tolist() == want
    assert not (out / ".capture" / "regenerated" / "1.json").exists()  # text is kept as it is
    assert read_manifest(out).samples == 3
    # token ids given as they are, with their loss mask
    assert [(i.tolist(), m.tolist()) for _, i, m in read_rows(out)][2] == (
        [3, 9, 4, 11],
        [0, 1, 1, 0],
    )
