"""How many draft tokens SGLang 0.5.23's EAGLE draft tree can hold (pure).

A root module so that both the launcher (launch.spec_flags, which refuses impossible flag
sets) and the doctor (doctor.draft_tree, which scores trees) read the one formula.
"""

from __future__ import annotations


def max_draft_tokens(steps: int, topk: int) -> int:
    """Root + the most candidates a draft tree proposes: ``topk`` at step 1, ``topk**2`` at each
    later step (spec_utils.select_top_k_tokens). More fails at runtime: organize_draft_results
    calls ``torch.topk(scores, draft_tokens - 1)`` over exactly these candidates."""
    return 1 + topk + (steps - 1) * topk * topk
