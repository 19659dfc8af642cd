"""SGLang's MLA drafter (real ModelRunner, in process, CPU harness) against the doctor's
reference forward.

Run as: python mla_drafter_vs_reference.py DRAFT TARGET OUT_JSON (in the harness
environment; TARGET lends its tokenizer). SGLang loads DRAFT, an Eagle3DeepseekV2ForCausalLM
with its own embedding, as its own model through ModelRunner (weights through its
load_weights, the plugin's hooks in place) and runs the drafter's first step as a draft
extend: token embeddings plus seeded taps in forward_batch.spec_info.hidden_states, the aux
hidden state captured for the last token of each request. The doctor's Eagle3Draft runs one
step on the same tokens and taps: as the config declares it, and with each MLA setting
altered, to show the comparison sees it. SGLang runs MLA absorbed, the reference unabsorbed; SGLang
counts positions from 0, the reference from 1 (RoPE only sees offsets).
"""

import json
import sys

import torch
from sglang.srt.plugins import load_plugins

load_plugins()  # the CPU harness and this project's plugin

from one_batch_runner import draft_extend_batch, load_runner, run_first_draft_step  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode  # noqa: E402

from sglang_eagle3.doctor.draft_forward import Eagle3Draft, load_draft  # noqa: E402

DRAFT, TARGET, OUT = sys.argv[1:4]
LENGTHS = (24, 9, 40)  # one request per sample, different lengths in one batch


def inputs() -> list[tuple[list[int], torch.Tensor]]:
    """(draft input ids, fc input [L, num_aux * target_hidden]) per request, seeded."""
    cfg = json.load(open(f"{DRAFT}/config.json"))
    width = cfg["target_hidden_size"] * len(cfg["eagle_config"]["hidden_state_layout"])
    gen = torch.Generator().manual_seed(7)
    return [
        (torch.randint(3, cfg["vocab_size"], (n,), generator=gen).tolist(),
         torch.randn(n, width, generator=gen))
        for n in LENGTHS
    ]  # fmt: skip


def work(server_args, port_args, bench_args, gpu_id, tp_rank):
    runner = load_runner(server_args, port_args, gpu_id, tp_rank).torch_runner
    data = inputs()
    fb = draft_extend_batch(runner, data)
    fb.capture_hidden_mode = CaptureHiddenMode.LAST  # the hidden state the next step gets
    with torch.no_grad():
        out = runner.forward(fb).logits_output
    json.dump(
        {"logits": out.next_token_logits.float().tolist(),
         "hidden": out.hidden_states.float().tolist(),
         "model": type(runner.model).__name__},
        open(OUT + ".sglang", "w"),
    )  # fmt: skip


def variants(draft: Eagle3Draft) -> dict[str, Eagle3Draft]:
    """The reference as declared, and each setting it must get right, got wrong (the check
    must see each of them)."""
    c, mla = draft.config, draft.config.mla

    def vary(**update) -> Eagle3Draft:
        return Eagle3Draft(c.model_copy(update=update), draft.w, draft.embed)

    out = {"declared": draft, "norm_output flipped": vary(norm_output=not c.norm_output)}
    if c.fc_norm:
        out["fc_norm dropped"] = vary(fc_norm=False)
    out["neox rope"] = vary(mla=mla.model_copy(update={"rope_interleave": False}))
    plain = vary()
    plain.scale = (mla.qk_nope_head_dim + mla.qk_rope_head_dim) ** -0.5
    out["no yarn mscale"] = plain
    return out


def reference(draft: Eagle3Draft, data) -> tuple[torch.Tensor, torch.Tensor]:
    logits, hidden = [], []
    for ids, hs in data:
        step = draft.forward(hs, torch.tensor(ids), steps=1)[0]
        logits.append(step.logits[-1].double())
        hidden.append(step.hidden[-1].double())
    return torch.stack(logits), torch.stack(hidden)


run_first_draft_step(work, DRAFT, TARGET, len(LENGTHS))

sg = json.load(open(OUT + ".sglang"))
got_logits = torch.tensor(sg["logits"], dtype=torch.float64)
got_hidden = torch.tensor(sg["hidden"], dtype=torch.float64)
report = {"model": sg["model"], "rows": len(got_logits)}
for name, draft in variants(load_draft(DRAFT, target_dir=TARGET, dtype="float32")).items():
    ref_logits, ref_hidden = reference(draft, inputs())
    report[name] = {
        "max_abs_diff": (got_logits - ref_logits).abs().max().item(),
        "max_abs_hidden_diff": (got_hidden - ref_hidden).abs().max().item(),
        "same_argmax": bool((got_logits.argmax(-1) == ref_logits.argmax(-1)).all()),
    }
json.dump(report, open(OUT, "w"), indent=1)
