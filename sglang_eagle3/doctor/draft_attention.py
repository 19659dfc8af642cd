"""Attention of a draft step over its KV cache: step 0 causally over the whole sequence,
each later (chained) step only to its own position's earlier-step keys, as speculators' TTT
mask (diagonal blocks) and SGLang's draft decode see them; in a draft tree, to its own
branch's earlier-step keys (``later_rows``). Softmax in fp32."""

from __future__ import annotations

import torch

_Q_CHUNK = 256  # queries per block: bounds the [heads, queries, T] score matrix


class LayerCache:
    """One layer's keys and values: step 0 for every position ([Hkv, T, D]), each later step
    full-size too but filled only at the positions that step ran for."""

    def __init__(self) -> None:
        self.k0 = self.v0 = torch.empty(0)
        self.later: list[tuple[torch.Tensor, torch.Tensor]] = []

    def add(
        self, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor, size: int | None = None
    ) -> None:
        """``rows``: where a later step's keys go; ``size``: that step's buffer length (the
        sequence length; a draft tree stores one slot per beam instead)."""
        if self.k0.numel() == 0:
            self.k0, self.v0 = k, v
            return
        shape_k = (k.shape[0], size or self.k0.shape[1], k.shape[2])
        shape_v = (v.shape[0], size or self.v0.shape[1], v.shape[2])
        full_k, full_v = k.new_zeros(shape_k), v.new_zeros(shape_v)
        full_k[:, rows], full_v[:, rows] = k, v
        self.later.append((full_k, full_v))


def attention(
    q: torch.Tensor,  # [H, R, D] queries of positions ``rows``
    rows: torch.Tensor,  # [R] positions (indices into the sequence)
    cache: LayerCache,
    later_rows: list[torch.Tensor] | None = None,  # per later step: [R] slot each query reads
    *,
    scale: float | None = None,  # softmax scale; None: D^-0.5
) -> torch.Tensor:  # [H, R, Dv] (an MLA draft's value width may differ from D)
    heads, n_rows, dim = q.shape
    rep = heads // cache.k0.shape[0]
    k0 = cache.k0.repeat_interleave(rep, 0).float()  # [H, T, D]
    v0 = cache.v0.repeat_interleave(rep, 0).float()
    later = [(k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)) for k, v in cache.later]
    t_len, scale = k0.shape[1], dim**-0.5 if scale is None else scale
    kv_pos = torch.arange(t_len, device=q.device)
    out = q.new_empty(heads, n_rows, v0.shape[-1])
    for s in range(0, n_rows, _Q_CHUNK):
        e = min(s + _Q_CHUNK, n_rows)
        qc, r = q[:, s:e].float(), rows[s:e]
        s0 = qc @ k0.transpose(1, 2) * scale  # step 0's keys: causal over the prefix
        s0 = s0.masked_fill(kv_pos[None, None, :] > r[None, :, None], float("-inf"))
        # later steps' keys: only the query's own position (TTT's diagonal blocks)
        slots = [r] * len(later) if later_rows is None else [x[s:e] for x in later_rows]
        diag = [
            (qc * k[:, j].float()).sum(-1, keepdim=True) * scale
            for (k, _), j in zip(later, slots, strict=True)
        ]
        p = torch.cat([s0, *diag], dim=-1).softmax(-1)
        o = p[..., :t_len] @ v0
        for j, ((_, v), slot) in enumerate(zip(later, slots, strict=True)):
            o = o + p[..., t_len + j : t_len + j + 1] * v[:, slot].float()
        out[:, s:e] = o.to(q.dtype)
    return out
