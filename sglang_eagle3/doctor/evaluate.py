"""Score candidate layouts: how often does the draft guess the target's next token?

For a candidate (which stored taps feed the fc, in which order), each sample gives T = seq-1
draft positions: position t is fed the taps of token t and the id of token t+1, as
speculators' ``shift_batch`` pairs them. Step k at t predicts token t+1+k; the truth is the
target's token there: ``argmax lm_head(norm(verifier tap))`` at position t+k when the target's
head is given (what speculators trains against), else the data's own token t+k+1.

Step k >= 2 is fed the draft's own previous token (through d2t) and hidden state, as chain
drafting does when serving. It is scored only where every earlier step was right and the fed
tokens are the data's tokens (so the target context is the one the data holds): p_k is the
conditional acceptance rate, and the chain's expected accept length is 1 + p1 + p1*p2 + ...
Only positions whose loss mask is set count, as in speculators' metrics.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import torch

from sglang_eagle3.data.train_data import Sample
from sglang_eagle3.doctor.candidates import Candidate
from sglang_eagle3.doctor.draft_forward import Eagle3Draft
from sglang_eagle3.errors import WiringError


@dataclass
class Result:
    candidate: Candidate
    correct: list[int] = field(default_factory=list)  # per step
    total: list[int] = field(default_factory=list)  # per step
    hits: list[torch.Tensor] = field(default_factory=list)  # step 1, per sample: [valid] bool
    logp: list[torch.Tensor] = field(default_factory=list)  # step 1: log p(truth), like hits
    walk_verifies: int = 0  # replay of serving: verify steps taken along the samples
    walk_accepted: int = 0  # drafts those verify steps accepted

    def step1_hits(self) -> torch.Tensor:
        """Step-1 hit per scored position, in data order (the same positions for every
        candidate, so two candidates can be compared pairwise)."""
        return torch.cat(self.hits) if self.hits else torch.zeros(0, dtype=torch.bool)

    def step1_logp(self) -> torch.Tensor:
        """Step-1 log-probability of the target's token per scored position (chain only)."""
        return torch.cat(self.logp) if self.logp else torch.zeros(0)

    @property
    def mean_logp(self) -> float | None:
        """Mean step-1 log p(target's token): finer than top-1, since a wrong tap lowers the
        draft's confidence well before it flips the argmax."""
        lp = self.step1_logp()
        lp = lp[torch.isfinite(lp)]
        return float(lp.mean()) if lp.numel() else None

    def rates(self) -> list[float | None]:
        return [c / t if t else None for c, t in zip(self.correct, self.total, strict=True)]

    @property
    def accuracy(self) -> float | None:
        """First-step top-1 accuracy."""
        return self.rates()[0] if self.total else None

    @property
    def served_accept_length(self) -> float | None:
        """Accepted tokens per verify step when serving walks the samples: each verify step
        starts where the previous one ended (after its accepted drafts and bonus token), so
        positions right after a failed draft count as often as serving meets them."""
        if self.walk_verifies == 0:
            return None
        return 1 + self.walk_accepted / self.walk_verifies

    def accept_length(self, steps: int | None = None) -> float | None:
        """1 + p1 + p1*p2 + ... over the first ``steps`` measured steps (chain drafting)."""
        rates = self.rates()[:steps]
        if not rates or rates[0] is None:
            return None
        length, prod = 1.0, 1.0
        for p in rates:
            if p is None:
                break
            prod *= p
            length += prod
        return length


def truth_tokens(
    sample: Sample, head: Callable[[torch.Tensor], torch.Tensor] | None
) -> torch.Tensor:
    """[seq] target ids: truth[u] = the target's token at position u+1 (-1: unknown)."""
    ids = sample.input_ids
    if sample.truth is not None:
        return sample.truth
    if head is not None:
        return head(sample.hidden_states[:, -1])  # verifier tap -> target's greedy token
    return torch.cat([ids[1:], ids.new_full((1,), -1)])


def score_sample(
    draft: Eagle3Draft,
    sample: Sample,
    indices: Sequence[int],
    truth: torch.Tensor,  # [seq]
    steps: int,
    result: Result,
    tree: tuple[int, int] | None = None,  # (topk, draft tokens) when SGLang drafts a tree
) -> None:
    """Add one sample's counts for one candidate to ``result``."""
    ids, mask = sample.input_ids, sample.loss_mask
    seq = ids.shape[0]
    while len(result.total) < steps:
        result.correct.append(0)
        result.total.append(0)
    if seq < 2:
        return
    if tree is not None and tree[0] > 1:
        _score_tree_sample(draft, sample, indices, truth, steps, result, tree)
        return

    depth = torch.zeros(seq - 1, dtype=torch.long)  # drafts a chain from row t gets accepted
    first = torch.zeros(seq - 1, dtype=torch.bool)  # rows whose step 1 is scored

    def keep(step: int, out) -> torch.Tensor:  # out.rows: the positions t this step ran for
        u = out.rows.cpu() + step + 1  # truth (and loss-mask) index of step k = step + 1
        inside = u < seq
        uc = u.clamp(max=seq - 1)
        truth_k = truth[uc]
        valid = inside & mask[uc] & (truth_k >= 0)
        pred = out.target_ids.cpu()
        hit = pred == truth_k
        result.total[step] += int(valid.sum())
        result.correct[step] += int((valid & hit).sum())
        if step == 0:
            result.hits.append(hit[valid])
            lp = draft.truth_logprob(out.logits[valid.to(out.logits.device)], truth_k[valid])
            result.logp.append(lp.cpu())
            first[out.rows.cpu()[valid]] = True
        depth[out.rows.cpu()[valid & hit]] += 1
        # go on only where this guess was right and is the data's next token, so the next
        # step sees the context the data (and its truth) was computed for
        data_next = torch.where(u + 1 < seq, ids[(u + 1).clamp(max=seq - 1)], -1)
        return valid & hit & (pred == data_next)

    draft.forward(fc_taps(draft, sample, indices), ids[1:], steps=steps, keep=keep)
    verifies, accepted = serving_walk(walked_rows(first, sample).tolist(), depth.tolist())
    result.walk_verifies += verifies
    result.walk_accepted += accepted


def fc_taps(draft: Eagle3Draft, sample: Sample, indices: Sequence[int]) -> torch.Tensor:
    hs = sample.hidden_states
    if indices:
        return hs[:-1, list(indices)].flatten(1)  # [T, K * hidden]
    return hs.new_zeros(hs.shape[0] - 1, draft.config.num_aux * hs.shape[-1])  # the floor


def _score_tree_sample(draft, sample, indices, truth, steps, result, tree) -> None:
    from sglang_eagle3.doctor.draft_tree import score_tree

    taps = fc_taps(draft, sample, indices)
    ids, mask = sample.input_ids, sample.loss_mask
    got = score_tree(draft, taps, ids, truth, mask, steps=steps, topk=tree[0],
                     draft_tokens=tree[1])  # fmt: skip
    for d, (c, t) in enumerate(zip(got.correct, got.total, strict=True)):
        result.correct[d] += c
        result.total[d] += t
    result.hits.append(got.hit1[got.first])
    verifies, accepted = serving_walk(walked_rows(got.first, sample).tolist(), got.depth.tolist())
    result.walk_verifies += verifies
    result.walk_accepted += accepted


def walked_rows(first: torch.Tensor, sample: Sample) -> torch.Tensor:
    """Rows whose verify a server's walk meets: [seq - 1] bool (row t's truth index is t+1)."""
    if sample.walk_mask is None:
        return first
    return first & sample.walk_mask[1 : first.shape[0] + 1]


def serving_walk(scored: Sequence[bool], depth: Sequence[int]) -> tuple[int, int]:
    """(verify steps, accepted drafts) of a server walking one sequence: a verify step at
    row t accepts ``depth[t]`` drafts, and the next one starts at row t + depth[t] + 1 (the
    accepted drafts and the bonus token are now context). Rows not ``scored`` (loss mask,
    unknown truth) are stepped over without a verify."""
    t = verifies = accepted = 0
    while t < len(scored):
        if not scored[t]:
            t += 1
            continue
        verifies += 1
        accepted += int(depth[t])
        t += int(depth[t]) + 1
    return verifies, accepted


def first_positions(sample: Sample, keep: int) -> Sample:
    """The first ``keep`` positions of a sample."""
    cut = {k: getattr(sample, k) for k in ("truth", "walk_mask")}
    return replace(
        sample,
        hidden_states=sample.hidden_states[:keep],
        input_ids=sample.input_ids[:keep],
        loss_mask=sample.loss_mask[:keep],
        **{k: None if v is None else v[:keep] for k, v in cut.items()},
    )


def progress_bar(total: int, progress: bool | None, unit: str = "tok"):
    """A tqdm bar on stderr; ``progress`` None shows it only when stderr is a terminal."""
    from tqdm import tqdm

    disable = None if progress is None else not progress
    return tqdm(total=total, file=sys.stderr, disable=disable, unit=unit, leave=False)


def evaluate(
    draft: Eagle3Draft,
    samples: Iterable[Sample],
    candidates: Sequence[Candidate],
    *,
    steps: int,
    max_tokens: int,
    head: Callable[[torch.Tensor], torch.Tensor] | None = None,
    progress: bool | None = None,
    tree: tuple[int, int] | None = None,
) -> list[Result]:
    """Score every evaluable candidate on up to ``max_tokens`` draft positions, one sample in
    memory at a time. Results come in candidate order (not evaluable ones stay empty)."""
    results = [Result(c) for c in candidates]
    live = [(c, r) for c, r in zip(candidates, results, strict=True) if c.indices is not None]
    bar = progress_bar(max_tokens, progress)
    used = 0
    with bar:
        for sample in samples:
            if used >= max_tokens:
                break
            keep = min(sample.input_ids.shape[0], max_tokens - used + 1)
            sample = first_positions(sample, keep)
            check_ids(sample, draft.embed.vocab_size)
            truth = truth_tokens(sample, head)
            for cand, res in live:
                score_sample(draft, sample, cand.indices or (), truth, steps, res, tree)
            used += keep - 1
            bar.update(keep - 1)
    return results


def check_ids(sample: Sample, vocab_size: int) -> None:
    """Refuse a sample whose ids the target (and so the draft's embedding) does not have,
    naming the data file: the embedding's own check can only name the draft's weights."""
    ids = sample.input_ids
    if not ids.numel():
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise WiringError(
            f"sample {sample.index}: token id {high if high >= vocab_size else low} is outside "
            f"the target's {vocab_size} ids",
            path=sample.path,
            fix="use data tokenized with this target's tokenizer (and written from it)",
        )


def paired_z(better: Result, worse: Result) -> float:
    """McNemar's z for "``better`` is right more often than ``worse``" on the same step-1
    positions: (b - c) / sqrt(b + c) over the positions where exactly one is right."""
    a, b = better.step1_hits(), worse.step1_hits()
    if a.shape != b.shape or a.numel() == 0:
        return 0.0
    only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
    return (only_a - only_b) / max(1.0, (only_a + only_b) ** 0.5)


def paired_logp_z(better: Result, worse: Result) -> float:
    """Paired z of the step-1 log-probability gain of ``better`` over ``worse`` on the same
    positions: mean difference / its standard error (0 when not comparable)."""
    a, b = better.step1_logp(), worse.step1_logp()
    if a.shape != b.shape or a.numel() < 2:
        return 0.0
    d = (a - b)[torch.isfinite(a) & torch.isfinite(b)].double()
    if d.numel() < 2:
        return 0.0
    return float(d.mean() / max(float(d.std()) / d.numel() ** 0.5, 1e-12))
