"""The doctor's clear refusals of bad input, and what it does with unusual input, on random
weights (fast: no training); the serving walk it replays."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from sglang_eagle3.data.train_data import TrainDataWriter
from sglang_eagle3.doctor.cli import main
from sglang_eagle3.layout.taps import Tap


@pytest.fixture(scope="module")
def random_draft(tmp_path_factory):
    pytest.importorskip("speculators.models.eagle3")
    try:
        from test_draft_forward import speculators_model
    except ImportError:  # run from elsewhere with the repository root on sys.path
        from tests.test_draft_forward import speculators_model

    d = tmp_path_factory.mktemp("random_draft")
    speculators_model(True).save_pretrained(str(d))  # hidden 64, ids [0, 3, 6]
    return d


def write_data(path: Path, *, taps: list[str], hidden: int = 64, n: int = 2) -> Path:
    with TrainDataWriter(path, taps=taps, num_layers=8) as w:
        for _ in range(n):
            w.add(torch.randn(16, len(taps), hidden), torch.randint(0, 1024, (16,)))
    return path


def run_main(argv, capsys) -> tuple[int, str]:
    code = main([*argv, "--no-progress", "--max-tokens", "32"])
    err = capsys.readouterr().err
    return code, err


def test_bad_inputs_exit_2_with_one_clear_line(random_draft, tmp_path, capsys):
    good_taps = ["embed", "layer:2", "layer:5", "layer:7"]
    ok = write_data(tmp_path / "ok", taps=good_taps)
    code, err = run_main(["--draft", str(random_draft), "--data", str(ok)], capsys)
    assert code in (0, 1) and err == ""

    wide = write_data(tmp_path / "wide", taps=good_taps, hidden=128)
    code, err = run_main(["--draft", str(random_draft), "--data", str(wide)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "config.json" in err and "64" in err and "128" in err and "Fix:" in err

    few = write_data(tmp_path / "few", taps=["embed", "layer:2"])
    code, err = run_main(["--draft", str(random_draft), "--data", str(few)], capsys)
    assert code == 2 and str(few) in err and "stores 2 taps" in err and "takes 3" in err

    broken = tmp_path / "broken"
    shutil.copytree(ok, broken)
    victim = broken / "hidden_states" / "hs_1.safetensors"
    victim.write_bytes(victim.read_bytes()[:64])
    code, err = run_main(["--draft", str(random_draft), "--data", str(broken)], capsys)
    assert code == 2 and str(victim) in err

    bad_cfg = tmp_path / "bad_cfg"
    shutil.copytree(random_draft, bad_cfg)
    (bad_cfg / "config.json").write_text("{not json")
    code, err = run_main(["--draft", str(bad_cfg), "--data", str(ok)], capsys)
    assert code == 2 and str(bad_cfg / "config.json") in err

    pt = tmp_path / "pt"
    pt.mkdir()
    torch.save({"input_ids": torch.arange(8), "hidden_states": torch.randn(8, 4, 64)}, pt / "a.pt")
    code, err = run_main(["--draft", str(random_draft), "--data", str(pt)], capsys)
    assert code == 2 and "--allow-pickle" in err and str(pt / "a.pt") in err
    code, err = run_main(
        ["--draft", str(random_draft), "--data", str(pt), "--allow-pickle", "--num-layers", "8"],
        capsys,
    )
    assert code in (0, 1), err

    no_layers = tmp_path / "no_layers"
    with TrainDataWriter(no_layers, taps=None) as w:
        w.add(torch.randn(8, 4, 64), torch.arange(8))
    code, err = run_main(["--draft", str(random_draft), "--data", str(no_layers)], capsys)
    assert code == 2 and "--num-layers" in err

    tree = ["--draft", str(random_draft), "--data", str(ok), "--topk", "2", "--draft-tokens"]
    code, err = run_main([*tree, "12"], capsys)
    assert code == 2 and err.count("\n") == 1 and "has 2 .. 11 draft tokens" in err
    code, err = run_main([*tree, "6"], capsys)
    assert code in (0, 1) and err == ""


def test_unknown_stored_taps_fall_back_to_speculators_convention(random_draft, tmp_path, capsys):
    plain = tmp_path / "plain"
    with TrainDataWriter(plain, taps=None) as w:
        w.add(torch.randn(16, 4, 64), torch.randint(0, 1024, (16,)))
    code = main(
        ["--draft", str(random_draft), "--data", str(plain), "--num-layers", "8", "--json"]
        + ["--no-progress", "--max-tokens", "16"]
    )
    report = json.loads(capsys.readouterr().out)
    assert code in (0, 1)
    assert report["data"]["stored_taps"] == ["embed", "layer:2", "layer:5", "layer:7"]
    assert "assumed" in report["data"]["stored_taps_source"]
    assert Tap.parse("layer:7").hf_index == 8


def test_serving_walk_jumps_past_accepted_drafts_and_the_bonus_token():
    from sglang_eagle3.doctor.evaluate import serving_walk

    # rows:      0  1  2  3  4  5  6  7
    depth = [2, 0, 0, 3, 1, 0, 1, 0]
    # verify at 0 (2 accepted) -> 3 (3 accepted) -> 7 (0): 3 verifies, 5 drafts accepted
    assert serving_walk([True] * 8, depth) == (3, 5)
    scored = [False, True, True, True, True, True, True, True]
    # 0 skipped; verify at 1 (0) -> 2 (0) -> 3 (3) -> 7 (0)
    assert serving_walk(scored, depth) == (4, 3)
    assert serving_walk([], []) == (0, 0)


def test_ambiguous_ids_are_scored_without_a_settings_table(random_draft, tmp_path, capsys):
    """ids that read validly in two conventions: the doctor scores both readings (its notes
    say why) instead of failing on the settings table, which needs a resolved draft."""
    from sglang_eagle3.checkpoint.draft_readers import read_draft
    from sglang_eagle3.checkpoint.flat_draft import write_flat_draft

    spec = read_draft(random_draft, num_layers=8, target_hidden_size=64)
    flat = write_flat_draft(spec, random_draft, tmp_path / "flat")
    cfg = json.loads((flat / "config.json").read_text())
    cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [2, 4, 5]}
    (flat / "config.json").write_text(json.dumps(cfg))
    data = write_data(tmp_path / "data", taps=["embed", "layer:2", "layer:5", "layer:7"])
    code = main(["--draft", str(flat), "--data", str(data), "--json", "--no-progress",
                 "--max-tokens", "32"])  # fmt: skip
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    report = json.loads(out.out)
    assert report["settings"] == []
    assert any("convention" in n for n in report["notes"]), report["notes"]
