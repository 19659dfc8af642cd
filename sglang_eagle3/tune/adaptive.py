"""SGLang 0.5.23's --speculative-adaptive-config written from the cost model (pure).

SGLang's rule (``speculative/adaptive_spec_params.py``, ``AdaptiveStepSlot._recompute_params``)
looks at one number, the EMA of the accepted drafts per request measured at the step it runs:
at step ``a`` it rises to the next candidate ``b`` while ``EMA > a - 0.5 + up_hysteresis``; at
``b`` it drops to ``a`` while ``EMA <= a - 0.5 + down_hysteresis`` (``0.5 + down_hysteresis``
when ``a`` is 0); from 0 it always probes the next candidate (the EMA is not updated at 0).

The cost model knows where a switch pays. With drafts per verify ``lam * m(s)`` (``m`` the
tuner's profile, ``lam`` how this traffic's acceptance differs from it), step ``s`` serves
``(1 + lam * m(s)) / cycle(s)`` tokens a second per request; the two candidates ``a < b`` are
equal at ``lam*``. So the rise threshold is ``lam* * m(a)`` (what the EMA reads at ``a`` there)
and the drop threshold ``lam* * m(b)``, each moved by ``DEAD_BAND`` so noise cannot flap. One
slot holds at most two candidates: its hysteresis is one pair of numbers, so only one pair of
neighbours can switch at its own break-even.

Per slot (batch sizes ``key`` up to the next key):
- ``[0]`` where steps 0 is predicted at least as fast as any chain;
- one step where it stays best for acceptance ``ACCEPT_BAND`` around the profile's;
- else that step and the neighbour that wins within the band, thresholds at the break-even.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_eagle3.tune.cost import CostModel

ACCEPT_BAND = (0.6, 1.4)  # drafts per verify, relative to the profile's, a slot must stay fast in
DEAD_BAND = 0.05  # relative: the rise threshold sits 5 % above the break-even, the drop 5 % below
SLOT_KEYS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # batch-size thresholds the tuner writes


@dataclass(frozen=True)
class Slot:
    """One batch-size slot: its candidates, the step predicted fastest, where it switches."""

    key: int  # smallest batch size the slot serves
    candidates: tuple[int, ...]
    best: int  # the step the tuner predicts fastest at the profile's acceptance
    up_hysteresis: float = 0.0
    down_hysteresis: float = 0.0
    switch_lam: float | None = None  # break-even acceptance (relative to the profile's)

    def entry(self) -> dict:
        return {"candidate_steps": list(self.candidates), "up_hysteresis":
                round(self.up_hysteresis, 4), "down_hysteresis": round(self.down_hysteresis, 4),
                "ceiling_coeff": 0}  # fmt: skip


def speed(model: CostModel, drafts: dict[int, float], s: int, c: int, lam: float = 1.0) -> float:
    """Tokens a second per request of chain step ``s`` (0: steps 0) at concurrency ``c``, with
    drafts per verify ``lam * drafts[s]`` (never more than ``s``)."""
    accepted = min(lam * drafts[s], float(s)) if s else 0.0
    return (1 + accepted) / model.cycle(s, 1, s + 1, c)


def fastest(model: CostModel, drafts: dict[int, float], c: int, lam: float = 1.0) -> int:
    """The step (0 included) predicted fastest at concurrency ``c``; ties go to fewer steps."""
    return max(sorted(drafts), key=lambda s: (speed(model, drafts, s, c, lam), -s))


def break_even(model: CostModel, drafts: dict[int, float], a: int, b: int, c: int) -> float | None:
    """The relative acceptance ``lam`` at which steps ``a < b`` are equally fast; None where
    ``b`` never catches up (its extra drafts do not pay for its longer cycle)."""
    ca, cb = model.cycle(a, 1, a + 1, c), model.cycle(b, 1, b + 1, c)
    ma, mb = (drafts[a] if a else 0.0), drafts[b]
    den = mb * ca - ma * cb
    if den <= 0:
        return None
    lam = (cb - ca) / den
    return lam if lam > 0 else None


def slot(model: CostModel, drafts: dict[int, float], key: int) -> Slot:
    """The slot for batch sizes from ``key``; ``drafts``: {step: accepted drafts per verify},
    step 0 with 0 drafts included."""
    best = fastest(model, drafts, key)
    if best == 0:
        return Slot(key, (0,), 0)
    low, high = (fastest(model, drafts, key, lam) for lam in ACCEPT_BAND)
    other = low if low != best else high
    if other == best:
        return Slot(key, (best,), best)
    a, b = sorted((best, other))
    lam = break_even(model, drafts, a, b, key)
    if lam is None:
        return Slot(key, (best,), best)
    rise, drop = lam * (1 + DEAD_BAND), lam * (1 - DEAD_BAND)
    # SGLang's thresholds: rise at a when EMA > a - 0.5 + up; drop at b when EMA <= base + down
    base = 0.5 if a == 0 else a - 0.5
    up = rise * drafts[a] - (a - 0.5) if a else 0.0  # from 0 SGLang always probes
    down = drop * drafts[b] - base
    return Slot(key, (a, b), best, up, down, lam)


def slots(model: CostModel, drafts: dict[int, float], concurrencies) -> list[Slot]:
    """One slot per SLOT_KEYS value up to the largest batch size (``concurrencies`` are the
    running batches: no batch is larger), neighbours that would serve alike merged (the lower
    key keeps them)."""
    top = max(concurrencies)
    out: list[Slot] = []
    for key in [k for k in SLOT_KEYS if k <= top]:
        s = slot(model, drafts, key)
        if (
            out
            and (out[-1].candidates, out[-1].best) == (s.candidates, s.best)
            and (len(s.candidates) == 1)
        ):
            continue
        out.append(s)
    return out


def config(found: list[Slot]) -> dict:
    """The JSON SGLang reads with --speculative-adaptive-config."""
    return {str(s.key): s.entry() for s in found}


def describe(found: list[Slot]) -> list[str]:
    """Per slot: what SGLang will run and at which acceptance it switches."""
    keys = [s.key for s in found]
    out = []
    for i, s in enumerate(found):
        span = f"batch size {s.key}+" if i == len(found) - 1 else (
            f"batch size {s.key}" if keys[i + 1] == s.key + 1 else
            f"batch sizes {s.key}-{keys[i + 1] - 1}")  # fmt: skip
        if s.candidates == (0,):
            out.append(f"{span}: steps 0 (no draft; SGLang still verifies each token)")
        elif len(s.candidates) == 1:
            out.append(f"{span}: steps {s.best}, whatever the acceptance within "
                       f"{ACCEPT_BAND[0]}-{ACCEPT_BAND[1]}x the profile's")  # fmt: skip
        else:
            a, b = s.candidates
            out.append(f"{span}: steps {s.best} at the profile's acceptance; {a} <-> {b} "
                       f"switch at {s.switch_lam:.2f}x its drafts per verify")  # fmt: skip
    return out
