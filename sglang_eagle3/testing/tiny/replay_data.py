"""Doctor data from what a server generated: the tiny target's hidden states over each
prompt + its greedy continuation, scored only on the continuation (the loss mask).

The doctor's replay accept length on this data walks the very sequences the server verified,
so it predicts the served accept length (speculative greedy output equals plain greedy output).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from sglang_eagle3.data.writer import TrainDataWriter
from sglang_eagle3.layout.taps import Tap


@torch.inference_mode()
def write_replay_data(
    target_dir: Path,
    prompts: Sequence[Sequence[int]],  # token ids as the server received them
    outputs: Sequence[Sequence[int]],  # the server's generated ids, per prompt
    out_dir: Path,
) -> Path:
    """Every tap (embed, layer:0 .. layer:n-1) per token, in speculators' data layout."""
    from sglang_eagle3.checkpoint.hf_target import load_hf_target
    from sglang_eagle3.testing.tiny.drafter_data import target_hidden_states

    if len(prompts) != len(outputs):
        raise ValueError(f"{len(prompts)} prompts but {len(outputs)} outputs")
    model = load_hf_target(target_dir).eval()
    n = model.config.num_hidden_layers
    with TrainDataWriter(out_dir, taps=[Tap(k) for k in range(n + 1)], num_layers=n) as writer:
        for prompt, output in zip(prompts, outputs, strict=True):
            seq = torch.tensor([*prompt, *output], dtype=torch.long)
            mask = torch.zeros_like(seq)
            mask[len(prompt) :] = 1
            writer.add(target_hidden_states(model, seq[None])[0], seq, mask)
    return out_dir
