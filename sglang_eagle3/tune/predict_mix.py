"""Every deployment the tuner can recommend, predicted at each concurrency of the mix: plain
decoding, each static setting of the grid (trees included) and the tuner's adaptive config as
SGLang's own rule will serve it (tune/adaptive_sim.py).

Served tok/s in all at concurrency c: the running batch is b = min(c, --max-running-requests)
(the rest queue), its requests decode at v_b tokens a second each, and every arrival stalls the
batch for the model's arrival cost (tune/rounds.py: timed on one trace-like round per server).
A phase with requests (a --trace) is simulated round by round, its drain included; a mix of
weights alone is priced in steady state, L tokens costing ``L / (b * v_b) + arrival``.
"""

from __future__ import annotations

from sglang_eagle3.tune.adaptive_sim import served_speed, steps_run
from sglang_eagle3.tune.cost import CostModel
from sglang_eagle3.tune.grid import Setting
from sglang_eagle3.tune.mix import ADAPTIVE, PLAIN, Phase, recommend, running
from sglang_eagle3.tune.report import adaptive_flags, adaptive_start, chain_drafts
from sglang_eagle3.tune.rounds import round_seconds


def adaptive_speeds(model: CostModel, drafts: dict[int, float], config: dict, cs,
                    initial: int | None = None) -> dict:  # fmt: skip
    """{c: (tok/s per request, {steps: share of batches})} of ``config`` under SGLang's rule,
    started at ``initial`` steps (default: adaptive_start's; 0 where it never drafts)."""
    out = {}
    start = (adaptive_start(config) or 0) if initial is None else initial
    for c in cs:
        ran = steps_run(config, start, drafts, c)
        total = sum(ran.values())
        out[c] = (served_speed(model, ran, drafts, c),
                  {str(s): round(n / total, 3) for s, n in sorted(ran.items())})  # fmt: skip
    return out


def served(speed, c: int, cap: int | None, tokens: float, arrival: float,
           phases: list[Phase] = ()) -> float:  # fmt: skip
    """Tok/s in all at concurrency ``c``; ``speed(b)``: tok/s per request at batch size b,
    ``arrival``: seconds an arrival stalls the batch. The phases at ``c`` that have requests
    are simulated round by round; without any, steady state at ``tokens`` a request."""
    rounds = [r for p in phases if p.concurrency == c for r in p.rounds()]
    if not rounds:
        b = running(c, cap)
        return tokens / (tokens / (b * speed(b)) + arrival)
    seconds = sum(round_seconds(r, c, cap, speed, arrival) for r in rounds)
    return sum(map(sum, rounds)) / seconds


def adaptive_served(model: CostModel, profile: dict[Setting, float], config: dict,
                    phases: list[Phase], cap: int | None, tokens: float,
                    initial: int | None = None) -> tuple[dict[int, float], dict]:  # fmt: skip
    """An adaptive config as SGLang's rule serves it: tok/s in all per concurrency of the
    mix, and adaptive_speeds' figures at every batch size a round drains through. Its arrival
    cost is a speculative server's at the mean steps it runs at the largest batch."""
    cs = sorted({p.concurrency for p in phases})
    sizes = range(1, max(running(c, cap) for c in cs) + 1)
    ran = adaptive_speeds(model, chain_drafts(profile), config, sizes, initial)
    shares = ran[sizes[-1]][1]
    a = model.arrival(sum(int(s) * x for s, x in shares.items()))
    return {c: served(lambda b: ran[b][0], c, cap, tokens, a, phases) for c in cs}, ran


def mix_result(
    model: CostModel, profile: dict[Setting, float], settings: list[Setting], config: dict,
    phases: list[Phase], cap: int | None, tokens: float,
) -> dict:  # fmt: skip
    """``cap``: --max-running-requests (None: unknown, no cap); ``tokens``: a request's mean."""
    cs = sorted({p.concurrency for p in phases})
    plain_a = model.arrival(None)
    candidates = {PLAIN: {c: served(lambda b: 1 / model.plain(b), c, cap, tokens, plain_a,
                                    phases) for c in cs}}  # fmt: skip
    labels = {PLAIN: "no speculation"}
    for s in settings:

        def v(b, s=s):
            return profile[s] / model.cycle(s.steps, s.topk, s.draft_tokens, b)

        a = model.arrival(s.steps)
        candidates[s.name] = {c: served(v, c, cap, tokens, a, phases) for c in cs}
        labels[s.name] = " ".join(s.flags)
    steps = {}
    if config:
        candidates[ADAPTIVE], ran = adaptive_served(model, profile, config, phases, cap, tokens)
        steps = {str(c): ran[running(c, cap)][1] for c in cs}
        flags = adaptive_flags(config)
        labels[ADAPTIVE] = (f"{flags} --speculative-adaptive-config FILE" if flags else
                            "the adaptive config (it never drafts)")  # fmt: skip
    out = recommend(phases, candidates)
    out["flags"] = labels[out["recommended"]]
    out["adaptive_steps"] = steps  # per concurrency: the share of batches at each step
    out["per_concurrency_tok_s"] = {
        n: {str(c): round(v, 2) for c, v in speeds.items()} for n, speeds in candidates.items()
    }
    out["running_cap"], out["tokens_per_request"] = cap, tokens
    return out
