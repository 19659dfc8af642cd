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
    code, err = run_main(
        ["--draft", str(random_draft), "--data", str(ok), "--data-taps", "embed,layer:2"], capsys
    )
    assert code == 2 and "--data-taps names 2 taps, the data stores 4" in err, err
    assert "Fix: name the data's 4 stored taps" in err

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
    assert code == 2 and err.count("\n") == 1 and "has 4 .. 11 draft tokens" in err
    assert "Fix: give --draft-tokens from 4 to 11" in err
    for flag in ("--steps", "--topk"):
        code, err = run_main(["--draft", str(random_draft), "--data", str(ok), flag, "0"], capsys)
        assert code == 2 and err.count("\n") == 1 and "at least 1 step and topk 1" in err, err
        assert "Fix: give the server's own --speculative-num-steps" in err
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


# ---- a poisoned drafter, and the pre-start checks the launcher shares ---------------


def _rewrite(src: Path, dst: Path, change) -> Path:
    """A copy of draft ``src`` whose tensors went through ``change(dict)``."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    f = dst / "model.safetensors"
    weights = load_file(str(f))
    change(weights)
    save_file(weights, str(f), metadata={"format": "pt"})
    return dst


POISONS = [("fc.weight", float("nan")), ("layers.0.mlp.down_proj.weight", float("inf"))]


@pytest.mark.parametrize("name,value", POISONS)
def test_non_finite_weights_exit_2_naming_the_tensor(random_draft, tmp_path, capsys, name, value):
    def poison(w):
        w[name] = w[name].clone()
        w[name].view(-1)[:5] = value

    bad = _rewrite(random_draft, tmp_path / "bad", poison)
    data = write_data(tmp_path / "data", taps=["embed", "layer:2", "layer:5", "layer:7"])
    code, err = run_main(["--draft", str(bad), "--data", str(data)], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{name} holds non-finite values" in err and str(bad / "model.safetensors") in err
    assert ("5 NaN" if value != value else "5 inf") in err and "Fix:" in err


def test_every_layout_at_the_floor_is_not_ok(random_draft, tmp_path, capsys):
    # fc all zeros: every layout feeds the layer exactly what the taps-zeroed floor does
    flat = _rewrite(random_draft, tmp_path / "zero_fc", lambda w: w["fc.weight"].zero_())
    data = write_data(tmp_path / "data", taps=["embed", "layer:2", "layer:5", "layer:7"])
    code = main(["--draft", str(flat), "--data", str(data), "--json", "--no-progress",
                 "--max-tokens", "32"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["exit_code"] == 1
    assert report["verdict"] == "no layout beats the floor"
    assert "at or below the taps-zeroed floor" in report["reason"]


def test_floor_verdict_rule():
    from sglang_eagle3.doctor.report import NO_TAPS, OK, _verdict

    lay = type("Lay", (), {"served_crash": None, "served": (Tap(1),), "declared": (Tap(1),),
                           "served_source": "x"})()  # fmt: skip

    def rows(served: float, floor: float) -> list[dict]:
        return [{"evaluable": True, "is_floor": False, "accuracy": served, "is_served": True,
                 "text": "layer:0", "name": "declared", "_id": 0},
                {"evaluable": True, "is_floor": True, "accuracy": floor, "is_served": False,
                 "text": "(taps zeroed: floor)", "name": "floor", "_id": 1}]  # fmt: skip

    verdict, reason, code = _verdict(rows(0.30, 0.30), {}, lay, (0.05, 4.0))
    assert (verdict, code) == (NO_TAPS, 1) and "30.0%" in reason
    verdict, _, code = _verdict(rows(0.10, 0.25), {}, lay, (0.05, 4.0))
    assert (verdict, code) == (NO_TAPS, 1)
    from sglang_eagle3.doctor.candidates import FLOOR
    from sglang_eagle3.doctor.evaluate import Result

    results = {i: Result(FLOOR) for i in (0, 1)}  # no hits: a paired z of 0
    verdict, _, code = _verdict(rows(0.50, 0.25), results, lay, (0.05, 4.0))
    assert (verdict, code) == (OK, 0)


def test_doctor_and_launcher_refuse_a_bad_d2t_with_the_same_line(random_draft, tmp_path, capsys):
    from conftest_helpers_layout import write_json

    from sglang_eagle3.launch.cli import main as launch

    def shift(w):
        w["d2t"] = w["d2t"].clone()
        w["d2t"][-1] = 10_000  # draft id 255 -> 10255, past the 1024-token vocab

    bad = _rewrite(random_draft, tmp_path / "bad_d2t", shift)
    data = write_data(tmp_path / "data", taps=["embed", "layer:2", "layer:5", "layer:7"])
    code, doctor_err = run_main(["--draft", str(bad), "--data", str(data)], capsys)
    assert code == 2 and "draft id 255 -> 10255" in doctor_err, doctor_err
    target = write_json(tmp_path / "t" / "config.json", {
        "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 8, "hidden_size": 64,
    }).parent  # fmt: skip
    code = launch(["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
                   "--speculative-draft-model-path", str(bad), "--dry-run",
                   "--draft-cache-dir", str(tmp_path / "cache")])  # fmt: skip
    launch_err = capsys.readouterr().err
    assert code == 2
    assert doctor_err.removeprefix("sglang_eagle3.doctor: ") == launch_err.removeprefix(
        "python -m sglang_eagle3.launch: error: "
    )


def test_draft_offsets_that_do_not_match_the_shapes_exit_2(random_draft, tmp_path, capsys):
    import struct

    bad = tmp_path / "bad_offsets"
    shutil.copytree(random_draft, bad)
    f = bad / "model.safetensors"
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    begin, end = header["norm.weight"]["data_offsets"]
    header["norm.weight"]["data_offsets"] = [begin, end - 4]  # one float short of its shape
    text = json.dumps(header).encode()
    f.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n :])
    data = write_data(tmp_path / "data", taps=["embed", "layer:2", "layer:5", "layer:7"])
    code, err = run_main(["--draft", str(bad), "--data", str(data)], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert str(f) in err and "'norm.weight'" in err and "Traceback" not in err


def test_a_draft_given_as_the_target_is_named_as_one(random_draft, tiny_target, tmp_path, capsys):
    """A speculators draft, or a Kimi MLA draft, passed as --target: the message says it is a
    draft's config and how to fix --target (it once blamed the draft, or num_hidden_layers)."""
    from sglang_eagle3.testing.tiny.random_mla_draft import write_random_mla_draft

    ids = {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}
    mla = write_random_mla_draft(tmp_path / "mla", tiny_target, eagle_config=ids)
    for wrong, marker in ((random_draft, "speculators_config"), (mla, "draft_vocab_size")):
        code, err = run_main(["--draft", str(random_draft), "--target", str(wrong)], capsys)
        assert code == 2 and err.count("\n") == 1, err
        assert f"{wrong / 'config.json'}: this is an EAGLE-3 draft's config ({marker})" in err
        assert "Fix: point --target at the target model's directory" in err


def test_ids_outside_the_vocabulary_name_the_data_file(random_draft, tmp_path, capsys):
    from safetensors.torch import save_file

    ids = torch.randint(0, 1024, (2, 16))
    ids[1, 3] = 5000
    dump = tmp_path / "dump.safetensors"
    save_file({"hidden_states": torch.randn(2, 16, 4, 64), "input_ids": ids}, str(dump))
    taps = ["--data-taps", "embed,layer:2,layer:5,layer:7", "--num-layers", "8"]
    code, err = run_main(["--draft", str(random_draft), "--data", str(dump), *taps], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{dump}: sample 1: token id 5000 is outside the target's 1024 ids" in err
    assert "model.safetensors" not in err and "Fix: use data tokenized" in err
