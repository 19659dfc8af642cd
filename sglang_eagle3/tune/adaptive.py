"""SGLang 0.5.23's --speculative-adaptive-config written from the cost model (pure).

SGLang's rule (``speculative/adaptive_spec_params.py``, ``AdaptiveStepSlot._recompute_params``)
looks at one number, the EMA of the accepted drafts per request measured at the step it runs:
at step ``a`` it rises to the next candidate ``b`` while ``EMA > a - 0.5 + up_hysteresis``; at
``b`` it drops to ``a`` while ``EMA <= a - 0.5 + down_hysteresis`` (``0.5 + down_hysteresis``
when ``a`` is 0); from 0 it always probes the next candidate (the EMA is not updated at 0).

The cost model knows where a switch pays. With drafts per verify ``lam * m(s)`` (``m`` the
tuner's profile, ``lam`` how this traffic's acceptance differs from it), step ``s`` serves
``(1 + lam * m(s)) / cycle(s)`` tokens a second per request. A slot's home is the step
predicted fastest at the profile's acceptance. It leaves home only where the other candidate
is predicted ``HOLD`` faster (SGLang's threshold there is what the EMA reads at home), and
comes back at the break-even, where home is as fast again. A near-tie (bench_live run 5: 0.6 %
apart at batch size 8, live acceptance 5-10 % under the profile's) so holds its home instead
of flapping on the EMA's noise. One slot holds at most two candidates: its hysteresis is one
pair of numbers, so only one pair of neighbours can switch where the model says.

Per slot (batch sizes ``key`` up to the next key):
- ``[0]`` where steps 0 is predicted at least as fast as any chain;
- one step where no other is predicted ``HOLD`` faster for acceptance within ``ACCEPT_BAND``;
- else home and the step that wins there, with the two thresholds above.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_eagle3.tune.cost import CostModel

ACCEPT_BAND = (0.6, 1.4)  # drafts per verify, relative to the profile's, a slot must stay fast in
HOLD = 0.03  # a slot leaves its home step only for one predicted 3 % faster
# SGLang re-decides every 5 batches on an EMA (alpha 0.2) it does not reset on a switch: at the
# first decision after one, a third of the EMA was read at the other step, whose drafts per
# verify differ by up to 40 %. Every 10 batches leaves 11 % (a switching slot's own setting).
UPDATE_INTERVAL = 10
SLOT_KEYS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # batch-size thresholds the tuner writes


@dataclass(frozen=True)
class Slot:
    """One batch-size slot: its candidates, the step predicted fastest, where it switches."""

    key: int  # smallest batch size the slot serves
    candidates: tuple[int, ...]
    best: int  # home: the step the tuner predicts fastest at the profile's acceptance
    up_hysteresis: float = 0.0
    down_hysteresis: float = 0.0
    switch_lam: float | None = None  # break-even acceptance (relative to the profile's): back home
    leave_lam: float | None = None  # where the other step is HOLD faster: home is left

    def entry(self) -> dict:
        out = {"candidate_steps": list(self.candidates), "up_hysteresis":
               round(self.up_hysteresis, 4), "down_hysteresis": round(self.down_hysteresis, 4),
               "ceiling_coeff": 0}  # fmt: skip
        return {**out, "update_interval": UPDATE_INTERVAL} if len(self.candidates) > 1 else out


def speed(model: CostModel, drafts: dict[int, float], s: int, c: int, lam: float = 1.0) -> float:
    """Tokens a second per request of chain step ``s`` (0: steps 0) at concurrency ``c``, with
    drafts per verify ``lam * drafts[s]`` (never more than ``s``)."""
    accepted = min(lam * drafts[s], float(s)) if s else 0.0
    return (1 + accepted) / model.cycle(s, 1, s + 1, c)


def fastest(model: CostModel, drafts: dict[int, float], c: int, lam: float = 1.0) -> int:
    """The step (0 included) predicted fastest at concurrency ``c``; ties go to fewer steps."""
    return max(sorted(drafts), key=lambda s: (speed(model, drafts, s, c, lam), -s))


def edge(model: CostModel, drafts: dict[int, float], x: int, y: int, c: int,
         ratio: float = 1.0) -> float | None:  # fmt: skip
    """The relative acceptance ``lam > 0`` at which step ``x`` serves ``ratio`` times step
    ``y``: ``(1 + lam m_x) / cycle_x = ratio (1 + lam m_y) / cycle_y``, solved for ``lam``;
    None where no positive ``lam`` does (the uncapped line; drafts[0] is 0)."""
    cx, cy = model.cycle(x, 1, x + 1, c), model.cycle(y, 1, y + 1, c)
    mx, my = drafts[x] if x else 0.0, drafts[y] if y else 0.0
    den = mx / cx - ratio * my / cy
    if den == 0:
        return None
    lam = (ratio / cy - 1 / cx) / den
    return lam if lam > 0 else None


def break_even(model: CostModel, drafts: dict[int, float], a: int, b: int, c: int) -> float | None:
    """The relative acceptance at which steps ``a < b`` are equally fast; None where ``b``
    never catches up (its extra drafts do not pay for its longer cycle)."""
    ca, cb = model.cycle(a, 1, a + 1, c), model.cycle(b, 1, b + 1, c)
    if (drafts[b] * ca - (drafts[a] if a else 0.0) * cb) <= 0:
        return None
    return edge(model, drafts, b, a, c)


def _rival(model: CostModel, drafts: dict[int, float], key: int, home: int) -> int | None:
    """The step predicted HOLD faster than home at an edge of ACCEPT_BAND, if any."""
    for lam in ACCEPT_BAND:
        other = fastest(model, drafts, key, lam)
        gain = speed(model, drafts, other, key, lam) / speed(model, drafts, home, key, lam)
        if other != home and gain >= 1 + HOLD:
            return other
    return None


def slot(model: CostModel, drafts: dict[int, float], key: int) -> Slot:
    """The slot for batch sizes from ``key``; ``drafts``: {step: accepted drafts per verify},
    step 0 with 0 drafts included."""
    home = fastest(model, drafts, key)
    if home == 0:
        return Slot(key, (0,), 0)
    other = _rival(model, drafts, key, home)
    if other is None:
        return Slot(key, (home,), home)
    a, b = sorted((home, other))
    back = break_even(model, drafts, a, b, key)
    leave = edge(model, drafts, other, home, key, 1 + HOLD)
    if back is None or leave is None:
        return Slot(key, (home,), home)
    # SGLang's thresholds: rise at a when EMA > a - 0.5 + up; drop at b when EMA <= base + down
    rise, drop = (back, leave) if home == b else (leave, back)
    base = 0.5 if a == 0 else a - 0.5
    up = rise * drafts[a] - (a - 0.5) if a else 0.0  # from 0 SGLang always probes
    down = drop * drafts[b] - base
    return Slot(key, (a, b), home, up, down, back, leave)


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
            out.append(f"{span}: steps {s.best}; no other step is {HOLD:.0%} faster within "
                       f"{ACCEPT_BAND[0]}-{ACCEPT_BAND[1]}x the profile's acceptance")  # fmt: skip
        else:
            other = next(x for x in s.candidates if x != s.best)
            side = "below" if other < s.best else "above"
            out.append(f"{span}: steps {s.best} at the profile's acceptance; {other} {side} "
                       f"{s.leave_lam:.2f}x its drafts per verify ({HOLD:.0%} faster there), "
                       f"back to {s.best} at {s.switch_lam:.2f}x (break-even)")  # fmt: skip
    return out
