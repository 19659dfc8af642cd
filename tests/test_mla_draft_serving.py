"""SGLang's own MLA drafter (Eagle3DeepseekV2ForCausalLM) through the launcher on the tiny
DeepSeek-V3 target: the declared taps (embed included, not ascending), the fc permuted at
load, the load-gap check passed, and the same greedy tokens as plain decoding.

A random MLA draft with fc_norm, norm_output, d2t and its own trained embedding: random
weights accept few drafts, but losslessness, the capture plan and the loader do not depend on
how many are accepted.
"""

from __future__ import annotations

import pytest
from sglang_checks import assert_lossless, generate

from sglang_eagle3.testing.tiny.random_mla_draft import write_random_mla_draft

FP32 = ["--cpu", "--dtype", "float32", "--attention-backend", "intel_amx"]
EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]  # fmt: skip
PROMPTS = ["def main(", "import os\n", "class Foo:", "for i in range(", "return self.",
           "if __name__ ==", "    def __init__(self", "# Copyright"]  # fmt: skip
LAYOUT = ["layer:5", "embed", "layer:2"]


@pytest.mark.sglang
@pytest.mark.slow
def test_mla_draft_through_the_launcher_is_lossless(
    server_factory, plain_tiny_server, tiny_target, tmp_path, figures
):
    draft = write_random_mla_draft(
        tmp_path / "draft",
        tiny_target,
        eagle_config={"hidden_state_layout": LAYOUT},
        fc_norm=True,
        norm_output=True,
        d2t=True,
        # SGLang's MLA set_embed (sharing the target's embedding) calls torch.cuda.synchronize()
        # and dies on CPU; a trained embedding is kept by the plugin and never shared
        extra_config={"embed_requires_grad": True},
    )
    want = {p: generate(plain_tiny_server, p)["output_ids"] for p in PROMPTS}
    srv = server_factory(
        tiny_target,
        FP32 + EAGLE + ["--speculative-draft-model-path", str(draft)],
        name="eagle3-mla", cpu=False, module="sglang_eagle3.launch",
    )  # fmt: skip
    log = srv.log()
    assert "capturing taps layer:5, embed, layer:2 (SGLang capture " in log
    assert "drafter fc: column blocks of taps layer:5, embed, layer:2 moved" in log
    assert "Eagle3 MLA: skipping unexpected weight" not in log
    assert "drafter fc: eagle3_fused_fc not installed on Eagle3DeepseekV2ForCausalLM" in log
    assert_lossless(srv, PROMPTS, want, figures, "MLA draft")
