"""spec_flags: SGLang 0.5.23's rules for the three EAGLE flags, and SGLang's own resolution."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.spec_flags import (
    DRAFT,
    STEPS,
    TOPK,
    FlagChange,
    FlagConflict,
    Resolution,
    SpecFlags,
    format_changes_table,
    max_draft_tokens,
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


@pytest.mark.parametrize("user, arch, kw, expect", ROWS)
def test_sglang_rules_table(user, arch, kw, expect):
    if isinstance(expect, tuple):
        res = resolve_spec_flags(user, architecture=arch, **kw)
        assert res.flags.as_tuple() == expect
        derived = {c.flag for c in res.changes}
        assert derived == {f for f, v in zip(FLAGS, user.as_tuple(), strict=True) if v is None}
        assert all(c.from_ is None and c.why.startswith("not given; ") for c in res.changes)
        return
    with pytest.raises(FlagConflict) as info:
        resolve_spec_flags(user, architecture=arch, **kw)
    for part in expect:
        assert part in str(info.value)


def test_notes_table_and_argv():
    res = resolve_spec_flags(SpecFlags(None, 1, 8), architecture=LLAMA)
    assert any("AssertionError" in n for n in res.notes)
    assert any("--max-running-requests to 48" in n for n in res.notes)
    assert not any(
        "max-running" in n
        for n in resolve_spec_flags(SpecFlags(), architecture=DSV3, max_running_requests=8).notes
    )
    table = format_changes_table(res)
    assert table.splitlines()[1].split()[:3] == [STEPS, "-", "7"]
    assert table.splitlines()[2].split() == [TOPK, "1", "1", "given"]
    assert sglang_argv_flags(res) == [STEPS, "7", TOPK, "1", DRAFT, "8"]
    paged = resolve_spec_flags(SpecFlags(), architecture=LLAMA, page_size=16)
    assert any("pass --attention-backend" in n for n in paged.notes)
    change = FlagChange(STEPS, None, 7, "x")
    assert change.to_dict() == {"flag": STEPS, "from": None, "to": 7, "why": "x"}


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3"])
def test_bad_values_are_wiring_errors(bad):
    with pytest.raises(WiringError, match="whole number >= 1"):
        SpecFlags(num_steps=bad)
    with pytest.raises(ValueError):
        Resolution(SpecFlags(1, None, 2))
    with pytest.raises(ValueError):
        FlagChange("--speculative-steps", None, 3, "why")


counts = st.one_of(st.none(), st.integers(1, 40))
options = st.fixed_dictionaries(
    {},
    optional={
        "page_size": st.sampled_from([1, 16]),
        "attention_backend": st.sampled_from([None, "fa3", "triton", "trtllm_mha", "torch_native"]),
        "use_rejection_sampling": st.booleans(),
    },
)


def _sglang_keeps(s: int, k: int, d: int, kw: dict) -> bool:
    """Independent oracle: SGLang 0.5.23 neither rewrites nor rejects (s, k, d)."""
    if k == 1:
        return d == s + 1  # L1255-1266
    tree_ok = not kw.get("use_rejection_sampling") and kw.get("attention_backend") != "trtllm_mha"
    paged_ok = kw.get("page_size", 1) == 1 or kw.get("attention_backend") in (None, "fa3", "triton")
    return tree_ok and paged_ok and 2 <= d <= 1 + k + (s - 1) * k * k


def test_conflict_only_when_no_completion_exists():
    small = [None, 1, 2, 3, 5, 8]
    for (s, k, d), arch, be, ps, rej in itertools.product(
        itertools.product(small, repeat=3), (LLAMA, DSV3), (None, "trtllm_mha"), (1, 16), (0, 1)
    ):
        kw = {"attention_backend": be, "page_size": ps, "use_rejection_sampling": bool(rej)}
        try:
            resolve_spec_flags(SpecFlags(s, k, d), architecture=arch, **kw)
        except FlagConflict:
            options = [[v] if v else range(1, 20) for v in (s, k, d)]
            assert not any(_sglang_keeps(*c, kw) for c in itertools.product(*options))


@settings(max_examples=400, deadline=None)
@given(s=counts, k=counts, d=counts, arch=st.sampled_from([LLAMA, DSV3, QWEN, GROK]), kw=options)
def test_resolved_sets_obey_sglang_and_keep_explicit_values(s, k, d, arch, kw):
    user = SpecFlags(s, k, d)
    try:
        res = resolve_spec_flags(user, architecture=arch, **kw)
    except FlagConflict as err:  # the message names every explicit value
        for flag, v in zip(FLAGS, user.as_tuple(), strict=True):
            assert v is None or f"{flag} {v}" in str(err)
        assert "use one of: " in str(err)
        return
    rs, rk, rd = res.flags.as_tuple()
    assert min(rs, rk, rd) >= 1 and _sglang_keeps(rs, rk, rd, kw)
    assert rk == 1 or rd <= max_draft_tokens(rs, rk)
    for given_v, got in zip(user.as_tuple(), res.flags.as_tuple(), strict=True):
        assert given_v is None or given_v == got
    assert len(res.changes) == user.as_tuple().count(None)
    again = resolve_spec_flags(res.flags, architecture=arch, **kw)  # a fixed point
    assert again.flags == res.flags and again.changes == ()


@settings(max_examples=200, deadline=None)
@given(arch=st.sampled_from([LLAMA, DSV3, QWEN]), kw=options)
def test_nothing_given_never_conflicts(arch, kw):
    assert resolve_spec_flags(SpecFlags(), architecture=arch, **kw).flags.eagle_topk >= 1


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
