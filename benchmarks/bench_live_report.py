"""bench_live's figures from one run's record: per-phase and whole-trace tok/s (paired against
plain), the tuner's predictions, the steps each adaptive server ran, and the issue's goals."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path


def measured(record: dict) -> dict:
    """{server: {"phases": [tok/s per phase], "whole": tok/s}}, plain included."""
    runs, n = record["runs"], len(record["trace"])
    level = [statistics.median(q for r in runs for _, q in r["phases"][k]["pairs"])
             for k in range(n)]  # fmt: skip
    tokens = [_tokens(ph) for ph in record["trace"]]
    share = [t / sum(tokens) for t in tokens]
    out = {"plain": level}
    for r in runs:
        out[r["name"]] = [statistics.median(p / q for p, q in r["phases"][k]["pairs"]) * level[k]
                          for k in range(n)]  # fmt: skip
    return {name: {"phases": v, "whole": 1 / sum(w / x for w, x in zip(share, v, strict=True))}
            for name, v in out.items()}  # fmt: skip


def _tokens(ph: dict) -> int:
    """A phase's generated tokens (a record before lengths were per phase: equal mixes)."""
    lengths = ph.get("lengths")
    if not lengths:
        return ph["requests"]
    return sum(lengths[j % len(lengths)] for j in range(ph["requests"]))


def _per_c(pred: dict, c: int) -> float:
    """A prediction at concurrency ``c``: int keys as computed, str keys as re-read from JSON."""
    row = pred["per_c"]
    return row[c] if c in row else row[str(c)]


def goals(record: dict) -> dict:
    m, pred = measured(record), record["predicted"]
    mix = record["tune"]["mix"]
    rec = mix["recommended"]
    best = max(m, key=lambda n: m[n]["whole"])
    phases = record["trace"]
    # a refit's tuner may recommend an adaptive config other than the one served
    served = record.get("served_adaptive_config", record["tune"]["adaptive_config"])
    ran = rec in m and not (rec == "adaptive" and served != record["tune"]["adaptive_config"])
    out = {"recommended": rec, "best": best,
           "rec_vs_best": m[rec]["whole"] / m[best]["whole"] if ran else None}  # fmt: skip
    if "adaptive" in m and "adaptive-default" in m:
        out["tuned_vs_default_adaptive"] = m["adaptive"]["whole"] / m["adaptive-default"]["whole"]
    per_phase = []
    for k, ph in enumerate(phases):
        top = max(m, key=lambda n: m[n]["phases"][k])
        row = {"phase": k, "concurrency": ph["concurrency"], "best": top,
               "rec_vs_best": m[rec]["phases"][k] / m[top]["phases"][k] if ran else None,
               "rec_below_plain": ran and m[rec]["phases"][k] < m["plain"]["phases"][k],
               "predicted_below_plain": any(w.startswith(f"at {ph['concurrency']}:") and
                                            "BELOW plain" in w for w in mix["why"])}  # fmt: skip
        per_phase.append(row)
    out["per_phase"] = per_phase
    errors = {n: m[n]["whole"] / pred[n]["whole"] - 1 for n in m if n in pred}
    out["whole_error"] = errors
    out["within_15pct"] = all(abs(e) <= 0.15 for e in errors.values())
    # the same over plain's level: what is left when the machine's speed moved between the
    # tuner's timing and the trace (plain's own error), which moves every server alike
    ref = m["plain"]["whole"] / pred["plain"]["whole"]
    out["speedup_error"] = {n: (1 + e) / ref - 1 for n, e in errors.items() if n != "plain"}
    out["lossless"] = all(r["lossless"] for r in record["runs"])
    for r in record["runs"]:
        if r["name"] == "adaptive":
            out["adaptive_settles"] = slot_settles({**record["tune"], "adaptive_config": served},
                                                   r)  # fmt: skip
    return out


MIN_BATCHES = 20  # a slot the trace visits less (a drain's odd sizes) shows no settled step


def slot_settles(result: dict, run: dict) -> dict[int, dict]:
    """Per slot of the tuned config (its smallest batch size): the steps SGLang ran at its batch
    sizes over the whole trace, the step it settled on (None: under MIN_BATCHES batches), and
    the step the tuner predicts fastest there."""
    from sglang_eagle3.tune.adaptive import slot
    from sglang_eagle3.tune.grid import Setting
    from sglang_eagle3.tune.report import chain_drafts
    from sglang_eagle3.tune.saved import model_of

    grid = {Setting(p["steps"], p["topk"], p["draft_tokens"]): p["accept_length"]
            for p in result["profile"] if not p["explained"]}  # fmt: skip
    model, drafts = model_of(result), chain_drafts(grid)
    keys = sorted(int(k) for k in result["adaptive_config"])
    ran: dict[int, Counter] = {k: Counter() for k in keys}
    for ph in run["phases"]:
        for key, n in ph["steps"].items():
            b, step = (int(x) for x in key.split(":"))
            ran[max(k for k in keys if k <= b)][step] += n
    out = {}
    for key in keys:
        got = ran[key]
        settled = got.most_common(1)[0][0] if sum(got.values()) >= MIN_BATCHES else None
        out[key] = {"ran": dict(sorted(got.items())), "settled": settled,
                    "predicted": slot(model, drafts, key).best}  # fmt: skip
    return out


def markdown(record: dict) -> str:
    m, pred, g = measured(record), record["predicted"], record["summary"]
    heads = [f"phase {k}: c={ph['concurrency']}" for k, ph in enumerate(record["trace"])]
    lines = ["| server | " + " | ".join(heads) + " | whole trace | / best | lossless |",
             "|---|" + "---|" * (len(heads) + 3)]  # fmt: skip
    best = m[g["best"]]["whole"]
    lossless = {r["name"]: r["lossless"] for r in record["runs"]}
    for name in sorted(m, key=lambda n: -m[n]["whole"]):
        p = pred.get(name)
        cells = [f"{v:.0f} ({_per_c(p, ph['concurrency']):.0f})" if p else f"{v:.0f}"
                 for v, ph in zip(m[name]["phases"], record["trace"], strict=True)]  # fmt: skip
        whole = f"{m[name]['whole']:.0f} ({p['whole']:.0f})" if p else f"{m[name]['whole']:.0f}"
        mark = " (recommended)" if name == g["recommended"] and g["rec_vs_best"] is not None else ""
        ratio, same = m[name]["whole"] / best, lossless.get(name, "reference")
        lines.append(f"| {name}{mark} | " + " | ".join(cells) + f" | {whole} | {ratio:.3f} | "
                     f"{same} |")  # fmt: skip
    from sglang_eagle3.tune.report import arrival_line

    lines += ["", "tok/s of all requests, measured (predicted by the tuner).",
              f"The tuner's arrival cost: {arrival_line(record['tune'])}."]  # fmt: skip
    if "tuned_vs_default_adaptive" in g:
        lines.append(f"Tuned adaptive / SGLang default adaptive, whole trace: "
                     f"{g['tuned_vs_default_adaptive']:.3f}.")  # fmt: skip
    if g["rec_vs_best"] is not None:
        lines.append(f"The recommendation ({g['recommended']}) / the best server ({g['best']}): "
                     f"{g['rec_vs_best']:.3f}; per phase: " + ", ".join(
                         f"{r['rec_vs_best']:.3f}" for r in g["per_phase"]) + ".")  # fmt: skip
    else:
        what = "its config was" if g["recommended"] == "adaptive" else "it was"
        lines.append(f"The recommendation ({g['recommended']}): {what} not served in this run.")
    lines.append("The tuner: " + "; ".join(record["tune"]["mix"]["why"][:2]) + ".")
    lines.append("Whole-trace prediction error: " + ", ".join(
        f"{n} {e:+.1%}" for n, e in sorted(g["whole_error"].items())) + ".")  # fmt: skip
    if "speedup_error" in g:
        lines.append("The same for the speedup over plain: " + ", ".join(
            f"{n} {e:+.1%}" for n, e in sorted(g["speedup_error"].items())) + ".")  # fmt: skip
    for key, s in g.get("adaptive_settles", {}).items():
        lines.append(
            f"Tuned adaptive, slot from batch size {key}: ran (steps: batches) "
            f"{s['ran']}; settled {s['settled']}, predicted {s['predicted']}."
        )
    for r in record["runs"]:
        if r["name"] == "adaptive-default":
            lines.append("SGLang default adaptive, steps run per phase: " + "; ".join(
                str(ph["steps"]) for ph in r["phases"]) + ".")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m, pred = measured(record), record["predicted"]
    names = sorted(m, key=lambda n: -m[n]["whole"])
    fig, axes = plt.subplots(1, len(record["trace"]), figsize=(3 * len(record["trace"]), 4),
                             sharey=False)  # fmt: skip
    for k, (ax, ph) in enumerate(zip(axes, record["trace"], strict=True)):
        xs = range(len(names))
        ax.bar(xs, [m[n]["phases"][k] for n in names], color="tab:blue", label="measured")
        want = [_per_c(pred[n], ph["concurrency"]) if n in pred else float("nan") for n in names]
        ax.scatter(xs, want, color="k", marker="_", s=200, label="predicted")
        ax.set_xticks(list(xs), names, rotation=70, fontsize=7)
        ax.set_title(f"phase {k}: concurrency {ph['concurrency']}", fontsize=9)
    axes[0].set_ylabel("tok/s (all requests)")
    axes[0].legend(fontsize=7)
    fig.suptitle("bench_live: tiny models, 2 CPU cores, paired against plain", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
