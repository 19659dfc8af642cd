"""The doctor's model of SGLang's draft tree (topk > 1) and its greedy verify."""

from __future__ import annotations

import functools

import pytest
import torch

from sglang_eagle3.doctor.draft_tree import _walk, check_tree
from sglang_eagle3.errors import WiringError


def test_walk_follows_chosen_children_of_the_accepted_node():
    # one row (t = 0), nodes: depth 1: a=5 (0), b=6 (1); depth 2: children of a: 7 (2), 8 (3);
    # of b: 9 (4), 7 (5); node 3 not chosen
    tok = torch.tensor([[5, 6, 7, 8, 9, 7]])
    par = torch.tensor([[-1, -1, 0, 0, 1, 1]])
    chosen = torch.tensor([[True, True, True, False, True, True]])
    depth_of = torch.tensor([1, 1, 2, 2, 2, 2])
    ids = torch.tensor([0, 1, 6, 7, 2])  # data: after position 0 come 1, then 6, 7
    mask = torch.ones(5, dtype=torch.bool)
    # truth at positions 1, 2: 6 then 7 -> b (node 1), then its child 7 (node 5)
    truth = torch.tensor([0, 6, 7, -1, -1])
    got = _walk(tok, par, chosen[None], depth_of, ids, truth, mask, steps=2)[0]
    assert got.depth.tolist() == [2] and got.hit1.tolist() == [True]
    assert got.correct == [1, 1] and got.total == [1, 1]
    # the same truth, but node 5 not chosen: depth 2 finds no child of b
    chosen[0, 5] = False
    got = _walk(tok, par, chosen[None], depth_of, ids, truth, mask, steps=2)[0]
    assert got.depth.tolist() == [1] and got.correct == [1, 0]
    # truth 8 at depth 2 belongs to a (not accepted) and is not chosen anyway
    truth = torch.tensor([0, 5, 8, -1, -1])
    got = _walk(tok, par, chosen[None], depth_of, ids, truth, mask, steps=2)[0]
    assert got.depth.tolist() == [1]


@pytest.mark.parametrize(
    ("steps", "topk", "tokens", "said"),
    [(3, 2, 12, "has 4 .. 11 draft tokens"), (3, 1, 1, "has 2 .. 4 draft tokens"),
     (3, 2, 3, "has 4 .. 11 draft tokens"),
     (0, 2, 3, "at least 1 step and topk 1"), (3, 0, 3, "at least 1 step and topk 1")],
)  # fmt: skip
def test_impossible_tree_shapes_are_refused(steps, topk, tokens, said):
    with pytest.raises(WiringError, match=said) as err:
        check_tree(steps, topk, tokens)
    assert err.value.fix


@functools.cache
def _score(tree, max_samples=4):  # the chain is scored once for both tests below
    from sglang_eagle3.data.train_data import TrainData
    from sglang_eagle3.doctor.candidates import Candidate
    from sglang_eagle3.doctor.draft_forward import load_draft
    from sglang_eagle3.doctor.evaluate import Result, score_sample, truth_tokens
    from sglang_eagle3.doctor.target import VerifierHead
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    d = tiny_drafter()
    draft = load_draft(d.draft_dir, target_dir=d.target_dir)
    head = VerifierHead(d.target_dir)
    result = Result(Candidate("declared", None, (0, 3, 6), ("test",)))
    for i, sample in enumerate(TrainData(d.eval_data)):
        if i == max_samples:
            break
        truth = truth_tokens(sample, head)
        if tree == "forced-chain":  # the tree code with topk 1
            from sglang_eagle3.doctor.evaluate import _score_tree_sample

            result.correct, result.total = result.correct or [0] * 3, result.total or [0] * 3
            _score_tree_sample(draft, sample, (0, 3, 6), truth, 3, result, (1, 4))
        else:
            score_sample(draft, sample, (0, 3, 6), truth, 3, result, tree)
    return result


@pytest.mark.sglang
@pytest.mark.slow
def test_tree_of_topk_1_is_exactly_the_chain():
    chain, tree = _score(None), _score("forced-chain")
    assert (chain.correct, chain.total) == (tree.correct, tree.total)
    assert (chain.walk_verifies, chain.walk_accepted) == (tree.walk_verifies, tree.walk_accepted)
    assert torch.equal(chain.step1_hits(), tree.step1_hits())
    assert chain.total[0] > 100


@pytest.mark.sglang
@pytest.mark.slow
def test_topk_2_tree_contains_the_chain_at_depth_1():
    chain, tree = _score(None), _score((2, 6))
    assert tree.total[0] == chain.total[0]
    # the top-1 token always scores highest, so the tree holds it: depth 1 accepts >= chain
    assert tree.correct[0] >= chain.correct[0]
    assert (tree.step1_hits() | ~chain.step1_hits()).all()
    assert tree.served_accept_length > 1
