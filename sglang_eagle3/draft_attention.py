"""Attention of a draft step over its KV cache: step 0 causally over the whole sequence,
each later (chained) step only to its own position's earlier-step keys, as speculators' TTT
mask (diagonal blocks) and SGLang's draft decode see them. Softmax in fp32."""

from __future__ import annotations

import torch

_Q_CHUNK = 256  # queries per block: bounds the [heads, queries, T] score matrix


class LayerCache:
    """One layer's keys and values: step 0 for every position ([Hkv, T, D]), each later step
    full-size too but filled only at the positions that step ran for."""

    def __init__(self) -> None:
        self.k0 = self.v0 = torch.empty(0)
        self.later: list[tuple[torch.Tensor, torch.Tensor]] = []

    def add(self, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor) -> None:
        if self.k0.numel() == 0:
            self.k0, self.v0 = k, v
            return
        full_k, full_v = torch.zeros_like(self.k0), torch.zeros_like(self.v0)
        full_k[:, rows], full_v[:, rows] = k, v
        self.later.append((full_k, full_v))


def attention(
    q: torch.Tensor,  # [H, R, D] queries of positions ``rows``
    rows: torch.Tensor,  # [R] positions (indices into the sequence)
    cache: LayerCache,
) -> torch.Tensor:  # [H, R, D]
    heads, n_rows, dim = q.shape
    rep = heads // cache.k0.shape[0]
    k0 = cache.k0.repeat_interleave(rep, 0).float()  # [H, T, D]
    v0 = cache.v0.repeat_interleave(rep, 0).float()
    later = [(k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)) for k, v in cache.later]
    t_len, scale = k0.shape[1], dim**-0.5
    kv_pos = torch.arange(t_len, device=q.device)
    out = torch.empty_like(q)
    for s in range(0, n_rows, _Q_CHUNK):
        e = min(s + _Q_CHUNK, n_rows)
        qc, r = q[:, s:e].float(), rows[s:e]
        s0 = qc @ k0.transpose(1, 2) * scale  # step 0's keys: causal over the prefix
        s0 = s0.masked_fill(kv_pos[None, None, :] > r[None, :, None], float("-inf"))
        # later steps' keys: only the query's own position (TTT's diagonal blocks)
        diag = [(qc * k[:, r].float()).sum(-1, keepdim=True) * scale for k, _ in later]
        p = torch.cat([s0, *diag], dim=-1).softmax(-1)
        o = p[..., :t_len] @ v0
        for j, (_, v) in enumerate(later):
            o = o + p[..., t_len + j : t_len + j + 1] * v[:, r].float()
        out[:, s:e] = o.to(q.dtype)
    return out
