"""The launcher's flag resolution against SGLang 0.5.23's own, in a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from test_spec_flags import DSV3, LLAMA, SEED

from sglang_eagle3.launch.spec_flags import (
    DRAFT,
    STEPS,
    TOPK,
    FlagConflict,
    SpecFlags,
    resolve_spec_flags,
    sglang_argv_flags,
)
from sglang_eagle3.launch.spec_resolve import resolve_spec_argv

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
