"""The manifest closes the loop, end to end on real components: capture the trained tiny target's
data through a launched SGLang, train a drafter on it with speculators' own model, dataset
reader, collate and shift, `layout stamp` it, and serve it through the launcher.

The data's taps are layer:5,embed,layer:2 (not ascending); the draft's own config says
embed,layer:2,layer:5, and the launcher refuses it against the data's manifest. The stamped
copy is served in the fc's order, against stock wiring (the demo's row: stock SGLang on a
hand-flattened copy, its ids ignored for the family's default taps, as in the seed). Both are
lossless against HF greedy decoding.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sglang_eagle3.testing.demo import STOCK_ONLY, stock_flat_copy
from sglang_eagle3.testing.tiny.drafter import DrafterRecipe, _one_thread, tiny_drafter

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

FC = "layer:5,embed,layer:2"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SPEC = ["--cpu", "--dtype", "float32", "--attention-backend", "intel_amx",
        "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]  # fmt: skip
PROMPTS = ["def main(", "import os\n", "class Foo:", "for i in range(", "return self.",
           "if __name__ =="]  # fmt: skip
NEW_TOKENS = 32
STEPS, BATCH_TOKENS, PER_STEP = 300, 1024, 5


def train_on(data: Path, target_dir: Path, out: Path) -> float:
    """A speculators Eagle3DraftModel trained on ``data`` (speculators' reader, collate and
    shift_batch); its last 20 losses' mean."""
    from speculators.losses import resolve_loss_config
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import ArrowDataset, CollateFn

    from sglang_eagle3.doctor.target import load_hf, target_config
    from sglang_eagle3.testing.tiny.drafter_train import speculators_draft

    target = load_hf(target_dir, target_config(target_dir))
    recipe = DrafterRecipe(taps=("embed", "layer:2", "layer:5"))  # a config the data disowns
    model = speculators_draft(recipe, target_dir, target)
    ds = ArrowDataset(BATCH_TOKENS, str(data), on_missing="raise",
                      hidden_states_dtype=torch.float32)  # fmt: skip
    collate = CollateFn(BATCH_TOKENS, target.config.hidden_size, num_target_layers=3,
                        dtype=torch.float32, preprocess=shift_batch)  # fmt: skip
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0)
    loss_config = resolve_loss_config("kl_div", "eager")
    gen, losses = torch.Generator().manual_seed(0), []
    model.train()
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = recipe.lr * min(1.0, (step + 1) / 20) * (
                0.1 + 0.45 * (1 + math.cos(math.pi * step / STEPS)))  # fmt: skip
        pick = torch.randperm(len(ds), generator=gen)[:PER_STEP].tolist()
        batch = collate([ds[i] for i in pick])
        batch = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        _, loss, _ = model(**batch, ttt_steps=recipe.ttt_steps, loss_config=loss_config)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
    model.save_pretrained(str(out))
    return sum(losses[-20:]) / 20


def hf_greedy(target_dir: Path) -> dict[str, list[int]]:
    from transformers import AutoTokenizer

    from sglang_eagle3.doctor.target import load_hf, target_config

    model = load_hf(target_dir, target_config(target_dir))
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    out = {}
    for p in PROMPTS:
        ids = torch.tensor([tok(p)["input_ids"]])
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
        out[p] = gen[0, ids.shape[1] :].tolist()
    return out


def served(srv) -> tuple[dict[str, list[int]], float]:
    """Greedy outputs per prompt, and SGLang's accept length (tokens / verifies) over them."""
    from sglang_eagle3.bench.metrics import spec_stats

    got = {p: srv.post("/generate", {"text": p, "sampling_params": {
        "max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True}})
        for p in PROMPTS}  # fmt: skip
    stats = spec_stats(g["meta_info"] for g in got.values())
    return {p: g["output_ids"] for p, g in got.items()}, stats.sglang_accept_length


def test_capture_train_stamp_serve(module_server_factory, tmp_path, figures):
    from sglang_eagle3.testing.tiny.corpus import iter_texts, stdlib_files

    target = tiny_drafter().target_dir
    text = ""
    for t in iter_texts(stdlib_files("train")):
        text += t
        if len(text) > 160 * 400:
            break
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": text[i * 400 : (i + 1) * 400]}) + "\n"
                            for i in range(160)), encoding="utf-8")  # fmt: skip
    captured = tmp_path / "captured"
    got = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.capture", "--data", str(data), "--out",
         str(captured), "--hidden-state-layout", FC, "--model-path", str(target), "--cpu",
         "--dtype", "float32", "--no-progress", "--json"],
        capture_output=True, text=True, timeout=600, env=ENV,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    assert json.loads(got.stdout)["samples"] == 160
    with _one_thread():  # a second thread spins on the other worker's core
        loss = train_on(captured, target, tmp_path / "draft")
    stamped = tmp_path / "stamped"
    got = subprocess.run([sys.executable, "-m", "sglang_eagle3.layout", "stamp", "--draft",
                          str(tmp_path / "draft"), "--data", str(captured), "--out",
                          str(stamped)], capture_output=True, text=True, env=ENV)  # fmt: skip
    assert got.returncode == 0, got.stderr
    # both servers start at once, and HF's greedy reference and the refusal run meanwhile
    ours = module_server_factory(
        target, [*SPEC, "--speculative-draft-model-path", str(stamped),
                 "--training-data", str(captured)],
        name="stamped", module="sglang_eagle3.launch", cpu=True, wait=False,
    )  # fmt: skip
    # stock wiring, as the demo's row: stock SGLang on a hand-flattened copy of the draft as
    # trained (its ids ignored: the family default taps; norm_before_residual ignored too)
    flat = stock_flat_copy(tmp_path / "draft", target, tmp_path / "stock-draft")
    stock = module_server_factory(
        target, [*SPEC[1:], "--speculative-draft-model-path", str(flat)],
        name="stock-wiring", module="sglang.launch_server", env=STOCK_ONLY, cpu=True,
        wait=False,
    )  # fmt: skip
    # the draft as trained, before the stamp (its config says embed,layer:2,layer:5): the
    # data's manifest refuses it
    draft = ["--model-path", str(target), *SPEC, "--speculative-draft-model-path",
             str(tmp_path / "draft")]  # fmt: skip
    refused = subprocess.run([sys.executable, "-m", "sglang_eagle3.launch", *draft,
                              "--training-data", str(captured), "--dry-run"],
                             capture_output=True, text=True, env=ENV)  # fmt: skip
    assert refused.returncode == 2 and "stamp" in refused.stderr, refused.stderr
    with _one_thread():  # a second thread spins on the other worker's core
        want = hf_greedy(target)
    ours.wait_ready()
    outs, accept = served(ours)
    assert outs == want  # lossless
    stock.wait_ready()
    outs_stock, accept_stock = served(stock)
    assert outs_stock == want
    figures.record(f"capture -> train -> stamp -> serve: accept length, stamped vs stock "
                   f"wiring (training loss {loss:.2f})",
                   f"{accept:.2f} vs {accept_stock:.2f}")  # fmt: skip
    assert accept >= 1.5 * accept_stock
