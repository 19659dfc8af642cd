"""bench_spec's streaming client on a replayed SGLang stream: a real EAGLE-3 server's events,
incremental chunks, and errors reported instead of raised."""

from __future__ import annotations

import contextlib
import json
from http.server import BaseHTTPRequestHandler

import pytest
from loopback import serving

from sglang_eagle3.bench.client import run_batch, stream_generate

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
    with contextlib.ExitStack() as stack:

        def start(events, status=200):
            handler = type("H", (_Replay,), {"events": events, "status": status})
            return stack.enter_context(serving(handler))

        yield start


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


class _CutOff(_Replay):
    """Like a server killed mid-stream: some events, then the connection closes, no [DONE]."""

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in self.events:
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        self.wfile.flush()
        self.close_connection = True


def test_a_cut_off_stream_is_a_failed_request(replay):
    cut = RECORDED_SPEC_STREAM[:3]  # 6 of 12 tokens, no finish reason
    with serving(type("H", (_CutOff,), {"events": cut})) as url:
        r = stream_generate(url, "x", {"max_new_tokens": 12})
    assert not r.ok and "cut off after 6 tokens (no finish reason" in r.error
    # a whole stream with ignore_eos but fewer tokens than asked is not whole either
    short = stream_generate(replay(RECORDED_SPEC_STREAM), "x",
                            {"max_new_tokens": 16, "ignore_eos": True})  # fmt: skip
    assert not short.ok and "12 of 16 tokens with ignore_eos" in short.error
    whole = stream_generate(replay(RECORDED_SPEC_STREAM), "x",
                            {"max_new_tokens": 12, "ignore_eos": True})  # fmt: skip
    assert whole.ok, whole.error
