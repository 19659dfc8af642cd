"""The trained tiny models shipped in the package (testing/tiny/embedded.py): they are the
builders' output for today's recipes and code, so a fresh machine restores instead of
training, and a restore gives exactly the shipped bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_eagle3 import env_names
from sglang_eagle3.testing.tiny import cache, embedded

REBUILD = "python -m sglang_eagle3.testing.tiny.ship --write (after the builds it replaces)"


def _keys() -> dict[str, str]:
    from sglang_eagle3.testing.tiny import drafter, mla_drafter

    target = cache.entry_name(cache.default_recipe())
    drafter_key = drafter.drafter_key(drafter.DrafterRecipe(), Path(target))
    return {
        "target": cache.recipe_key(cache.default_recipe()),
        "drafter": drafter_key,
        "mla_drafter": mla_drafter.mla_key(f"drafter-s0-{drafter_key}"),
    }


@pytest.mark.parametrize("kind", ["target", "drafter", "mla_drafter"])
def test_shipped_models_are_for_todays_recipes_and_code(kind):
    """A builder edit without a new shipped copy would train for minutes on every fresh
    machine (CI's cold run included): caught here, in the fast tier."""
    found = embedded.manifest(kind)
    assert found is not None, f"nothing shipped for {kind}; run {REBUILD}"
    assert found["key"] == _keys()[kind], f"{kind} was shipped for another build; run {REBUILD}"
    for rel, digest in found["files"].items():
        assert embedded.sha256(embedded.HERE / kind / rel) == digest, rel


def test_shipped_copies_stay_small():
    size = sum(p.stat().st_size for p in embedded.HERE.rglob("*") if p.is_file())
    assert size < 20e6, size  # the budget a repository clone pays for a fast cold start


def test_restore_copies_the_shipped_bytes_and_only_for_its_key(tmp_path, monkeypatch):
    key = embedded.manifest("target")["key"]
    assert not embedded.restore("target", "0" * 16, tmp_path / "other")
    assert not (tmp_path / "other").exists()
    monkeypatch.setenv(env_names.TINY_EMBEDDED, "0")
    assert not embedded.restore("target", key, tmp_path / "off")
    monkeypatch.delenv(env_names.TINY_EMBEDDED)
    assert embedded.restore("target", key, tmp_path / "on")
    for rel, digest in embedded.manifest("target")["files"].items():
        assert embedded.sha256(tmp_path / "on" / rel) == digest
    assert cache.is_complete(tmp_path / "on")


def test_a_damaged_shipped_file_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "shipped"
    src = tmp_path / "built"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"weights")
    embedded.write("target", "k" * 16, src, ["model.safetensors"], root=fake)
    (fake / "target" / "model.safetensors").write_bytes(b"changed")
    monkeypatch.setattr(embedded, "HERE", fake)
    with pytest.raises(RuntimeError, match="does not match"):
        embedded.restore("target", "k" * 16, tmp_path / "out")


@pytest.mark.sglang
@pytest.mark.slow
def test_the_drafter_restored_on_regenerated_data_is_the_shipped_one(tmp_path, monkeypatch):
    """A fresh cache: the target and the drafter come from the package, the drafter's data
    is written again from the target and equals the data it was trained on."""
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    monkeypatch.setenv(env_names.CACHE, str(tmp_path))
    built = tiny_drafter()
    assert built.record["shipped"], built.record
    shipped = json.loads((embedded.HERE / "drafter" / "tiny_drafter.json").read_text())
    if built.record["data_digests"]["eval"] == shipped["data_digests"]["eval"]:
        # this CPU rounds as the one that made the shipped data: the capture must too
        assert built.record["data_as_trained"], built.record
    else:
        # The eval data is HF fp32 alone (no SGLang) and already differs: this CPU kind sums
        # floats in another order (AMX here, none where the data was made). The data is still
        # right when the captured train taps equal HF's on this CPU.
        _assert_train_taps_equal_hf(built)
    files = embedded.manifest("drafter")["files"]
    for rel, digest in files.items():
        if rel not in embedded.NOT_COMPARED:
            assert embedded.sha256(built.draft_dir.parent / rel) == digest, rel
    assert json.loads((built.draft_dir / "config.json").read_text())["norm_before_residual"]


def _assert_train_taps_equal_hf(built) -> None:
    import torch
    from safetensors.torch import load_file

    from sglang_eagle3.checkpoint.hf_target import load_hf_target

    model = load_hf_target(built.target_dir)
    files = sorted((built.train_data / "hidden_states").glob("hs_*.safetensors"))[:3]
    assert files, built.train_data
    worst = 0.0
    for f in files:
        sample = load_file(str(f))
        with torch.no_grad():
            hs = model(sample["token_ids"][None], output_hidden_states=True).hidden_states
        ref = torch.stack([hs[i][0] for i in (0, 3, 6)], 1)  # embed, layer:2, layer:5
        got = sample["hidden_states"][:, :3].double()
        worst = max(worst, (got - ref.double()).abs().max().item())
    assert worst < 1e-4, worst


@pytest.mark.sglang  # tiny_drafter(): a fresh cache captures its data through SGLang
@pytest.mark.slow  # and trains (or restores) the tiny target
def test_tiny_drafter_command_prints_the_demos_paths_for_the_shell(capsys):
    import shlex

    from sglang_eagle3.testing.tiny.__main__ import main
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    assert main(["--drafter"]) == 0
    got = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    got = {k: Path(shlex.split(v)[0]) for k, v in got.items()}
    d = tiny_drafter()
    want = {"TARGET": d.target_dir, "DRAFT": d.draft_dir, "TRAIN": d.train_data,
            "EVAL": d.eval_data}  # fmt: skip
    assert got == want and all(p.is_dir() for p in got.values()), got
    assert (got["DRAFT"] / "config.json").is_file()
