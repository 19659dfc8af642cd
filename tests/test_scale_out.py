"""Tensor parallelism, DP attention and expert parallelism on real SGLang 0.5.23: two ranks on
this machine's two cores (CPU harness: gloo collectives, one core per rank).

Capture tests: concurrent requests of different lengths, so DP attention really splits the
batch; prefill and decode rows against HF (under EP at the dense layer's tap and an MoE
layer's). EAGLE-3 tests with the demo's trained drafter under TP=2, DP attention, EP and EP + DP
attention: greedy tokens equal plain TP=1's, also in an uneven concurrent round (DP attention's
ranks then run padded batches and idle batches), accept length within 2 % of TP=1's. PD
disaggregation: tests/test_scale_out_pd.py.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from sglang_eagle3 import env_names
from sglang_eagle3.testing.demo import spec_flags

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

FP32 = ["--dtype", "float32", "--attention-backend", "intel_amx"]
MODES = {
    "tp2": ["--tp-size", "2"],
    # torch_native lacks the padding hook DP attention calls (get_cpu_graph_seq_len_fill_value)
    "dp_attention": ["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"],
    # expert parallelism: each rank holds 4 of the 8 routed experts (CPU harness: the other
    # rank's experts masked, README "Scale-out")
    "ep": ["--tp-size", "2", "--ep-size", "2"],
    "dp_ep": ["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention", "--ep-size", "2"],
}
RANKS = {env_names.CPU_OMP_THREADS_BIND: "0|1", "OMP_NUM_THREADS": "1"}  # a core per rank
LAYOUT = "embed,layer:2,layer:5"  # the seed's fix at toy scale
HF_INDICES = (0, 3, 6)
# Under EP a tap at the dense layer (first_k_dense_replace = 1: layer 0) and one at an MoE
# layer (upstream #14280: their residuals can be laid out differently across ranks)
EP_LAYOUT, EP_HF_INDICES = "embed,layer:0,layer:5", (0, 1, 6)
# different lengths, so DP attention gives the two ranks batches of different shapes
PROMPT_IDS = [[0, *range(17, 17 + 5 * k, 5)] for k in (2, 7, 3, 12, 5, 9)]


def _plan_lines(log: str, arch: str) -> list[tuple[int, str]]:
    pattern = rf"pid=(\d+)\] INFO {arch}: capturing taps (.*)"
    return [(int(pid), text) for pid, text in re.findall(pattern, log)]


def _assert_every_rank_applied_one_plan(log: str, arch: str = "DeepseekV3ForCausalLM") -> None:
    lines = _plan_lines(log, arch)
    assert len({pid for pid, _ in lines}) == 2, lines  # one line per rank, two ranks
    assert len({text for _, text in lines}) == 1, lines
    assert "[all 2 ranks agree]" in lines[0][1]


def _capture(srv, ids: list[int]) -> tuple[dict, list[int]]:
    params = {"max_new_tokens": 4, "temperature": 0}
    return srv.post("/generate", {"input_ids": ids, "return_hidden_states": True,
                                  "sampling_params": params}), ids  # fmt: skip


def _target(name: str):
    """(target dir, HF loader, architecture) of a tiny target: DeepSeek-V3 or Llama."""
    from sglang_eagle3.checkpoint.hf_target import load_hf_target
    from sglang_eagle3.testing.tiny import family_targets
    from sglang_eagle3.testing.tiny.cache import tiny_target_dir

    if name == "llama":
        return (family_targets.tiny_family_target("llama"), family_targets.load_family_target,
                "LlamaForCausalLM")  # fmt: skip
    return tiny_target_dir(train_steps=0), load_hf_target, "DeepseekV3ForCausalLM"


@pytest.mark.parametrize(
    "target_name,mode",
    [("deepseek", "tp2"), ("deepseek", "dp_attention"), ("llama", "tp2"), ("deepseek", "ep")],
)
def test_capture_is_exact_with_two_ranks(
    server_factory, target_name, mode, tmp_path, figures, capsys
):
    import torch

    layout, hf_indices = (EP_LAYOUT, EP_HF_INDICES) if mode == "ep" else (LAYOUT, HF_INDICES)
    target, loader, arch = _target(target_name)
    folder = tmp_path / "files"  # capture to files on: JSON rows gain the verifier block
    folder.mkdir()
    srv = server_factory(
        target,
        FP32 + MODES[mode] + ["--enable-return-aux-hidden-states", "--speculative-algorithm",
                              "EAGLE3", "--disable-radix-cache"],
        name=f"capture-{target_name}-{mode}",
        env={env_names.LAYOUT: layout, env_names.CAPTURE_DIR: str(folder), **RANKS},
        # spawned: each rank loads the plugin and reads the plan itself, as in production. EP
        # and Llama fork their ranks from the launcher (half the start time): the experts and
        # the family are what they add to DeepSeek's spawned TP=2
        spawn=target_name == "deepseek" and mode != "ep",
    )  # fmt: skip
    _assert_every_rank_applied_one_plan(srv.log(), arch)
    with ThreadPoolExecutor(len(PROMPT_IDS)) as pool:
        results = list(pool.map(lambda ids: _capture(srv, ids), PROMPT_IDS))
    model = loader(target)
    worst, rows = 0.0, 0
    for out, ids in results:
        chunks = out["meta_info"]["hidden_states"]
        assert len(chunks) >= 3, "a prefill and at least two decode steps"
        decode = [torch.tensor(c).reshape(1, -1) for c in chunks[1:]]
        got = torch.cat([torch.tensor(chunks[0]), *decode]).double()
        got = got[:, : got.shape[1] * len(hf_indices) // (len(hf_indices) + 1)]
        start = len(ids) - len(chunks[0])  # rows the radix cache already held are not sent
        with torch.no_grad():
            hs = model(torch.tensor([ids + out["output_ids"]]), output_hidden_states=True)
        ref = torch.cat([hs.hidden_states[i][0] for i in hf_indices], -1).double()
        worst = max(worst, (got - ref[start : start + len(got)]).abs().max().item())
        rows += len(got)
    figures.record(
        f"{target_name} {mode}: max |diff| capture vs HF over {rows} rows, 6 concurrent", worst
    )
    assert worst < 1e-4, worst
    if mode != "ep":  # which rank writes a sample depends on TP and DP, not on the experts
        _capture_files(srv, target, loader, f"{target_name} {mode}", tmp_path, figures, capsys)


def _capture_files(srv, target, loader, name, tmp_path, figures, capsys) -> None:
    """The capture CLI (in process: no interpreter start) against the two-rank server: each
    sample written once (one rank under TP; each DP rank its own requests), its taps equal to
    HF's, one index."""
    import json

    import torch
    from safetensors.torch import load_file

    from sglang_eagle3.capture.cli import main
    from sglang_eagle3.data.manifest import read_manifest

    texts = ["def f(x):\n    return x * 2\n" * k for k in (1, 4, 2, 6, 3, 5)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "captured"
    capsys.readouterr()
    code = main(["--data", str(data), "--out", str(out), "--hidden-state-layout", LAYOUT,
                 "--server", srv.url, "--no-progress", "--json"])  # fmt: skip
    got = capsys.readouterr()
    assert code == 0, got.err[-3000:]
    assert json.loads(got.out)["samples"] == len(texts)
    assert read_manifest(out).samples == len(texts)
    assert sorted(p.name for p in (out / "hidden_states").iterdir()) == sorted(
        f"hs_{i}.safetensors" for i in range(len(texts)))  # fmt: skip
    assert not list((tmp_path / "files").iterdir())  # every file adopted, no rank wrote twice
    model, worst = loader(target), 0.0
    for i in range(len(texts)):
        f = load_file(str(out / "hidden_states" / f"hs_{i}.safetensors"))
        with torch.no_grad():
            hs = model(f["token_ids"][None], output_hidden_states=True).hidden_states
        ref = torch.stack([hs[j][0] for j in HF_INDICES], 1)
        worst = max(worst, (f["hidden_states"][:, :3].double() - ref.double()).abs().max().item())
    figures.record(f"{name}: capture CLI files vs HF, {len(texts)} samples", worst)
    assert worst < 1e-4, worst


def _serve_eagle3(factory, tp1, extra, name, env, tmp, spawn=True):
    drafter = tp1["drafter"]
    return factory(
        drafter.target_dir,
        ["--cpu", *FP32, *tp1["spec"], *extra, "--speculative-draft-model-path",
         str(drafter.draft_dir), "--draft-cache-dir", str(tmp / "drafts")],
        name=name, cpu=False, module="sglang_eagle3.launch", env=env, spawn=spawn,
    )  # fmt: skip


# Lengths of the uneven concurrent round: 7 requests of different prompt and output lengths,
# so DP attention's two ranks run batches of different sizes, and one runs idle batches at the
# end (the shapes SGLang pads to the largest rank's).
UNEVEN_NEW = [32, 9, 20, 32, 5, 14, 27]


def _run(srv, prompt_ids: list[list[int]], max_new: int):
    """(sequential outputs, 8 concurrent outputs, the uneven round's outputs, accept length
    over the sequential ones)."""
    from sglang_eagle3.bench.metrics import spec_stats

    def one(ids: list[int], n: int = max_new) -> dict:
        params = {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}
        return srv.post("/generate", {"input_ids": ids, "sampling_params": params})

    seq = [one(ids) for ids in prompt_ids]
    with ThreadPoolExecutor(8) as pool:
        conc = list(pool.map(one, prompt_ids))
        uneven = list(pool.map(one, _uneven(prompt_ids), UNEVEN_NEW))
    accept = spec_stats(o["meta_info"] for o in seq).accept_length
    ids = [[o["output_ids"] for o in outs] for outs in (seq, conc, uneven)]
    return *ids, accept


def _uneven(items: list) -> list:
    return [items[i % len(items)] for i in range(len(UNEVEN_NEW))]


def _assert_lossless(mode, tp1, seq, conc, uneven, accept, figures) -> None:
    """Greedy tokens equal plain TP=1's (the uneven round: a prefix of them, as long as each
    request asked) and the accept length within 2 % of unified TP=1's."""
    same = sum(a == b for a, b in zip(seq, tp1["want"], strict=True))
    figures.record(f"{mode}: EAGLE-3 prompts equal to plain TP=1 greedy", f"{same} of {len(seq)}")
    figures.record(f"{mode}: accept length (TP=1: {tp1['accept']:.4f})", accept, ".4f")
    assert seq == tp1["want"]
    assert conc == tp1["want"]
    assert uneven == [w[:n] for w, n in zip(_uneven(tp1["want"]), UNEVEN_NEW, strict=True)]
    assert abs(accept - tp1["accept"]) <= 0.02 * tp1["accept"], (accept, tp1["accept"])


@pytest.fixture(scope="module")
def tp1(demo_run):
    """Plain and EAGLE-3 at TP=1: the demo's own servers (the same trained drafter, tree and
    greedy requests; the demo checks that EAGLE-3 is lossless there), not a second pair."""
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    result = demo_run["result"]
    rows = {r["name"]: r for r in result["rows"]}
    sp = result["speculative"]  # the tuner's pick at concurrency 1 (testing/demo.py)
    assert rows["declared-layout"]["output_ids"] == rows["plain"]["output_ids"]
    return {
        "drafter": tiny_drafter(), "prompt_ids": result["prompt_ids"],
        "max_new": result["max_new_tokens"], "want": rows["plain"]["output_ids"],
        "accept": rows["declared-layout"]["accept_length"],
        "spec": spec_flags(sp["num_steps"], sp["eagle_topk"], sp["num_draft_tokens"]),
    }  # fmt: skip


@pytest.mark.parametrize("mode", ["tp2", "dp_attention", "ep", "dp_ep"])
def test_eagle3_with_two_ranks_is_lossless(server_factory, tp1, mode, tmp_path, figures):
    # TP=2 spawns its ranks (each loads the plugin itself, as in production); the other modes
    # fork them from the launcher (tests/README.md: half the start time)
    srv = _serve_eagle3(server_factory, tp1, MODES[mode], f"eagle3-{mode}",
                        RANKS, tmp_path, spawn=mode == "tp2")  # fmt: skip
    _assert_every_rank_applied_one_plan(srv.log())
    _assert_lossless(mode, tp1, *_run(srv, tp1["prompt_ids"], tp1["max_new"]), figures)
