"""``--search``'s answer: the best layout as the exact flags to launch with, and by how much
it beats the runner-up on the same tokens.

Ranked by the draft's mean step-1 log-probability of the target's token, with a paired z over
the same positions: many layouts that keep the embedding tie on top-1 (a drafter trained with
``norm_before_residual`` leans on the token), while the log-probability still tells the taps
it was trained on. Tree scoring (topk > 1) has no log-probability: top-1 and McNemar's z then.
Layouts the evidence cannot tell from the winner (paired z under ``TIE_Z``) are listed as
tied: adjacent layers of a small target can serve alike, and saying so beats a false pick.
"""

from __future__ import annotations

from sglang_eagle3.doctor.evaluate import Result, paired_logp_z, paired_z
from sglang_eagle3.layout.taps import format_taps

TIE_Z = 2.0  # paired z below which a layout is within noise of the winner
MAX_TIED = 5  # tied layouts named in the text (all of them in JSON)


def search_winner(results: list[Result]) -> dict | None:
    """None when no evaluable, non-floor layout was scored."""
    scored = [
        r for r in results
        if r.candidate.indices and r.candidate.taps is not None and r.accuracy is not None
    ]  # fmt: skip
    if not scored:
        return None
    by_logp = all(r.mean_logp is not None for r in scored)
    scored.sort(key=lambda r: -(r.mean_logp if by_logp else r.accuracy))
    best = scored[0]
    layout = ",".join(str(t) for t in best.candidate.taps)
    metric = "mean step-1 log p(target token)" if by_logp else "step-1 top-1"
    out = {
        "layout": [str(t) for t in best.candidate.taps],
        "flags": f"--hidden-state-layout {layout}",
        "ranked_by": metric,
        "accuracy": best.accuracy,
        "mean_logp": best.mean_logp,
        "candidates": len(scored),
        "runner_up": None,
        "margin": None,
        "z": None,
        "tied": [],
    }
    score = (lambda r: f"{r.mean_logp:.3f}") if by_logp else (lambda r: f"{r.accuracy:.1%}")
    text = f"best of {len(scored)} layouts by {metric}: {format_taps(best.candidate.taps)} " + (
        f"({score(best)}, top-1 {best.accuracy:.1%})"
    )
    if len(scored) > 1:
        second = scored[1]
        out["runner_up"] = [str(t) for t in second.candidate.taps]
        if by_logp:
            out["margin"] = best.mean_logp - second.mean_logp
            out["z"] = paired_logp_z(best, second)
        else:
            out["margin"] = best.accuracy - second.accuracy
            out["z"] = paired_z(best, second)
        text += (
            f", {out['margin']:.3g} over the runner-up {format_taps(second.candidate.taps)} "
            f"({score(second)}; paired z = {out['z']:.1f})"
        )
        pair = paired_logp_z if by_logp else paired_z
        for r in scored[1:]:
            z = pair(best, r)
            if z < TIE_Z:
                out["tied"].append({"layout": [str(t) for t in r.candidate.taps], "z": z})
    if out["tied"]:
        named = ", ".join(
            f"[{', '.join(t['layout'])}] (z = {t['z']:.1f})" for t in out["tied"][:MAX_TIED]
        )
        more = len(out["tied"]) - MAX_TIED
        text += (
            f"; within noise of it (paired z < {TIE_Z:g}): {named}"
            + (f" and {more} more" if more > 0 else "")
            + ": this evidence cannot tell them apart (more prompts may)"
        )
    out["text"] = f"{text}; launch with: {out['flags']}"
    return out
