"""EAGLE-3 on non-DeepSeek targets through the launcher: the declared taps, and the same greedy
tokens as plain decoding.

A speculators-format random drafter (its taps `layer:5, embed, layer:2`: embed, and not
ascending) on tiny random Llama and Qwen3-MoE targets. Random weights accept few drafts, but
losslessness and the capture plan do not depend on how many are accepted.
"""

from __future__ import annotations

import pytest
from sglang_checks import assert_lossless, generate

from sglang_eagle3.testing.tiny import family_targets
from sglang_eagle3.testing.tiny.random_speculators import write_random_speculators_draft

FP32 = ["--cpu", "--dtype", "float32", "--attention-backend", "intel_amx"]
EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]  # fmt: skip
PROMPTS = ["def main(", "import os\n", "class Foo:", "for i in range(", "return self.",
           "if __name__ ==", "    def __init__(self", "# Copyright"]  # fmt: skip
ARCH = {"llama": "LlamaForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}


@pytest.mark.parametrize("family", sorted(ARCH))
def test_eagle3_through_the_launcher_is_lossless(server_factory, family, tmp_path, figures):
    target = family_targets.tiny_family_target(family)
    draft = write_random_speculators_draft(
        tmp_path / "draft", target, hf_ids=(6, 0, 3), num_layers=1, embed_requires_grad=False
    )
    plain = server_factory(target, FP32, name=f"plain-{family}", cpu=False,
                           module="sglang_eagle3.launch")  # fmt: skip
    want = {p: generate(plain, p)["output_ids"] for p in PROMPTS}
    plain.stop()  # one server at a time: two would share the two cores
    srv = server_factory(
        target,
        FP32 + EAGLE + ["--speculative-draft-model-path", str(draft),
                        "--draft-cache-dir", str(tmp_path / "drafts")],
        name=f"eagle3-{family}", cpu=False, module="sglang_eagle3.launch",
    )  # fmt: skip
    log = srv.log()
    assert f"{ARCH[family]}: capturing taps layer:5, embed, layer:2 (SGLang capture " in log
    assert "fc column blocks permuted [2, 0, 1]" in log
    # ... and the served drafter's fc really was permuted (SGLang loads it before the target
    # sets its capture up, so this once silently did not happen)
    assert "drafter fc: column blocks of taps layer:5, embed, layer:2 moved to capture order" in log
    assert_lossless(srv, PROMPTS, want, figures, family)
