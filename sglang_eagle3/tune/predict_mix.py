"""Every deployment the tuner can recommend, predicted at each concurrency of the mix: plain
decoding, each static setting of the grid (trees included) and the tuner's adaptive config as
SGLang's own rule will serve it (tune/adaptive_sim.py).

Served tok/s in all at concurrency c, requests of L tokens in a closed loop: the running batch
is b = min(c, --max-running-requests) (the rest queue), its requests decode at v_b tokens a
second each, and every arrival's prefill runs as its own forward while the batch waits (SGLang
does not mix prefill into decode here). So L tokens cost ``L / (b * v_b) + t_pf``: t_pf is a
batch-1 step, plain(1) without a draft, steps0(1) with one (the prefill and the drafter's
extend). The first bench_live run showed both: its c=64 phase ran batches of 8 (the CPU
default), and at c=8 the arrivals' prefills took a third of a speculative server's time."""

from __future__ import annotations

from sglang_eagle3.tune.adaptive_sim import served_speed, steps_run
from sglang_eagle3.tune.cost import CostModel
from sglang_eagle3.tune.grid import Setting
from sglang_eagle3.tune.mix import ADAPTIVE, PLAIN, Phase, recommend, running
from sglang_eagle3.tune.report import adaptive_flags, adaptive_start, chain_drafts


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


def served(model: CostModel, speed, c: int, cap: int | None, tokens: float,
           speculative: bool) -> float:  # fmt: skip
    """Tok/s in all at concurrency ``c``; ``speed(b)``: tok/s per request at batch size b."""
    b = running(c, cap)
    t_pf = model.steps0(1) if speculative else model.plain(1)
    return tokens / (tokens / (b * speed(b)) + t_pf)


def mix_result(
    model: CostModel, profile: dict[Setting, float], settings: list[Setting], config: dict,
    phases: list[Phase], cap: int | None, tokens: float,
) -> dict:  # fmt: skip
    """``cap``: --max-running-requests (None: unknown, no cap); ``tokens``: a request's mean."""
    cs = sorted({p.concurrency for p in phases})
    runs = sorted({running(c, cap) for c in cs})
    candidates = {PLAIN: {c: served(model, lambda b: 1 / model.plain(b), c, cap, tokens, False)
                          for c in cs}}  # fmt: skip
    labels = {PLAIN: "no speculation"}
    for s in settings:

        def v(b, s=s):
            return profile[s] / model.cycle(s.steps, s.topk, s.draft_tokens, b)

        candidates[s.name] = {c: served(model, v, c, cap, tokens, True) for c in cs}
        labels[s.name] = " ".join(s.flags)
    steps = {}
    if config:
        ran = adaptive_speeds(model, chain_drafts(profile), config, runs)
        candidates[ADAPTIVE] = {c: served(model, lambda b: ran[b][0], c, cap, tokens, True)
                                for c in cs}  # fmt: skip
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
