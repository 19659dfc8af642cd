"""Time a few servers through the launcher, one at a time, at each concurrency asked.

Request timing (SGLang 0.5.23 exports no per-phase times): streamed greedy requests of a fixed
length; a decode cycle's time is a request's time after its first token divided by its verify
count (SGLang's ``spec_verify_ct``), a plain step's by its tokens after the first.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from sglang_eagle3.bench.client import RequestResult, run_batch
from sglang_eagle3.bench.servers import ServerSpec, live_server
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.sglang_argv import drop_options
from sglang_eagle3.tune.cost import Measured
from sglang_eagle3.tune.grid import Setting

ROUNDS = 3  # requests per concurrency slot; the median is taken over all of them
TIMING = "request timing: streamed greedy requests (SGLang 0.5.23 exports no per-phase times)"


def per_request(r: RequestResult, speculative: bool) -> tuple[float, float | None] | None:
    """(seconds per cycle or plain step, accept length) of one request; None when too short."""
    first = next((t for t, n in r.timing.chunks if n > 0), None)
    tokens = int(r.meta_info.get("completion_tokens", 0))
    verifies = int(r.meta_info.get("spec_verify_ct") or 0)
    if first is None or tokens < 2:
        return None
    steps = verifies if speculative else tokens - 1
    if steps < 1:
        return None
    return (r.end - first) / steps, (tokens / verifies if speculative and verifies else None)


def timed_prompts(prompts: Sequence[str], c: int) -> list[str]:
    """At least ROUNDS requests a concurrency slot (one request alone varied 2x between runs),
    and every prompt equally often: the accept length depends on the text, so each
    concurrency is timed on the same mix of prompts."""
    rounds = -(-max(ROUNDS * c, len(prompts)) // len(prompts))
    return list(prompts) * rounds


def measure_url(
    url: str, setting: Setting | None, prompts: Sequence[str], concurrencies: Sequence[int],
    max_new_tokens: int, outputs: dict[str, list[int]] | None = None,
) -> list[Measured]:  # fmt: skip
    """One Measured per concurrency: the median over its requests (after one warm-up that
    also records every prompt's greedy output in ``outputs``, to check losslessness)."""
    params = {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}
    warm = run_batch(url, list(prompts), params, 1)  # first-call costs are not a cycle's
    if outputs is not None:
        outputs.update({p: r.output_ids for p, r in zip(prompts, warm.results, strict=True)})
    out = []
    for c in concurrencies:
        batch = run_batch(url, timed_prompts(prompts, c), params, c)
        if batch.errors:
            raise WiringError(f"the server at {url} failed: {batch.errors[0]}",
                              fix="check its log")  # fmt: skip
        per = [x for r in batch.results if (x := per_request(r, setting is not None))]
        if not per:
            raise WiringError(f"no timed request at concurrency {c} from {url}",
                              fix="raise --max-new-tokens")  # fmt: skip
        seconds = statistics.median(p[0] for p in per)
        accept = statistics.median(p[1] for p in per) if setting is not None else None
        s = setting or Setting(0, 0, 0)
        out.append(Measured(s.steps, s.topk, s.draft_tokens, c, seconds, accept))
    return out


def measure_launched(
    model_path: str, argv: Sequence[str], settings: Sequence[Setting | None], log_dir: Path,
    measure: Callable[[str, Setting | None, dict], list[Measured]],
    outputs: dict[str, dict[str, list[int]]],
) -> list[Measured]:  # fmt: skip
    """Start each setting's server through the launcher (None: plain, no speculation), one at
    a time, and measure it; ``outputs[server name]`` gets its greedy outputs."""
    out = []
    for setting in settings:
        args = list(argv) if setting is not None else plain_argv(argv)
        name = (
            "plain"
            if setting is None
            else f"s{setting.steps}k{setting.topk}n{setting.draft_tokens}"
        )
        spec = ServerSpec(name, None, model_path, tuple(setting.on(args) if setting else args))
        with live_server(spec, log_dir) as url:
            out += measure(url, setting, outputs.setdefault(name, {}))
    return out


def plain_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` (SGLang's flags) without speculative decoding: every --speculative-* option."""
    return drop_options(list(argv), lambda name: name.startswith("--speculative-"))
