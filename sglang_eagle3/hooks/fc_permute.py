"""Reorder a drafter's fc input blocks once, at load, instead of the hidden states per token."""

from __future__ import annotations

import torch


@torch.no_grad()
def permute_fc_blocks(model, order: tuple[int, ...]) -> None:
    """Move fc input block j to position order[j] (and the norms that act on the blocks).

    SGLang packs taps in ascending capture order; the weights were trained on the declared
    order. Permuting columns once at load avoids a per-token copy of the hidden states.
    """
    k = len(order)
    fc = model.fc
    width = fc.weight.shape[1] // k
    old = fc.weight.detach().clone()  # [hidden, k * width]
    for j, dst in enumerate(order):
        fc.weight[:, dst * width : (dst + 1) * width] = old[:, j * width : (j + 1) * width]
    if getattr(model, "input_norm", None) is not None:
        w = model.input_norm.weight.detach().clone()  # [k * width]
        for j, dst in enumerate(order):
            model.input_norm.weight[dst * width : (dst + 1) * width] = w[
                j * width : (j + 1) * width
            ]
    if getattr(model, "fc_norm", None) is not None:
        norms = list(model.fc_norm)
        for j, dst in enumerate(order):
            model.fc_norm[dst] = norms[j]
