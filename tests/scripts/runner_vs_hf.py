"""Real SGLang ModelRunner (in process, CPU harness) against HF transformers on one target.

Run as: python runner_vs_hf.py TARGET_DIR OUT_JSON  (in the harness environment). Does a
prefill of a prefix, an extend on the cached prefix, then DECODE_STEPS greedy decode steps,
and records SGLang's logits at each step next to HF's logits for the same tokens.
"""

import json
import sys

import torch
from sglang.srt.plugins import load_plugins

load_plugins()  # the CPU harness is a plugin: SGLang's own mechanism, as in a server

import sglang.benchmark.one_batch as ob  # noqa: E402
from one_batch_runner import load_runner  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

from sglang_eagle3.checkpoint.hf_target import load_hf_target  # noqa: E402

DECODE_STEPS = 6
TARGET, OUT = sys.argv[1], sys.argv[2]
PROMPTS = [[1, 17, 300, 45, 99, 512, 7, 64, 128, 3], [1, 400, 401, 402, 5, 6, 7, 8, 9, 10, 11]]
CUT = 4


def work(server_args, port_args, bench_args, gpu_id, tp_rank):
    runner = load_runner(server_args, port_args, gpu_id, tp_rank)
    params = ob.SamplingParams(temperature=0, max_new_tokens=DECODE_STEPS + 1)
    reqs = []
    for i, ids in enumerate(PROMPTS):
        req = ob.Req(rid=i, origin_input_text="", origin_input_ids=ob.array("q", ids[:CUT]),
                     sampling_params=params)  # fmt: skip
        req.full_untruncated_fill_ids = req.origin_input_ids
        req.logprob_start_len = -1
        req.extend_end = CUT
        reqs.append(req)
    seqs = [list(p[:CUT]) for p in PROMPTS]
    nxt, logits, _ = runner.extend(reqs)  # prefill of the prefix
    steps = [("prefill", [list(s) for s in seqs], logits.float().tolist(), nxt.tolist())]
    seqs = [list(p) for p in PROMPTS]
    for i, req in enumerate(reqs):
        req.full_untruncated_fill_ids.extend(PROMPTS[i][CUT:])
        req.prefix_len = CUT
        req.logprob_start_len = -1
        req.extend_end = len(req.full_untruncated_fill_ids)
    nxt, logits, batch = runner.extend(reqs)  # extend on the cached prefix
    steps.append(("extend", [list(s) for s in seqs], logits.float().tolist(), nxt.tolist()))
    for _ in range(DECODE_STEPS):
        for b, seq in enumerate(seqs):
            seq.append(nxt.tolist()[b])
        nxt, logits = runner.decode(nxt, batch)
        steps.append(("decode", [list(s) for s in seqs], logits.float().tolist(), nxt.tolist()))
    json.dump({"steps": steps}, open(OUT + ".sglang", "w"))


ob.correctness_test = work
server_args = ServerArgs(
    model_path=TARGET, device="cpu", dtype="float32", attention_backend="torch_native",
    cuda_graph_backend_decode="disabled", cuda_graph_backend_prefill="disabled",
    mem_fraction_static=0.1, max_total_tokens=2048, chunked_prefill_size=512,
    disable_radix_cache=True,
)  # fmt: skip
bench_args = ob.BenchArgs(batch_size=(len(PROMPTS),), correctness_test=True, cut_len=CUT)
ob.main(server_args, bench_args)

sg = json.load(open(OUT + ".sglang"))["steps"]
hf = load_hf_target(TARGET).eval()
max_diff, same_tokens, records = 0.0, True, []
for kind, seqs, sg_logits, sg_next in sg:
    with torch.no_grad():
        for b, seq in enumerate(seqs):
            ref = hf(torch.tensor([seq])).logits[0, -1].double()
            diff = (torch.tensor(sg_logits[b]).double() - ref).abs().max().item()
            max_diff = max(max_diff, diff)
            same_tokens &= int(ref.argmax()) == sg_next[b]
            records.append({"kind": kind, "row": b, "len": len(seq), "max_abs_diff": diff})
json.dump({"max_abs_diff": max_diff, "same_greedy_tokens": same_tokens, "steps": records,
           "decode_steps": DECODE_STEPS}, open(OUT, "w"), indent=1)  # fmt: skip
