"""Stock SGLang 0.5.23 (this project's plugin excluded) reads the flat copy's ids right.

The defect of issue 15: a flat copy carrying speculators' input-to-layer ids makes a
"+1 always" family capture every tap one layer late. `--write-draft-only` now writes the ids
that family's stock rule turns into the declared captures. A stock EAGLE-3 server is started
on the copy with only the CPU harness loaded; its tap recorder saves what the target hands the
drafter, which is compared with HF output_hidden_states over the prompt's prefill.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sglang_checks import PROMPT

from sglang_eagle3 import env_names
from sglang_eagle3.testing.cpu_harness.tap_recorder import recorded_taps
from sglang_eagle3.testing.tiny import family_targets
from sglang_eagle3.testing.tiny.random_speculators import write_random_speculators_draft

FP32 = ["--dtype", "float32", "--attention-backend", "intel_amx"]
EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]  # fmt: skip
HF_INDICES = (0, 2, 5)  # embed, layer:1, layer:4: ascending, so the stock rule can say it
HARNESS_ONLY = {env_names.PLUGINS: "sglang_eagle3_cpu_harness"}  # stock SGLang + CPU harness
WANT_IDS = {"llama": [-1, 1, 4], "qwen3_moe": [-1, 1, 4]}  # "+1 always": id X captures hs[X + 1]


def _write_flat_copy(target, draft, cache) -> tuple[str, dict]:
    argv = [sys.executable, "-m", "sglang_eagle3.launch", "--write-draft-only", "--json",
            "--model-path", str(target), "--speculative-draft-model-path", str(draft),
            "--draft-cache-dir", str(cache), *EAGLE]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if out.returncode:
        pytest.fail(f"--write-draft-only exited {out.returncode}: {out.stderr[-2000:]}")
    argv = json.loads(out.stdout)["sglang_argv"]
    flat = argv[argv.index("--speculative-draft-model-path") + 1]
    with open(f"{flat}/config.json") as f:
        return flat, json.load(f)["eagle_config"]


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(WANT_IDS))
def test_stock_server_captures_the_declared_taps_from_the_flat_copy(
    server_factory, family, tmp_path, figures
):
    import torch

    target = family_targets.tiny_family_target(family)
    draft = write_random_speculators_draft(
        tmp_path / "draft", target, hf_ids=HF_INDICES, num_layers=1, embed_requires_grad=False
    )
    flat, eagle = _write_flat_copy(target, draft, tmp_path / "flat")
    assert eagle["hidden_state_layout"] == ["embed", "layer:1", "layer:4"]
    assert eagle["eagle_aux_hidden_state_layer_ids"] == WANT_IDS[family]

    taps_dir = tmp_path / "taps"
    srv = server_factory(
        target, FP32 + EAGLE + ["--speculative-draft-model-path", flat],
        name=f"stock-flat-{family}", env={**HARNESS_ONLY, env_names.RECORD_TAPS: str(taps_dir)},
    )  # fmt: skip
    log = srv.log()
    assert "plugin loaded in process" not in log and "capturing taps" not in log, "not stock"
    params = {"max_new_tokens": 4, "temperature": 0}
    srv.post("/generate", {"input_ids": PROMPT, "sampling_params": params})

    prefill = [r for r in recorded_taps(taps_dir) if r["input_ids"].tolist() == PROMPT]
    assert prefill, f"no recorded forward over the prompt in {taps_dir}"
    got = prefill[0]["taps"].double()  # [prompt tokens, 3 * hidden]
    model = family_targets.load_family_target(target)
    with torch.no_grad():
        hs = model(torch.tensor([PROMPT]), output_hidden_states=True).hidden_states

    def diff(indices) -> float:
        return (got - torch.cat([hs[i][0] for i in indices], -1).double()).abs().max().item()

    exact, shifted = diff(HF_INDICES), diff(tuple(i + 1 for i in HF_INDICES))
    figures.record(f"{family}: stock server on the flat copy, max |diff| vs HF taps", exact)
    figures.record(f"{family}: the same against every tap one layer late", shifted)
    assert exact < 1e-4, exact
    assert shifted > 1e-2, shifted  # one layer late (the defect) would be told apart
