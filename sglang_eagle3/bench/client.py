"""A streaming client for SGLang's native /generate: per-chunk timings and output token ids.

Standard library only (urllib + threads): the client must not compete with a CPU server for
cores more than it has to, and a thread per in-flight request is enough for the concurrency a
benchmark sweep uses. SGLang 0.5.23 streams `data: {json}\\n\\n` events and ends with
`data: [DONE]`; every event carries `meta_info.completion_tokens` (cumulative), and only the
final one carries the speculative counters (`spec_verify_ct`, ...).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sglang_eagle3.bench.metrics import StreamTiming


@dataclass
class RequestResult:
    output_ids: list[int]
    meta_info: dict
    timing: StreamTiming
    error: str | None = None
    end: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class BatchResult:
    results: list[RequestResult]
    wall_s: float
    errors: list[str] = field(default_factory=list)


def _merge_ids(ids: list[int], chunk_ids: list[int], completion_tokens: int) -> list[int]:
    """SGLang streams cumulative ids by default and deltas with --incremental-streaming-output;
    a chunk holding as many ids as tokens generated so far is the cumulative kind."""
    if len(chunk_ids) == completion_tokens:
        return list(chunk_ids)
    return ids + list(chunk_ids)


def incomplete_reason(ids: list[int], meta: dict, sampling_params: dict, done: bool) -> str | None:
    """Why a stream that raised nothing is still not a whole response (None: it is one).

    A server killed mid-stream closes the connection cleanly between events, so an ended
    stream proves nothing: only `[DONE]` after a finish reason does, and with `ignore_eos`
    exactly the asked number of tokens."""
    if not ids:
        return "stream ended without a token"
    finish = meta.get("finish_reason")
    if not done or not finish:
        return f"stream cut off after {len(ids)} tokens (no finish reason; did the server die?)"
    asked = sampling_params.get("max_new_tokens")
    if sampling_params.get("ignore_eos") and asked is not None and len(ids) != int(asked):
        return f"{len(ids)} of {asked} tokens with ignore_eos (finish reason {finish})"
    return None


def stream_generate(
    url: str, text: str, sampling_params: dict, *, timeout: float = 600.0
) -> RequestResult:
    """POST one streaming /generate request and record when each chunk arrived."""
    body = {"text": text, "sampling_params": sampling_params, "stream": True}
    req = urllib.request.Request(
        url.rstrip("/") + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    start = time.perf_counter()
    chunks: list[tuple[float, int]] = []
    ids: list[int] = []
    meta: dict = {}
    error, done = None, False
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            for raw in resp:
                now = time.perf_counter()  # stamp before parsing: parse time is not latency
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                event = json.loads(payload)
                if "error" in event:
                    error = str(event["error"].get("message", event["error"]))
                    break
                meta = event.get("meta_info") or {}
                n = int(meta.get("completion_tokens", 0))
                ids = _merge_ids(ids, event.get("output_ids") or [], n)
                chunks.append((now, n))
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        detail = (
            e.read().decode(errors="replace")[:500] if isinstance(e, urllib.error.HTTPError) else ""
        )
        error = f"{type(e).__name__}: {e} {detail}".strip()
    end = time.perf_counter()
    if error is None:
        error = incomplete_reason(ids, meta, sampling_params, done)
    return RequestResult(ids, meta, StreamTiming(start, tuple(chunks)), error, end)


def server_alive(url: str, timeout: float = 10.0) -> bool:
    """Whether the server still answers /health (after failed requests: did it die?)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, http.client.HTTPException):
        return False


def run_batch(
    url: str,
    prompts: Sequence[str],
    sampling_params: dict | Callable[[int], dict],
    concurrency: int,
    on_done: Callable[[], None] | None = None,
    timeout: float = 600.0,
) -> BatchResult:
    """All prompts with at most `concurrency` in flight; results in prompt order.

    `sampling_params` may be a function of the prompt index (a per-request seed)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")

    def one(i: int) -> RequestResult:
        params = sampling_params(i) if callable(sampling_params) else sampling_params
        r = stream_generate(url, prompts[i], params, timeout=timeout)
        if on_done is not None:
            on_done()
        return r

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(len(prompts))))
    wall = time.perf_counter() - t0
    errors = [f"prompt {i}: {r.error}" for i, r in enumerate(results) if r.error]
    return BatchResult(results, wall, errors)
