"""Reference KV-slot bookkeeping ops (tests and demos only).

`req_to_token[row, t]` is the KV-cache slot of token t of the request stored in `row`; these
ops copy ranges of it to and from flat `out_cache_loc` lists, build the per-candidate slot
table of EAGLE's multi-step draft decode, and move KV rows between slots. Ports of the Triton
kernels in sglang/kernels/ops/speculative/cache_locs.py, kvcache/cache_move.py and
srt/mem_cache/allocation.py.
"""

from __future__ import annotations

import ctypes

import torch

COPY_ALL_LAYER_SCHEMA = "(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, Tensor src_loc) -> ()"
ASSIGN_DRAFT_SCHEMA = (
    "(Tensor req_pool_indices, Tensor req_to_token, Tensor seq_lens, "
    "Tensor(a!) out_cache_loc, int pool_len, int topk, int num_steps) -> ()"
)
ASSIGN_EXTEND_SCHEMA = (
    "(Tensor req_pool_indices, Tensor req_to_token, Tensor start_offset, Tensor end_offset, "
    "Tensor(a!) out_cache_loc, int pool_len) -> ()"
)
ASSIGN_REQ_SCHEMA = (
    "(Tensor req_pool_indices, Tensor(a!) req_to_token, Tensor start_offset, "
    "Tensor end_offset, Tensor out_cache_loc, int pool_len) -> ()"
)
DRAFT_METADATA_SCHEMA = (
    "(Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, int topk, int num_steps, "
    "int pool_len) -> Tensor"
)


def _check_pool_len(req_to_token: torch.Tensor, pool_len: int, op: str) -> None:
    # The kernels address rows as base + row * pool_len; a mismatch would read other rows.
    if req_to_token.shape[1] != pool_len:
        raise ValueError(f"{op}: pool_len {pool_len} != req_to_token row length")


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,  # [num_buffers] uint64 base address of each layer's K or V buffer
    strides: torch.Tensor,  # [num_buffers] bytes per slot (= bytes copied per slot)
    tgt_loc: torch.Tensor,  # [N] destination slots
    src_loc: torch.Tensor,  # [N] source slots
) -> None:
    """For every buffer: row[tgt_loc[i]] = row[src_loc[i]] (all sources read before writing).

    SGLang hands over raw addresses (its Triton kernel takes a pointer table), so the buffers
    are viewed as byte matrices through ctypes; only the rows up to the largest slot touched
    are mapped.
    """
    if tgt_loc.numel() != src_loc.numel():
        raise ValueError("copy_all_layer_kv_cache_cpu: tgt_loc and src_loc differ in length")
    if tgt_loc.numel() == 0:
        return
    tgt, src = tgt_loc.long(), src_loc.long()
    num_rows = int(torch.maximum(tgt.max(), src.max())) + 1
    for address, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        raw = (ctypes.c_uint8 * (num_rows * int(stride))).from_address(int(address))
        rows = torch.frombuffer(raw, dtype=torch.uint8).view(num_rows, int(stride))
        rows[tgt] = rows[src].clone()  # gather first: safe when sources and targets overlap


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,  # [B]
    req_to_token: torch.Tensor,  # [num_rows, pool_len]
    seq_lens: torch.Tensor,  # [B] tokens before the draft
    out_cache_loc: torch.Tensor,  # [B * topk * num_steps] int64, written
    pool_len: int,
    topk: int,
    num_steps: int,
) -> None:
    """out_cache_loc[b, :] = req_to_token[req_pool_indices[b], seq_lens[b] : + topk * num_steps].

    The draft's slots were allocated right after each prefix, branch-major ([topk, num_steps]).
    """
    _check_pool_len(req_to_token, pool_len, "assign_draft_cache_locs_contiguous_cpu")
    width = topk * num_steps
    if out_cache_loc.numel() != req_pool_indices.shape[0] * width:
        raise ValueError(
            "assign_draft_cache_locs_contiguous_cpu: out_cache_loc is not [B*topk*steps]"
        )
    out = out_cache_loc.view(-1, width)
    for b in range(req_pool_indices.shape[0]):
        start = int(seq_lens[b])
        out[b] = req_to_token[int(req_pool_indices[b]), start : start + width]


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,  # [B]
    req_to_token: torch.Tensor,  # [num_rows, pool_len]
    start_offset: torch.Tensor,  # [B]
    end_offset: torch.Tensor,  # [B]
    out_cache_loc: torch.Tensor,  # [sum(end - start)], written back to back
    pool_len: int,
) -> None:
    """out_cache_loc = concat_b req_to_token[req_pool_indices[b], start_offset[b]:end_offset[b]]."""
    _check_pool_len(req_to_token, pool_len, "assign_extend_cache_locs_cpu")
    pos = 0
    for b in range(req_pool_indices.shape[0]):
        start, end = int(start_offset[b]), int(end_offset[b])
        out_cache_loc[pos : pos + end - start] = req_to_token[int(req_pool_indices[b]), start:end]
        pos += end - start


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,  # [B]
    req_to_token: torch.Tensor,  # [num_rows, pool_len], written
    start_offset: torch.Tensor,  # [B]
    end_offset: torch.Tensor,  # [B]
    out_cache_loc: torch.Tensor,  # [sum(end - start)] slots, back to back
    pool_len: int,
) -> None:
    """The inverse: req_to_token[req_pool_indices[b], start_offset[b]:end_offset[b]] = the
    next end - start entries of out_cache_loc."""
    _check_pool_len(req_to_token, pool_len, "assign_req_to_token_pool_cpu")
    pos = 0
    for b in range(req_pool_indices.shape[0]):
        start, end = int(start_offset[b]), int(end_offset[b])
        req_to_token[int(req_pool_indices[b]), start:end] = out_cache_loc[pos : pos + end - start]
        pos += end - start


def build_draft_decode_metadata_cpu(
    req_to_token: torch.Tensor,  # [num_rows, pool_len]
    req_pool_indices: torch.Tensor,  # [B]
    seq_lens: torch.Tensor,  # [B] tokens before the draft
    topk: int,
    num_steps: int,
    pool_len: int,
) -> torch.Tensor:
    """Slot table for the multi-step draft decode, one row per (request b, branch k):

        row[b * topk + k, :L]          = req_to_token[r, :L]                    (shared prefix)
        row[b * topk + k, L : L + s]   = req_to_token[r, L + k * num_steps : + s]  (branch k)

    with r = req_pool_indices[b], L = seq_lens[b], s = num_steps. The rest of each row is 0
    (the real kernel leaves it uninitialized; attention never reads it).
    Returns [B * topk, pool_len], dtype of req_to_token.
    """
    _check_pool_len(req_to_token, pool_len, "build_draft_decode_metadata_cpu")
    num_seqs = req_pool_indices.shape[0]
    table = req_to_token.new_zeros((num_seqs * topk, pool_len))
    for b in range(num_seqs):
        source, prefix_len = req_to_token[int(req_pool_indices[b])], int(seq_lens[b])
        for k in range(topk):
            row = table[b * topk + k]
            row[:prefix_len] = source[:prefix_len]
            branch = source[prefix_len + k * num_steps : prefix_len + (k + 1) * num_steps]
            row[prefix_len : prefix_len + branch.numel()] = branch
    return table


OPS = {
    "copy_all_layer_kv_cache_cpu": (COPY_ALL_LAYER_SCHEMA, copy_all_layer_kv_cache_cpu),
    "assign_draft_cache_locs_contiguous_cpu": (
        ASSIGN_DRAFT_SCHEMA,
        assign_draft_cache_locs_contiguous_cpu,
    ),
    "assign_extend_cache_locs_cpu": (ASSIGN_EXTEND_SCHEMA, assign_extend_cache_locs_cpu),
    "assign_req_to_token_pool_cpu": (ASSIGN_REQ_SCHEMA, assign_req_to_token_pool_cpu),
    "build_draft_decode_metadata_cpu": (DRAFT_METADATA_SCHEMA, build_draft_decode_metadata_cpu),
}
