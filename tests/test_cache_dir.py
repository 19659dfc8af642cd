"""The launcher's cache of flat draft copies: an unusable folder is refused before anything
starts (a dry run too), and launches of one draft at once never trip over each other."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest_helpers_layout import build_speculators_draft, write_json


def _inputs(tmp_path):
    pytest.importorskip("speculators")
    draft = build_speculators_draft(tmp_path / "draft", ids=[0, 3, 6], hidden=64)
    target = write_json(tmp_path / "t" / "config.json", {
        "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 8, "hidden_size": 64,
    }).parent  # fmt: skip
    return draft, target


def _launch(target, draft, cache, *extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "sglang_eagle3.launch", *extra, "--model-path", str(target),
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft),
            "--draft-cache-dir", str(cache)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("where", ["under-a-file", "in-proc"])
def test_an_unusable_cache_dir_exits_2_in_a_dry_run(tmp_path, where):
    draft, target = _inputs(tmp_path)
    if where == "under-a-file":
        (tmp_path / "file").write_text("x")
        cache = tmp_path / "file" / "cache"
    else:
        cache = "/proc/sglang-eagle3-cache"
    proc = _launch(target, draft, cache, "--dry-run")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"--draft-cache-dir: {cache} cannot hold converted drafts" in lines[0]
    assert "Fix: give --draft-cache-dir a writable folder" in lines[0]


@pytest.mark.slow
def test_concurrent_launches_of_one_draft_all_succeed(tmp_path):
    draft, target = _inputs(tmp_path)
    for round_ in range(6):  # the failure seen before: 2 of 18 died with ENOTEMPTY
        cache = tmp_path / f"cache{round_}"
        with ThreadPoolExecutor(3) as pool:
            runs = list(pool.map(lambda c: _launch(target, draft, c, "--write-draft-only"),
                                 [cache] * 3))  # fmt: skip
        for proc in runs:
            assert proc.returncode == 0, proc.stderr
        (copy,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
        cfg = json.loads((copy / "config.json").read_text())
        assert cfg["eagle_config"]["hidden_state_layout"] == ["embed", "layer:2", "layer:5"]
        assert not list(cache.glob(".*.tmp-*"))  # no half-written copy left behind
