"""SGLang's EAGLE-3 drafter (real ModelRunner, in process, CPU harness) against speculators.

Run as: python drafter_vs_speculators.py FLAT_DRAFT SPECULATORS_DRAFT DATA TARGET OUT_JSON (in
the harness environment; TARGET lends its tokenizer and
its embedding, as in a server; SGLANG_PLUGINS decides whether this
project's plugin is loaded).

SGLang loads the flat copy of the draft as its own model (LlamaForCausalLMEagle3 through
ModelRunner, weights through its load_weights, so the plugin's hooks run as in a server) and
runs the drafter's first step as a draft extend: token embeddings plus the packed target taps
in forward_batch.spec_info.hidden_states. speculators runs Eagle3DraftModel.forward (one TTT
step) on the same tokens and taps; its first-step logits are read at its lm_head. Positions:
SGLang counts from 0, speculators from 1 (its training default): RoPE only sees offsets.
"""

import json
import sys

import torch
from safetensors.torch import load_file
from sglang.srt.plugins import load_plugins

load_plugins()  # the CPU harness (and this project's plugin unless SGLANG_PLUGINS drops it)

from one_batch_runner import draft_extend_batch, load_runner, run_first_draft_step  # noqa: E402

from sglang_eagle3.data.train_data import TrainData  # noqa: E402

FLAT, SPEC, DATA, TARGET, OUT = sys.argv[1:6]
LENGTHS = (24, 9, 40)  # one request per sample, different lengths in one batch


def inputs() -> list[tuple[list[int], torch.Tensor]]:
    """(draft input ids, fc input [L, num_aux * hidden]) per request, as speculators pairs
    them: taps of position t with the token at t + 1; the last stored tap is the verifier's."""
    out = []
    for sample, length in zip(TrainData(DATA), LENGTHS, strict=False):
        hs = sample.hidden_states[:, :-1].flatten(1).float()
        out.append((sample.input_ids[1 : length + 1].tolist(), hs[:length]))
    return out


def work(server_args, port_args, bench_args, gpu_id, tp_rank):
    runner = load_runner(server_args, port_args, gpu_id, tp_rank).torch_runner
    # as SGLang's EAGLE-3 worker does once both models are loaded: share the target's embedding
    embed = load_file(f"{TARGET}/model.safetensors")["model.embed_tokens.weight"].float()
    runner.model.set_embed(torch.nn.Parameter(embed, requires_grad=False))
    data = inputs()
    fb = draft_extend_batch(runner, data)
    with torch.no_grad():
        logits = runner.forward(fb).logits_output.next_token_logits
    layer0 = runner.model.model.layers[0]
    json.dump(
        {
            "logits": logits.float().tolist(),
            "norm_before_residual_flag": bool(
                getattr(layer0, "sglang_eagle3_norm_before_residual", False)
            ),
        },
        open(OUT + ".sglang", "w"),
    )


def speculators_logits(data) -> list[list[float]]:
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    cfg = Eagle3SpeculatorConfig.from_pretrained(SPEC)
    cfg.transformer_layer_config._attn_implementation = "sdpa"  # flex attention needs a GPU
    # the verifier is TARGET here: a shipped (restored) drafter's config names the path of
    # the cache it was trained in, on another machine
    cfg.speculators_config.verifier.name_or_path = TARGET
    model = Eagle3DraftModel.from_pretrained(SPEC, config=cfg).float().eval()
    seen = []
    model.lm_head.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    rows = []
    for ids, hs in data:
        n = len(ids)
        with torch.no_grad():
            model(
                hidden_states=hs[None],
                input_ids=torch.tensor([ids]),
                document_ids=torch.zeros(1, n, dtype=torch.long),
                position_ids=torch.arange(1, n + 1)[None],
                ttt_steps=1,
            )
        rows.append(seen.pop()[0, -1].double().tolist())
    return rows


run_first_draft_step(work, FLAT, TARGET, len(LENGTHS))

sg = json.load(open(OUT + ".sglang"))
ref = torch.tensor(speculators_logits(inputs()), dtype=torch.float64)
got = torch.tensor(sg["logits"], dtype=torch.float64)
json.dump(
    {
        "max_abs_diff": (got - ref).abs().max().item(),
        "same_argmax": bool((got.argmax(-1) == ref.argmax(-1)).all()),
        "argmax_sglang": got.argmax(-1).tolist(),
        "argmax_speculators": ref.argmax(-1).tolist(),
        "norm_before_residual_flag": sg["norm_before_residual_flag"],
        "rows": len(ref),
    },
    open(OUT, "w"),
    indent=1,
)
