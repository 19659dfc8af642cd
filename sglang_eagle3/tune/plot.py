"""The tuner's PNG: predicted tok/s per request against steps, one line per topk (its best
draft-token count), one panel per concurrency, plain decoding as a dashed line."""

from __future__ import annotations

from pathlib import Path


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs = result["concurrency"]
    fig, axes = plt.subplots(1, len(cs), figsize=(4.5 * len(cs), 3.6), squeeze=False)
    for ax, c in zip(axes[0], cs, strict=True):
        preds = [p for p in result["predictions"] if p["concurrency"] == c]
        for k in sorted({p["topk"] for p in preds}):
            best: dict[int, float] = {}
            for p in (p for p in preds if p["topk"] == k):
                best[p["steps"]] = max(best.get(p["steps"], 0.0), p["tok_s"])
            xs = sorted(best)
            ax.plot(xs, [best[x] for x in xs], marker="o", label=f"topk {k}")
        ax.axhline(result["per_concurrency"][str(c)]["plain_tok_s"], ls="--", c="k",
                   label="plain (measured)")  # fmt: skip
        ax.set(title=f"concurrency {c}", xlabel="steps (best draft tokens)",
               ylabel="predicted tok/s per request")  # fmt: skip
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
