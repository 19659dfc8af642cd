"""What SGLang's capture loop must capture for a declared layout, and in which order.

Pure logic. SGLang's DeepSeek loop captures the residual stream at the INPUT of layer i
when i is in `layers_to_capture`, always in ascending i, so `embed` is index 0 and
`layer:K` is index K+1. The drafter's fc expects its declared order; when that differs
from ascending order we permute the fc weight's column blocks once, at load.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_eagle3 import env_names
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.families import Family
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import format_taps

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


def plan_from_layout(
    layout: HiddenStateLayout, source: str, *, final_layer: bool = False
) -> CapturePlan:
    """``final_layer``: the target family's loop also captures the last layer's output."""
    n = layout.num_layers
    unreachable = () if final_layer else layout.uncapturable_taps()
    if unreachable:
        raise WiringError(
            f"tap {format_taps(unreachable)} is the output of the last decoder layer; SGLang "
            f"0.5.23's capture loop only sees layer inputs (capture indices 0..{n - 1}), so "
            "it cannot capture it",
            path=source,
            fix=f"train the drafter on taps up to layer:{n - 2} (the final layer is the "
            "verifier tap that produced the targets, not an fc input)",
        )
    indices = layout.capture_indices()
    ascending = sorted(indices)
    return CapturePlan(
        taps=tuple(str(t) for t in layout.taps),
        capture_indices=tuple(ascending),
        fc_block_order=tuple(ascending.index(i) for i in indices),
        source=source,
        num_layers=n,
    )


def check_family(
    family: Family | None,
    architecture: str,
    *,
    path: str,
    two_batch_overlap: bool = False,
    pipeline_stages: int = 1,
) -> Family:
    """The target's row, or a WiringError: a family outside the table, one that cannot
    capture a tap, two-batch overlap on one that runs layers without capture, or pipeline
    parallelism. The launcher asks before SGLang starts; the plugin asks again where the
    target is built."""
    if family is None:
        raise WiringError(
            f"{architecture} is not in sglang-eagle3's table of SGLang 0.5.23 EAGLE-3 "
            "target families, so the declared taps cannot be guaranteed",
            path=path,
            fix="serve a listed family (README: 'Target families'), or start SGLang without a "
            "declared layout",
        )
    if family.refused:
        raise WiringError(
            f"{architecture} ({family.label}): {family.refused}",
            path=path,
            fix="serve this drafter on another target family",
        )
    if two_batch_overlap and family.two_batch_overlap_skips:
        raise WiringError(
            f"two-batch overlap runs {family.label} layers without hidden-state capture, so "
            "the drafter would get no taps",
            path="--enable-two-batch-overlap",
            fix="drop --enable-two-batch-overlap when serving an EAGLE-3 drafter",
        )
    if pipeline_stages > 1:
        raise WiringError(
            f"pipeline parallelism ({pipeline_stages} stages): SGLang 0.5.23 sets up capture "
            "only on the last stage and each stage's loop sees only its own layers, so taps on "
            "earlier stages (embed included) would never reach the drafter",
            path="--pp-size",
            fix="serve an EAGLE-3 drafter with --pp-size 1 (tensor or data parallelism instead)",
        )
    return family
