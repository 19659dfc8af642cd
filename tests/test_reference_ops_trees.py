"""The reference `sgl_kernel` of the CPU harness: slot bookkeeping, the EAGLE tree ops on
hand-computed trees, and the module itself (exports, stubs, refusing to shadow a real kernel)."""

from __future__ import annotations

import os

import pytest
import torch
from reference_ops_support import (
    STUB_MESSAGE,
    TREE_PARENT_LIST,
    TREE_QLEN_MASK,
    TREE_SELECTED,
    _env,
    _run,
    reference_sgl_kernel,
)


@pytest.fixture(scope="module")
def sk():
    """The reference sgl_kernel module, imported from the shim directory, then forgotten."""
    yield from reference_sgl_kernel()


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
# Module behaviour and isolation


def test_exports_are_the_registered_ops(sk, figures):
    figures.record("ops the reference sgl_kernel implements", len(sk.OP_NAMES))
    assert len(sk.OP_NAMES) == 12  # 11 for DeepSeek + EAGLE-3, 1 for MiniMax-M2
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
