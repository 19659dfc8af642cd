"""A data set's capture manifest against a draft's layout: `python -m sglang_eagle3.layout stamp`
writes the data's taps into a copy of the draft; the launcher (--training-data) and the doctor
(--data) refuse a draft whose layout is not the data's. Fast: the shipped tiny drafters (copied
first, read only), fake-weight flat drafts, random hidden states; no server, no training."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest_helpers_layout import flat_config, make_flat_draft, run_main

from sglang_eagle3 import SGLANG_VERSION, __version__
from sglang_eagle3.capture.stamp import main as stamp_main
from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.data.arrow import META_NAME
from sglang_eagle3.data.manifest import DataManifest, TargetRecord, config_sha256, sidecar
from sglang_eagle3.data.writer import TrainDataWriter
from sglang_eagle3.doctor.cli import main as doctor_main
from sglang_eagle3.launch.cli import main as launch_main
from sglang_eagle3.layout.families import family_for
from sglang_eagle3.testing.tiny.embedded import HERE as SHIPPED

TARGET = SHIPPED / "target"  # the trained tiny DeepSeek-V3 target: 8 layers, hidden 128
HIDDEN, LAYERS, VERIFIER = 128, 8, "layer:7"
DRAFT_TAPS = ["embed", "layer:2", "layer:5"]  # what every draft here declares (or could)
DATA_TAPS = ["embed", "layer:3", "layer:5"]  # what the data says the fc was trained on
STAMP = "python -m sglang_eagle3.layout: error:"


def write_data(path: Path, fc: list[str] | None, *, stored: list[str] | None = None,
               layers: int = LAYERS, architecture: str | None = None) -> Path:  # fmt: skip
    """Two samples of random hidden states stored as speculators does (fc taps, verifier
    last); ``fc``: the manifest's fc taps (None: data without a manifest); ``layers`` and
    ``architecture``: the target the manifest says it was captured from (default: TARGET)."""
    taps = stored or [*(fc or DATA_TAPS), VERIFIER]
    with TrainDataWriter(path, taps=taps, num_layers=LAYERS) as w:
        for _ in range(2):
            w.add(torch.randn(16, len(taps), HIDDEN), torch.randint(0, 1024, (16,)))
    if fc is not None:  # what python -m sglang_eagle3.capture writes next to the data
        cfg = json.loads((TARGET / "config.json").read_text())
        target = TargetRecord(architecture=architecture or cfg["architectures"][0],
                              num_layers=layers,
                              hidden_size=HIDDEN, config_sha256=config_sha256(cfg))  # fmt: skip
        manifest = DataManifest(fc_taps=tuple(fc), verifier=VERIFIER, target=target,
                                sglang=SGLANG_VERSION, sglang_eagle3=__version__,
                                dtype="float32", samples=2, tokens=32)  # fmt: skip
        (path / META_NAME).write_text(json.dumps(sidecar(manifest), indent=2) + "\n")
    return path


def digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> dict[str, Path]:
    """Copies of the shipped drafters: speculators (ids [0, 3, 6]) and MLA (explicit layout)."""
    root = tmp_path_factory.mktemp("shipped")
    kinds = (("speculators", "drafter"), ("sglang-mla", "mla_drafter"))
    return {
        kind: Path(shutil.copytree(SHIPPED / src / "draft", root / kind)) for kind, src in kinds
    }


def make_draft(kind: str, tmp: Path, shipped: dict[str, Path]) -> Path:
    if kind in shipped:
        return shipped[kind]
    if kind == "sglang-flat":  # ids valid in both conventions: the case stamp is for
        return make_flat_draft(tmp / kind, flat_config(hidden=HIDDEN, ids=[2, 4, 5]),
                               fc_in=3 * HIDDEN)  # fmt: skip
    return make_flat_draft(tmp / kind, flat_config(hidden=HIDDEN, ids=[-1, 2, 5]),
                           fc_in=3 * HIDDEN, prefix="midlayer.")  # fmt: skip


def resolved(draft: Path) -> tuple[str, list[str]]:
    spec = read_draft(draft, num_layers=LAYERS, target_hidden_size=HIDDEN,
                      family=family_for("DeepseekV3ForCausalLM"))  # fmt: skip
    assert spec.layout is not None
    return spec.format, [str(t) for t in spec.layout.taps]


def stamp(capsys, *args: Path | str) -> tuple[int, str, str]:
    code = stamp_main(["stamp", *(str(a) for a in args)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("kind", ["speculators", "sglang-flat", "specforge", "sglang-mla"])
def test_stamp_writes_a_copy_that_resolves_to_the_data_taps(kind, tmp_path, shipped, capsys):
    draft = make_draft(kind, tmp_path, shipped)
    data = write_data(tmp_path / "data", DATA_TAPS)
    before = digest(draft)
    out = tmp_path / "stamped"
    code, text, err = stamp(capsys, "--draft", draft, "--data", data, "--out", out)
    assert code == 0 and err == "", err
    assert digest(draft) == before, "stamp wrote into the draft"
    assert resolved(out) == (kind, DATA_TAPS)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eagle_config"]["hidden_state_layout"] == DATA_TAPS
    assert cfg["eagle_config"]["verifier_tap"] == VERIFIER
    copied = digest(out)
    assert copied.pop("config.json") != before.pop("config.json")
    assert copied == before and not any(p.is_symlink() for p in out.rglob("*"))
    assert f"declares: {', '.join(DATA_TAPS)} (eagle_config.hidden_state_layout)" in text
    if kind == "speculators":  # its own ids keep its convention, input-to-layer
        assert cfg["eagle_aux_hidden_state_layer_ids"] == [0, 4, 6]


def test_stamp_through_the_layout_entry_point(tmp_path, shipped):
    draft = make_draft("specforge", tmp_path, shipped)
    data = write_data(tmp_path / "data", DATA_TAPS)
    out = tmp_path / "stamped"
    run = subprocess.run([sys.executable, "-m", "sglang_eagle3.layout", "stamp", "--draft",
                          str(draft), "--data", str(data), "--out", str(out)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"--speculative-draft-model-path {out} --training-data {data}" in run.stdout
    assert resolved(out) == ("specforge", DATA_TAPS)
    # the ids agree with the layout (DeepSeek's stock rule reads [0, 4, 6] as these taps)
    assert json.loads((out / "config.json").read_text())["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"
    ] == [0, 4, 6]


REFUSALS = [
    ("no manifest", "the data has no capture manifest"),
    ("out not empty", "--out exists and is not an empty directory"),
    ("out is the draft", "--out is the draft directory or inside it"),
    ("out inside the draft", "--out is the draft directory or inside it"),
    ("fc width", "the data has 3 fc taps (embed, layer:3, layer:5) of width 128 = 384 input "
     "features, but the draft's fc.weight takes 256 (2 taps of 128)"),
    ("config count", "the data's fc taps embed, layer:3, layer:5 do not fit this draft"),
    ("verifier depth", "the draft was trained against"),
]  # fmt: skip


@pytest.mark.parametrize("case,message", REFUSALS, ids=[c for c, _ in REFUSALS])
def test_stamp_refusals_exit_2_with_one_line_and_write_nothing(case, message, tmp_path, capsys):
    draft = make_flat_draft(tmp_path / "draft", flat_config(hidden=HIDDEN, ids=[-1, 2, 5]),
                            fc_in=3 * HIDDEN)  # fmt: skip
    data = write_data(tmp_path / "data", None if case == "no manifest" else DATA_TAPS)
    out = {"out is the draft": draft, "out inside the draft": draft / "sub"}.get(
        case, tmp_path / "out"
    )
    if case == "out not empty":
        (out / "keep").mkdir(parents=True)
    if case == "fc width":  # the config agrees with its weights: two taps
        make_flat_draft(draft, flat_config(hidden=HIDDEN, ids=[-1, 2]), fc_in=2 * HIDDEN)
    if case == "config count":  # weights for three taps, a config that says two
        make_flat_draft(draft, flat_config(hidden=HIDDEN, ids=[-1, 2]))
    if case == "verifier depth":  # trained against a 16-layer target; the data's has fewer
        other = tmp_path / "other-target"
        other.mkdir()
        (other / "config.json").write_text(json.dumps({
            "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 16,
            "hidden_size": HIDDEN}))  # fmt: skip
        cfg = json.loads((draft / "config.json").read_text())
        cfg["speculators_config"] = {"verifier": {"name_or_path": str(other)}}
        (draft / "config.json").write_text(json.dumps(cfg))
    before, out_before = digest(draft), digest(out) if out.exists() else None
    code, text, err = stamp(capsys, "--draft", draft, "--data", data, "--out", out)
    lines = err.splitlines()
    assert code == 2 and text == "" and len(lines) == 1, err
    assert lines[0].startswith(STAMP) and message in lines[0] and "Fix:" in lines[0], lines
    named = {"no manifest": data, "fc width": draft, "config count": draft / "config.json",
             "verifier depth": draft / "config.json"}  # fmt: skip
    assert f"{STAMP} {named.get(case, out)}: " in lines[0], lines
    assert digest(draft) == before
    assert (digest(out) if out.exists() else None) == out_before


def launch(capsys, *args: Path | str) -> tuple[int, str, str]:
    code = launch_main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def serve(draft: Path, tmp: Path) -> list[str]:
    return ["--model-path", str(TARGET), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft), "--draft-cache-dir",
            str(tmp / "cache")]  # fmt: skip


def test_launcher_refuses_a_layout_that_is_not_the_datas_before_starting(tmp_path, shipped):
    data = write_data(tmp_path / "data", DATA_TAPS)
    args = [*serve(shipped["speculators"], tmp_path), "--training-data", str(data)]
    out = run_main("sglang_eagle3.launch.cli", args, tmp_path)  # no --dry-run: a real start
    err = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(err) == 1, out.stderr
    assert err[0].startswith("python -m sglang_eagle3.launch: error:"), err
    assert "with fc taps embed, layer:3, layer:5" in err[0], err
    assert "the draft declares embed, layer:2, layer:5" in err[0], err
    assert f"python -m sglang_eagle3.layout stamp --draft {shipped['speculators']}" in err[0]
    assert not (tmp_path / "cache").exists(), "nothing is written before the check"


def test_launcher_serves_the_stamped_copy_and_notes_unchecked_data(tmp_path, shipped, capsys):
    data = write_data(tmp_path / "data", DATA_TAPS)
    out = tmp_path / "stamped"
    assert stamp(capsys, "--draft", shipped["speculators"], "--data", data, "--out", out)[0] == 0
    code, text, err = launch(capsys, "--dry-run", "--json", *serve(out, tmp_path),
                             "--training-data", data)  # fmt: skip
    assert code == 0, err
    plan = json.loads(text)
    assert plan["layout"] == DATA_TAPS
    assert (
        f"--training-data {data}: its manifest's fc taps are the served layout, captured "
        "from a DeepseekV3ForCausalLM of 8 layers, as served"
    ) in plan["notes"]
    # the same taps, captured from a deeper target: layer:5 was another tensor there
    deeper = write_data(tmp_path / "deeper", DATA_TAPS, layers=12)
    code, text, err = launch(capsys, "--dry-run", *serve(out, tmp_path), "--training-data",
                             deeper)  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert (
        f"captured from a DeepseekV3ForCausalLM of 12 layers (manifest of {deeper}), but "
        "the target here is a DeepseekV3ForCausalLM of 8 layers"
    ) in err
    assert "capture the data again from this one" in err
    bare = write_data(tmp_path / "bare", None, stored=[*DRAFT_TAPS, VERIFIER])
    code, text, err = launch(capsys, "--dry-run", *serve(shipped["speculators"], tmp_path),
                             "--training-data", bare)  # fmt: skip
    assert code == 0, err
    assert f"--training-data {bare} has no capture manifest: the layout was not checked" in text


def test_launcher_refuses_training_data_without_a_draft(tmp_path, capsys):
    data = write_data(tmp_path / "data", DATA_TAPS)
    code, text, err = launch(capsys, "--dry-run", "--model-path", TARGET,
                             "--enable-return-aux-hidden-states", "--hidden-state-layout",
                             ",".join(DATA_TAPS), "--training-data", data)  # fmt: skip
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--training-data checks the layout a draft is served with" in err


def doctor(capsys, draft: Path, data: Path, *extra: str) -> tuple[int, str, str]:
    code = doctor_main(["--draft", str(draft), "--data", str(data), "--no-progress",
                        "--max-tokens", "32", *extra])  # fmt: skip
    out = capsys.readouterr()
    return code, out.out, out.err


def test_doctor_refuses_a_draft_whose_layout_is_not_the_datas(tmp_path, shipped, capsys):
    draft = shipped["speculators"]  # embed, layer:2, layer:5
    wrong = write_data(tmp_path / "wrong", DATA_TAPS)
    code, text, err = doctor(capsys, draft, wrong)
    assert code == 2 and text == "" and len(err.splitlines()) == 1, err
    assert err.startswith("sglang_eagle3.doctor: ") and "layout stamp" in err
    assert "fc taps embed, layer:3, layer:5" in err and "declares embed, layer:2, layer:5" in err
    code, text, err = doctor(capsys, draft, wrong, "--search", "--json")
    assert code in (0, 1) and err == "", err
    assert any(n.startswith("scored anyway (--search)") for n in json.loads(text)["notes"])
    right = write_data(tmp_path / "right", DRAFT_TAPS)
    code, text, err = doctor(capsys, draft, right)
    assert code in (0, 1) and err == "", err
    # the right taps, captured from another family's target of the same depth: refused as
    # the launcher refuses it, --search or not (layer:K is another tensor there)
    llama = write_data(tmp_path / "llama", DRAFT_TAPS, architecture="LlamaForCausalLM")
    for extra in ((), ("--search",)):
        code, text, err = doctor(capsys, draft, llama, "--target", str(TARGET), *extra)
        assert code == 2 and text == "" and len(err.splitlines()) == 1, err
        want = (f"captured from a LlamaForCausalLM of 8 layers (manifest of {llama}), but the "
                f"target here is a DeepseekV3ForCausalLM of 8 layers ({TARGET})")  # fmt: skip
        assert want in err, err
    assert doctor(capsys, draft, llama)[0] in (0, 1)  # no --target: nothing to compare with
