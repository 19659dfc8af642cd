"""bench_spec: input checks, the streaming client on a replayed SGLang stream, the comparison and
report, and one live run that launches a plain and an EAGLE-3 server on the tiny models."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sglang_eagle3.bench import cli as bench
from sglang_eagle3.bench.client import run_batch, stream_generate
from sglang_eagle3.bench.prompts import BUILT_IN, PromptFileError, read_prompts
from sglang_eagle3.bench.report import markdown_table, write_plots
from sglang_eagle3.bench.servers import ServerSpecError, parse_launch, parse_server

ROOT = Path(__file__).resolve().parent.parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Recorded verbatim (parsed from its `data: ` lines) from a real SGLang 0.5.23 EAGLE-3 server on
# the tiny target: "def fibonacci(n):", greedy, max_new_tokens 12, stream true.
RECORDED_SPEC_STREAM = [
    {
        "text": "\n   ",
        "output_ids": [288],
        "meta_info": {
            "id": "bd096b0269144da4b7d349ad4accf4ed",
            "finish_reason": None,
            "prompt_tokens": 12,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": 1,
            "cached_tokens": 0,
            "cached_tokens_details": None,
            "dp_rank": None,
            "response_sent_to_client_ts": 1796051922.1551247,
        },
    },
    {
        "text": '\n    """Return',
        "output_ids": [288, 395, 710],
        "meta_info": {
            "id": "bd096b0269144da4b7d349ad4accf4ed",
            "finish_reason": None,
            "prompt_tokens": 12,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": 3,
            "cached_tokens": 0,
            "cached_tokens_details": None,
            "dp_rank": None,
        },
    },
    {
        "text": '\n    """Return the same',
        "output_ids": [288, 395, 710, 292, 306, 316],
        "meta_info": {
            "id": "bd096b0269144da4b7d349ad4accf4ed",
            "finish_reason": None,
            "prompt_tokens": 12,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": 6,
            "cached_tokens": 0,
            "cached_tokens_details": None,
            "dp_rank": None,
        },
    },
    {
        "text": '\n    """Return the sameterable',
        "output_ids": [288, 395, 710, 292, 306, 316, 380, 480],
        "meta_info": {
            "id": "bd096b0269144da4b7d349ad4accf4ed",
            "finish_reason": None,
            "prompt_tokens": 12,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": 8,
            "cached_tokens": 0,
            "cached_tokens_details": None,
            "dp_rank": None,
        },
    },
    {
        "text": '\n    """Return the sameterable of',
        "output_ids": [288, 395, 710, 292, 306, 316, 380, 480, 358],
        "meta_info": {
            "id": "bd096b0269144da4b7d349ad4accf4ed",
            "finish_reason": None,
            "prompt_tokens": 12,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": 9,
            "cached_tokens": 0,
            "cached_tokens_details": None,
            "dp_rank": None,
        },
    },
    {
        "text": '\n    """Return the sameterable of the same',
        "output_ids": [288, 395, 710, 292, 306, 316, 380, 480, 358, 292, 306, 316],
        "meta_info": {
            "id": "bd096b0269144da4b7d349ad4accf4ed",
            "finish_reason": {"type": "length", "length": 12},
            "prompt_tokens": 12,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": 12,
            "cached_tokens": 0,
            "weight_versions": [{"version": "default", "start": 0, "end": 12}],
            "cached_tokens_details": None,
            "dp_rank": None,
            "e2e_latency": 0.7297733730010805,
            "spec_accept_rate": 0.4,
            "spec_accept_length": 2.4,
            "spec_num_correct_drafts": 6,
            "spec_num_proposed_drafts": 15,
            "spec_verify_ct": 5,
            "spec_correct_drafts_histogram": [1, 2, 2],
        },
    },
]


class _Replay(BaseHTTPRequestHandler):
    """Serves a recorded event list as SGLang does: `data: {json}\\n\\n` ... `data: [DONE]`."""

    events: list = []
    status = 200

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(self.status)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if self.status != 200:
            self.wfile.write(b'{"error": "bad request"}')
            return
        for event in self.events:
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def replay():
    servers = []

    def start(events, status=200):
        handler = type("H", (_Replay,), {"events": events, "status": status})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_port}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_client_reads_a_recorded_speculative_stream(replay):
    url = replay(RECORDED_SPEC_STREAM)
    r = stream_generate(url, "def fibonacci(n):", {"max_new_tokens": 12})
    assert r.ok, r.error
    assert r.output_ids == RECORDED_SPEC_STREAM[-1]["output_ids"]
    assert [n for _, n in r.timing.chunks] == [1, 3, 6, 8, 9, 12]
    assert r.meta_info["spec_verify_ct"] == 5 and r.meta_info["spec_num_correct_drafts"] == 6
    assert len(r.timing.itls()) == 11 and r.timing.ttft() > 0


def test_client_concatenates_incremental_chunks(replay):
    # --incremental-streaming-output: each event carries only its new ids
    events, prev = [], []
    for e in RECORDED_SPEC_STREAM:
        ids = e["output_ids"]
        events.append({**e, "output_ids": ids[len(prev) :]})
        prev = ids
    r = stream_generate(replay(events), "x", {})
    assert r.output_ids == RECORDED_SPEC_STREAM[-1]["output_ids"]


def test_client_reports_errors_instead_of_raising(replay):
    bad = stream_generate(replay([], status=400), "x", {})
    assert not bad.ok and "400" in bad.error
    in_stream = stream_generate(replay([{"error": {"message": "boom"}}]), "x", {})
    assert in_stream.error == "boom"
    batch = run_batch(replay([]), ["a", "b"], {}, concurrency=2)
    assert batch.errors == ["prompt 0: stream ended without a token",
                            "prompt 1: stream ended without a token"]  # fmt: skip


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


def test_bad_prompts_file_exits_2_before_any_server_starts(tmp_path):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": "fine"}\n{"text": oops}\n')
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_spec.py"),
         "--launch", f"plain=--model-path {tmp_path} --cpu", "--prompts", str(bad),
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
        [],
    ],
)
def test_bad_server_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2
    assert "error:" in capsys.readouterr().err


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
    assert spec["lossless"] is False and spec["mismatches"] == [1, 2]
    table = markdown_table(rows)
    assert "| plain | greedy | 1 | 100.0 | 1.00x |" in table and "| ref |" in table
    assert "| 1.80 | 1.90 | 0.27 | NO (2 differ) |" in table


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
            assert r["accept_length"] > 1 and r["sglang_accept_length"] > r["accept_length"]
            assert sum(r["histogram"]) == r["verify_ct"]
    for png in ("accept_length_hist.png", "tok_s_by_concurrency.png"):
        data = (out / png).read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1000
    assert "| eagle3 | greedy | 1 |" in proc.stdout and "| plain | greedy | 2 |" in proc.stdout
    assert (out / "results.md").read_text().strip() == proc.stdout.strip()
