"""Training-time settings of a real speculators draft, and whether the server honours them:
as the launcher reports them (dry run) and refuses what it cannot serve."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3.checkpoint.draft_settings import OK, Setting

pytest.importorskip("speculators")


def launch(args: list[str], env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os

    code = (
        "import sys; from sglang_eagle3.launch.cli import main; rc = main(sys.argv[1:]); "
        "print('SGLANG_IMPORTED' if 'sglang' in sys.modules else '', file=sys.stderr); "
        "sys.exit(rc)"
    )
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip


@pytest.fixture(scope="module")
def two_layer_draft(tiny_target, tmp_path_factory) -> Path:
    from sglang_eagle3.testing.tiny.random_speculators import write_random_speculators_draft

    out = tmp_path_factory.mktemp("settings") / "draft"
    return write_random_speculators_draft(out, tiny_target, num_layers=2)


def args_for(target: Path, draft: Path, cache: Path, *extra: str) -> list[str]:
    return ["--dry-run", "--json", "--model-path", str(target), "--speculative-algorithm",
            "EAGLE3", "--speculative-draft-model-path", str(draft), "--draft-cache-dir",
            str(cache), *extra]  # fmt: skip


def copy_draft(src: Path, dst: Path, *, config=None, drop=()) -> Path:
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    if config:
        config(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    tensors = {k: v for k, v in load_file(str(src / "model.safetensors")).items() if k not in drop}
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def test_launcher_reports_each_setting_and_honours_all(tiny_target, two_layer_draft, tmp_path):
    out = launch(args_for(tiny_target, two_layer_draft, tmp_path / "c"))
    assert out.returncode == 0, out.stderr
    rows = {s["name"]: s for s in json.loads(out.stdout)["settings"]}
    assert list(rows) == ["hidden-state layout", "target_hidden_size", "norm_before_fc",
                          "fc_norm", "norm_output", "norm_before_residual",
                          "embed_requires_grad", "decoder layers", "sliding window"]  # fmt: skip
    assert all(r["honoured"] for r in rows.values()), rows
    assert rows["hidden-state layout"]["trained"] == "embed,layer:2,layer:5"
    assert rows["norm_before_residual"]["stock"].startswith("ignored")
    assert rows["embed_requires_grad"]["stock"] == "target's embedding swapped in"
    assert rows["decoder layers"]["trained"] == "2"
    assert rows["target_hidden_size"]["stock"].startswith("crashes")
    text = launch(
        [a for a in args_for(tiny_target, two_layer_draft, tmp_path / "c") if a != "--json"]
    )
    assert "trained settings, and whether the server honours them" in text.stdout
    assert "plugin keeps the draft's embedding" in text.stdout


def test_norm_fix_off_is_reported_not_honoured(tiny_target, two_layer_draft, tmp_path):
    out = launch(args_for(tiny_target, two_layer_draft, tmp_path / "c"),
                 {"SGLANG_EAGLE3_NORM_BEFORE_RESIDUAL": "0"})  # fmt: skip
    assert out.returncode == 0, out.stderr
    row = next(s for s in json.loads(out.stdout)["settings"] if s["name"] == "norm_before_residual")
    assert not row["honoured"] and "NOT honoured" in row["served"]


def test_trained_embedding_missing_from_checkpoint_is_refused(
    tiny_target, two_layer_draft, tmp_path
):
    bad = copy_draft(two_layer_draft, tmp_path / "bad", drop={"embed_tokens.weight"})
    before = sorted(p.name for p in bad.iterdir())
    out = launch(args_for(tiny_target, bad, tmp_path / "c"))
    assert out.returncode == 2, (out.stdout, out.stderr)
    err = [line for line in out.stderr.splitlines() if line.strip()][0]
    assert str(bad / "config.json") in err
    assert "embed_requires_grad=true: refused: the checkpoint has no embed_tokens.weight" in err
    assert "SGLANG_IMPORTED" not in out.stderr
    assert sorted(p.name for p in bad.iterdir()) == before
    assert not (tmp_path / "c").exists(), "nothing written"


def test_trained_sliding_window_goes_to_the_flag(tiny_target, two_layer_draft, tmp_path):
    def window(cfg):
        cfg["transformer_layer_config"].update(
            sliding_window=64, layer_types=["sliding_attention", "full_attention"]
        )

    draft = copy_draft(two_layer_draft, tmp_path / "w", config=window)
    out = launch(args_for(tiny_target, draft, tmp_path / "c"))
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    row = next(s for s in plan["settings"] if s["name"] == "sliding window")
    assert row["trained"] == "64" and row["honoured"], row
    argv = plan["sglang_argv"]
    assert argv[argv.index("--speculative-draft-window-size") + 1] == "64"
    out = launch(args_for(tiny_target, draft, tmp_path / "c", "--speculative-draft-window-size",
                          "32"))  # fmt: skip
    row = next(s for s in json.loads(out.stdout)["settings"] if s["name"] == "sliding window")
    assert not row["honoured"] and "32" in row["served"]


def test_setting_status_is_validated():
    assert Setting("x", "1", OK, OK, OK).honoured
    with pytest.raises(ValueError, match="status"):
        Setting("x", "1", OK, OK, "maybe")


def test_write_draft_only_writes_the_flat_copy_and_starts_nothing(
    tiny_target, two_layer_draft, tmp_path
):
    before = {p.name: p.stat().st_mtime_ns for p in two_layer_draft.iterdir()}
    args = [a for a in args_for(tiny_target, two_layer_draft, tmp_path / "c") if a != "--dry-run"]
    out = launch(["--write-draft-only", *args])
    assert out.returncode == 0, out.stderr
    served = Path(json.loads(out.stdout)["draft"]["served_from"])
    cfg = json.loads((served / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["norm_before_residual"] and cfg["embed_requires_grad"]
    assert cfg["num_hidden_layers"] == 2 and cfg["target_hidden_size"] == 128
    assert "SGLANG_IMPORTED" not in out.stderr
    assert {p.name: p.stat().st_mtime_ns for p in two_layer_draft.iterdir()} == before
