"""Time a few servers through the launcher at each concurrency asked: each speculative server in
rounds against a plain reference server kept alive beside it (paired), or alone.

Request timing (SGLang 0.5.23 exports no per-phase times): streamed greedy requests of a fixed
length; a decode cycle's time is a request's time after its first token divided by its verify
count (SGLang's ``spec_verify_ct``), a plain step's by its tokens after the first.

Why paired: on a shared 2-core machine the speed drifts by tens of percent within seconds (one
plain server's single requests read 27 to 72 tok/s over bench_tune run 8; run 6 saw one
setting 7-79 % apart over three server starts). A round sends the same c prompts to the
subject and to the reference, one after the other (ABBA order), so drift hits both alike; a
subject's time is the median over rounds of its ratio to the reference, times the reference's
median over the whole run (``drift_corrected``). It costs a second server's memory, so it is
the default on CPU only.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from math import gcd
from pathlib import Path

from sglang_eagle3.bench.client import BatchResult, RequestResult, run_batch
from sglang_eagle3.bench.metrics import spec_stats
from sglang_eagle3.bench.servers import ServerSpec, live_server
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.sglang_argv import drop_options
from sglang_eagle3.tune.cost import Measured
from sglang_eagle3.tune.grid import Setting
from sglang_eagle3.tune.rounds import ArrivalRound, mixed_lengths

MIN_ROUNDS = 6  # rounds of c requests per concurrency, at least (an even count: ABBA)
PER_PROMPT = 2  # times each prompt is timed per concurrency, at least


def timing_text(paired: bool) -> str:
    how = ("paired: each speculative server in rounds against a plain server alive beside it"
           if paired else "one server at a time")  # fmt: skip
    return f"request timing, {how} (SGLang 0.5.23 exports no per-phase times)"


def per_request(r: RequestResult, speculative: bool) -> tuple[float, float | None] | None:
    """(seconds per cycle or plain step, accept length) of one request; None when too short.
    The accept length is the unbiased ``1 + correct drafts / verifies`` (bench/metrics.py):
    SGLang's own counts the prefill's token as a verify's, +1/verifies (+0.04 at 25 verifies)."""
    first = next((t for t, n in r.timing.chunks if n > 0), None)
    tokens = int(r.meta_info.get("completion_tokens", 0))
    verifies = int(r.meta_info.get("spec_verify_ct") or 0)
    if first is None or tokens < 2:
        return None
    steps = verifies if speculative else tokens - 1
    if steps < 1:
        return None
    accept = spec_stats([r.meta_info]).accept_length if speculative else None
    return (r.end - first) / steps, accept


def round_count(c: int, n_prompts: int) -> int:
    """Rounds of c requests: an even number (ABBA), at least MIN_ROUNDS, each prompt timed at
    least PER_PROMPT times and every prompt equally often (the accept length depends on the
    text, so each concurrency is timed on the same mix)."""
    step = n_prompts // gcd(n_prompts, c)
    r = step
    while r < MIN_ROUNDS or r * c < PER_PROMPT * n_prompts or r % 2:
        r += step
    return r


def timed_rounds(
    url: str, ref: str | None, prompts: Sequence[str], c: int, params: dict
) -> Iterator[tuple[BatchResult, BatchResult | None]]:
    """Per round, c concurrent requests on ``url`` and the same ones on ``ref`` (None: no
    reference), the reference first every other round. One untimed round first: a server's
    first batch of a new size pays one-time costs (bench_tune run 7: for 12 of 16 new servers
    the first round at c=8 was the slowest of four)."""
    for i in range(-1, round_count(c, len(prompts))):
        batch = [prompts[(i * c + j) % len(prompts)] for j in range(c)]
        got = paired_round(url, ref, i, batch, params, c)
        if i >= 0:
            yield got


def paired_round(
    url: str, ref: str | None, i: int, batch: Sequence[str], params, c: int
) -> tuple[BatchResult, BatchResult | None]:
    """Round ``i``: ``batch`` with ``c`` in flight on ``url`` and on ``ref`` (None: none), the
    reference first in odd rounds (ABBA); a failed request is one WiringError."""
    order = [url] if ref is None else ([url, ref] if i % 2 == 0 else [ref, url])
    got = {}
    for u in order:
        got[u] = run_batch(u, batch, params, c)
        if got[u].errors:
            raise WiringError(f"the server at {u} failed: {got[u].errors[0]}",
                              fix="check its log")  # fmt: skip
    return got[url], (got[ref] if ref is not None else None)


def drift_corrected(pairs: Sequence[tuple[float, float | None]], level: float) -> float:
    """A subject's value from its rounds: the median over rounds of subject / reference, times
    ``level`` (the reference's median over the whole run); unpaired rounds (reference None):
    the median of the subject's values."""
    if not pairs:
        raise ValueError("no timed round")
    if all(r is None for _, r in pairs):
        return statistics.median(s for s, _ in pairs)
    if any(r is None or r <= 0 for _, r in pairs):
        raise ValueError("every round must be paired, with a positive reference value")
    return statistics.median(s / r for s, r in pairs) * level


def _seconds(batch: BatchResult, speculative: bool) -> tuple[float, list[float]]:
    """(median seconds per cycle or step over the batch's requests, their accept lengths)."""
    per = [x for r in batch.results if (x := per_request(r, speculative))]
    if not per:
        raise WiringError("a timed request was too short to time", fix="raise --max-new-tokens")
    return statistics.median(p[0] for p in per), [p[1] for p in per if p[1] is not None]


def greedy(max_new_tokens: int) -> dict:
    """The sampling parameters of every timed request: greedy, a fixed length."""
    return {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}


def warm_up(url: str, prompts: Sequence[str], params: dict) -> dict[str, list[int]]:
    """One pass over the prompts (first-call costs are not a cycle's); their greedy outputs."""
    warm = run_batch(url, list(prompts), params, 1)
    return {p: r.output_ids for p, r in zip(prompts, warm.results, strict=True)}


def arrival_plan(b: int, max_new_tokens: int) -> tuple[tuple[int, ...], int]:
    """A trace-like round at running batch ``b``: (4b request lengths, mixed as tune/rounds.py
    MIX, and 2b in flight, so that arrivals keep coming while b run)."""
    return tuple(mixed_lengths(max_new_tokens, 4 * b)), 2 * b


def arrival_rounds(
    url: str, ref: str | None, prompts: Sequence[str], lengths: Sequence[int], c: int,
    rounds: int,
) -> Iterator[tuple[BatchResult, BatchResult | None]]:  # fmt: skip
    """Per round, ``lengths`` with ``c`` in flight on ``url`` and the same on ``ref``."""
    batch = [prompts[j % len(prompts)] for j in range(len(lengths))]
    for i in range(rounds):
        yield paired_round(url, ref, i, batch, lambda j: greedy(lengths[j]), c)


STEPS0 = Setting(0, 1, 1)  # SGLang's adaptive steps 0: verify one token, draft none
STEPS0_CONFIG = {"1": {"candidate_steps": [0]}}  # every batch size at steps 0


def steps0_argv(argv: Sequence[str], config: Path) -> list[str]:
    """``argv`` serving SGLang's adaptive mode with every slot at steps 0."""
    out = STEPS0.on(list(argv))
    return [*out, "--speculative-adaptive", "--speculative-adaptive-config", str(config)]


def measure_launched(
    model_path: str, argv: Sequence[str], settings: Sequence[Setting], log_dir: Path,
    prompts: Sequence[str], concurrencies: Sequence[int], max_new_tokens: int, paired: bool,
    steps0: Path | None = None, arrival: tuple[int, int | None, int] | None = None,
) -> tuple[list[Measured], dict[str, dict[str, list[int]]], list[ArrivalRound]]:  # fmt: skip
    """Plain decoding and each speculative setting, each started through the launcher; one
    Measured per server and concurrency, and every server's greedy outputs by name. With
    ``steps0`` (an all-[0] adaptive config file) a steps-0 server is timed too; with
    ``arrival`` (batch size b, the running cap, rounds) each server's trace-like rounds."""
    params = greedy(max_new_tokens)
    outputs: dict[str, dict[str, list[int]]] = {}
    ref_s: dict[int, list[float]] = {c: [] for c in concurrencies}
    # keyed by position too: a one-setting grid measures its setting twice, two fit points
    rounds: dict[tuple[int, Setting, int], list[tuple[float, float | None]]] = {}
    accepts: dict[tuple[int, Setting, int], list[float]] = {}
    arr_pairs: dict[tuple[int, Setting], list[tuple[float, float | None]]] = {}
    arr_accept: dict[tuple[int, Setting], list[float]] = {}
    arr_ref: list[float] = []
    arr_lengths, arr_c = arrival_plan(arrival[0], max_new_tokens) if arrival else ((), 0)
    with ExitStack() as plain_alive:
        plain = ServerSpec("plain", None, model_path, tuple(plain_argv(argv)))
        ref = plain_alive.enter_context(live_server(plain, log_dir))
        outputs["plain"] = warm_up(ref, prompts, params)
        if not paired:
            for c in concurrencies:
                ref_s[c] = [_seconds(b, False)[0] for b, _ in timed_rounds(ref, None, prompts,
                                                                          c, params)]  # fmt: skip
            if arrival is not None:
                arr_ref += [sub.wall_s for sub, _ in arrival_rounds(
                    ref, None, prompts, arr_lengths, arr_c, arrival[2])]  # fmt: skip
            plain_alive.close()
        servers = [(s, s.on(list(argv))) for s in settings]
        if steps0 is not None:
            servers.append((STEPS0, steps0_argv(argv, steps0)))
        for i, (s, s_argv) in enumerate(servers):
            spec = ServerSpec(s.name, None, model_path, tuple(s_argv))
            with live_server(spec, log_dir) as url:
                outputs[s.name] = warm_up(url, prompts, params)
                for c in concurrencies:
                    got, acc = rounds.setdefault((i, s, c), []), accepts.setdefault((i, s, c), [])
                    for sub, rb in timed_rounds(url, ref if paired else None, prompts, c,
                                                params):  # fmt: skip
                        # steps 0 yields one token a cycle, and SGLang reports no verify count
                        seconds, a = _seconds(sub, s.steps > 0)
                        acc += a
                        r = _seconds(rb, False)[0] if rb is not None else None
                        got.append((seconds, r))
                        if r is not None:
                            ref_s[c].append(r)
                if arrival is not None:
                    got_a = arr_pairs.setdefault((i, s), [])
                    r_url = ref if paired else None
                    for sub, rb in arrival_rounds(url, r_url, prompts, arr_lengths, arr_c,
                                                  arrival[2]):  # fmt: skip
                        got_a.append((sub.wall_s, rb.wall_s if rb is not None else None))
                        if rb is not None:
                            arr_ref.append(rb.wall_s)
                        if s.steps > 0:
                            arr_accept.setdefault((i, s), []).append(
                                spec_stats([r.meta_info for r in sub.results]).accept_length
                            )
    level = {c: statistics.median(v) for c, v in ref_s.items()}
    out = [Measured(0, 0, 0, c, level[c]) for c in concurrencies]
    for (i, s, c), pairs in rounds.items():
        acc = statistics.median(accepts[(i, s, c)]) if accepts[(i, s, c)] else None
        out.append(
            Measured(s.steps, s.topk, s.draft_tokens, c, drift_corrected(pairs, level[c]), acc)
        )
    if arrival is None or not arr_ref:
        return out, outputs, []
    # plain's median wall, and each server's drift-corrected against it
    cap, level = arrival[1], statistics.median(arr_ref)
    arrivals = [ArrivalRound(-1, 0, 0, arr_c, cap, arr_lengths, level)]
    for (i, s), got in arr_pairs.items():
        acc = arr_accept.get((i, s))
        arrivals.append(ArrivalRound(s.steps, s.topk, s.draft_tokens, arr_c, cap, arr_lengths,
                                     drift_corrected(got, level),
                                     statistics.median(acc) if acc else None))  # fmt: skip
    return out, outputs, arrivals


def plain_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` (the launcher's flags and SGLang's) without speculative decoding: every
    --speculative-* option, and the launcher's own but --cpu (--hidden-state-layout,
    --training-data, --expected-accept-length, ...: it refuses them without a draft)."""
    from sglang_eagle3.launch.cli import build_parser

    own, sglang = build_parser().parse_known_args(list(argv))
    keep = ["--cpu"] if own.cpu else []
    return keep + drop_options(sglang, lambda name: name.startswith("--speculative-"))
