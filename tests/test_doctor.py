"""The doctor on the trained tiny drafter (slow: builds and caches it on first use). Its
refusals of bad input, on random weights: tests/test_doctor_inputs.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sglang_eagle3.data.train_data import TrainData, TrainDataWriter
from sglang_eagle3.doctor.cli import DoctorOptions, main

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


@pytest.mark.sglang
@pytest.mark.slow
def test_declared_layout_beats_shifted_ones(drafter, doctor_report, figures):
    report = doctor_report(
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
    for name in ("declared", "shifted +1 layer", "stock SGLang 0.5.23", "floor: taps zeroed"):
        row, label = rows[name], f"doctor, tiny drafter, 2048 tokens, {name} ({rows[name]['text']})"
        figures.record(f"{label}: step-1 accuracy", row["accuracy"], ".1%")
        figures.record(f"{label}: accept (3-step chain)", row["predicted_accept_length"], ".2f")
    figures.record(
        "doctor, declared: replay accept length", declared["replay_accept_length"], ".2f"
    )
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
    figures.record("doctor fingerprint: median per-token L2 norm, embed", norms[0], ".2f")
    figures.record(
        "doctor fingerprint: layer outputs", f"{min(norms[1:]):.0f}-{max(norms[1:]):.0f}"
    )
    assert norms[0] < 0.25 * min(norms[1:])
    # the verifier tap reproduces the target's real greedy tokens; stored taps are what they say
    check = report.target_check
    figures.record(
        "doctor: verifier tap reproduces the target's greedy token",
        f"{check['verifier_agreement']:.1%} of {check['tokens']} tokens",
    )
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


@pytest.mark.sglang
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


@pytest.mark.sglang
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


@pytest.mark.sglang
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
