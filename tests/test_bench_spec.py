"""bench_spec: input checks, the comparison and report, and one live run that launches a plain
and an EAGLE-3 server on the tiny models (the streaming client: tests/test_bench_client.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3.bench import cli as bench
from sglang_eagle3.bench.prompts import BUILT_IN, PromptFileError, read_prompts
from sglang_eagle3.bench.report import markdown_table, write_plots
from sglang_eagle3.bench.servers import ServerSpecError, parse_launch, parse_server

ROOT = Path(__file__).resolve().parent.parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("content", "line", "why"),
    [
        ('{"text": "ok"}\n{"text": "ok"\n', 2, "not valid JSON"),
        ('{"text": "ok"}\n\n["text"]\n', 3, "expected an object"),
        ('{"prompt": "x"}\n', 1, "expected an object"),
        ('{"text": ""}\n', 1, "non-empty string"),
        ('{"text": 5}\n', 1, "non-empty string"),
    ],
)
def test_bad_prompt_lines_name_the_line(tmp_path, content, line, why):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(PromptFileError) as e:
        read_prompts(path)
    assert e.value.line == line and f"{path}, line {line}" in str(e.value) and why in str(e.value)


def test_prompt_file_read_and_empty(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"text": "a"}\n\n{"text": "b\\nc", "extra": 1}\n')
    assert read_prompts(path) == ["a", "b\nc"]
    path.write_text("\n\n")
    with pytest.raises(PromptFileError, match="no prompts"):
        read_prompts(path)
    with pytest.raises(PromptFileError, match="cannot read"):
        read_prompts(tmp_path / "missing.jsonl")


def test_bad_prompts_file_exits_2_before_any_server_starts(tmp_path, tiny_target):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": "fine"}\n{"text": oops}\n')
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_spec.py"),
         "--launch", f"plain=--model-path {tiny_target} --cpu", "--prompts", str(bad),
         "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"{bad}, line 3" in proc.stderr and "not valid JSON" in proc.stderr
    assert not out.exists()  # the launched server's log would be under out/logs
    assert proc.stdout == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["--server", "plain"],
        ["--server", "plain=localhost:30000"],
        ["--launch", "spec=--cpu --dtype float32"],
        ["--launch", "spec=--model-path M --port 3000"],
        ["--server", "a=http://x", "--server", "a=http://y"],
        ["--server", "a=http://x", "--concurrency", "1,x"],
        ["--server", "a=http://x", "--concurrency", "2,2"],
        ["--server", "a=http://x", "--temperature", "nan"],
        ["--server", "a=http://x", "--top-p", "7"],
        ["--server", "a=http://x", "--num-prompts", "-3"],
        ["--server", "a=http://x", "--request-timeout", "0"],
        ["--server", "a=http://x", "--out", "/proc/version/out"],
        ["--launch", "bad=--model-path /nonexistent"],
        ["--server", "a=http://x", "--load-client", "sglang"],  # no local tokenizer
        [],
    ],
)
def test_bad_server_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err
    if "bad=" in " ".join(argv):  # the launcher's own dry run, before any server starts
        assert "--launch bad: the launcher refuses it" in err and "/nonexistent" in err


def test_launch_spec_takes_the_model_path_out():
    spec = parse_launch("eagle3=--model-path /m --cpu --speculative-draft-model-path '/d x'")
    assert spec.model_path == "/m" and spec.launch_args == (
        "--cpu", "--speculative-draft-model-path", "/d x",
    )  # fmt: skip
    assert parse_launch("p=--model-path=/m").model_path == "/m"
    assert parse_server("p=http://127.0.0.1:1/").url == "http://127.0.0.1:1"
    with pytest.raises(ServerSpecError):
        parse_launch("p=--model-path 'unclosed")


def _row(name, mode="greedy", conc=1, tok_s=100.0, hist=None):
    return {
        "name": name, "mode": mode, "temperature": 0.0, "concurrency": conc, "tok_s": tok_s,
        "ttft_ms_median": 20.0, "ttft_ms_p90": 30.0, "itl_ms_median": 10.0 if hist is None
        else 5.0, "itl_ms_p90": 12.0, "accept_length": None if hist is None else 1.8,
        "sglang_accept_length": None if hist is None else 1.9, "accept_rate": None if hist is
        None else 0.27, "histogram": hist or [], "errors": [],
    }  # fmt: skip


def test_compare_reports_ratios_and_every_differing_prompt():
    rows = [_row("plain"), _row("eagle3", tok_s=150.0, hist=[5, 2, 1])]
    outputs = {("plain", "greedy", 1): [[1, 2], [3, 4], [5]],
               ("eagle3", "greedy", 1): [[1, 2], [3, 9], None]}  # fmt: skip
    bench._compare(rows, outputs, "plain")
    plain, spec = rows
    assert plain["lossless"] is None and plain["baseline"] and plain["speedup"] == 1.0
    assert spec["speedup"] == 1.5 and spec["itl_ratio"] == 0.5 and spec["ttft_ratio"] == 1.0
    # prompt 2 failed on eagle3: a failed request, not a difference
    assert spec["lossless"] is False and spec["mismatches"] == [1]
    spec["failed_requests"] = [2]
    table = markdown_table(rows)
    assert "| plain | greedy | 1 | 100.0 | 1.00x |" in table and "| ref |" in table
    assert "| 1.80 | 1.90 | 0.27 | NO (1 differ; 1 failed) |" in table


def test_a_failed_request_is_never_reported_as_a_difference():
    rows = [_row("plain"), _row("eagle3", hist=[5, 2, 1])]
    outputs = {("plain", "greedy", 1): [[1, 2], [3, 4]],
               ("eagle3", "greedy", 1): [[1, 2], None]}  # fmt: skip
    bench._compare(rows, outputs, "plain")
    assert rows[1]["lossless"] is True and rows[1]["mismatches"] == []
    dead = [_row("plain"), _row("eagle3", conc=4)]  # the baseline died before c=4
    bench._compare(dead, {("eagle3", "greedy", 4): [None]}, "plain")
    assert dead[1]["lossless"] is None and dead[1]["speedup"] is None


def test_plots_are_valid_pngs(tmp_path):
    rows = [_row("plain"), _row("plain", conc=4, tok_s=300.0),
            _row("eagle3", hist=[5, 2, 1]), _row("eagle3", conc=4, hist=[4, 3, 1, 1])]  # fmt: skip
    paths = write_plots(rows, tmp_path)
    assert [p.name for p in paths] == ["accept_length_hist.png", "tok_s_by_concurrency.png"]
    for p in paths:
        assert p.read_bytes()[:8] == PNG_SIGNATURE and p.stat().st_size > 1000


def test_built_in_prompts_are_distinct():
    assert len(set(BUILT_IN)) == len(BUILT_IN) >= 8


SPEC_FLAGS = ("--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
              "--speculative-num-draft-tokens 4")  # fmt: skip


@pytest.mark.sglang
@pytest.mark.slow
def test_launch_mode_plain_and_eagle3_end_to_end(tmp_path):
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    d = tiny_drafter()
    cpu = f"--model-path {d.target_dir} --cpu --dtype float32"
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_spec.py"),
         "--launch", f"plain={cpu}",
         "--launch", f"eagle3={cpu} {SPEC_FLAGS} --speculative-draft-model-path {d.draft_dir} "
                     f"--draft-cache-dir {tmp_path / 'drafts'}",
         "--num-prompts", "4", "--max-new-tokens", "24", "--concurrency", "1,2",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},  # the servers it starts: one thread each
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert result["lossless"] is True and result["request_errors"] == 0
    rows = {(r["name"], r["concurrency"]): r for r in result["rows"]}
    assert set(rows) == {("plain", 1), ("plain", 2), ("eagle3", 1), ("eagle3", 2)}
    for (name, _), r in rows.items():
        assert r["tok_s"] > 0 and r["completion_tokens"] == 4 * 24
        assert r["ttft_ms_median"] > 0 and r["ttft_ms_p90"] >= r["ttft_ms_median"]
        assert r["itl_ms_median"] > 0 and r["itl_ms_p90"] >= r["itl_ms_median"]
        assert r["finish_reasons"] == {"length": 4}
        if name == "plain":
            assert r["accept_length"] is None and r["histogram"] == []
        else:
            assert r["lossless"] is True and r["speedup"] > 0
            # SGLang's figure is completion / verifies (the prefill token adds 1 / verifies,
            # drafts cut off by the length limit take away); ours is 1 + correct / verifies.
            assert r["accept_length"] > 1 and r["verify_ct"] > 0
            assert r["sglang_accept_length"] == pytest.approx(
                r["completion_tokens"] / r["verify_ct"]
            )
            assert sum(r["histogram"]) == r["verify_ct"]
    for png in ("accept_length_hist.png", "tok_s_by_concurrency.png"):
        data = (out / png).read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1000
    assert "| eagle3 | greedy | 1 |" in proc.stdout and "| plain | greedy | 2 |" in proc.stdout
    assert (out / "results.md").read_text().strip() == proc.stdout.strip()


@pytest.mark.sglang
@pytest.mark.slow
def test_a_server_killed_mid_run_fails_the_run_and_its_requests(server_factory, tiny_target,
                                                                 tmp_path):  # fmt: skip
    """SIGKILL a real server while 8 long requests stream: nothing cut off counts as done."""
    import signal
    import time

    srv = server_factory(tiny_target, ["--dtype", "float32"], name="to-kill")
    out = tmp_path / "out"
    bench_proc = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "bench_spec.py"), "--server",
         f"victim={srv.url}", "--num-prompts", "8", "--concurrency", "8", "--max-new-tokens",
         "200", "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while "#running-req: 8" not in srv.log():  # the 8-request batch is decoding
            if time.monotonic() > deadline or bench_proc.poll() is not None:
                pytest.fail("the batch never ran 8 requests at once:\n" + srv.log()[-2000:])
            time.sleep(0.2)
        srv.stop(signal.SIGKILL)
        stdout, stderr = bench_proc.communicate(timeout=300)
    finally:  # the bench process never outlives the test, pass or fail
        if bench_proc.poll() is None:
            bench_proc.kill()
            bench_proc.wait()
    assert bench_proc.returncode == 1, stdout[-2000:] + stderr[-2000:]
    assert "server died: victim" in stderr
    assert "NOT LOSSLESS" not in stderr  # a crash is not a correctness bug
    result = json.loads((out / "results.json").read_text())
    (row,) = result["rows"]
    assert row["server_died"] and result["server_died"] == ["victim"]
    assert row["failed_requests"] == list(range(8)), row["errors"]
    assert any("cut off" in e or "Error" in e for e in row["errors"]), row["errors"]
    assert row["completion_tokens"] == 0  # nothing from a broken stream is counted
