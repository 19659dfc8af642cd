"""Score SGLang 0.5.23's EAGLE draft tree (``--speculative-eagle-topk`` > 1) as its verify
accepts it, for every position of a sequence at once.

SGLang's tree (``spec_utils.select_top_k_tokens``, ``eagle_utils.organize_draft_results``):
  depth 1: the top-k tokens of the first draft step, score = their probability;
  step s >= 2: each of the k beams is fed its token and its parent's output hidden state and
    proposes its top-k children, score = parent score x child probability; all k*k children
    are candidates, the best k become the next beams;
  the tree: the num_draft_tokens - 1 best-scored candidates (a child never outscores its
  parent, so a chosen node's ancestors are chosen too).
Greedy verify walks from the root: at depth d it accepts the chosen child of the last
accepted node whose token is the target's token, and stops when there is none.
A beam attends to the context causally and to its own branch's earlier draft steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sglang_eagle3.doctor.draft_attention import LayerCache
from sglang_eagle3.doctor.draft_forward import Eagle3Draft
from sglang_eagle3.draft_tree_size import max_draft_tokens
from sglang_eagle3.errors import WiringError


@dataclass
class TreeScore:
    first: torch.Tensor  # [T] bool: rows whose depth-1 truth is known (scored)
    depth: torch.Tensor  # [T] long: drafts the verify at that row accepts
    hit1: torch.Tensor  # [T] bool: depth 1 accepted
    correct: list[int]  # per depth: rows accepting it
    total: list[int]  # per depth: rows that reached it with a known truth


def check_tree(steps: int, topk: int, draft_tokens: int) -> None:
    """The doctor's tree flags, under the same bound the launcher puts on SGLang's."""
    if steps < 1 or topk < 1:
        raise WiringError(
            f"--steps {steps} --topk {topk}: a draft tree has at least 1 step and topk 1",
            fix="give the server's own --speculative-num-steps and --speculative-eagle-topk "
            "(both 1 or more)",
        )
    most = max_draft_tokens(steps, topk)
    # a tree keeps steps + 1 accepted slots: fewer crashes SGLang (launch/spec_flags.py)
    least = steps + 1 if topk > 1 else 2
    if not least <= draft_tokens <= most:
        raise WiringError(
            f"--steps {steps} --topk {topk} --draft-tokens {draft_tokens}: a tree of "
            f"{steps} steps and topk {topk} that SGLang 0.5.23 runs has {least} .. {most} draft "
            "tokens (root included)",
            fix=f"give --draft-tokens from {least} to {most} (the server's "
            "--speculative-num-draft-tokens)",
        )


@dataclass
class DraftTree:
    """Every candidate node SGLang's tree search scores for each row, over ``steps`` steps
    (a search of fewer steps makes the same first levels: beams depend on earlier steps only)."""

    tok: torch.Tensor  # [T, nodes] target token ids
    par: torch.Tensor  # [T, nodes] parent node (-1: the root's children)
    score: torch.Tensor  # [T, nodes] path probability
    depth_of: torch.Tensor  # [nodes] depth of each node (1 .. steps)


@torch.inference_mode()
def build_tree(
    draft: Eagle3Draft,
    taps: torch.Tensor,  # [T, num_aux * target_hidden]
    ids: torch.Tensor,  # [T + 1] the sample's target ids; row t is fed ids[t + 1]
    *,
    steps: int,
    topk: int,
) -> DraftTree:
    k, n_rows, dev = topk, taps.shape[0], draft.device
    rows = torch.arange(n_rows, device=dev)
    caches = [LayerCache() for _ in range(draft.config.num_layers)]
    hidden = draft.fc_input(taps.to(dev, draft.dtype))
    logits, hidden = draft.step(ids[1:].to(dev), hidden, rows, 0, caches)
    prob, idx = logits.float().softmax(-1).topk(k, dim=-1)  # [T, k]
    beam_tok, beam_score = draft.to_target_ids(idx), prob
    beam_node = torch.arange(k, device=dev).expand(n_rows, k)
    beam_hidden = hidden[:, None].expand(n_rows, k, hidden.shape[-1])
    reads: list[torch.Tensor] = []  # per later step: [T, k] slot of each beam's ancestor
    tokens, scores, parents = [beam_tok], [beam_score], [torch.full_like(beam_tok, -1)]
    depth_of = [1] * k
    for s in range(1, steps):
        slots = torch.arange(n_rows * k, device=dev)  # beam j of row t -> slot t*k + j
        tree = (slots, n_rows * k, [r.flatten() for r in reads] + [slots])
        logits, out = draft.step(
            beam_tok.flatten(), beam_hidden.reshape(n_rows * k, -1),
            rows.repeat_interleave(k), s, caches, tree,
        )  # fmt: skip
        prob, idx = logits.float().softmax(-1).topk(k, dim=-1)  # [T*k, k]
        child = draft.to_target_ids(idx).view(n_rows, k * k)
        score = (beam_score[:, :, None] * prob.view(n_rows, k, k)).view(n_rows, k * k)
        tokens.append(child)
        scores.append(score)
        parents.append(beam_node.repeat_interleave(k, dim=1))
        best, pick = score.topk(k, dim=-1)  # the next beams
        parent = pick // k
        reads = [r.gather(1, parent) for r in reads] + [rows[:, None] * k + parent]
        beam_node = len(depth_of) + pick
        depth_of += [s + 1] * (k * k)
        beam_tok, beam_score = child.gather(1, pick), best
        out = out.view(n_rows, k, -1)
        beam_hidden = out.gather(1, parent[:, :, None].expand(-1, -1, out.shape[-1]))
    return DraftTree(torch.cat(tokens, 1).cpu(), torch.cat(parents, 1).cpu(),
                     torch.cat(scores, 1).cpu(), torch.tensor(depth_of))  # fmt: skip


def walk_tree(
    tree: DraftTree, ids, truth, mask, *, steps: int, draft_tokens: int | list[int]
) -> TreeScore | list[TreeScore]:
    """Greedy verify of the tree SGLang keeps for ``steps`` and ``draft_tokens``: the
    ``draft_tokens - 1`` best-scored nodes of depth <= steps. A list of draft-token counts is
    walked in one pass (their kept sets are nested) and gives one score each."""
    many = isinstance(draft_tokens, list)
    score = tree.score.masked_fill((tree.depth_of > steps)[None], -1.0)
    rank = score.argsort(dim=-1, descending=True).argsort(dim=-1)  # [T, nodes] 0 = best
    counts = torch.tensor(draft_tokens if many else [draft_tokens])
    chosen = rank[None] < (counts - 1)[:, None, None]  # [N, T, nodes]
    got = _walk(tree.tok, tree.par, chosen, tree.depth_of, ids, truth, mask, steps)
    return got if many else got[0]


def score_tree(
    draft: Eagle3Draft,
    taps: torch.Tensor,  # [T, num_aux * target_hidden]
    ids: torch.Tensor,  # [T + 1] the sample's target ids; row t is fed ids[t + 1]
    truth: torch.Tensor,  # [T + 1] the target's token at each position (-1: unknown)
    mask: torch.Tensor,  # [T + 1] bool: positions scored
    *,
    steps: int,
    topk: int,
    draft_tokens: int,
) -> TreeScore:
    check_tree(steps, topk, draft_tokens)
    tree = build_tree(draft, taps, ids, steps=steps, topk=topk)
    return walk_tree(tree, ids, truth, mask, steps=steps, draft_tokens=draft_tokens)


def _walk(tok, par, chosen, depth_of, ids, truth, mask, steps: int) -> list[TreeScore]:
    """Greedy verify from every row, for each kept set ``chosen`` [N, T, nodes]; a branch goes
    on only where its token is also the data's next token (so the next truth is computed on
    the context the data holds)."""
    n_sets, n_rows, seq = chosen.shape[0], tok.shape[0], ids.shape[0]
    rows = torch.arange(n_rows)
    cur = torch.full((n_sets, n_rows), -1)
    alive = torch.ones(n_sets, n_rows, dtype=torch.bool)
    depth = torch.zeros(n_sets, n_rows, dtype=torch.long)
    first = hit1 = torch.zeros(n_sets, n_rows, dtype=torch.bool)
    correct, total = [], []
    for d in range(1, steps + 1):
        u = rows + d  # position of the depth-d token
        uc = u.clamp(max=seq - 1)
        want = truth[uc]
        valid = (u < seq) & mask[uc].bool() & (want >= 0)
        here = alive & valid[None]
        match = ((depth_of == d)[None] & (tok == want[:, None]))[None] & chosen
        match &= par[None] == cur[..., None]
        found = match.any(-1) & here
        if d == 1:
            first, hit1 = valid.clone(), found.clone()
        total.append(here.sum(-1).tolist())
        correct.append(found.sum(-1).tolist())
        depth += found.long()
        cur = torch.where(found, match.float().argmax(-1), cur)
        data_next = torch.where(u + 1 < seq, ids[(u + 1).clamp(max=seq - 1)], -1)
        alive = found & (want == data_next)[None]
    return [
        TreeScore(first, depth[i], hit1[i], [c[i] for c in correct], [t[i] for t in total])
        for i in range(n_sets)
    ]
