"""Reference EAGLE tree ops: build the draft tree, verify it greedily, pick bonus tokens.

Plain Python/PyTorch ports of the Triton kernels in sglang/kernels/ops/speculative/
(spec_tree.py, eagle.py), for tests and demos only. Argument names follow the sgl_kernel
schemas (including the historical `retrive_*` spelling, which SGLang passes as keywords).

Tree encoding (per request, n = draft_token_num tokens, token 0 = the verified/bonus token):
  * selected_index[i - 1] is the flat index, in the draft's score list, of tree token i;
    its parent's flat index is parent_list[selected_index[i - 1] // topk], and the parent
    is the tree token whose selected_index equals that (or token 0 when the quotient is 0).
  * retrive_next_token[p] = first child of p, retrive_next_sibling[c] = next sibling of c,
    -1 when none (the caller pre-fills -1; like the kernel, only links are written).
  * retrive_index[b, i] = b * n + i, the token's row in the flattened verify batch.
"""

from __future__ import annotations

import torch

FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING = 0, 1, 2

FILL_BONUS_SCHEMA = (
    "(Tensor accept_tokens, Tensor accept_lens, Tensor(a!) bonus_tokens, int accept_stride) -> ()"
)
FILL_ACCEPT_SCHEMA = (
    "(Tensor accept_index, Tensor out_cache_loc, Tensor(a!) accept_out_cache_loc) -> ()"
)
BUILD_TREE_SCHEMA = (
    "(Tensor parent_list, Tensor selected_index, Tensor verified_seq_len, "
    "Tensor(a!) tree_mask, Tensor(b!) positions, Tensor(c!) retrive_index, "
    "Tensor(d!) retrive_next_token, Tensor(e!) retrive_next_sibling, int topk, int depth, "
    "int draft_token_num, int tree_mask_mode) -> ()"
)
VERIFY_SCHEMA = (
    "(Tensor(a!) predicts, Tensor(b!) accept_index, Tensor(c!) accept_token_num, "
    "Tensor candidates, Tensor retrive_index, Tensor retrive_next_token, "
    "Tensor retrive_next_sibling, Tensor target_predict) -> ()"
)


def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor,  # [B * accept_stride] accepted tokens, bonus last
    accept_lens: torch.Tensor,  # [B] accepted count, including the bonus token
    bonus_tokens: torch.Tensor,  # [B], written
    accept_stride: int,
) -> None:
    """bonus_tokens[b] = accept_tokens[b * accept_stride + accept_lens[b] - 1]."""
    batch = torch.arange(accept_lens.shape[0])
    flat = batch * accept_stride + accept_lens.long() - 1
    bonus_tokens.copy_(accept_tokens.reshape(-1)[flat])


def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor,  # [B, S] rows into out_cache_loc, -1 = not accepted
    out_cache_loc: torch.Tensor,  # [B * n] KV slots of the verified tokens
    accept_out_cache_loc: torch.Tensor,  # [>= #accepted], written at its front
) -> None:
    """Compact the accepted tokens' slots: out[k] = out_cache_loc[k-th index that is not -1]."""
    index = accept_index.reshape(-1).long()
    slots = out_cache_loc[index[index != -1]]
    accept_out_cache_loc[: slots.numel()] = slots


def _parent_position(selected: list[int], parents: list[int], i: int, topk: int) -> int | None:
    """Tree position of the parent of tree token i >= 1; 0 is the root, None if not found."""
    parent_flat = selected[i - 1] // topk
    if parent_flat == 0:
        return 0
    parent_token = parents[parent_flat]
    for position, flat in enumerate(selected):
        if flat == parent_token:
            return position + 1
    return None


def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,  # [B, topk * (depth - 1) + 1] int64
    selected_index: torch.Tensor,  # [B, n - 1] int64
    verified_seq_len: torch.Tensor,  # [B] tokens before the tree
    tree_mask: torch.Tensor,  # bool, written (see tree_mask_mode)
    positions: torch.Tensor,  # [B * n] int64, written: seq_len + depth
    retrive_index: torch.Tensor,  # [B, n] int64, written
    retrive_next_token: torch.Tensor,  # [B, n] int64, -1 pre-filled, links written
    retrive_next_sibling: torch.Tensor,  # [B, n] int64, -1 pre-filled, links written
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """Build the tree links, positions and attention mask of an EAGLE draft tree.

    Mask row i of request b marks token 0, token i and i's ancestors. QLEN_ONLY: rows of n
    entries, [B, n, n] flattened. FULL_MASK: rows of seq_len + n entries whose first seq_len
    (prefix) entries are left to the caller's fill, [n, seq_len_b + n] per request back to back.
    """
    if tree_mask_mode not in (FULL_MASK, QLEN_ONLY):
        raise NotImplementedError(
            "sgl_kernel.build_tree_kernel_efficient_cpu: QLEN_ONLY_BITPACKING is not implemented "
            "by the sglang-eagle3 CPU reference harness"
        )
    n = draft_token_num
    seq_lens = [int(s) for s in verified_seq_len.tolist()]
    mask = tree_mask.view(-1)
    for b, seq_len in enumerate(seq_lens):
        selected = [int(s) for s in selected_index[b].tolist()]
        parents = [int(p) for p in parent_list[b].tolist()] if parent_list.numel() else []
        parent_of = [None] + [_parent_position(selected, parents, i, topk) for i in range(1, n)]

        # Links: walking i downwards and prepending each child keeps siblings in index order.
        for i in range(n - 1, 0, -1):
            retrive_index[b, i] = b * n + i
            parent = parent_of[i]
            if parent is None:
                continue
            first_child = int(retrive_next_token[b, parent])
            retrive_next_token[b, parent] = i
            if first_child != -1:
                retrive_next_sibling[b, i] = first_child
        retrive_index[b, 0] = b * n

        # Rows: token 0 and the path from i up to the root; depth = number of steps taken.
        if tree_mask_mode == QLEN_ONLY:
            row_base, row_len, tree_col = b * n * n, n, 0
        else:
            row_base, row_len, tree_col = n * n * b + n * sum(seq_lens[:b]), seq_len + n, seq_len
        positions[b * n] = seq_len
        for i in range(n):
            row = row_base + i * row_len + tree_col
            mask[row : row + n] = False
            mask[row] = True
            node, steps = i, 0
            while node not in (0, None) and steps < depth:
                mask[row + node] = True
                node, steps = parent_of[node], steps + 1
            if i > 0:
                positions[b * n + i] = seq_len + steps


def verify_tree_greedy_cpu(
    predicts: torch.Tensor,  # [B * n] int32, written at accepted rows
    accept_index: torch.Tensor,  # [B, S] int32, written: rows of accepted tokens
    accept_token_num: torch.Tensor,  # [B] int32, written: accepted drafts (bonus excluded)
    candidates: torch.Tensor,  # [B, n] draft tokens, candidates[b, 0] = verified token
    retrive_index: torch.Tensor,  # [B, n]
    retrive_next_token: torch.Tensor,  # [B, n]
    retrive_next_sibling: torch.Tensor,  # [B, n]
    target_predict: torch.Tensor,  # [B, n] target argmax at every tree token
) -> None:
    """Greedy tree walk: from the root, repeatedly take the child whose draft token equals the
    target's prediction at the current token; stop when no child matches or after S - 1
    accepted drafts. Each accepted step writes predicts[current] = target token; finally
    predicts[last accepted] = the target's (bonus) prediction there.
    """
    num_spec_steps = accept_index.shape[1]
    target = target_predict.reshape(-1)
    for b in range(candidates.shape[0]):
        last = int(retrive_index[b, 0])
        accept_index[b, 0] = last
        accepted, node = 0, 0
        for _ in range(1, num_spec_steps):
            child = int(retrive_next_token[b, node])
            while child != -1 and int(candidates[b, child]) != int(target[last]):
                child = int(retrive_next_sibling[b, child])
            if child == -1:
                break
            predicts[last] = target[last]
            accepted += 1
            last = int(retrive_index[b, child])
            accept_index[b, accepted] = last
            node = child
        accept_token_num[b] = accepted
        predicts[last] = target[last]


OPS = {
    "fill_bonus_tokens_cpu": (FILL_BONUS_SCHEMA, fill_bonus_tokens_cpu),
    "fill_accept_out_cache_loc_cpu": (FILL_ACCEPT_SCHEMA, fill_accept_out_cache_loc_cpu),
    "build_tree_kernel_efficient_cpu": (BUILD_TREE_SCHEMA, build_tree_kernel_efficient_cpu),
    "verify_tree_greedy_cpu": (VERIFY_SCHEMA, verify_tree_greedy_cpu),
}
