"""Acceptance profile: the accept length of every setting of the grid, from the doctor's
evidence (training data, or the target's own continuations without data).

One draft-tree search per topk over the grid's deepest steps serves every setting of that
topk: beams at step s depend on earlier steps only, and a setting keeps the draft_tokens - 1
best-scored nodes of depth <= steps (doctor/draft_tree.py). Each setting is then walked as a
server walks the samples (doctor/evaluate.py ``serving_walk``): accept length = 1 + accepted
drafts per verify, the number the doctor's replay matches within about 1 % on served runs.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from sglang_eagle3.doctor.draft_tree import build_tree, walk_tree
from sglang_eagle3.doctor.evaluate import (
    check_ids,
    fc_taps,
    first_positions,
    progress_bar,
    serving_walk,
    truth_tokens,
    walked_rows,
)
from sglang_eagle3.doctor.options import DoctorOptions
from sglang_eagle3.errors import WiringError
from sglang_eagle3.tune.grid import Setting


def _evidence(opts: DoctorOptions):
    if opts.data_free:
        from sglang_eagle3.doctor.run_data_free import captured_evidence

        return captured_evidence(opts)
    from sglang_eagle3.doctor.run import training_evidence

    return training_evidence(opts)


@torch.inference_mode()
def acceptance_profile(opts: DoctorOptions, settings: list[Setting]) -> dict[Setting, float]:
    """{setting: predicted accept length} with the layout the server feeds (the plugin's)."""
    from sglang_eagle3.doctor.draft_forward import load_draft
    from sglang_eagle3.doctor.target import VerifierHead

    ev = _evidence(opts)
    served = next((c for c in ev.candidates if "served" in c.names), None)
    if served is None or served.indices is None:
        why = served.why_not if served is not None else "no served layout"
        raise WiringError(
            f"the served layout cannot be scored on this evidence: {why}",
            path=opts.data or opts.target,
            fix="give data that stores its taps",
        )
    draft = load_draft(opts.draft, target_dir=opts.target, device=opts.device, dtype=opts.dtype)
    head = VerifierHead(opts.target, device=opts.device) if opts.target and ev.uses_head else None
    deepest: dict[int, int] = defaultdict(int)
    for s in settings:
        deepest[s.topk] = max(deepest[s.topk], s.steps)
    walked = {s: [0, 0] for s in settings}  # verifies, accepted drafts
    used = 0
    with progress_bar(opts.max_tokens, opts.progress) as bar:
        for sample in iter(ev.data):
            if used >= opts.max_tokens:
                break
            sample = first_positions(
                sample, min(sample.input_ids.shape[0], opts.max_tokens - used + 1)
            )
            check_ids(sample, draft.embed.vocab_size)
            truth = truth_tokens(sample, head)
            taps = fc_taps(draft, sample, served.indices)
            ids, mask = sample.input_ids, sample.loss_mask
            for k, steps in deepest.items():
                tree = build_tree(draft, taps, ids, steps=steps, topk=k)
                for steps_s in sorted({x.steps for x in settings if x.topk == k}):
                    group = [x for x in settings if x.topk == k and x.steps == steps_s]
                    scores = walk_tree(tree, ids, truth, mask, steps=steps_s,
                                       draft_tokens=[x.draft_tokens for x in group])  # fmt: skip
                    for s, got in zip(group, scores, strict=True):
                        rows = walked_rows(got.first, sample).tolist()
                        v, a = serving_walk(rows, got.depth.tolist())
                        walked[s][0] += v
                        walked[s][1] += a
            used += sample.input_ids.shape[0] - 1
            bar.update(sample.input_ids.shape[0] - 1)
    if not any(v for v, _ in walked.values()):
        raise WiringError("no position could be scored", path=opts.data or opts.target,
                          fix="give more data (or --max-tokens)")  # fmt: skip
    return {s: 1 + a / v if v else 1.0 for s, (v, a) in walked.items()}
