"""The wiring table the launcher prints before SGLang starts (pure)."""

from __future__ import annotations

import shlex

from sglang_eagle3.checkpoint.draft_settings import render as render_settings
from sglang_eagle3.launch.plan import LaunchPlan
from sglang_eagle3.layout.taps import Tap
from sglang_eagle3.table import text_table

IDS_NOTE = (
    "ids: HF hidden_states index = input-to-layer id (0 = embed); SGLang capture index = "
    "DeepSeek loop index whose layer input is captured"
)


def render(plan: LaunchPlan) -> str:
    t, d, cap, res = plan.target, plan.draft, plan.capture, plan.resolution
    lines = [
        "sglang-eagle3 wiring",
        f"target  {t.path}: {t.architecture}, {t.num_layers} layers, hidden {t.hidden_size}",
    ]
    if d is not None:
        fc_in = d.fc_in_features or d.num_aux * t.hidden_size
        lines.append(
            f"draft   {plan.draft_src}: {d.format}, fc {fc_in} -> {d.draft_hidden_size} "
            f"({d.num_aux} taps x {t.hidden_size})"
        )
        if plan.converted_draft:
            lines.append(f"        served from {plan.converted_draft} (flat copy)")
    if cap is not None and plan.capture_order is not None:
        lines += _capture_only_lines(plan)
    elif cap is not None and d is not None and d.layout is not None:
        lines += [f"layout  from {cap.source}", f"        {IDS_NOTE}"]
        head = ["#", "tap", "HF hidden_states", "SGLang capture index", "fc block"]
        rows = [
            [str(j), tap, str(hf), str(tap_index), str(cap.fc_block_order[j])]
            for j, (tap, hf, tap_index) in enumerate(
                zip(cap.taps, d.layout.hf_indices(), d.layout.capture_indices(), strict=True)
            )
        ]
        lines += text_table([head, *rows], indent="        ")
        if d.layout.verifier is not None:
            v = d.layout.verifier
            lines.append(
                f"        verifier tap (training targets): {v} (HF hidden_states {v.hf_index})"
            )
    elif d is not None and d.layout is not None:
        lines.append(f"layout  {d.layout} (from {d.layout_source}; not enforced for this target)")
    if plan.settings:
        lines.append("trained settings, and whether the server honours them")
        lines += render_settings(list(plan.settings))
    if d is not None:
        lines.append(
            f"vocab   draft {d.draft_vocab_size} / target {d.target_vocab_size}; "
            f"d2t {'yes' if d.has_d2t else 'no'}, t2d {'yes' if d.has_t2d else 'no'}"
        )
    if res is not None:
        f = res.flags
        lines.append(
            f"flags   --speculative-num-steps {f.num_steps} --speculative-eagle-topk "
            f"{f.eagle_topk} --speculative-num-draft-tokens {f.num_draft_tokens}"
        )
    if plan.changes:
        lines.append("changes (before -> after)")
        for c in plan.changes:
            before = "unset" if c["from"] is None else c["from"]
            lines.append(f"        {c['flag']}: {before} -> {c['to']}  ({c['why']})")
    lines += [f"note    {n}" for n in plan.notes]
    return "\n".join(lines)


def _capture_only_lines(plan: LaunchPlan) -> list[str]:
    """Each declared tap and where the server returns it: its block of the row."""
    cap, h = plan.capture, plan.target.hidden_size
    lines = [f"layout  from {cap.source} (capture only, no draft)", f"        {IDS_NOTE}"]
    head = ["#", "tap", "HF hidden_states", "SGLang capture index", "returned block (columns)"]
    rows = []
    for j, tap in enumerate(cap.taps):
        p = cap.fc_block_order[j]  # its position in SGLang's ascending fill order
        hf = Tap.parse(tap).hf_index
        block = f"{p} ({p * h}:{(p + 1) * h})"
        rows.append([str(j), tap, str(hf), str(cap.capture_indices[p]), block])
    return lines + text_table([head, *rows], indent="        ")


def command_line(plan: LaunchPlan, python: str = "python") -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(plan.env.items()))
    argv = shlex.join([python, "-m", "sglang.launch_server", *plan.sglang_argv])
    return f"{env} {argv}".strip()
