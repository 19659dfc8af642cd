"""Plain words for what stock SGLang 0.5.23 captures when a draft declares no layout."""

from __future__ import annotations

from collections.abc import Sequence

from sglang_eagle3.layout.conventions import stock_capture
from sglang_eagle3.layout.families import Family

HOW = (
    "declare the layout the drafter was trained on: add "
    '"hidden_state_layout": ["embed", "layer:K", ...] to the draft\'s eagle_config, or '
    "start through `python -m sglang_eagle3.launch --hidden-state-layout ...`"
)


def stock_capture_note(
    family: Family | None, target_class: str, ids: Sequence[int] | None, num_layers: int
) -> str:
    head = f"{target_class}: no declared layout; keeping stock SGLang 0.5.23 behaviour: "
    if family is None:
        what = "a target family sglang-eagle3 does not know, so it cannot say which taps"
    else:
        what = stock_capture(family, ids, num_layers).describe()
    return f"{head}{what}. To capture what the drafter was trained on, {HOW}"
