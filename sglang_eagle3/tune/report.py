"""What the tuner prints: the best setting per concurrency as launch flags, the top 5, the
cost breakdown and break-even accept length, plain sentences where speculation cannot pay,
and SGLang's --speculative-adaptive-config built from the same model (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from sglang_eagle3.tune.adaptive import config as slot_config
from sglang_eagle3.tune.adaptive import describe, slots
from sglang_eagle3.tune.cost import CostModel, Measured, break_even
from sglang_eagle3.tune.grid import Setting


@dataclass(frozen=True)
class Prediction:
    setting: Setting
    concurrency: int
    accept_length: float
    tok_s: float  # per request: accept_length / cycle
    speedup: float  # over plain decoding at this concurrency

    def to_dict(self) -> dict:
        s = self.setting
        return {"steps": s.steps, "topk": s.topk, "draft_tokens": s.draft_tokens,
                "concurrency": self.concurrency, "accept_length": round(self.accept_length, 3),
                "tok_s": round(self.tok_s, 2), "speedup": round(self.speedup, 3)}  # fmt: skip


def predict(model: CostModel, profile: dict[Setting, float], c: int) -> list[Prediction]:
    """Every profiled setting at concurrency ``c``, fastest first."""
    plain = 1 / model.plain(c)
    out = []
    for s, accept in profile.items():
        tok_s = accept / model.cycle(s.steps, s.topk, s.draft_tokens, c)
        out.append(Prediction(s, c, accept, tok_s, tok_s / plain))
    return sorted(out, key=lambda p: -p.tok_s)


def explain(model: CostModel, p: Prediction) -> dict:
    """Where a cycle's time goes, and the accept length it needs to beat plain decoding."""
    s, c = p.setting, p.concurrency
    parts = model.parts(s.steps, s.topk, s.draft_tokens, c)
    cycle = sum(parts.values())
    need = break_even(model, s.steps, s.topk, s.draft_tokens, c)
    verify = parts["verify"] / model.plain(c)
    return {"setting": str(s), "concurrency": c, "cycle_s": cycle,
            "shares": {k: round(v / cycle, 3) for k, v in parts.items()},
            "verify_vs_plain_step": round(verify, 2), "break_even_accept_length": round(need, 2),
            "accept_length": round(p.accept_length, 2), "tok_s": round(p.tok_s, 2),
            "pays": p.accept_length > need}  # fmt: skip


def verdict(model: CostModel, best: Prediction) -> str:
    """One plain sentence on whether speculation pays at this concurrency."""
    e = explain(model, best)
    c = best.concurrency
    if e["pays"]:
        return (f"at {c} concurrent request(s), {best.setting} is predicted {best.speedup:.2f}x "
                f"plain: it needs accept length > {e['break_even_accept_length']} and this "
                f"drafter reaches {e['accept_length']}")  # fmt: skip
    return (f"at {c} concurrent request(s), verify costs {e['verify_vs_plain_step']}x a plain "
            f"step; speculation needs accept length > {e['break_even_accept_length']} and this "
            f"drafter reaches {e['accept_length']}: serve without it, or use the adaptive "
            "config")  # fmt: skip


def chain_drafts(profile: dict[Setting, float]) -> dict[int, float]:
    """{steps: accepted drafts per verify} of the profile's chains, steps 0 (no draft) included:
    what SGLang's adaptive mode (topk 1 only) chooses among."""
    out = {s.steps: a - 1 for s, a in profile.items() if s.topk == 1}
    return {0: 0.0, **out} if out else {}


def adaptive_slots(model: CostModel, profile: dict[Setting, float], concurrencies) -> list:
    """The tuner's adaptive slots (tune/adaptive.py); empty where the grid holds no chain."""
    drafts = chain_drafts(profile)
    return slots(model, drafts, concurrencies) if drafts else []


def adaptive_config(model: CostModel, profile: dict[Setting, float], concurrencies) -> dict:
    """SGLang's --speculative-adaptive-config for these slots ({} without a chain)."""
    return slot_config(adaptive_slots(model, profile, concurrencies))


def adaptive_start(config: dict) -> int | None:
    """The --speculative-num-steps to serve ``config`` with: SGLang 0.5.23 refuses one outside
    the union of its candidate steps, and starts every slot at it where the slot holds it. The
    lowest batch size's longest step, as a lone request is where drafting pays most; None where
    the config never drafts."""
    if not config:
        return None
    lowest = [s for s in config[min(config, key=int)]["candidate_steps"] if s]
    union = sorted({s for e in config.values() for s in e["candidate_steps"] if s})
    return max(lowest) if lowest else union[0] if union else None


def adaptive_flags(config: dict) -> str | None:
    """The flags that serve ``config`` (adaptive_start's steps); None where it never drafts."""
    steps = adaptive_start(config)
    if steps is None:
        return None
    return " ".join([*Setting(steps, 1, steps + 1).flags, "--speculative-adaptive"])


def steps0_sentences(model: CostModel, concurrencies) -> list[str]:
    """Steps 0 against plain decoding, per concurrency: SGLang's [0] still verifies each token
    and extends the drafter, so serving without speculation is faster by this much."""
    out = []
    for c in concurrencies:
        ratio = model.steps0(c) / model.plain(c)
        out.append(f"at {c} concurrent request(s) steps 0 costs {ratio:.2f}x a plain step "
                   f"({'timed' if model.z0 is not None else 'modelled'}): a server without "
                   f"speculation is {ratio:.2f}x faster than an adaptive slot at [0]")  # fmt: skip
    return out


def measured_rows(measured: list[Measured]) -> list[dict]:
    return [{"steps": m.steps, "topk": m.topk, "draft_tokens": m.draft_tokens,
             "concurrency": m.concurrency, "seconds": round(m.seconds, 6),
             "accept_length": m.accept_length} for m in measured]  # fmt: skip


def arrival_line(result: dict) -> str:
    """What an arriving request costs the batch, and where the figure comes from."""
    m = result["model"]
    if m.get("arr_plain") is None:
        return ("an arrival stalls the batch for one batch-1 step (not timed: "
                "--arrival-rounds 0)")  # fmt: skip
    rounds = result.get("arrival_rounds", [])
    at = f" at {rounds[0]['concurrency']} in flight" if rounds else ""
    return (
        f"an arrival stalls the batch {m['arr_plain'] * 1e3:.1f} ms without a draft, "
        f"{m['arr0'] * 1e3:.1f} + {m['arr1'] * 1e3:.1f} ms x steps with one (timed on "
        f"{len(rounds)} servers' trace-like rounds{at})"
    )


def render(result: dict) -> str:
    """The text report of a tune result (the same dict --json prints)."""
    lines = [f"cost model: {result['timing']}; fitted on {len(result['measured'])} points",
             f"acceptance: {result['acceptance_source']}"]  # fmt: skip
    for name, same in result.get("lossless", {}).items():
        lines.append(f"lossless: {name} greedy output {'equals' if same else 'DIFFERS FROM'} "
                     "plain's on every prompt")  # fmt: skip
    for a in result.get("accept_check", []):
        lines.append(f"accept length of {a['setting']} at {a['concurrency']}: profile "
                     f"{a['profile']}, served {a['served']}")  # fmt: skip
    lines.append("")
    for c in result["concurrency"]:
        row = result["per_concurrency"][str(c)]
        lines.append(f"== concurrency {c}: plain {row['plain_tok_s']:.1f} tok/s per request")
        lines.append(f"   best: {row['flags']}")
        lines.append(f"   {row['verdict']}")
        lines.append("   top 5 (predicted):")
        for p in row["top"]:
            lines.append(f"     steps {p['steps']} topk {p['topk']} draft tokens "
                         f"{p['draft_tokens']}: accept {p['accept_length']:.2f}, "
                         f"{p['tok_s']:.1f} tok/s, {p['speedup']:.2f}x plain")  # fmt: skip
        shares = ", ".join(f"{k} {v:.0%}" for k, v in row["why"]["shares"].items())
        lines.append(f"   the best cycle: {shares}; break-even accept length "
                     f"{row['why']['break_even_accept_length']}")  # fmt: skip
    for e in result.get("explained", []):
        lines.append(f"explain {e['setting']} at {e['concurrency']}: predicted {e['tok_s']:.1f} "
                     f"tok/s (accept {e['accept_length']}, break-even "
                     f"{e['break_even_accept_length']}; draft steps "
                     f"{e['shares']['draft_steps']:.0%} of the cycle)")  # fmt: skip
    mix = result.get("mix")
    if mix:
        lines.append("")
        shares = ", ".join(f"{p['concurrency']}: {p['weight']:.0%}" for p in mix["phases"])
        lines.append(f"== the mix (share of tokens at each concurrency: {shares})")
        if mix.get("running_cap"):
            lines.append(f"   batches run at most {mix['running_cap']} requests "
                         "(--max-running-requests): more concurrent requests queue")  # fmt: skip
        lines.append(f"   {arrival_line(result)}")
        lines.append(f"   recommended: {mix['recommended']}: {mix['flags']}")
        lines += [f"   {w}" for w in mix["why"]]
        for c, shares in mix.get("adaptive_steps", {}).items():
            ran = ", ".join(f"steps {s} {v:.0%}" for s, v in shares.items())
            lines.append(f"   adaptive at {c} (SGLang's rule, simulated): {ran} of batches")
    for line in result.get("steps0", []):
        lines.append(f"steps 0: {line}")
    for line in result.get("adaptive_slots", []):
        lines.append(f"adaptive slot, {line}")
    if "adaptive_config" in result:
        flags = result["adaptive_flags"]
        lines.append(f"adaptive config: serve with {flags} --speculative-adaptive-config FILE"
                     if flags else "adaptive config: it never drafts; serve without "
                     "--speculative-algorithm")  # fmt: skip
    return "\n".join(lines)


def build_result(
    model: CostModel, profile: dict[Setting, float], settings: list[Setting],
    explained: list[Setting], measured: list[Measured], concurrency, *, timing: str,
    acceptance_source: str,
) -> dict:  # fmt: skip
    """Everything the tuner found, as one JSON-able dict (what --json prints)."""
    grid_profile = {s: profile[s] for s in settings}
    plain = {m.concurrency: 1 / m.seconds for m in measured if m.plain}
    per, every = {}, []
    for c in concurrency:
        preds = predict(model, grid_profile, c)
        every += [p.to_dict() for p in preds]
        best = preds[0]
        pays = best.tok_s > 1 / model.plain(c)
        per[str(c)] = {
            "plain_tok_s": round(plain.get(c, 1 / model.plain(c)), 2),
            "best": best.to_dict(),
            "flags": " ".join(best.setting.flags)
            if pays
            else "no speculation: launch "
            "without --speculative-algorithm (or with the adaptive config)",
            "verdict": verdict(model, best),
            "top": [p.to_dict() for p in preds[:5]],
            "why": explain(model, best),
        }
    found = adaptive_slots(model, grid_profile, concurrency)
    config = slot_config(found)
    explains = []
    for s in explained:
        for c in concurrency:
            [p] = predict(model, {s: profile[s]}, c)
            explains.append(explain(model, p))
    return {
        "timing": timing,
        "acceptance_source": acceptance_source,
        "concurrency": list(concurrency),
        "model": model.to_dict(),
        "measured": measured_rows(measured),
        "per_concurrency": per,
        "explained": explains,
        "adaptive_config": config,
        "adaptive_flags": adaptive_flags(config),
        "adaptive_slots": describe(found),
        "steps0": steps0_sentences(model, concurrency),
        "predictions": every,
    }
