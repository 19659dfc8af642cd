"""Which speculative step count SGLang's adaptive mode ran, per decode batch size.

``--speculative-adaptive`` switches ``--speculative-num-steps`` per batch-size slot at run
time, and SGLang 0.5.23 neither logs nor exports the steps each batch ran. Two hooks in the
scheduler process keep that record:

- around ``AdaptiveController.activate_step_by_batch``: the worker calls it once per decode
  batch, right before drafting (eagle_worker_v2.py, ``forward_batch_generation``), and the
  worker's ``speculative_num_steps`` after it is the step count that batch runs with. The
  policy's ``get_steps_for_batch`` only reads a slot and activates nothing;
- around ``SchedulerInternalStateController._add_speculative``: the cumulative table goes into
  ``GET /get_server_info`` as ``internal_states[0]["sglang_eagle3_adaptive_steps"]``, shaped
  ``{"<batch size>": {"<steps>": count}}`` (str keys: the state goes through msgpack).

Counts are per process; the scheduler of TP rank 0 (PP rank 0, attention-CP rank 0) is the one
that answers ``get_internal_state``. Under PP only the last PP rank runs the controller, so the
answering rank reports an empty table there.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.plugins.hook_registry import HookType

CONTROLLER = "sglang.srt.speculative.adaptive_runtime_state.AdaptiveController"
INTERNAL_STATE = (
    "sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController"
)
STATE_KEY = "sglang_eagle3_adaptive_steps"

# (batch size, steps) -> decode batches run so; a flat dict so a read can copy it in one step
_COUNTS: dict[tuple[int, int], int] = {}


def count_steps(original: Any, self: Any, batch_size: int, *args: Any, **kwargs: Any) -> Any:
    """AROUND AdaptiveController.activate_step_by_batch(batch_size)."""
    result = original(self, batch_size, *args, **kwargs)
    if batch_size > 0:  # an idle batch (DP attention's filler) decodes nothing
        key = (int(batch_size), int(self.worker.speculative_num_steps))
        _COUNTS[key] = _COUNTS.get(key, 0) + 1
    return result


def steps_table() -> dict[str, dict[str, int]]:
    """This process's counts so far: ``{"<batch size>": {"<steps>": decode batches}}``."""
    table: dict[str, dict[str, int]] = {}
    # dict.copy() runs without releasing the GIL: safe against the forward thread's increments
    for (batch_size, steps), n in sorted(_COUNTS.copy().items()):
        table.setdefault(str(batch_size), {})[str(steps)] = n
    return table


def add_steps_table(original: Any, self: Any, state: dict, *args: Any, **kwargs: Any) -> Any:
    """AROUND SchedulerInternalStateController._add_speculative(state)."""
    result = original(self, state, *args, **kwargs)
    state[STATE_KEY] = steps_table()
    return result


def wanted(argv: list[str]) -> bool:
    """Only an adaptive server runs the controller; any other is left to SGLang alone."""
    return any(a == "--speculative-adaptive" for a in argv)


HOOKS = [
    (f"{CONTROLLER}.activate_step_by_batch", count_steps, HookType.AROUND),
    (f"{INTERNAL_STATE}._add_speculative", add_steps_table, HookType.AROUND),
]
