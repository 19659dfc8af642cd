"""The doctor on the trained tiny drafter (slow: builds and caches it on first use), and its
clear refusals of bad input (fast: random weights)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sglang_eagle3.data.train_data import TrainData, TrainDataWriter
from sglang_eagle3.doctor.cli import DoctorOptions, main, run_doctor
from sglang_eagle3.layout.taps import Tap

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def drafter():
    pytest.importorskip("speculators.models.eagle3")
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    return tiny_drafter()


def rows_by_name(report) -> dict[str, dict]:
    out = {}
    for row in report.rows:
        for name in row["name"].split(", "):
            out.setdefault(name, row)
    return out


@pytest.mark.slow
def test_declared_layout_beats_shifted_ones(drafter):
    report = run_doctor(
        DoctorOptions(
            draft=str(drafter.draft_dir),
            data=str(drafter.eval_data),
            target=str(drafter.target_dir),
            max_tokens=2048,
            progress=False,
        )
    )
    print(report.render())
    rows = rows_by_name(report)
    declared = rows["declared"]
    assert declared["layout"] == ["embed", "layer:2", "layer:5"] and declared["is_served"]
    names = (
        "shifted +1 layer",
        "shifted +1 stored tap",
        "stock SGLang 0.5.23",
        "last K stored taps",
    )
    wrong = {n: rows[n]["accuracy"] for n in names}
    floor = rows["floor: taps zeroed"]["accuracy"]
    print(
        f"step-1 top-1 (target's greedy token): declared {declared['accuracy']:.1%}; "
        + "; ".join(f"{n} {a:.1%}" for n, a in wrong.items())
        + f"; taps zeroed {floor:.1%}"
    )
    assert declared["accuracy"] > 0.45
    assert declared["accuracy"] - max(wrong.values()) > 0.08  # measured: ~15 points
    assert max(wrong.values()) > floor  # wrong taps still beat no taps: they are similar
    assert report.verdict == "ok" and report.exit_code == 0
    assert report.predicted_accept_length > 1.8
    assert declared["step_accuracy"][1] is not None  # step 2 scored on chain-consistent tokens
    # the embedding tap is recognised from the numbers alone
    assert report.fingerprint["embed_index"] == 0 and report.fingerprint["embed_tap"] == "embed"
    norms = report.fingerprint["median_norms"]
    assert norms[0] < 0.25 * min(norms[1:])
    # the verifier tap reproduces the target's real greedy tokens; stored taps are what they say
    check = report.target_check
    assert check["verifier_agreement"] > 0.95
    assert check["matched_taps"] == ["embed"] + [f"layer:{k}" for k in range(8)]


def flat_copy(src: Path, dst: Path, *, keep_ids: list[int] | None = None) -> Path:
    """An SGLang-flat copy of the speculators draft with no layout, optionally with ids."""
    cfg = json.loads((src / "config.json").read_text())
    flat = dict(cfg["transformer_layer_config"])
    flat.update(
        architectures=["LlamaForCausalLMEagle3"],
        model_type="llama",
        draft_vocab_size=cfg["draft_vocab_size"],
        norm_before_residual=cfg["norm_before_residual"],
    )
    if keep_ids is not None:
        flat["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": keep_ids}
    dst.mkdir()
    (dst / "config.json").write_text(json.dumps(flat))
    for f in src.glob("*.safetensors"):
        os.symlink(f, dst / f.name)
    return dst


@pytest.mark.slow
def test_wrong_served_taps_exit_1(drafter, tmp_path):
    # no ids: stock SGLang 0.5.23 captures its default [2, 4, 5] = layer:1, layer:3, layer:4
    bare = flat_copy(drafter.draft_dir, tmp_path / "bare")
    cmd = [sys.executable, "-m", "sglang_eagle3.doctor", "--draft", str(bare)]
    cmd += ["--data", str(drafter.eval_data), "--target", str(drafter.target_dir)]
    cmd += ["--max-tokens", "1024", "--json", "--steps", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["served"]["layout"] == ["layer:1", "layer:3", "layer:4"]
    scored = [r for r in report["candidates"] if r["evaluable"] and not r["is_floor"]]
    best = max(scored, key=lambda r: r["accuracy"])
    trained = next(r for r in scored if r["layout"] == ["embed", "layer:2", "layer:5"])
    served = next(r for r in scored if r["is_served"])
    print(report["reason"])
    print(f"trained layout {trained['accuracy']:.1%}, best {best['text']} {best['accuracy']:.1%}")
    # the search puts the trained layout at (or within noise of) the top, far above served
    assert trained["accuracy"] > best["accuracy"] - 0.02
    assert trained["accuracy"] - served["accuracy"] > 0.08
    # the speculators checkpoint as stock SGLang would read it: top-level ids ignored
    code = main(
        ["--draft", str(drafter.draft_dir), "--data", str(drafter.eval_data)]
        + ["--target", str(drafter.target_dir), "--served-by", "stock"]
        + ["--max-tokens", "1024", "--steps", "1", "--no-progress"]
    )
    assert code == 1


@pytest.mark.slow
def test_verifier_tap_not_final_layer_is_flagged(drafter, tmp_path, capsys):
    # relabel: store layer:6 where the final layer (layer:7) belongs
    out = tmp_path / "data"
    taps = ["embed", "layer:2", "layer:5", "layer:7"]
    with TrainDataWriter(out, taps=taps, num_layers=8) as w:
        for s in list(TrainData(drafter.eval_data))[:4]:
            w.add(s.hidden_states[:, [0, 3, 6, 7]], s.input_ids)
    code = main(
        ["--draft", str(drafter.draft_dir), "--data", str(out), "--target", str(drafter.target_dir)]
        + ["--max-tokens", "256", "--steps", "1", "--no-progress"]
    )
    text = capsys.readouterr().out
    print(text)
    assert code == 0  # serving is fine; the data is not
    assert "the last stored tap is layer:6, not the final layer layer:7" in text
    assert "reproduces the target's greedy token for only" in text


# ---- bad input: random weights, no training ------------------------------------------------


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


@pytest.mark.slow
def test_tiny_drafter_checkpoint_and_its_flat_copy(drafter, tmp_path):
    from safetensors import safe_open

    from sglang_eagle3.checkpoint.draft_readers import read_draft
    from sglang_eagle3.checkpoint.flat_draft import write_flat_draft
    from sglang_eagle3.doctor.draft_forward import load_draft

    cfg = json.loads((drafter.draft_dir / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["norm_before_residual"] is True
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [0, 3, 6]  # input-to-layer
    weights = next(drafter.draft_dir.glob("*.safetensors"))
    with safe_open(str(weights), framework="pt") as f:
        names = set(f.keys())
    # draft vocab == target vocab: speculators saves no d2t/t2d, and no verifier_* tensors
    assert not names & {"d2t", "t2d", "verifier_lm_head.weight", "verifier_norm.weight"}
    assert {"embed_tokens.weight", "lm_head.weight", "fc.weight"} <= names
    spec = read_draft(drafter.draft_dir, num_layers=8, target_hidden_size=128)
    assert [str(t) for t in spec.layout.taps] == ["embed", "layer:2", "layer:5"]
    flat = write_flat_draft(spec, drafter.draft_dir, tmp_path / "flat")
    sample = next(iter(TrainData(drafter.train_data)))
    taps, ids = sample.hidden_states[:-1, :3].flatten(1), sample.input_ids[1:]
    a = load_draft(drafter.draft_dir).forward(taps, ids, steps=2)
    b = load_draft(flat).forward(taps, ids, steps=2)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.logits, y.logits)
    print(json.dumps(drafter.record, indent=1, sort_keys=True))


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
