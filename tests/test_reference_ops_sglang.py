"""The reference `sgl_kernel` with real SGLang, in subprocesses (marked `sglang`): SGLang's CPU
engine imports with it, its own call sites bind to it, and its Triton tree kernels (interpreted)
agree with it on random EAGLE-shaped trees."""

from __future__ import annotations

import pytest
from reference_ops_support import _env, _run


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


@pytest.mark.sglang
def test_fused_qk_rmsnorm_matches_minimax_m2s_triton_pair_interpreted():
    """MiniMax-M2's own q/k norm kernels (sum of squares, then apply), one rank."""
    pytest.importorskip("triton")
    pytest.importorskip("sglang")
    script = """
        import torch, triton, sgl_kernel
        from sglang.srt.models.minimax_m2 import (
            rmsnorm_apply_kernel_serial, rmsnorm_sumsq_kernel_serial)

        gen = torch.Generator().manual_seed(0)
        worst = 0.0
        for b, dq, dk in [(1, 64, 32), (5, 96, 48), (7, 128, 16)]:
            q, k = torch.randn(b, dq, generator=gen), torch.randn(b, dk, generator=gen) * 3
            wq, wk = torch.rand(dq, generator=gen) + 0.5, torch.rand(dk, generator=gen) + 0.5
            bq, bk = triton.next_power_of_2(dq), triton.next_power_of_2(dk)
            sum_sq = torch.empty((2 * b + 3) // 4 * 4)
            rmsnorm_sumsq_kernel_serial[(b,)](q, k, q.stride(0), k.stride(0), sum_sq, b, dq, dk,
                                              bq, bk)
            oq, ok = torch.empty_like(q), torch.empty_like(k)
            rmsnorm_apply_kernel_serial[(b,)](q, k, wq, wk, sum_sq, oq, ok, b, dq, dk,
                                              q.stride(0), k.stride(0), 1, 1e-6, bq, bk)
            rq, rk = sgl_kernel.fused_qk_rmsnorm_cpu(q, k, wq, wk, 1e-6)
            assert not torch.allclose(rq, q)  # it normalised
            worst = max(worst, (rq - oq).abs().max().item(), (rk - ok).abs().max().item())
        assert worst < 1e-5, worst
        print("TRITON-MATCH", worst)
    """
    result = _run(script, _env(cpu_engine=False, TRITON_INTERPRET="1"))
    assert "TRITON-MATCH" in result.stdout, result.stderr[-4000:]
