"""Reference decode/extend attention for SGLang's `intel_amx` backend (tests and demos only).

For one query token q of head h (KV head g = h // (H_q / H_kv), SGLang's grouping):

    s_j = sm_scale * <q, k_j>            for every cached token j the query may see
    s_j = cap * tanh(s_j / cap)          only when logit_cap > 0
    p   = softmax([s_1 .. s_n, sink_h])  the sink column only when `sinks` is given
    o   = sum_j p_j * v_j                (the sink has no value)

Everything is computed in float32 and cast to the output dtype. The tokens a request sees are
`req_to_token[req_pool_indices[b], :seq_lens[b]]`; a query at position p sees key position t
when t <= p (causal), when the EAGLE tree mask allows it (draft tokens only), and when
p - t < sliding_window_size (if that is > 0; the backend passes `window_left + 1`).

MLA (DeepSeek absorbed attention) is the case H_kv = 1, D_qk = kv_lora_rank + rope_dim,
D_v = kv_lora_rank, with `v_buffer` a view of the first D_v columns of `k_buffer`.

Padded batches (DP attention): SGLang pads each rank's token rows to the largest rank's, so
the query may have more rows than `seq_lens` has sequences. As in the real CPU kernels, the
sequences are `seq_lens`' entries; query rows past them are padding, and their output rows
are written as zeros (the real kernels leave them unwritten; nobody reads them).
"""

from __future__ import annotations

import torch

# The backend passes fp8 scales for every dtype; they only mean something for fp8 caches,
# which is also the only case where SGLang's KV pool divides by them on store.
_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)

DECODE_SCHEMA = (
    "(Tensor query, Tensor(a!) k_buffer, Tensor(b!) v_buffer, float key_scale, "
    "float value_scale, Tensor(c!) output, Tensor? key, Tensor? value, Tensor loc, "
    "Tensor(d!) attn_logits, Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, "
    "float sm_scale, float logit_cap, bool is_cross_attention, int sliding_window_size, "
    "Tensor? encoder_lens, Tensor? sinks) -> ()"
)
EXTEND_SCHEMA = (
    "(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, "
    "Tensor k_buffer, Tensor v_buffer, float key_scale, float value_scale, "
    "Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, "
    "Tensor extend_start_loc, int max_len_extend, float sm_scale, float logit_cap, "
    "bool is_cross_attention, int sliding_window_size, Tensor? encoder_lens, Tensor? sinks, "
    "Tensor? tree_mask, bool is_causal) -> ()"
)


def _load(buffer: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
    """Rows `slots` of a KV buffer [num_slots, H_kv, D] as float32, dequantized if fp8."""
    rows = buffer[slots].float()
    return rows * scale if buffer.dtype in _FP8_DTYPES else rows


def _store(buffer: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor, scale: float) -> None:
    """buffer[slots] = rows, quantized like SGLang's KV pool when the buffer is fp8.

    `buffer` may be a view (MLA's value buffer): index assignment writes through to its base.
    """
    if buffer.dtype in _FP8_DTYPES:
        rows = rows.float() / scale
    buffer[slots] = rows.to(buffer.dtype)


def _attend(
    q: torch.Tensor,  # [Q, H, D_qk]
    k: torch.Tensor,  # [K, H_kv, D_qk] float32
    v: torch.Tensor,  # [K, H_kv, D_v] float32
    visible: torch.Tensor,  # [Q, K] bool
    sm_scale: float,
    logit_cap: float,
    sinks: torch.Tensor | None,  # [H]
) -> torch.Tensor:
    """Masked softmax attention of the formula in the module docstring -> [Q, H, D_v] float32."""
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    if num_heads % num_kv_heads != 0:
        raise ValueError(f"{num_heads} query heads do not group over {num_kv_heads} KV heads")
    group = num_heads // num_kv_heads
    k = k.repeat_interleave(group, dim=1)  # [K, H, D_qk]: head h reads KV head h // group
    v = v.repeat_interleave(group, dim=1)  # [K, H, D_v]
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * sm_scale  # [H, Q, K]
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    scores = scores.masked_fill(~visible.unsqueeze(0), float("-inf"))
    if sinks is not None:
        sink_column = sinks.float().view(-1, 1, 1).expand(-1, scores.shape[1], 1)
        probs = torch.softmax(torch.cat([scores, sink_column], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def _window(visible: torch.Tensor, q_pos: torch.Tensor, sliding_window_size: int) -> torch.Tensor:
    """Restrict `visible` [Q, K] to keys with q_pos - k_pos < sliding_window_size (if > 0)."""
    if sliding_window_size <= 0:
        return visible
    k_pos = torch.arange(visible.shape[1])
    return visible & (q_pos[:, None] - k_pos[None, :] < sliding_window_size)


def _keys(
    buffer: torch.Tensor,  # [num_slots, H_kv, D]
    slots: torch.Tensor,  # [P + n] the request's slots
    prefix_len: int,
    new: torch.Tensor | None,  # [T, H_kv, D] new tokens of all requests, or None
    start: int,
    scale: float,
) -> torch.Tensor:
    """K (or V) of one request's P + n tokens as float32 [P + n, H_kv, D].

    The cache is only read where needed: DeepSeek's MHA prefill passes a layer whose cache
    holds MLA latents of another shape, with no prefix and its K/V in `new`.
    """
    if new is None:
        return _load(buffer, slots, scale)
    fresh = new[start : start + slots.numel() - prefix_len].float()
    if prefix_len == 0:
        return fresh
    return torch.cat([_load(buffer, slots[:prefix_len], scale), fresh])


def _reject_cross_attention(is_cross_attention: bool, op: str) -> None:
    # Encoder-decoder attention is not used by DeepSeek-V3 or EAGLE-3; fail loudly rather
    # than compute something plausible but untested.
    if is_cross_attention:
        raise NotImplementedError(
            f"sgl_kernel.{op}: cross-attention is not implemented by the sglang-eagle3 CPU "
            "reference harness"
        )


def decode_attention_cpu(
    query: torch.Tensor,  # [B, H, D_qk]: one token per sequence
    k_buffer: torch.Tensor,  # [num_slots, H_kv, D_qk]
    v_buffer: torch.Tensor,  # [num_slots, H_kv, D_v]; for MLA a view of k_buffer
    key_scale: float,
    value_scale: float,
    output: torch.Tensor,  # [B, H, D_v], written
    key: torch.Tensor | None,  # [B, H_kv, D_qk]: this step's K, stored at `loc` first
    value: torch.Tensor | None,  # [B, H_kv, D_v]
    loc: torch.Tensor,  # [B] int64 KV slot of this step's token
    attn_logits: torch.Tensor,  # [>=B, H, num_kv_splits, D_v + 1] float32 scratch
    req_to_token: torch.Tensor,  # [num_rows, row_len] int32 slot table
    req_pool_indices: torch.Tensor,  # [B] row of each sequence in req_to_token
    seq_lens: torch.Tensor,  # [B] int64, including this step's token
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    sliding_window_size: int,
    encoder_lens: torch.Tensor | None,
    sinks: torch.Tensor | None,  # [H] per-head attention-sink logits
) -> None:
    """One decode step: store this token's K/V, then attend over each sequence's cache.

    The real kernel reduces `num_kv_splits` chunks of the sequence through `attn_logits`
    (partial outputs plus a log-sum-exp per split); that buffer is scratch nobody reads
    afterwards, so the reference only checks its shape and computes the softmax in one go.
    """
    _reject_cross_attention(is_cross_attention, "decode_attention_cpu")
    num_seqs, num_heads, v_dim = seq_lens.shape[0], query.shape[1], output.shape[-1]
    if query.shape[0] < num_seqs or req_pool_indices.shape[0] != num_seqs:
        raise ValueError(
            f"decode_attention_cpu: one query token per sequence expected, got "
            f"{query.shape[0]} queries, {num_seqs} seq_lens, {req_pool_indices.shape[0]} rows"
        )
    if attn_logits.dim() != 4 or attn_logits.shape[0] < num_seqs:
        raise ValueError(f"decode_attention_cpu: attn_logits {tuple(attn_logits.shape)}")
    if attn_logits.shape[1] != num_heads or attn_logits.shape[3] != v_dim + 1:
        raise ValueError("decode_attention_cpu: attn_logits is not [B, H, splits, D_v + 1]")

    # The query attends to its own token, whose slot is req_to_token[row, seq_len - 1]
    # == loc[b]: store first, then read everything back through the slot table.
    if key is not None:
        _store(k_buffer, loc.long(), key, key_scale)
    if value is not None:
        _store(v_buffer, loc.long(), value, value_scale)

    output[num_seqs:].zero_()  # DP attention's padding rows
    for b in range(num_seqs):
        seq_len = int(seq_lens[b])
        slots = req_to_token[int(req_pool_indices[b]), :seq_len].long()
        k = _load(k_buffer, slots, key_scale)
        v = _load(v_buffer, slots, value_scale)
        q_pos = torch.tensor([seq_len - 1])
        visible = _window(torch.ones(1, seq_len, dtype=torch.bool), q_pos, sliding_window_size)
        out = _attend(query[b : b + 1], k, v, visible, sm_scale, logit_cap, sinks)
        output[b].copy_(out[0])


def extend_attention_cpu(
    q_extend: torch.Tensor,  # [T, H, D_qk]: new tokens of all requests, back to back
    k_extend: torch.Tensor | None,  # [T, H_kv, D_qk]; None: read the new tokens' K from cache
    v_extend: torch.Tensor | None,  # [T, H_kv, D_v]
    o_extend: torch.Tensor,  # [T, H, D_v], written
    k_buffer: torch.Tensor,  # [num_slots, H_kv, D_qk]
    v_buffer: torch.Tensor,  # [num_slots, H_kv, D_v]
    key_scale: float,
    value_scale: float,
    req_to_token: torch.Tensor,  # [num_rows, row_len] int32
    req_pool_indices: torch.Tensor,  # [B]
    seq_lens: torch.Tensor,  # [B] int64: prefix + new tokens
    extend_seq_lens: torch.Tensor,  # [B] new tokens per request
    extend_start_loc: torch.Tensor,  # [B] first row of each request in q/k/v/o_extend
    max_len_extend: int,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    sliding_window_size: int,
    encoder_lens: torch.Tensor | None,
    sinks: torch.Tensor | None,  # [H]
    tree_mask: torch.Tensor | None,  # bool, QLEN_ONLY layout: [B, n, n] flattened
    is_causal: bool,
) -> None:
    """Prefill / extend / EAGLE target-verify attention.

    Request b has prefix P = seq_lens[b] - n cached tokens and n = extend_seq_lens[b] new
    ones. Keys are the prefix (from the cache, through req_to_token) followed by the new
    tokens (from k_extend/v_extend when given, as DeepSeek's MHA prefill passes them without
    storing them; otherwise from the cache). New token i (position P + i) sees every prefix
    token and new token j when j <= i (causal) or, with `tree_mask`, when
    tree_mask[b, i, j] (its ancestors in the draft tree; the backend passes a mask only for
    topk > 1, where sibling drafts must not see each other).

    Under DP attention a verify batch is padded with requests the drafter never built a tree
    for: the mask then covers the first `masked` requests exactly, and the padding requests
    after them attend causally (their rows are discarded).
    """
    _reject_cross_attention(is_cross_attention, "extend_attention_cpu")
    ext_lens = [int(n) for n in extend_seq_lens.tolist()]
    if max(ext_lens, default=0) > max_len_extend:
        raise ValueError(f"extend_attention_cpu: extend length > max_len_extend {max_len_extend}")
    masked = _masked_requests(tree_mask, ext_lens)

    mask_offset = 0
    o_extend[sum(ext_lens) :].zero_()  # DP attention's padding rows
    for b, n in enumerate(ext_lens):
        start, seq_len = int(extend_start_loc[b]), int(seq_lens[b])
        prefix_len = seq_len - n
        slots = req_to_token[int(req_pool_indices[b]), :seq_len].long()
        k = _keys(k_buffer, slots, prefix_len, k_extend, start, key_scale)
        v = _keys(v_buffer, slots, prefix_len, v_extend, start, value_scale)

        q_pos = prefix_len + torch.arange(n)  # [n]
        k_pos = torch.arange(seq_len)  # [P + n]
        if is_causal:
            visible = k_pos[None, :] <= q_pos[:, None]
        else:
            visible = torch.ones(n, seq_len, dtype=torch.bool)
        if b < masked:
            block = tree_mask[mask_offset : mask_offset + n * n].view(n, n).bool()
            visible[:, prefix_len:] = block
            mask_offset += n * n
        visible = _window(visible, q_pos, sliding_window_size)

        out = _attend(q_extend[start : start + n], k, v, visible, sm_scale, logit_cap, sinks)
        o_extend[start : start + n].copy_(out)


def _masked_requests(tree_mask: torch.Tensor | None, ext_lens: list[int]) -> int:
    """How many leading requests `tree_mask` (QLEN_ONLY, [n, n] each, flattened) covers."""
    if tree_mask is None:
        return 0
    covered = 0
    for b, n in enumerate(ext_lens):
        if covered == tree_mask.numel():
            return b
        covered += n * n
    if covered == tree_mask.numel():
        return len(ext_lens)
    # SGLang's CPU path builds QLEN_ONLY masks (eagle_utils.default_tree_mask_mode); a
    # FULL_MASK ([n, P + n] per request) would be misread, so refuse it.
    raise ValueError(
        f"extend_attention_cpu: tree_mask has {tree_mask.numel()} entries, expected the "
        f"QLEN_ONLY layout: sum(n * n) = {sum(n * n for n in ext_lens)} over the requests, or "
        "over the first of them when the batch is padded"
    )


OPS = {
    "decode_attention_cpu": (DECODE_SCHEMA, decode_attention_cpu),
    "extend_attention_cpu": (EXTEND_SCHEMA, extend_attention_cpu),
}
