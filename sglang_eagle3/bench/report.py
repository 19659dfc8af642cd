"""The benchmark's outputs: a Markdown table, a JSON file and PNG plots.

Markdown and JSON are pure; matplotlib is imported only when plotting (Agg backend: no display).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from sglang_eagle3.table import markdown_table as render_markdown


def _f(x: float | None, fmt: str = ".1f", suffix: str = "") -> str:
    return "-" if x is None else f"{x:{fmt}}{suffix}"


def _lossless(row: dict) -> str:
    failed = len(row.get("failed_requests", ()))
    note = f"; {failed} failed" if failed else ""
    if row.get("lossless") is None:  # the baseline itself, a sampled run, or all failed
        text = "ref" if row.get("baseline") and row["mode"] == "greedy" else "-"
        return f"{text} ({failed} failed)" if failed else text
    if row["lossless"]:
        return "yes" + (f" (of the answered{note})" if failed else "")
    return f"NO ({len(row.get('mismatches', []))} differ{note})"


HEADER = (
    "server", "mode", "conc", "tok/s", "speedup", "TTFT p50 / p90 ms", "ITL p50 / p90 ms",
    "TTFT ratio", "ITL ratio", "accept length", "SGLang's accept length", "accept rate",
    "lossless",
)  # fmt: skip


def markdown_table(rows: Sequence[dict]) -> str:
    return render_markdown(HEADER, [
        [r["name"], r["mode"], str(r["concurrency"]), _f(r["tok_s"]),
         _f(r["speedup"], ".2f", "x"),
         f"{_f(r['ttft_ms_median'])} / {_f(r['ttft_ms_p90'])}",
         f"{_f(r['itl_ms_median'])} / {_f(r['itl_ms_p90'])}",
         _f(r["ttft_ratio"], ".2f", "x"), _f(r["itl_ratio"], ".2f", "x"),
         _f(r["accept_length"], ".2f"), _f(r["sglang_accept_length"], ".2f"),
         _f(r["accept_rate"], ".2f"), _lossless(r)]
        for r in rows
    ])  # fmt: skip


SGLANG_HEADER = (
    "server", "mode", "conc", "output tok/s", "TTFT p50 / p90 ms", "ITL p50 / p90 ms",
    "accept length (server-wide, /server_info)",
)  # fmt: skip


def sglang_client_table(rows: Sequence[dict]) -> str:
    """The same configurations as measured by `python -m sglang.benchmark.serving`."""
    cells = []
    for r in rows:
        s = r.get("sglang_client")
        if not s:
            continue
        head = [r["name"], r["mode"], str(r["concurrency"])]
        if s.get("error"):
            cells.append([*head, f"failed: {s['error'][:80]}", "", "", ""])
            continue
        cells.append([
            *head, _f(s["output_throughput"]),
            f"{_f(s['median_ttft_ms'])} / {_f(s['p90_ttft_ms'])}",
            f"{_f(s['median_itl_ms'])} / {_f(s['p90_itl_ms'])}",
            _f(s.get("accept_length"), ".2f"),
        ])  # fmt: skip
    return render_markdown(SGLANG_HEADER, cells)


def write_json(path: Path, result: dict) -> None:
    path.write_text(json.dumps(result, indent=2) + "\n")


def write_plots(rows: Sequence[dict], out_dir: Path) -> list[Path]:
    """accept_length_hist.png (per speculative server and mode, summed over concurrencies)
    and tok_s_by_concurrency.png (one line per server and mode)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hists: dict[str, list[int]] = {}
    for r in rows:
        if r.get("histogram"):
            h = hists.setdefault(f"{r['name']} ({r['mode']})", [])
            h += [0] * (len(r["histogram"]) - len(h))
            for k, c in enumerate(r["histogram"]):
                h[k] += c
    n = max(1, len(hists))
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 3.4), squeeze=False)
    for ax, (label, h) in zip(axes[0], hists.items(), strict=False):  # no panel is drawn when empty
        total = sum(h) or 1
        ax.bar(range(len(h)), [c / total for c in h], color="tab:blue")
        mean = 1 + sum(k * c for k, c in enumerate(h)) / total
        ax.set_title(f"{label}\naccept length {mean:.2f}", fontsize=9)
        ax.set_xlabel("drafts accepted per verify step")
        ax.set_ylabel("fraction of verify steps")
        ax.set_xticks(range(len(h)))
    if not hists:
        axes[0][0].text(0.5, 0.5, "no speculative server", ha="center", va="center")
        axes[0][0].set_axis_off()
    fig.tight_layout()
    hist_path = out_dir / "accept_length_hist.png"
    fig.savefig(hist_path, dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        series.setdefault(f"{r['name']} ({r['mode']})", []).append((r["concurrency"], r["tok_s"]))
    for label, pts in series.items():
        pts.sort()
        ax.plot([c for c, _ in pts], [t for _, t in pts], marker="o", label=label)
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("output tok/s")
    ax.set_xticks(sorted({r["concurrency"] for r in rows}))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    tok_path = out_dir / "tok_s_by_concurrency.png"
    fig.savefig(tok_path, dpi=100)
    plt.close(fig)
    return [hist_path, tok_path]
