"""What SGLang's capture loop must capture for a declared layout, and in which order.

Pure logic. SGLang's DeepSeek loop captures the residual stream at the INPUT of layer i
when i is in `layers_to_capture`, always in ascending i, so `embed` is index 0 and
`layer:K` is index K+1. The drafter's fc expects its declared order; when that differs
from ascending order we permute the fc weight's column blocks once, at load.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3 import env_names
from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.errors import AmbiguousIdsError, WiringError
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import parse_taps

LAYOUT_ENV = env_names.LAYOUT


@dataclass(frozen=True)
class CapturePlan:
    taps: tuple[str, ...]  # declared order, e.g. ("embed", "layer:2", "layer:5")
    capture_indices: tuple[int, ...]  # SGLang capture indices, ascending (fill order)
    fc_block_order: tuple[int, ...]  # [j] = capture-order position of declared tap j
    source: str
    num_layers: int

    def __post_init__(self) -> None:
        if sorted(self.fc_block_order) != list(range(len(self.taps))):
            raise ValueError(f"fc_block_order {self.fc_block_order} is not a permutation")
        if list(self.capture_indices) != sorted(set(self.capture_indices)):
            raise ValueError(f"capture_indices {self.capture_indices} must ascend, unique")

    @property
    def needs_permutation(self) -> bool:
        return self.fc_block_order != tuple(range(len(self.taps)))

    def log_line(self, target_class: str) -> str:
        order = "declared order == fill order"
        if self.needs_permutation:
            order = f"fc column blocks permuted {list(self.fc_block_order)} at load"
        return (
            f"{target_class}: capturing taps {', '.join(self.taps)} "
            f"(SGLang capture indices {list(self.capture_indices)}, ascending fill order; "
            f"{order}); layout from {self.source}"
        )


def plan_from_layout(layout: HiddenStateLayout, source: str) -> CapturePlan:
    n = layout.num_layers
    indices = list(layout.capture_indices())
    unreachable = [str(t) for t, i in zip(layout.taps, indices, strict=True) if i > n - 1]
    if unreachable:
        raise WiringError(
            f"tap {', '.join(unreachable)} is the output of the last decoder layer; SGLang "
            f"0.5.23's capture loop only sees layer inputs (capture indices 0..{n - 1}), so "
            "it cannot capture it",
            path=source,
            fix=f"train the drafter on taps up to layer:{n - 2} (the final layer is the "
            "verifier tap that produced the targets, not an fc input)",
        )
    ascending = sorted(indices)
    return CapturePlan(
        taps=tuple(str(t) for t in layout.taps),
        capture_indices=tuple(ascending),
        fc_block_order=tuple(ascending.index(i) for i in indices),
        source=source,
        num_layers=n,
    )


def resolve_plan(
    *, env_layout: str | None, draft_dir: str | None, num_layers: int, hidden_size: int
) -> tuple[CapturePlan | None, str]:
    """The capture plan for one server, or (None, why) to keep stock SGLang behaviour.

    Order of truth: the launcher's explicit layout (environment), then the draft checkpoint
    (explicit layout key, speculators ids, output-of-layer ids with -1). Ids that do not say
    their convention keep stock behaviour, so existing deployments do not change under them.
    """
    if env_layout:
        layout = HiddenStateLayout(parse_taps(env_layout, path=LAYOUT_ENV), num_layers, hidden_size)
        return plan_from_layout(layout, f"${LAYOUT_ENV}"), f"${LAYOUT_ENV}"
    if not draft_dir or not Path(draft_dir).is_dir():
        return None, "no local draft directory to read a layout from"
    try:
        spec = read_draft(draft_dir, num_layers=num_layers, target_hidden_size=hidden_size)
    except AmbiguousIdsError as err:
        return None, f"ids without a convention: {err}"
    if spec.layout is None:
        return None, f"{spec.config_path}: {spec.layout_source}"
    source = f"{spec.layout_source} in {spec.config_path}"
    return plan_from_layout(spec.layout, source), source
