"""Refusals are one bounded line that names what is at fault (the flag when it is the flag)
and says the fix."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest_helpers_layout import flat_config, make_flat_draft, write_json

from sglang_eagle3.errors import MAX_CHARS, WiringError, bounded


def _launch(tmp_path, *, layers=8, ids=(-1, 2, 5), extra=()) -> subprocess.CompletedProcess:
    target = write_json(tmp_path / "t" / "config.json", {
        "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": layers,
        "hidden_size": 16,
    }).parent  # fmt: skip
    draft = make_flat_draft(tmp_path / "d", flat_config(hidden=16, ids=list(ids)), fc_in=48)
    argv = [sys.executable, "-m", "sglang_eagle3.launch", "--dry-run", "--model-path",
            str(target), "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
            str(draft), *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "Fix: " in lines[0]
    return lines[0]


def test_450k_duplicated_ids_give_one_short_line(tmp_path):
    line = _one_line(_launch(tmp_path, ids=[2] * 450_000))
    assert len(line) < MAX_CHARS + 200, len(line)
    assert "... and 449992 more]" in line


def test_a_bad_layout_flag_is_blamed_on_the_flag(tmp_path):
    line = _one_line(_launch(tmp_path, extra=["--hidden-state-layout", "embed,layer:99"]))
    assert line.startswith("python -m sglang_eagle3.launch: error: --hidden-state-layout: ")
    assert "config.json" not in line.split("Fix:")[0]


def test_an_absurd_layer_count_is_refused(tmp_path):
    line = _one_line(_launch(tmp_path, layers=10**12))
    assert "num_hidden_layers 1000000000000 is not a decoder depth" in line


@pytest.mark.parametrize(
    "text,want",
    [
        ("ids [1, 2, 3] repeat", "ids [1, 2, 3] repeat"),  # short lists are left alone
        ("ids " + str(list(range(100))) + " x", "ids [0, 1, 2, 3, 4, 5, 6, 7, ... and 92 more] x"),
        ("two\nlines", "two lines"),
    ],
)
def test_bounded(text, want):
    assert bounded(text) == want


def test_every_message_is_capped():
    err = WiringError("x" * 10 * MAX_CHARS, path="p", fix="f")
    assert len(str(err)) < MAX_CHARS + 100 and "characters cut" in str(err)
