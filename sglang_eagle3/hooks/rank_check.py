"""Every rank of one server applies the same capture plan, or the server does not start.

Ranks resolve their plan independently (environment, command line, draft config), so a node
with another environment or another draft copy would otherwise capture other taps in
silence. Each rank states its plan in one line; the lines are gathered over the server's
gloo group at the one point every rank passes (capture set-up) and must all be equal.
"""

from __future__ import annotations

from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.capture_plan import CapturePlan

STOCK = "stock SGLang capture (no declared layout)"
MAX_SHOWN = 4  # ranks quoted in the error; the rest are counted


def plan_statement(plan: CapturePlan | None, target: str) -> str:
    """One comparable line: what this rank will capture."""
    if plan is None:
        return f"{target}: {STOCK}"
    return f"{target}: {', '.join(plan.taps)} at capture indices {list(plan.capture_indices)}"


def disagreement(statements: list[str]) -> WiringError | None:
    """None when every rank said the same; else the error naming who said what."""
    if len(set(statements)) <= 1:
        return None
    shown = [f"rank {r}: {s}" for r, s in enumerate(statements[:MAX_SHOWN])]
    if len(statements) > MAX_SHOWN:
        shown.append(f"... and {len(statements) - MAX_SHOWN} more ranks")
    return WiringError(
        "the ranks of this server would capture different hidden states: " + "; ".join(shown),
        path="capture set-up",
        fix="give every node the same $SGLANG_EAGLE3_LAYOUT, draft directory and sglang-eagle3",
    )


def check_ranks_agree(statement: str, group) -> int:
    """Gather ``statement`` from every rank of the torch.distributed ``group`` (None: this
    process alone); raise the disagreement on every rank. Returns the number of ranks."""
    import torch.distributed as dist

    if group is None or not dist.is_initialized():
        return 1
    size = dist.get_world_size(group)
    if size == 1:
        return 1
    everyone: list[str | None] = [None] * size
    dist.all_gather_object(everyone, statement, group=group)
    err = disagreement([str(s) for s in everyone])
    if err is not None:
        raise err
    return size
