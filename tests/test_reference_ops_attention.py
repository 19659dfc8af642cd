"""The reference `sgl_kernel` of the CPU harness, attention: decode and extend (prefix,
MHA prefill, non-causal, target verify with a tree mask) against float64 SDPA."""

from __future__ import annotations

import pytest
import torch
from reference_ops_support import TREE_QLEN_MASK, Cache, _sdpa, reference_sgl_kernel


@pytest.fixture(scope="module")
def sk():
    """The reference sgl_kernel module, imported from the shim directory, then forgotten."""
    yield from reference_sgl_kernel()


def _decode(sk, cache, q, key, value, **kw):
    num_heads, dv = q.shape[1], cache.v.shape[-1]
    out = torch.empty(q.shape[0], num_heads, dv, dtype=q.dtype)
    loc = torch.stack([s[-1] for s in cache.slots])
    attn_logits = torch.empty(q.shape[0], num_heads, 8, dv + 1)
    args = dict(key_scale=1.0, value_scale=1.0, sm_scale=0.3, logit_cap=0.0)
    args |= dict(is_cross_attention=False, sliding_window_size=0, encoder_lens=None, sinks=None)
    args |= kw
    sk.decode_attention_cpu(
        q,
        cache.k,
        cache.v,
        args["key_scale"],
        args["value_scale"],
        out,
        key,
        value,
        loc,
        attn_logits,
        cache.req_to_token,
        cache.rows,
        cache.seq_lens,
        args["sm_scale"],
        args["logit_cap"],
        args["is_cross_attention"],
        args["sliding_window_size"],
        args["encoder_lens"],
        args["sinks"],
    )
    return out, loc


@pytest.mark.parametrize("mla", [False, True], ids=["gqa", "mla"])
def test_decode_matches_sdpa_and_stores_kv(sk, mla):
    seq_lens = [5, 1, 9]
    heads, heads_kv, dqk, dv = (4, 1, 40, 32) if mla else (4, 2, 16, 12)
    cache = Cache(seq_lens, heads_kv, dqk, dv, mla=mla)
    q = torch.randn(3, heads, dqk, generator=cache.gen)
    key = torch.randn(3, heads_kv, dqk, generator=cache.gen)
    value = key[..., :dv].clone() if mla else torch.randn(3, heads_kv, dv, generator=cache.gen)
    k_before = cache.k.clone()
    out, loc = _decode(sk, cache, q, key, value)

    expected_k = k_before.clone()
    expected_k[loc] = key
    torch.testing.assert_close(cache.k, expected_k)  # the new token's K landed at loc only
    torch.testing.assert_close(cache.v[loc], value)
    for b, slots in enumerate(cache.slots):
        everything = torch.ones(1, seq_lens[b], dtype=torch.bool)
        ref = _sdpa(q[b : b + 1], cache.k[slots], cache.v[slots], everything, 0.3)
        torch.testing.assert_close(out[b : b + 1].double(), ref, atol=1e-5, rtol=1e-5)


def test_decode_bf16_and_window(sk):
    seq_lens, window = [12, 3], 4
    cache = Cache(seq_lens, 2, 16, 16, dtype=torch.bfloat16, seed=1)
    q = torch.randn(2, 4, 16, generator=cache.gen).bfloat16()
    out, _ = _decode(sk, cache, q, None, None, sliding_window_size=window)
    for b, slots in enumerate(cache.slots):
        visible = (torch.arange(seq_lens[b]) >= seq_lens[b] - window)[None]
        ref = _sdpa(q[b : b + 1], cache.k[slots], cache.v[slots], visible, 0.3)
        torch.testing.assert_close(out[b : b + 1].double(), ref, atol=2e-2, rtol=2e-2)


def test_decode_logit_cap_and_sinks(sk):
    cache = Cache([6, 4], 2, 8, 8, seed=2)
    q = 4 * torch.randn(2, 4, 8, generator=cache.gen)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0])
    capped, _ = _decode(sk, cache, q, None, None, logit_cap=1.5)
    huge_cap, _ = _decode(sk, cache, q, None, None, logit_cap=1e9)
    with_sinks, _ = _decode(sk, cache, q, None, None, sinks=sinks)
    for b, slots in enumerate(cache.slots):
        k = cache.k[slots].double().repeat_interleave(2, 1)
        v = cache.v[slots].double().repeat_interleave(2, 1)
        scores = 0.3 * torch.einsum("hd,khd->hk", q[b].double(), k)
        probs = torch.softmax(1.5 * torch.tanh(scores / 1.5), dim=-1)
        torch.testing.assert_close(capped[b].double(), torch.einsum("hk,khd->hd", probs, v))
        everything = torch.ones(1, len(slots), dtype=torch.bool)
        plain = _sdpa(q[b : b + 1], cache.k[slots], cache.v[slots], everything, 0.3)[0]
        torch.testing.assert_close(huge_cap[b].double(), plain, atol=1e-5, rtol=1e-5)
        # A sink only adds exp(sink) to the softmax denominator.
        kept = torch.sigmoid(torch.logsumexp(scores, -1) - sinks.double())[:, None]
        torch.testing.assert_close(with_sinks[b].double(), plain * kept, atol=1e-5, rtol=1e-5)


def test_decode_fp8_cache_is_dequantized(sk):
    cache = Cache([5, 3], 1, 16, 16, seed=3)
    cache.k, cache.v = cache.k.to(torch.float8_e4m3fn), cache.v.to(torch.float8_e4m3fn)
    q = torch.randn(2, 2, 16, generator=cache.gen)
    out, _ = _decode(sk, cache, q, None, None, key_scale=0.5, value_scale=2.0)
    for b, slots in enumerate(cache.slots):
        k, v = cache.k[slots].float() * 0.5, cache.v[slots].float() * 2.0
        everything = torch.ones(1, len(slots), dtype=torch.bool)
        ref = _sdpa(q[b : b + 1], k, v, everything, 0.3)
        torch.testing.assert_close(out[b : b + 1].double(), ref, atol=1e-5, rtol=1e-5)


def test_decode_rejects_bad_scratch_and_cross_attention(sk):
    cache = Cache([3], 1, 8, 8)
    q = torch.randn(1, 2, 8)
    with pytest.raises(NotImplementedError, match="cross-attention"):
        _decode(sk, cache, q, None, None, is_cross_attention=True)
    loc = cache.slots[0][-1:]
    with pytest.raises(ValueError, match="attn_logits"):
        sk.decode_attention_cpu(
            *(q, cache.k, cache.v, 1.0, 1.0, torch.empty(1, 2, 8), None, None, loc),
            *(torch.empty(1, 2, 8, 8), cache.req_to_token, cache.rows, cache.seq_lens),
            *(0.3, 0.0, False, 0, None, None),
        )


def _extend(sk, cache, q, k_new, v_new, ext_lens, *, dv, tree_mask=None, is_causal=True):
    out = torch.full((q.shape[0], q.shape[1], dv), float("nan"))
    starts = torch.tensor([0, *torch.tensor(ext_lens).cumsum(0)[:-1].tolist()], dtype=torch.int32)
    sk.extend_attention_cpu(
        *(q, k_new, v_new, out, cache.k, cache.v, 1.0, 1.0),
        *(cache.req_to_token, cache.rows, cache.seq_lens),
        *(torch.tensor(ext_lens, dtype=torch.int32), starts, max(ext_lens), 0.3, 0.0),
        *(False, 0, None, None, tree_mask, is_causal),
    )
    return out, starts.tolist()


@pytest.mark.parametrize(
    "mla,from_cache", [(False, False), (False, True), (True, False)], ids=["gqa", "cache", "mla"]
)
def test_extend_with_prefix_is_causal_sdpa(sk, mla, from_cache):
    prefix_lens, ext_lens = [0, 4, 7], [5, 3, 1]
    seq_lens = [p + n for p, n in zip(prefix_lens, ext_lens, strict=True)]
    heads, heads_kv, dqk, dv = (4, 1, 40, 32) if mla else (4, 2, 16, 12)
    cache = Cache(seq_lens, heads_kv, dqk, dv, mla=mla, seed=4)
    total = sum(ext_lens)
    q = torch.randn(total, heads, dqk, generator=cache.gen)
    # The backend stores the new tokens' K/V before the call; k/v_extend are the same rows.
    new_slots = torch.cat([s[p:] for s, p in zip(cache.slots, prefix_lens, strict=True)])
    k_new, v_new = cache.k[new_slots].clone(), cache.v[new_slots].clone()
    args = (None, None) if from_cache else (k_new, v_new)
    out, starts = _extend(sk, cache, q, *args, ext_lens, dv=dv)
    for b, (p, n) in enumerate(zip(prefix_lens, ext_lens, strict=True)):
        causal = torch.ones(n, p + n, dtype=torch.bool).tril(diagonal=p)
        slots, rows = cache.slots[b], slice(starts[b], starts[b] + n)
        ref = _sdpa(q[rows], cache.k[slots], cache.v[slots], causal, 0.3)
        torch.testing.assert_close(out[rows].double(), ref, atol=1e-5, rtol=1e-5)


def test_extend_mha_prefill_never_reads_the_latent_cache(sk):
    # DeepSeek's MHA prefill: q/k are [T, H, nope+rope], v is [T, H, v_head_dim], no prefix,
    # nothing stored; the layer's cache holds 40-wide MLA latents of another shape.
    cache = Cache([6, 2], 1, 40, 32, mla=True, seed=5)
    q, k, v = (torch.randn(8, 4, d, generator=cache.gen) for d in (24, 24, 16))
    out, _ = _extend(sk, cache, q, k, v, [6, 2], dv=16)
    for rows in (slice(0, 6), slice(6, 8)):
        n = rows.stop - rows.start
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        ref = _sdpa(q[rows], k[rows], v[rows], causal, 0.3)
        torch.testing.assert_close(out[rows].double(), ref, atol=1e-5, rtol=1e-5)


def test_extend_non_causal(sk):
    cache = Cache([3, 5], 2, 8, 8, seed=6)
    q = torch.randn(8, 2, 8, generator=cache.gen)
    out, _ = _extend(sk, cache, q, None, None, [3, 5], dv=8, is_causal=False)
    everything = torch.ones(5, 5, dtype=torch.bool)
    ref = _sdpa(q[3:], cache.k[cache.slots[1]], cache.v[cache.slots[1]], everything, 0.3)
    torch.testing.assert_close(out[3:].double(), ref, atol=1e-5, rtol=1e-5)


def test_extend_target_verify_with_tree_mask(sk):
    prefix_lens, n = [3, 6], 4
    cache = Cache([p + n for p in prefix_lens], 2, 16, 8, seed=7)
    q = torch.randn(2 * n, 4, 16, generator=cache.gen)
    tree_mask = torch.tensor(TREE_QLEN_MASK, dtype=torch.bool).flatten()
    out, _ = _extend(sk, cache, q, None, None, [n, n], dv=8, tree_mask=tree_mask)
    for b, p in enumerate(prefix_lens):
        visible = torch.cat([torch.ones(n, p), torch.tensor(TREE_QLEN_MASK[b])], 1).bool()
        rows, slots = slice(b * n, (b + 1) * n), cache.slots[b]
        ref = _sdpa(q[rows], cache.k[slots], cache.v[slots], visible, 0.3)
        torch.testing.assert_close(out[rows].double(), ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="QLEN_ONLY"):
        _extend(sk, cache, q, None, None, [n, n], dv=8, tree_mask=tree_mask[:-1])


def test_decode_dp_attention_padding_rows(sk):
    # DP attention pads a rank's query rows to the largest rank's; the sequences are seq_lens'
    # entries (as in the real kernel), and the padding rows come back zero, never read.
    cache = Cache([5, 2, 7], 2, 16, 12, seed=8)
    q = torch.randn(5, 4, 16, generator=cache.gen)  # 3 sequences, 2 padding rows
    out = torch.full((5, 4, 12), float("nan"))
    loc = torch.stack([s[-1] for s in cache.slots])
    sk.decode_attention_cpu(
        *(q, cache.k, cache.v, 1.0, 1.0, out, None, None, loc, torch.empty(3, 4, 8, 13)),
        *(cache.req_to_token, cache.rows, cache.seq_lens, 0.3, 0.0, False, 0, None, None),
    )
    for b, slots in enumerate(cache.slots):
        everything = torch.ones(1, len(slots), dtype=torch.bool)
        ref = _sdpa(q[b : b + 1], cache.k[slots], cache.v[slots], everything, 0.3)
        torch.testing.assert_close(out[b : b + 1].double(), ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(out[3:], torch.zeros(2, 4, 12))
    with pytest.raises(ValueError, match="one query token per sequence"):  # fewer rows: refused
        sk.decode_attention_cpu(
            *(q[:2], cache.k, cache.v, 1.0, 1.0, out[:2], None, None, loc),
            *(torch.empty(3, 4, 8, 13), cache.req_to_token, cache.rows, cache.seq_lens),
            *(0.3, 0.0, False, 0, None, None),
        )  # fmt: skip


def test_extend_target_verify_padded_batch(sk):
    # A DP-padded verify batch: a third request the drafter built no tree for (its mask is
    # absent) and padding rows past every request. The two real requests keep their tree
    # masks; a mask that covers no whole prefix of the requests is still refused.
    prefix_lens, n = [3, 6, 1], 4
    cache = Cache([p + n for p in prefix_lens], 2, 16, 8, seed=9)
    q = torch.randn(3 * n + 2, 4, 16, generator=cache.gen)
    tree_mask = torch.tensor(TREE_QLEN_MASK, dtype=torch.bool).flatten()
    out, _ = _extend(sk, cache, q, None, None, [n, n, n], dv=8, tree_mask=tree_mask)
    for b, p in enumerate(prefix_lens[:2]):
        visible = torch.cat([torch.ones(n, p), torch.tensor(TREE_QLEN_MASK[b])], 1).bool()
        rows, slots = slice(b * n, (b + 1) * n), cache.slots[b]
        ref = _sdpa(q[rows], cache.k[slots], cache.v[slots], visible, 0.3)
        torch.testing.assert_close(out[rows].double(), ref, atol=1e-5, rtol=1e-5)
    causal = torch.ones(n, 1 + n, dtype=torch.bool).tril(diagonal=1)
    ref = _sdpa(q[2 * n : 3 * n], cache.k[cache.slots[2]], cache.v[cache.slots[2]], causal, 0.3)
    torch.testing.assert_close(out[2 * n : 3 * n].double(), ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(out[3 * n :], torch.zeros(2, 4, 8))
    with pytest.raises(ValueError, match="QLEN_ONLY"):
        _extend(sk, cache, q, None, None, [n, n, n], dv=8, tree_mask=tree_mask[:20])
