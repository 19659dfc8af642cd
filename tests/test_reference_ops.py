"""The reference `sgl_kernel` of the CPU harness: each op against a straightforward formula.

The shim is imported in this process with its directory put on sys.path for this module only;
SGLANG_USE_CPU_ENGINE=1 and real SGLang are only ever used in subprocesses.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from sglang_eagle3.testing.cpu_harness import SHIM_DIR  # noqa: E402

STUB_MESSAGE = "is not implemented by the sglang-eagle3 CPU reference harness"


@pytest.fixture(scope="module")
def sk():
    """The reference sgl_kernel module, imported from the shim directory, then forgotten."""
    if any(name.split(".")[0] == "sgl_kernel" for name in sys.modules):
        pytest.skip("an sgl_kernel is already imported in this process")
    saved_path = list(sys.path)
    sys.path.insert(0, str(SHIM_DIR))
    try:
        try:
            module = importlib.import_module("sgl_kernel")
        except ImportError as error:
            pytest.skip(f"reference sgl_kernel refused to import: {error}")
        assert module.SGLANG_EAGLE3_REFERENCE is True
        yield module
    finally:
        sys.path[:] = saved_path
        for name in [n for n in sys.modules if n.split(".")[0] == "sgl_kernel"]:
            del sys.modules[name]


def _env(cpu_engine: bool, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(SHIM_DIR), env.get("PYTHONPATH", "")] if p)
    if cpu_engine:
        env["SGLANG_USE_CPU_ENGINE"] = "1"
    env.update(extra)
    return env


def _run(script: str, env: dict[str, str], cwd: Path | None = None, timeout: int = 300):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --------------------------------------------------------------------------------------------
# Attention: scenario builders and the SDPA reference


def _sdpa(q, k, v, visible, scale):
    """q [Q, H, D], k [K, Hkv, D], v [K, Hkv, Dv], visible [Q, K] -> [Q, H, Dv], in float64."""
    out = F.scaled_dot_product_attention(
        q.double().transpose(0, 1),
        k.double().transpose(0, 1),
        v.double().transpose(0, 1),
        attn_mask=visible,
        scale=scale,
        enable_gqa=True,
    )
    return out.transpose(0, 1)


class Cache:
    """A KV pool and slot table: request b lives in row rows[b] and owns seq_lens[b] slots."""

    def __init__(self, seq_lens, heads_kv, dqk, dv, *, mla=False, dtype=torch.float32, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.gen = gen
        num_slots = sum(seq_lens) + 7
        self.k = torch.randn(num_slots, heads_kv, dqk, generator=gen).to(dtype)
        # MLA: the value buffer is the first dv columns of the key buffer (a view).
        self.v = (
            self.k[..., :dv]
            if mla
            else torch.randn(num_slots, heads_kv, dv, generator=gen).to(dtype)
        )
        self.rows = torch.tensor([len(seq_lens) - 1 - b for b in range(len(seq_lens))])
        self.req_to_token = torch.zeros(len(seq_lens) + 1, max(seq_lens) + 4, dtype=torch.int32)
        slots = torch.randperm(num_slots, generator=gen)
        self.slots = []
        for b, length in enumerate(seq_lens):
            mine, slots = slots[:length], slots[length:]
            self.req_to_token[self.rows[b], :length] = mine.int()
            self.slots.append(mine)
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int64)


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


# Hand-made topk=2 draft trees (see test_build_tree_hand_computed): request 0 is
# 0 -> {1, 2}, 1 -> 3; request 1 is 0 -> 1, 1 -> {2, 3}.
TREE_PARENT_LIST = [[-1, 0, 1], [-1, 0, 1]]
TREE_SELECTED = [[0, 1, 3], [0, 2, 3]]
TREE_QLEN_MASK = [
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]],
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]],
]


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


# --------------------------------------------------------------------------------------------
# Slot bookkeeping


def test_req_to_token_assign_and_gather_are_inverse(sk):
    gen = torch.Generator().manual_seed(8)
    req_to_token = torch.randint(0, 1000, (5, 16), generator=gen, dtype=torch.int32)
    rows, starts, ends = torch.tensor([3, 0, 4]), torch.tensor([2, 0, 9]), torch.tensor([6, 1, 16])
    locs = torch.randint(0, 1000, (int((ends - starts).sum()),), generator=gen)
    expected = req_to_token.clone()
    expected[3, 2:6], expected[0, 0:1], expected[4, 9:16] = locs[:4], locs[4:5], locs[5:]
    sk.assign_req_to_token_pool_cpu(rows, req_to_token, starts, ends, locs, 16)
    assert torch.equal(req_to_token, expected)

    gathered = torch.full_like(locs, -1)
    sk.assign_extend_cache_locs_cpu(rows, req_to_token, starts, ends, gathered, 16)
    assert torch.equal(gathered, locs)
    with pytest.raises(ValueError, match="pool_len"):
        sk.assign_extend_cache_locs_cpu(rows, req_to_token, starts, ends, gathered, 15)


def test_draft_cache_locs_and_decode_metadata(sk):
    topk, steps = 2, 3
    req_to_token = torch.arange(3 * 20, dtype=torch.int32).view(3, 20)
    rows, seq_lens = torch.tensor([2, 0]), torch.tensor([4, 1])
    out = torch.empty(2 * topk * steps, dtype=torch.int64)
    sk.assign_draft_cache_locs_contiguous_cpu(rows, req_to_token, seq_lens, out, 20, topk, steps)
    assert out.tolist() == [*range(44, 50), *range(1, 7)]

    table = sk.build_draft_decode_metadata_cpu(req_to_token, rows, seq_lens, topk, steps, 20)
    assert table.shape == (4, 20) and table.dtype == torch.int32
    # Row (b, k): b's prefix, then branch k's slots seq_len + k * steps ... + steps.
    assert table[0, :7].tolist() == [40, 41, 42, 43, 44, 45, 46]
    assert table[1, :7].tolist() == [40, 41, 42, 43, 47, 48, 49]
    assert table[2, :4].tolist() == [0, 1, 2, 3]
    assert table[3, :4].tolist() == [0, 4, 5, 6]


def test_copy_all_layer_kv_cache_moves_rows_of_every_buffer(sk):
    gen = torch.Generator().manual_seed(9)
    buffers = [
        torch.randn(10, 2, 4, generator=gen),
        torch.randn(10, 3, generator=gen).bfloat16(),
        torch.randint(0, 100, (10, 1, 5), generator=gen, dtype=torch.int32),
    ]
    ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.element_size() for b in buffers])
    tgt, src = torch.tensor([2, 1, 7]), torch.tensor([1, 2, 9])  # 1 <-> 2 overlap
    expected = [b.clone() for b in buffers]
    for e in expected:
        e[tgt] = e[src].clone()
    sk.copy_all_layer_kv_cache_cpu(ptrs, strides, tgt, src)
    for b, e in zip(buffers, expected, strict=True):
        assert torch.equal(b, e)
    # SGLang's pool runs one 0 -> 0 copy at construction; it must be a harmless no-op.
    sk.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.zeros(1).long(), torch.zeros(1).long())
    assert all(torch.equal(b, e) for b, e in zip(buffers, expected, strict=True))


# --------------------------------------------------------------------------------------------
# EAGLE tree ops


def test_fill_bonus_tokens_and_accept_out_cache_loc(sk):
    accept_tokens = torch.tensor([[5, 6, 7], [8, 9, 10]], dtype=torch.int32)
    bonus = torch.zeros(2, dtype=torch.int32)
    sk.fill_bonus_tokens_cpu(accept_tokens, torch.tensor([3, 1], dtype=torch.int32), bonus, 3)
    assert bonus.tolist() == [7, 8]

    accept_index = torch.tensor([[0, 2, -1], [4, 5, 7]], dtype=torch.int32)
    out_cache_loc = torch.arange(100, 108)
    accept_loc = torch.zeros(6, dtype=torch.int64)
    sk.fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_loc)
    assert accept_loc.tolist() == [100, 102, 104, 105, 107, 0]


def _build_tree(sk, parent_list, selected, seq_lens, topk, depth, n, mode):
    bs = len(seq_lens)
    size = bs * n * n if mode == 1 else sum(seq_lens) * n + bs * n * n
    tree_mask = torch.ones(size, dtype=torch.bool)
    positions = torch.empty(bs * n, dtype=torch.int64)
    retrieve = torch.full((3, bs, n), -1, dtype=torch.int64)
    sk.build_tree_kernel_efficient_cpu(
        torch.tensor(parent_list, dtype=torch.int64).view(bs, -1),
        torch.tensor(selected, dtype=torch.int64),
        torch.tensor(seq_lens, dtype=torch.int64),
        *(tree_mask, positions, *retrieve, topk, depth, n, mode),
    )
    return tree_mask, positions, retrieve


def test_build_tree_hand_computed(sk):
    # topk 2, 2 steps: flat 0, 1 are the root's children; flat 2, 3 children of flat 0.
    seq_lens = [7, 3]
    mask, positions, (index, next_token, next_sibling) = _build_tree(
        sk, TREE_PARENT_LIST, TREE_SELECTED, seq_lens, 2, 2, 4, 1
    )
    assert mask.view(2, 4, 4).int().tolist() == TREE_QLEN_MASK
    assert positions.tolist() == [7, 8, 8, 9, 3, 4, 5, 5]
    assert index.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert next_token.tolist() == [[1, 3, -1, -1], [1, 2, -1, -1]]
    assert next_sibling.tolist() == [[-1, 2, -1, -1], [-1, -1, 3, -1]]

    full, *_ = _build_tree(sk, TREE_PARENT_LIST, TREE_SELECTED, seq_lens, 2, 2, 4, 0)
    first, second = full[: 4 * 11].view(4, 11), full[4 * 11 :].view(4, 7)
    assert first[:, :7].all() and second[:, :3].all()  # prefix columns: the caller's fill
    assert first[:, 7:].int().tolist() == TREE_QLEN_MASK[0]
    assert second[:, 3:].int().tolist() == TREE_QLEN_MASK[1]
    with pytest.raises(NotImplementedError, match="BITPACKING"):
        _build_tree(sk, TREE_PARENT_LIST, TREE_SELECTED, seq_lens, 2, 2, 4, 2)


def test_build_tree_topk1_is_a_chain(sk):
    mask, positions, (_, next_token, next_sibling) = _build_tree(
        sk, [[-1, 0, 1, 2]], [[0, 1, 2]], [5], 1, 4, 4, 1
    )
    assert mask.view(4, 4).int().tolist() == torch.ones(4, 4).tril().int().tolist()
    assert positions.tolist() == [5, 6, 7, 8]
    assert next_token.tolist() == [[1, 2, 3, -1]] and next_sibling.tolist() == [[-1] * 4]


def test_verify_tree_greedy_hand_computed(sk):
    _, _, retrieve = _build_tree(sk, TREE_PARENT_LIST, TREE_SELECTED, [7, 3], 2, 2, 4, 1)
    candidates = torch.tensor([[50, 11, 12, 13], [60, 21, 22, 23]])
    # Request 0: the target wants 12 after the root (node 2, second child), then 99: one
    # draft accepted. Request 1: 21 (node 1), then 23 (node 3, 1's second child): two.
    target = torch.tensor([[12, 98, 99, 97], [21, 23, 96, 95]])
    predicts = torch.zeros(8, dtype=torch.int32)
    accept_index = torch.full((2, 3), -1, dtype=torch.int32)
    accept_num = torch.empty(2, dtype=torch.int32)
    sk.verify_tree_greedy_cpu(
        predicts=predicts,
        accept_index=accept_index,
        accept_token_num=accept_num,
        candidates=candidates,
        retrive_index=retrieve[0],
        retrive_next_token=retrieve[1],
        retrive_next_sibling=retrieve[2],
        target_predict=target,
    )
    assert accept_num.tolist() == [1, 2]
    assert accept_index.tolist() == [[0, 2, -1], [4, 5, 7]]
    assert predicts.tolist() == [12, 0, 99, 0, 21, 23, 0, 95]


# --------------------------------------------------------------------------------------------
# Module behaviour, isolation and real SGLang (subprocesses)


def test_exports_are_the_registered_ops(sk):
    assert len(sk.OP_NAMES) == 11
    for name in sk.OP_NAMES:
        assert getattr(sk, name) is getattr(torch.ops.sgl_kernel, name)


def test_unknown_names_fail_when_called_not_when_imported(sk):
    stub = sk.rotate_input_ids_cpu  # imported by SGLang at import time, never called here
    with pytest.raises(
        NotImplementedError, match=f"sgl_kernel.rotate_input_ids_cpu {STUB_MESSAGE}"
    ):
        stub(torch.zeros(1))
    with pytest.raises(AttributeError):
        sk._private_name  # noqa: B018
    with pytest.raises(AttributeError):
        torch.ops.sgl_kernel.rmsnorm_cpu  # noqa: B018


@pytest.mark.sglang
def test_sglang_cpu_engine_imports_with_the_reference_kernels():
    script = """
        import importlib, torch, sgl_kernel
        for name in [
            "sglang.srt.managers.scheduler",
            "sglang.srt.layers.attention.intel_amx_backend",
            "sglang.kernels.ops.speculative.spec_tree",
            "sglang.kernels.ops.speculative.eagle",
            "sglang.kernels.ops.speculative.cache_locs",
            "sglang.kernels.ops.kvcache.cache_move",
            "sglang.srt.mem_cache.allocation",
            "sglang.srt.speculative.eagle_worker_v2",
            "sglang.srt.models.deepseek_v2",
            "sglang.srt.models.llama_eagle3",
        ]:
            importlib.import_module(name)
        from sglang.kernels.ops.speculative import eagle, spec_tree
        from sglang.srt.utils import is_cpu
        assert is_cpu() and sgl_kernel.SGLANG_EAGLE3_REFERENCE
        assert eagle.fill_bonus_tokens_cpu is torch.ops.sgl_kernel.fill_bonus_tokens_cpu
        assert spec_tree.sgl_verify_tree_greedy_cpu is sgl_kernel.verify_tree_greedy_cpu
        print("IMPORTS-OK")
    """
    pytest.importorskip("sglang")
    result = _run(script, _env(cpu_engine=True))
    assert "IMPORTS-OK" in result.stdout, result.stderr[-4000:]


_CALL_SITES_SCRIPT = """
import types

import torch
import torch.nn.functional as F

from sglang.kernels.ops.kvcache.cache_move import copy_all_layer_kv_cache_func
from sglang.kernels.ops.speculative.cache_locs import (
    assign_draft_cache_locs_contiguous_func,
    assign_extend_cache_locs_func,
    fill_front_out_cache_loc_func,
)
from sglang.kernels.ops.speculative.eagle import (
    fill_accept_out_cache_loc_func,
    fill_bonus_tokens_func,
)
from sglang.srt.layers.attention.intel_amx_backend import IntelAMXAttnBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.allocation import assign_req_to_token_pool_func
from sglang.srt.speculative.eagle_utils import (
    build_tree_kernel_efficient,
    default_tree_mask_mode,
    verify_tree_greedy_func,
)

# --- intel_amx backend, MLA-shaped layer: its own forward_extend / forward_decode calls.
torch.manual_seed(0)
H, D, DV = 4, 40, 32  # qk = 32 latent + 8 rope, v = the 32 latent columns
kv = torch.zeros(64, 1, D)


class Pool:
    def get_key_buffer(self, layer_id):
        return kv

    def get_value_buffer(self, layer_id):
        return kv[..., :DV]

    def set_kv_buffer(self, layer, loc, k, v, **kw):
        kv[loc.loc] = k


req_to_token = torch.zeros(4, 32, dtype=torch.int32)
backend = IntelAMXAttnBackend.__new__(IntelAMXAttnBackend)  # no ModelRunner needed
backend.__dict__.update(
    req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token),
    token_to_kv_pool=Pool(), use_mla=True, use_sliding_window_kv_pool=False,
    swa_out_cache_loc=None, draft_decode_metadata=None, num_head=H, v_head_dim=DV,
    num_kv_splits=8, _attn_logits_buffers={},
    decode_attention_fwd=torch.ops.sgl_kernel.decode_attention_cpu,
    extend_attention_fwd=torch.ops.sgl_kernel.extend_attention_cpu,
)
layer = types.SimpleNamespace(
    tp_q_head_num=H, qk_head_dim=D, v_head_dim=DV, layer_id=0, is_cross_attention=False,
    k_scale_float=None, v_scale_float=None, scaling=0.2, logit_cap=0.0,
    sliding_window_size=-1, attn_type=AttentionType.DECODER,
)


def sdpa(q, k, v, mask):
    q, k, v = q.transpose(0, 1), k.expand(-1, H, -1).transpose(0, 1), v.transpose(0, 1)
    out = F.scaled_dot_product_attention(q, k, v.expand(H, -1, -1), attn_mask=mask, scale=0.2)
    return out.transpose(0, 1)


req_to_token[1, :5] = torch.arange(10, 15)
req_to_token[2, :3] = torch.arange(20, 23)
batch = types.SimpleNamespace(
    out_cache_loc=torch.tensor([10, 11, 12, 13, 14, 20, 21, 22]),
    req_pool_indices=torch.tensor([1, 2]), encoder_lens=None, seq_lens=torch.tensor([5, 3]),
)
starts = torch.tensor([0, 5], dtype=torch.int32)
backend.extend_metadata = (batch.seq_lens, torch.tensor([5, 3], dtype=torch.int32), starts, None)
backend.forward_metadata = (None, 5)
q, k = torch.randn(8, H, D), torch.randn(8, 1, D)
o = backend.forward_extend(q, k, k[..., :DV].clone(), layer, batch).view(8, H, DV)
causal = torch.ones(5, 5, dtype=torch.bool).tril()
torch.testing.assert_close(o[:5], sdpa(q[:5], k[:5], k[:5, :, :DV], causal))

req_to_token[1, 5], req_to_token[2, 3] = 15, 23
batch = types.SimpleNamespace(
    out_cache_loc=torch.tensor([15, 23]), req_pool_indices=torch.tensor([1, 2]),
    encoder_lens=None, seq_lens=torch.tensor([6, 4]),
)
backend.forward_metadata = (torch.zeros(2, H, 8, DV + 1), None)
q, k = torch.randn(2, H, D), torch.randn(2, 1, D)
o = backend.forward_decode(q, k, k[..., :DV].clone(), layer, batch).view(2, H, DV)
assert torch.equal(kv[15], k[0]) and torch.equal(kv[23], k[1])  # stored by the kernel
everything = torch.ones(1, 6, dtype=torch.bool)
torch.testing.assert_close(o[:1], sdpa(q[:1], kv[10:16], kv[10:16, :, :DV], everything))

# --- slot bookkeeping through SGLang's own wrappers, with the dtypes its callers use.
req_to_token = torch.zeros(3, 16, dtype=torch.int32)
rows, cur, nxt = torch.tensor([2, 0]), torch.tensor([3, 1]), torch.tensor([7, 4])
assign_req_to_token_pool_func(rows, req_to_token, cur, nxt, torch.arange(100, 107), 2)
assert req_to_token[2, 3:7].tolist() == [100, 101, 102, 103]
assert req_to_token[0, 1:4].tolist() == [104, 105, 106]
out = assign_extend_cache_locs_func(rows, req_to_token, cur, nxt, 2, 4, "cpu")
assert out.dtype == torch.int64 and out[:7].tolist() == list(range(100, 107))
draft = torch.empty(8, dtype=torch.int64)
assign_draft_cache_locs_contiguous_func(rows, req_to_token, cur, draft, 2, 2)
assert draft.tolist() == [100, 101, 102, 103, 104, 105, 106, 0]

# --- the EAGLE tree round trip of the hand-made topk=2 trees.
mode = default_tree_mask_mode()
assert int(mode) == 1  # QLEN_ONLY on CPU
mask, positions, index, next_token, next_sibling, tokens = build_tree_kernel_efficient(
    torch.tensor([50, 60]), torch.tensor([[-1, 0, 1], [-1, 0, 1]]),
    torch.tensor([[0, 1, 3], [0, 2, 3]]), torch.tensor([[11, 12, 13], [21, 22, 23]]),
    torch.tensor([7, 3]), 10, 2, 2, 4, mode,
)
assert positions.tolist() == [7, 8, 8, 9, 3, 4, 5, 5] and mask.numel() == 32
predict, accept_index, accepted = verify_tree_greedy_func(
    predicts=torch.zeros(8, dtype=torch.int32),
    accept_index=torch.full((2, 3), -1, dtype=torch.int32),
    accept_token_num=torch.empty(2, dtype=torch.int32),
    candidates=tokens.view(2, 4), retrieve_index=index, retrieve_next_token=next_token,
    retrieve_next_sibling=next_sibling,
    target_predict=torch.tensor([[12, 98, 99, 97], [21, 23, 96, 95]]), topk=2,
)
assert accepted.tolist() == [1, 2] and accept_index.tolist() == [[0, 2, -1], [4, 5, 7]]
bonus = torch.empty(2, dtype=torch.int32)
fill_bonus_tokens_func(predict[accept_index], accepted + 1, bonus, 3, 2)
assert bonus.tolist() == [99, 95]
out_cache_loc = torch.arange(200, 208)
accept_loc, front = torch.zeros(6, dtype=torch.int64), torch.zeros(6, dtype=torch.int64)
fill_accept_out_cache_loc_func(accept_index, out_cache_loc, accept_loc, 6)
assert accept_loc.tolist() == [200, 202, 204, 205, 207, 0]
fill_front_out_cache_loc_func(accepted + 1, out_cache_loc, front)
assert front.tolist() == [200, 201, 204, 205, 206, 0]

# --- KV slot moves through the pointer table, as the memory pool builds it.
buffers = [torch.randn(8, 2, 4), torch.randn(8, 3)]
ptrs = torch.tensor([x.data_ptr() for x in buffers], dtype=torch.uint64)
strides = torch.tensor([x.stride(0) * x.dtype.itemsize for x in buffers])
want = [x.clone() for x in buffers]
for w in want:
    w[torch.tensor([1, 2])] = w[torch.tensor([5, 6])]
tgt, src = torch.tensor([1, 2, 0, 0]), torch.tensor([5, 6, 0, 0])
copy_all_layer_kv_cache_func(ptrs, strides, tgt, src, 2, 2, {})
assert all(torch.equal(a, b) for a, b in zip(buffers, want))
print("CALL-SITES-OK")
"""


@pytest.mark.sglang
def test_sglang_call_sites_bind_to_the_reference_ops():
    """SGLang's own wrappers and intel_amx backend methods, called as they are in a server."""
    pytest.importorskip("sglang")
    result = _run(_CALL_SITES_SCRIPT, _env(cpu_engine=True))
    assert "CALL-SITES-OK" in result.stdout, result.stderr[-4000:]


def test_refuses_to_shadow_an_importable_sgl_kernel(tmp_path):
    real, broken = tmp_path / "real" / "sgl_kernel", tmp_path / "broken" / "sgl_kernel"
    real.mkdir(parents=True)
    broken.mkdir(parents=True)
    (real / "__init__.py").write_text("VALUE = 1\n")
    (broken / "__init__.py").write_text("raise OSError('libcuda.so.1: cannot open')\n")
    script = "import sgl_kernel; print('REFERENCE', sgl_kernel.SGLANG_EAGLE3_REFERENCE)"

    env = _env(cpu_engine=False)
    env["PYTHONPATH"] += os.pathsep + str(real.parent)
    shadowed = _run(script, env)
    assert shadowed.returncode != 0 and "must not shadow" in shadowed.stderr

    env = _env(cpu_engine=False)
    env["PYTHONPATH"] += os.pathsep + str(broken.parent)
    unusable = _run(script, env)
    assert "REFERENCE True" in unusable.stdout, unusable.stderr[-4000:]


@pytest.mark.sglang
def test_tree_ops_match_sglang_triton_kernels_interpreted():
    """Random EAGLE-shaped trees through both the reference ops and SGLang's Triton kernels."""
    pytest.importorskip("triton")
    pytest.importorskip("sglang")
    script = """
        import torch, sgl_kernel
        from sglang.kernels.ops.speculative.spec_tree import (
            sgl_build_tree_kernel_triton, verify_tree_greedy_triton)

        def draft_tree(gen, bs, topk, steps, n):
            # As EAGLE's draft: cumulative scores, topk expansions per step, top n - 1 overall.
            parents, selected = [], []
            for _ in range(bs):
                cur = torch.rand(topk, generator=gen)
                flat, plist = list(cur), [-1, *range(topk)]
                for i in range(1, steps):
                    expand = (cur[:, None] * torch.rand(topk, topk, generator=gen)).flatten()
                    flat += list(expand)
                    chosen = expand.topk(topk).indices
                    cur = expand[chosen]
                    if i < steps - 1:
                        plist += (chosen + topk * topk * (i - 1) + topk).tolist()
                parents.append(plist)
                selected.append(sorted(torch.tensor(flat).topk(n - 1).indices.tolist()))
            return torch.tensor(parents).view(bs, -1), torch.tensor(selected)

        def build(fn, parents, selected, seq_lens, topk, steps, n, mode):
            bs = len(seq_lens)
            size = bs * n * n if mode == 1 else int(seq_lens.sum()) * n + bs * n * n
            outs = (torch.ones(size, dtype=torch.bool), torch.zeros(bs * n, dtype=torch.long),
                    *torch.full((3, bs, n), -1, dtype=torch.long))
            fn(parents, selected, seq_lens, *outs, topk, steps, n, mode)
            return outs

        gen = torch.Generator().manual_seed(0)
        cases = 0
        for topk, steps, n in [(1, 3, 4), (2, 3, 5), (2, 4, 8), (3, 3, 6), (4, 2, 5)]:
            for mode in (0, 1):
                bs = 3
                parents, selected = draft_tree(gen, bs, topk, steps, n)
                seq_lens = torch.randint(1, 9, (bs,), generator=gen)
                ours = build(sgl_kernel.build_tree_kernel_efficient_cpu,
                             parents, selected, seq_lens, topk, steps, n, mode)
                theirs = build(sgl_build_tree_kernel_triton,
                               parents, selected, seq_lens, topk, steps, n, mode)
                assert (ours[1] >= seq_lens.repeat_interleave(n)).all()  # both really ran
                for a, b in zip(ours, theirs):
                    assert torch.equal(a, b), (topk, steps, n, mode, a, b)
                candidates = torch.randint(0, 4, (bs, n), generator=gen)
                target = torch.randint(0, 4, (bs, n), generator=gen)
                results = []
                for fn in (sgl_kernel.verify_tree_greedy_cpu, verify_tree_greedy_triton):
                    outs = (torch.zeros(bs * n, dtype=torch.int32),
                            torch.full((bs, steps + 1), -1, dtype=torch.int32),
                            torch.zeros(bs, dtype=torch.int32))
                    fn(*outs, candidates, *ours[2:], target)
                    results.append(outs)
                for a, b in zip(*results):
                    assert torch.equal(a, b), (topk, steps, n, a, b)
                cases += 1
        print("TRITON-MATCH", cases)
    """
    result = _run(script, _env(cpu_engine=False, TRITON_INTERPRET="1"))
    assert "TRITON-MATCH 10" in result.stdout, result.stderr[-4000:]
