"""Plain words for what stock SGLang 0.5.23 captures when a draft declares no layout."""

from __future__ import annotations

from sglang_eagle3.layout.conventions import stock_sglang_deepseek_capture


def stock_capture_note(target_class: str, ids: list[int] | None, num_layers: int) -> str:
    stock = stock_sglang_deepseek_capture(ids, num_layers)
    how = (
        "declare the layout the drafter was trained on: add "
        '"hidden_state_layout": ["embed", "layer:K", ...] to the draft\'s eagle_config, or '
        "start through `python -m sglang_eagle3.launch --hidden-state-layout ...`"
    )
    return f"{target_class}: no declared layout; keeping stock SGLang 0.5.23 behaviour: " + (
        f"{stock.describe()}. To capture what the drafter was trained on, {how}"
    )
