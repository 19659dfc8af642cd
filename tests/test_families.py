"""The table of SGLang 0.5.23's EAGLE-3 target families: complete, checked against SGLang's own
setters, and read by the launcher and the flat copy (the Qwen3-MoE defect of the issue)."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest_helpers_layout import (
    build_speculators_draft,
    flat_config,
    make_flat_draft,
    write_json,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.checkpoint.flat_draft import write_flat_draft
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.cpu_env import harness_env
from sglang_eagle3.launch.plan import LaunchOptions, plan_launch
from sglang_eagle3.layout.conventions import stock_capture
from sglang_eagle3.layout.families import FAMILIES, family_for, family_named

SCRIPT = Path(__file__).parent / "scripts" / "family_rules.py"
CASES = {
    "none": None,
    "minus_one": [-1, 2, 5],
    "first_is_1": [1, 3, 5],
    "zero": [0, 3, 6],
    "max_is_n": [1, 4, 8],
}  # fmt: skip  (tests/scripts/family_rules.py runs the same)
# Families SGLang's CPU path cannot import here: the missing reference op, exactly.
CPU_IMPORT_ERRORS = {"qwen3_5_text": "fused_sigmoid_mul_cpu"}
NOT_IN_TABLE = {"mindspore"}  # NPU-only: delegates to an external MindSpore model


def _sglang_models_dir() -> Path:
    spec = importlib.util.find_spec("sglang")  # finds the package without importing it
    return Path(next(iter(spec.submodule_search_locations))) / "srt" / "models"


def test_every_sglang_family_that_captures_has_a_row():
    files = set()
    for path in _sglang_models_dir().glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "set_eagle3_layers_to_capture":
                files.add(path.stem)
    assert len(files) == 29  # the count the issue read from SGLang 0.5.23
    rows = {f.name for f in FAMILIES}
    assert files - NOT_IN_TABLE - {"qwen3_5"} <= rows  # qwen3_5's setter is qwen3_5_text's body
    architectures = [a for f in FAMILIES for a in f.architectures]
    assert len(architectures) == len(set(architectures))


@pytest.mark.sglang
def test_stock_rules_are_sglangs_own():
    """Every row's stock rule equals what SGLang's own setter stores, on the same ids."""
    proc = subprocess.run([sys.executable, str(SCRIPT)], env=harness_env(), capture_output=True,
                          text=True, timeout=280)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert set(got) == {f.name for f in FAMILIES if not f.delegate}
    for name, op in CPU_IMPORT_ERRORS.items():
        assert op in got.pop(name)["import"]
    for name, row in got.items():
        family = family_named(name)
        for case, ids in CASES.items():
            assert row[case] == list(family.stock_indices(ids, 8)), (name, case)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(FAMILIES), st.integers(4, 96), st.data())
def test_stock_ids_make_stock_capture_exactly_those_indices(family, n, data):
    top = family.max_capture_index(n)
    want = sorted(data.draw(st.sets(st.integers(0, top), min_size=1, max_size=4)))
    ids = family.stock_ids(want, n)
    if ids is None:  # only DeepSeek's rule cannot say a lone first index of 1
        assert family.rule.name == "PLUS_ONE_IF_FIRST_IS_1" and want == [1]
        return
    cap = stock_capture(family, ids, n)
    assert cap.crash is None and [t.hf_index for t in cap.taps] == want


def _speculators_draft(tmp_path, ids):
    pytest.importorskip("speculators")
    return build_speculators_draft(tmp_path / "draft", ids=ids, hidden=64)


def _target(tmp_path, arch: str, layers: int, hidden: int = 64) -> Path:
    cfg = {"architectures": [arch], "num_hidden_layers": layers, "hidden_size": hidden}
    return write_json(tmp_path / arch / "config.json", cfg).parent


def test_the_issues_qwen3_moe_defect_flat_copy_is_read_right_by_stock(tmp_path):
    """speculators ids [2, 46, 91, 93] (input-to-layer) on a 94-layer Qwen3-MoE target."""
    draft = _speculators_draft(tmp_path, [2, 46, 91, 93])
    spec = read_draft(draft, num_layers=94, target_hidden_size=64)
    assert [str(t) for t in spec.layout.taps] == ["layer:1", "layer:45", "layer:90", "layer:92"]
    qwen = family_for("Qwen3MoeForCausalLM")
    flat = write_flat_draft(spec, draft, tmp_path / "flat", family=qwen, stock_readable=True)
    ids = json.loads((flat / "config.json").read_text())["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"
    ]
    assert ids == [1, 45, 90, 92]  # output-of-layer: stock qwen3_moe adds 1
    assert [str(t) for t in stock_capture(qwen, ids, 94).taps] == [str(t) for t in spec.layout.taps]
    # what the flat copy wrote before: every tap one layer late, and layers[94] at startup
    assert "IndexError" in stock_capture(qwen, [2, 46, 91, 93], 94).crash


def test_a_layout_stock_cannot_express_needs_for_plugin(tmp_path):
    draft = _speculators_draft(tmp_path, [6, 0, 3])  # layer:5, embed, layer:2: not ascending
    spec = read_draft(draft, num_layers=8, target_hidden_size=64)
    llama = family_for("LlamaForCausalLM")
    with pytest.raises(WiringError, match="packs taps in ascending order.*--for-plugin"):
        write_flat_draft(spec, draft, tmp_path / "strict", family=llama, stock_readable=True)
    assert not (tmp_path / "strict").exists()
    flat = write_flat_draft(spec, draft, tmp_path / "plugin", family=llama)
    eagle = json.loads((flat / "config.json").read_text())["eagle_config"]
    assert eagle["hidden_state_layout"] == ["layer:5", "embed", "layer:2"]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_launcher_plans_exact_capture_for_every_family(tmp_path, family):
    n = 8
    cfg = flat_config(hidden=64, layout=["layer:5", "embed", "layer:2"])
    draft = make_flat_draft(tmp_path / "d", cfg, fc_in=3 * 64)
    target = _target(tmp_path, family.architectures[0], n)
    argv = ["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft)]  # fmt: skip
    if family.refused:
        with pytest.raises(WiringError, match=family.refused.split(",")[0]):
            plan_launch(argv, LaunchOptions(cache_dir=tmp_path / "cache"))
        return
    plan = plan_launch(argv, LaunchOptions(cache_dir=tmp_path / "cache")).to_json()
    assert plan["layout"] == ["layer:5", "embed", "layer:2"]
    assert plan["capture_indices"] == [0, 3, 6] and plan["fc_block_order"] == [2, 0, 1]


def test_unknown_family_and_unreachable_final_layer_are_refused(tmp_path):
    cfg = flat_config(hidden=64, layout=["embed", "layer:2", "layer:7"])  # layer:7 = the last
    draft = make_flat_draft(tmp_path / "d", cfg, fc_in=3 * 64)
    opts = LaunchOptions(cache_dir=tmp_path / "cache")

    def argv(arch: str) -> list[str]:
        return ["--model-path", str(_target(tmp_path, arch, 8)), "--speculative-algorithm",
                "EAGLE3", "--speculative-draft-model-path", str(draft)]  # fmt: skip

    with pytest.raises(WiringError, match="not in sglang-eagle3's table"):
        plan_launch(argv("MadeUpForCausalLM"), opts)
    with pytest.raises(WiringError, match="layer:7 is the output of the last decoder layer"):
        plan_launch(argv("LlamaForCausalLM"), opts)
    plan = plan_launch(argv("GptOssForCausalLM"), opts).to_json()  # its loop reaches hs[n]
    assert plan["capture_indices"] == [0, 3, 8]


def test_rows_marked_tested_are_the_families_served_in_tests():
    import test_family_capture

    # deepseek_v2: test_capture_server.py; kimi_k25 has its own target builder
    served = set(test_family_capture.SERVED) | {"deepseek_v2", "kimi_k25"}
    assert {f.name for f in FAMILIES if f.tested_here} == served


def test_write_draft_only_refuses_what_stock_cannot_read_unless_for_plugin(tmp_path, capsys):
    from sglang_eagle3.launch.cli import main

    draft = _speculators_draft(tmp_path, [6, 0, 3])  # layer:5, embed, layer:2
    target = _target(tmp_path, "Qwen3MoeForCausalLM", 8)
    capsys.readouterr()  # speculators' save progress bar
    argv = ["--write-draft-only", "--model-path", str(target), "--speculative-algorithm",
            "EAGLE3", "--speculative-draft-model-path", str(draft),
            "--draft-cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "qwen3_moe cannot capture layer:5, embed, layer:2" in err[0]
    assert "--for-plugin" in err[0] and not (tmp_path / "cache").exists()
    assert main([*argv, "--for-plugin"]) == 0
    (flat,) = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]  # lock
    layout = json.loads((flat / "config.json").read_text())["eagle_config"]["hidden_state_layout"]
    assert layout == ["layer:5", "embed", "layer:2"]


def test_readme_table_is_what_the_command_prints():
    from sglang_eagle3.layout.families import families_markdown

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    assert families_markdown() in readme
