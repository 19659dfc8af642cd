"""benchmarks/gpu_check.py and the dispatch that reads its output.

- The CPU dry run (every step at tiny sizes under the Triton interpreter) runs ONCE, in a
  subprocess shared by the `slow` tests below (about 30 s on 2 cores).
- ``eagle3_fused_fc_wins`` turns that JSON format into ``MEASURED_WINS``: from the dry run's
  own file, from a copy edited to hold one win, and never from a malformed or unbacked one.
- The checked-in wins file parses, ships in the package, and is a passed GPU run's (H200,
  2026-12-04) whose wins the dispatch reads.
"""

from __future__ import annotations

import copy
import fnmatch
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from sglang_eagle3.ops import eagle3_fused_fc_configs as fc_configs
from sglang_eagle3.ops import eagle3_fused_fc_wins as fc_wins
from sglang_eagle3.ops.eagle3_fused_fc import NORMS

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
DRAFTERS = {"Kimi-K2.5": 7168, "Llama-3.1-70B": 8192, "Llama-3.1-8B": 4096}
HEAVY = {"sglang", "transformers", "pydantic"}  # what a GPU machine may lack


def _stderr(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("import time:")]
    return "\n".join(lines)[-4000:]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("gpu_check") / "gpu_check.json"
    cmd = [sys.executable, "-X", "importtime", str(SCRIPT), "--cpu-dry-run", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    imported = {
        ln.rsplit("|", 1)[-1].strip() for ln in proc.stderr.splitlines() if ln.startswith("import")
    }
    data = json.loads(out.read_text()) if out.is_file() else None
    return dict(proc=proc, path=out, data=data, imported=imported)


def _edited(data: dict, tmp_path: Path, **changes) -> Path:
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(dict(copy.deepcopy(data), **changes)))
    return path


@pytest.mark.slow
def test_dry_run_passes_and_writes_every_section(dry_run):
    proc, data = dry_run["proc"], dry_run["data"]
    assert proc.returncode == 0, proc.stdout[-3000:] + _stderr(proc)
    assert data is not None and "PASSED" in proc.stdout
    assert data["format"] == fc_wins.GPU_CHECK_FORMAT
    assert data["dry_run"] is True and data["passed"] is True and data["failures"] == []
    dev = data["device"]
    assert "dry run" in dev["name"] and dev["capability"] is None and dev["torch"] and dev["triton"]
    corr = data["correctness"]
    assert corr["passed"] is True and corr["failures"] == []
    for matrix in ("gpu_test_matrix", "interp_matrix"):
        cases = corr[matrix]["cases"]
        assert cases and all(c["ok"] and c["ratio"] <= 1 for c in cases), matrix
        assert {c["id"].split("-")[0] for c in cases} == set(NORMS), matrix
        assert all(s["why"].startswith("dry run") for s in corr[matrix]["skipped"])
    graph = data["graph"]
    assert graph["captured"] is False and "no CUDA graph was captured" in graph["what"]
    assert graph["passed"] is True and len(graph["cases"]) == 4 * 3
    assert all(c["ok"] and not c["fused_path"] for c in graph["cases"])  # CPU: SGLang's modules
    tim = data["timing"]
    assert tim["method"].startswith("dry run") and tim["errors"] == []
    assert tim["rows"] and all(r["ok"] and r["fused_us"] > 0 for r in tim["rows"])
    assert data["wins"] == []  # interpreter timings are no measurement
    assert "1.03" in data["win_rule"]


@pytest.mark.slow
def test_dry_run_times_every_bucket_or_says_why_not(dry_run):
    tim = dry_run["data"]["timing"]
    assert {s["name"]: s["H"] for s in tim["shapes"]} == {n: h // 128 for n, h in DRAFTERS.items()}
    key = ("shape", "norm", "T")
    timed = {tuple(r[f] for f in key) for r in tim["rows"]}
    skipped = {tuple(s[f] for f in key): s["why"] for s in tim["skipped"]}
    # the script's T list is the dispatch's buckets, which end at 4096
    everything = set(itertools.product(DRAFTERS, NORMS, fc_configs.T_BUCKETS))
    assert fc_configs.T_BUCKETS[-1] == 4096 and timed | set(skipped) == everything
    assert not timed & set(skipped) and {t for _, _, t in timed} == {1, 4, 16, 64}
    assert all(why.startswith("dry run: T > 64") for why in skipped.values())


@pytest.mark.slow
def test_dry_run_imports_no_sglang(dry_run):
    imported = dry_run["imported"]
    assert {"triton", "sglang_eagle3.ops.eagle3_fused_fc_patch"} <= imported  # the log is real
    assert not {m for m in imported if m.split(".")[0] in HEAVY}


@pytest.mark.slow
def test_dispatch_reads_the_dry_run_file_and_a_measured_win(dry_run, tmp_path):
    data = dry_run["data"]
    assert fc_wins.load_measured_wins(dry_run["path"]) == frozenset()
    # the same file as a GPU run that measured one win: per_tap at T = 16 on the 8B stand-in
    measured = copy.deepcopy(data)
    rows = measured["timing"]["rows"]
    row = next(
        r for r in rows if (r["shape"], r["norm"], r["T"]) == ("Llama-3.1-8B", "per_tap", 16)
    )
    row.update(fused_us=100.0, unfused_us=103.0, ok=True)  # exactly the 3 % margin
    win = {f: row[f] for f in ("norm", "T", "H", "K")}
    path = _edited(measured, tmp_path, dry_run=False, wins=[win])
    assert fc_wins.load_measured_wins(path) == {("per_tap", 16, 32, 3)}
    assert fc_wins.wins_from_gpu_check(json.loads(path.read_text())) == {("per_tap", 16, 32, 3)}


@pytest.mark.slow
def test_unbacked_wins_are_refused_naming_the_file(dry_run, tmp_path):
    data = copy.deepcopy(dry_run["data"])
    row = data["timing"]["rows"][0]
    row.update(fused_us=100.0, unfused_us=102.9, ok=True)  # faster, but not by 3 %
    win = {f: row[f] for f in ("norm", "T", "H", "K")}
    refused = {
        "wins need a GPU run": dict(wins=[win]),  # still marked dry_run
        "no timing row shows it": dict(dry_run=False, wins=[win]),
        "T in (1, 4, 16, 64, 256, 1024, 4096)": dict(dry_run=False, wins=[dict(win, T=8192)]),
    }
    for why, changes in refused.items():
        path = _edited(data, tmp_path, **changes)
        with pytest.raises(ValueError, match=re.escape(str(path))) as err:
            fc_wins.load_measured_wins(path)
        assert why in str(err.value)


@pytest.mark.parametrize(
    "text, why",
    [
        ("{not json", "not a readable gpu_check JSON file"),
        ("[]", "not a JSON object"),
        ('{"format": "bench_eagle3_fused_fc", "wins": []}', "expected 'sglang_eagle3.gpu_check/1'"),
        ('{"format": "sglang_eagle3.gpu_check/1"}', "'wins' must be a list"),
        (
            '{"format": "sglang_eagle3.gpu_check/1", "dry_run": false, "passed": true, '
            '"wins": [{"norm": "per_tap", "T": 16, "H": "7168", "K": 3}]}',
            "must be positive integers",
        ),
        (
            '{"format": "sglang_eagle3.gpu_check/1", "dry_run": false, "passed": true, '
            '"wins": [{"norm": "layer", "T": 16, "H": 7168, "K": 3}]}',
            "needs norm in",
        ),
    ],
)
def test_malformed_files_are_refused_naming_the_file(tmp_path, text, why):
    path = tmp_path / "wins.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(str(path))) as err:
        fc_wins.load_measured_wins(path)
    assert why in str(err.value)


def test_checked_in_wins_file_is_a_passed_gpu_run_and_the_dispatch_reads_it():
    data = json.loads(fc_wins.WINS_FILE.read_text())
    assert data["format"] == fc_wins.GPU_CHECK_FORMAT
    assert data["dry_run"] is False and data["passed"] is True and data["failures"] == []
    assert data["device"]["capability"][0] >= 9 and data["graph"]["captured"] is True
    assert data["timing"]["skipped"] == [] and data["timing"]["errors"] == []
    wins = fc_wins.load_measured_wins(fc_wins.WINS_FILE)
    assert wins == {(w["norm"], w["T"], w["H"], w["K"]) for w in data["wins"]}
    assert fc_wins.MEASURED_WINS == wins  # read from that file at import
    # every timing row the run marked faster is a win, and no other (one rule, row_is_win)
    faster = {(r["norm"], r["T"], r["H"], r["K"]) for r in data["timing"]["rows"]
              if fc_wins.row_is_win(r)}  # fmt: skip
    assert faster == wins


def test_wins_file_is_package_data_and_names_agree():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["sglang_eagle3.ops"]
    assert any(fnmatch.fnmatch(fc_wins.WINS_FILE.name, p) for p in patterns)
    assert fc_wins.NORM_NAMES == NORMS  # the wins reader cannot import the op (it imports it)


@pytest.mark.slow  # a subprocess importing torch: seconds
def test_script_refuses_interpreter_without_dry_run():
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # on a GPU machine: kernels would interpret
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", os.devnull], capture_output=True, text=True,
        env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "TRITON_INTERPRET=1 is set: unset it, or pass --cpu-dry-run" in proc.stderr
