"""The doctor's findings: a verdict, a table for people, one JSON object for machines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sglang_eagle3.data.tap_fingerprint import (
    TapFingerprint,
    check_against_layout,
    check_against_taps,
)
from sglang_eagle3.data.train_data import DataInfo
from sglang_eagle3.doctor.candidates import DraftLayouts
from sglang_eagle3.doctor.evaluate import Result, paired_z
from sglang_eagle3.doctor.target import TargetCheck
from sglang_eagle3.layout.taps import Tap, format_taps
from sglang_eagle3.table import text_table

OK, BAD, UNKNOWN = "ok", "served layout is wrong", "cannot tell"
NO_TAPS = "no layout beats the floor"  # every candidate at or below the taps-zeroed floor


@dataclass
class Report:
    verdict: str  # OK, BAD or UNKNOWN
    reason: str
    exit_code: int
    rows: list[dict[str, Any]]
    declared: dict[str, Any]
    served: dict[str, Any]
    data: dict[str, Any]
    predicted_accept_length: float | None
    replay_accept_length: float | None  # serving's walk along the data (see doctor_eval)
    steps: int
    fingerprint: dict[str, Any]
    target_check: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    settings: list[dict[str, Any]] = field(default_factory=list)  # draft_settings rows
    source: dict[str, Any] = field(default_factory=dict)  # where the hidden states came from
    search: dict[str, Any] | None = None  # --search: the winner, as launch flags

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "declared": self.declared,
            "served": self.served,
            "predicted_accept_length": self.predicted_accept_length,
            "replay_accept_length": self.replay_accept_length,
            "steps": self.steps,
            "candidates": self.rows,
            "data": self.data,
            "fingerprint": self.fingerprint,
            "target_check": self.target_check,
            "notes": self.notes,
            "settings": self.settings,
            "source": self.source,
            "search": self.search,
        }

    def render(self) -> str:
        lines = [f"source: {self.source['text']}"] if self.source.get("text") else []
        lines += [
            f"data: {self.data['path']} ({self.data['format']}, {self.data['num_taps']} taps "
            f"x {self.data['hidden_size']}; stored taps: {self.data['stored_taps_text']})",
            f"declared: {self.declared['text']}",
            f"served:   {self.served['text']}",
            "",
        ]
        table = [["layout (taps)", "step1", "p2|1", "p3|2", "accept", "replay", "candidate"]]
        hidden_rows = 0
        for r in self.rows:
            plain_search = r["name"] == "search" and not (r["is_served"] or r["is_declared"])
            if plain_search and len(table) > 12:
                hidden_rows += 1  # exhaustive search rows beyond the top few: JSON only
                continue
            if not r["evaluable"]:
                table.append([r["text"], "n/a", f"not evaluable: {r['why_not']}"])
                continue
            rates = (r["step_accuracy"] + [None, None, None])[:3]
            acc, rep = r["predicted_accept_length"], r.get("replay_accept_length")
            mark = "".join(m for m, key in (("*", "is_served"), ("=", "is_declared")) if r[key])
            table.append([
                (mark + " " if mark else "") + r["text"],
                *("-" if p is None else f"{p:.1%}" for p in rates),
                "-" if acc is None else f"{acc:.2f}",
                "-" if rep is None else f"{rep:.2f}",
                r["name"],
            ])  # fmt: skip
        lines += text_table(table, align="<>>>>><")
        if hidden_rows:
            lines.append(f"({hidden_rows} more search candidates: see --json)")
        lines.append(
            "(* served, = declared; p2|1: step 2 given step 1 right; accept: chain "
            f"accept length over {self.steps} steps, 1 + p1 + p1*p2 + ... (every position "
            "alike); replay: serving's walk along the data, each verify starting where the "
            "last ended: closest to a server when the data is the target's own greedy output)"
        )
        lines.append(f"fingerprint: {self.fingerprint['text']}")
        if self.target_check is not None:
            agree = self.target_check["verifier_agreement"]
            lines.append(
                "target check: verifier tap reproduces the target's greedy token for "
                + ("n/a" if agree is None else f"{agree:.1%}")
                + f" of {self.target_check['tokens']} tokens"
            )
        if self.settings:
            lines.append("trained settings (served by the launcher + plugin):")
            lines += [
                f"  {st['name']}={st['trained']}: {st['served']} (stock SGLang 0.5.23: "
                f"{st['stock']})"
                for st in self.settings
            ]
        lines += [f"note: {n}" for n in self.notes]
        if self.search is not None:
            lines.append(f"search: {self.search['text']}")
        lines.append(f"verdict: {self.verdict.upper()}: {self.reason}")
        return "\n".join(lines)


def _row(res: Result, lay: DraftLayouts, steps: int) -> dict[str, Any]:
    c = res.candidate
    taps = list(c.taps) if c.taps is not None else None
    return {
        "name": ", ".join(dict.fromkeys(c.names)),
        "layout": None if taps is None else [str(t) for t in taps],
        "text": c.label,
        "hf_hidden_states": None if taps is None else [t.hf_index for t in taps],
        "stored_indices": None if c.indices is None else list(c.indices),
        "source": "; ".join(dict.fromkeys(c.sources)),
        "evaluable": c.indices is not None,
        "why_not": c.why_not,
        "accuracy": res.accuracy,
        "mean_logp": res.mean_logp,
        "step_accuracy": res.rates(),
        "step_counts": [[a, b] for a, b in zip(res.correct, res.total, strict=True)],
        "predicted_accept_length": res.accept_length(steps),
        "replay_accept_length": res.served_accept_length,
        "is_floor": c.is_floor,
        "is_served": lay.served is not None and c.taps == lay.served,
        "is_declared": lay.declared is not None and c.taps == lay.declared,
    }


def _verdict(
    rows: list[dict], results: dict[int, Result], lay: DraftLayouts, margins: tuple[float, float],
    best_layout: list[str] | None = None,
) -> tuple[str, str, int]:  # fmt: skip
    """``margins`` = (minimum accuracy gap, minimum paired z) for "clearly below";
    ``best_layout``: the best candidate when a ranking other than step-1 top-1 chose it
    (--search), so that one report names one winner."""
    scored = [r for r in rows if r["evaluable"] and not r["is_floor"] and r["accuracy"] is not None]
    if not scored:
        return UNKNOWN, "no candidate could be scored (no tokens under the loss mask?)", 0
    top = max(scored, key=lambda r: r["accuracy"])
    best = top
    if best_layout is not None:
        best = next((r for r in scored if r["layout"] == best_layout), top)
    floor = next((r for r in rows if r["is_floor"] and r["accuracy"] is not None), None)
    if floor is not None and top["accuracy"] <= floor["accuracy"]:
        best = top
        # the served layout cannot be "OK" when no layout gives the draft anything
        return (
            NO_TAPS,
            f"every layout scores at or below the taps-zeroed floor: best {best['text']} "
            f"({best['name']}) {best['accuracy']:.1%} step-1 top-1, floor "
            f"{floor['accuracy']:.1%}; the draft gets nothing from its taps under any layout "
            "(corrupt fc or draft weights, data from another target, or data the draft was "
            "not trained for)",
            1,
        )
    if lay.served_crash is not None:
        return BAD, f"the served config would not run: {lay.served_crash}", 1
    if lay.served is None:  # stock SGLang on a family outside the table: no rule to replay
        return UNKNOWN, f"the served taps are unknown: {lay.served_source}", 0
    served = next((r for r in rows if r["is_served"]), None)
    if served is None or not served["evaluable"]:
        if lay.declared is not None and lay.served != lay.declared:
            return (
                BAD,
                f"served taps {format_taps(lay.served or ())} differ from the declared "
                f"{format_taps(lay.declared)} (served ones not in the data to score)",
                1,
            )
        return UNKNOWN, "the served taps are not in the data, so they cannot be scored", 0
    s, b = served["accuracy"], best["accuracy"]
    z = paired_z(results[best["_id"]], results[served["_id"]])
    served["z_below_best"] = round(z, 2)
    if b - s >= margins[0] and z >= margins[1]:
        return (
            BAD,
            f"served {served['text']} scores {s:.1%} step-1 top-1, clearly below "
            f"{best['text']} ({b:.1%}; {best['name']}): {b - s:.1%} lower on the same "
            f"tokens, paired z = {z:.1f}",
            1,
        )
    return OK, f"served {served['text']} scores {s:.1%}; best candidate {best['text']} {b:.1%}", 0


def make_report(
    *,
    opts_dict: dict,
    info: DataInfo,
    num_layers: int,
    stored: tuple[Tap, ...] | None,
    stored_source: str,
    lay: DraftLayouts,
    results: list[Result],
    fingerprint: TapFingerprint,
    target_check: TargetCheck | None,
    steps: int,
    margins: tuple[float, float],
    search: dict | None = None,
) -> Report:
    """``search``: --search's winner (search_winner.py); its ranking then orders the rows and
    names the verdict's best candidate too."""
    rows = [{**_row(r, lay, steps), "_id": i} for i, r in enumerate(results)]
    if search is not None and search["ranked_by"].startswith("mean"):
        low = float("-inf")
        rows.sort(key=lambda r: (not r["evaluable"], -(r["mean_logp"] if r["mean_logp"]
                                                         is not None else low)))  # fmt: skip
    else:
        rows.sort(key=lambda r: (not r["evaluable"], -(r["accuracy"] or 0.0)))
    best = search["layout"] if search is not None else None
    verdict, reason, code = _verdict(rows, dict(enumerate(results)), lay, margins, best)
    for r in rows:
        del r["_id"]
    notes = list(lay.notes) + check_against_taps(fingerprint, stored)
    for r in rows:
        if r["evaluable"] and r["layout"] is not None and (r["is_served"] or r["is_declared"]):
            taps = [Tap.parse(t) for t in r["layout"]]
            msg = check_against_layout(fingerprint, r["stored_indices"], taps, r["name"])
            if msg:
                notes.append(msg)
    if target_check is not None:
        notes += list(target_check.notes)
    served_row = next((r for r in rows if r["is_served"]), None)
    decl_row = next((r for r in rows if r["is_declared"]), None)
    pal_row = served_row if served_row and served_row["evaluable"] else decl_row
    return Report(
        verdict=verdict,
        reason=reason,
        exit_code=code,
        rows=rows,
        declared={
            "layout": None if lay.declared is None else [str(t) for t in lay.declared],
            "source": lay.declared_source,
            "text": f"{format_taps(lay.declared)} ({lay.declared_source})"
            if lay.declared is not None
            else f"none declared [{lay.declared_source}]",
            "accuracy": decl_row["accuracy"] if decl_row else None,
        },
        served={
            "layout": None if lay.served is None else [str(t) for t in lay.served],
            "source": lay.served_source,
            "crash": lay.served_crash,
            "text": (
                format_taps(lay.served) if lay.served is not None else f"none ({lay.served_crash})"
            )
            + f" ({lay.served_source})",
            "accuracy": served_row["accuracy"] if served_row else None,
            "served_by": opts_dict.get("served_by"),
        },
        data={
            "path": info.path,
            "format": info.format,
            "num_samples": info.num_samples,
            "num_taps": info.num_taps,
            "hidden_size": info.hidden_size,
            "dtype": info.dtype,
            "num_layers": num_layers,
            "stored_taps": None if stored is None else [str(t) for t in stored],
            "stored_taps_source": stored_source,
            "stored_taps_text": (format_taps(stored) if stored else "unknown")
            + f" [{stored_source}]",
        },
        predicted_accept_length=pal_row["predicted_accept_length"] if pal_row else None,
        replay_accept_length=pal_row["replay_accept_length"] if pal_row else None,
        steps=steps,
        fingerprint={
            "median_norms": list(fingerprint.norms),
            "embed_index": fingerprint.embed_index,
            "embed_tap": None
            if fingerprint.embed_index is None or stored is None
            else str(stored[fingerprint.embed_index]),
            "exact_embed_match": None
            if fingerprint.exact_match is None
            else list(fingerprint.exact_match),
            "text": fingerprint.describe(stored),
        },
        target_check=None if target_check is None else target_check.to_dict(),
        notes=notes,
    )
