"""The launcher's flag resolution against SGLang 0.5.23's own, in a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from sglang_eagle3.launch.spec_flags import (
    DRAFT,
    STEPS,
    TOPK,
    FlagConflict,
    SpecFlags,
    resolve_spec_argv,
    resolve_spec_flags,
    sglang_argv_flags,
)

LLAMA, DSV3, QWEN = "LlamaForCausalLM", "DeepseekV3ForCausalLM", "Qwen3ForCausalLM"
GROK = "Grok1ForCausalLM"
FLAGS = (STEPS, TOPK, DRAFT)
SEED = SpecFlags(num_steps=1, eagle_topk=1, num_draft_tokens=16)

# (user flags, architecture, extra kwargs, resolved (steps, topk, draft) or conflict substrings)
ROWS = [
    # all unset: SGLang's auto values (speculative_hook.py L1430-1461)
    (SpecFlags(), LLAMA, {}, (5, 4, 8)),
    (SpecFlags(), GROK, {}, (5, 4, 8)),
    (SpecFlags(), DSV3, {}, (3, 1, 4)),
    (SpecFlags(), QWEN, {}, (3, 1, 4)),  # unlisted architectures get the DeepSeek triple
    # topk 1: draft tokens = steps + 1 (L1255-1266), derived, never rewritten
    (SpecFlags(3, 1, None), LLAMA, {}, (3, 1, 4)),
    (SpecFlags(3, 1, 4), DSV3, {}, (3, 1, 4)),
    (
        SEED,
        DSV3,
        {},
        [
            f"{STEPS} 1 {TOPK} 1 {DRAFT} 16",
            "would silently change 16 to 2",
            f"{STEPS} 15 (a chain of 16 tokens)",
            f"{TOPK} 15 or more",
            f"{DRAFT} 2",
        ],
    ),
    # steps unset (SGLang: bare AssertionError, L1159-1163): derived from what is given
    (SpecFlags(None, 1, 8), LLAMA, {}, (7, 1, 8)),
    (SpecFlags(None, None, 20), DSV3, {}, (19, 1, 20)),
    (SpecFlags(None, 4, 60), DSV3, {}, (5, 4, 60)),  # fewest steps whose tree holds 60
    (SpecFlags(None, 1, None), LLAMA, {}, (5, 1, 6)),
    # topk > 1: draft tokens <= 1 + topk + (steps - 1) * topk^2 (runtime torch.topk)
    (SpecFlags(2, None, 20), DSV3, {}, (2, 4, 20)),
    (SpecFlags(3, 4, 37), LLAMA, {}, (3, 4, 37)),
    (SpecFlags(3, 4, 38), LLAMA, {}, ["at most 37 draft tokens", f"{DRAFT} between 2 and 37"]),
    (SpecFlags(3, 4, 1), LLAMA, {}, ["verifies no draft token"]),
    (SpecFlags(2, 8, None), DSV3, {}, (2, 8, 4)),
    # trees ruled out: trtllm_mha (L1176-1180), rejection sampling (L1220-1224), paging
    (SpecFlags(), LLAMA, {"attention_backend": "trtllm_mha"}, (5, 1, 6)),
    (SpecFlags(), LLAMA, {"decode_attention_backend": "trtllm_mha"}, (5, 1, 6)),
    (SpecFlags(), LLAMA, {"use_rejection_sampling": True}, (5, 1, 6)),
    (SpecFlags(), LLAMA, {"use_block_verification": True}, (5, 1, 6)),
    (
        SpecFlags(3, 4, 8),
        LLAMA,
        {"use_rejection_sampling": True},
        [
            "rejection sampling",
            f"{DRAFT} 4 with {TOPK} 1 (a chain)",
            "no --speculative-use-rejection-sampling",
        ],
    ),
    (SpecFlags(3, 4, 8), LLAMA, {"attention_backend": "trtllm_mha"}, ["trtllm_mha"]),
    (
        SpecFlags(3, 4, 8),
        LLAMA,
        {"page_size": 16, "attention_backend": "torch_native"},
        ["--page-size 16", "flashinfer/fa3/triton", "--page-size 1 or --attention-backend"],
    ),
    (SpecFlags(3, 4, 8), LLAMA, {"page_size": 16, "attention_backend": "fa3"}, (3, 4, 8)),
    (SpecFlags(), LLAMA, {"page_size": 16, "attention_backend": "torch_native"}, (5, 1, 6)),
    (
        SpecFlags(1, None, 16),
        DSV3,
        {"use_rejection_sampling": True},
        [f"{TOPK} 1 (derived)", f"{STEPS} 15", f"{DRAFT} 2"],
    ),
]


# --- SGLang's own resolution, in a subprocess (its import is heavy and mutates globals) ----
_PROBE = r"""
import json, sys
from sglang.srt.arg_groups.overrides import resolution_result
from sglang.srt.server_args import prepare_server_args
out = []
for argv in json.load(sys.stdin):
    try:
        sa = prepare_server_args(argv)
        sa.resolve_once()
        out.append([resolution_result(sa, "speculative_" + f)
                    for f in ("num_steps", "eagle_topk", "num_draft_tokens")])
    except Exception as e:
        out.append(f"{type(e).__name__}: {e}")
print("RESULT " + json.dumps(out))
"""
_LLAMA_CFG = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}
_DSV3_CFG = {
    **_LLAMA_CFG,
    "model_type": "deepseek_v3",
    "num_key_value_heads": 4,
    "moe_intermediate_size": 32,
    "first_k_dense_replace": 1,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "q_lora_rank": None,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
}


def _write(dirpath, cfg):
    dirpath.mkdir()
    (dirpath / "config.json").write_text(json.dumps(cfg))
    return str(dirpath)


@pytest.fixture(scope="module")
def sglang_resolve(tmp_path_factory):
    if importlib.util.find_spec("sglang") is None:
        pytest.skip("SGLang is not installed")
    root = tmp_path_factory.mktemp("spec_flags")
    models = {
        LLAMA: _write(
            root / "llama", {**_LLAMA_CFG, "architectures": [LLAMA], "num_hidden_layers": 2}
        ),
        DSV3: _write(root / "dsv3", {**_DSV3_CFG, "architectures": [DSV3], "num_hidden_layers": 2}),
    }
    draft = _write(
        root / "draft",
        {
            **_LLAMA_CFG,
            "architectures": ["LlamaForCausalLMEagle3"],
            "num_hidden_layers": 1,
            "draft_vocab_size": 256,
        },
    )

    def run(cases):
        argvs = [
            [
                "--model-path",
                models[arch],
                "--speculative-algorithm",
                "EAGLE3",
                "--speculative-draft-model-path",
                draft,
                "--device",
                "cpu",
                *extra,
            ]
            for arch, extra in cases
        ]
        env = {**os.environ, "SGLANG_PLUGINS": "__none__"}  # SGLang alone, no plugins
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE],
            input=json.dumps(argvs),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        assert proc.returncode == 0 and line, proc.stderr[-3000:]
        return json.loads(line[-1][len("RESULT ") :])

    return run


@pytest.mark.sglang
def test_sglang_keeps_every_resolved_set(sglang_resolve):
    cases = [  # (user flags, architecture, extra SGLang flags)
        (SpecFlags(), LLAMA, []),
        (SpecFlags(), DSV3, []),
        (SpecFlags(None, 1, 8), LLAMA, []),
        (SpecFlags(3, 1, None), LLAMA, []),
        (SpecFlags(2, None, 20), DSV3, []),
        (SpecFlags(None, 4, 60), DSV3, []),
        (SpecFlags(), LLAMA, ["--page-size", "16", "--attention-backend", "triton"]),
    ]
    resolved, runs = [], []
    for user, arch, extra in cases:
        kw = {"page_size": 16, "attention_backend": "triton"} if extra else {}
        res = resolve_spec_flags(user, architecture=arch, **kw)
        resolved.append(list(res.flags.as_tuple()))
        runs.append((arch, extra + sglang_argv_flags(res)))
    # the seed's flags: SGLang silently turns 16 draft tokens into 2; we refuse instead
    seed_argv = [STEPS, "1", TOPK, "1", DRAFT, "16"]
    # a tree on a paged torch_native cache: SGLang raises, as our FlagConflict says it would
    paged = [STEPS, "3", TOPK, "4", DRAFT, "8", "--page-size", "16"]
    got = sglang_resolve(runs + [(DSV3, seed_argv), (LLAMA, paged)])
    assert got[: len(cases)] == resolved
    assert got[-2] == [1, 1, 2]
    with pytest.raises(FlagConflict, match="would silently change 16 to 2"):
        resolve_spec_flags(SEED, architecture=DSV3)
    assert "page_size > 1 is only supported on" in got[-1]
    with pytest.raises(FlagConflict, match="--page-size 16"):
        resolve_spec_flags(
            SpecFlags(3, 4, 8), architecture=LLAMA, page_size=16, attention_backend="torch_native"
        )


@pytest.mark.sglang
def test_chain_only_options_the_launcher_refuses_sglang_refuses_too(sglang_resolve):
    tree = [STEPS, "3", TOPK, "2", DRAFT, "4"]
    rejection = [*tree, "--speculative-use-rejection-sampling"]
    block = [*tree, "--speculative-use-block-verification"]
    got = sglang_resolve([(LLAMA, rejection), (LLAMA, block)])
    assert "requires --speculative-eagle-topk=1" in str(got[0]), got[0]
    assert isinstance(got[1], str), got[1]  # an error (on CPU: block verification needs CUDA)
    for argv in (rejection, block):
        with pytest.raises(FlagConflict, match="needs --speculative-eagle-topk 1"):
            resolve_spec_argv(argv, architecture=LLAMA)
