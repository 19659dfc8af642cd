"""spec_flags: SGLang 0.5.23's rules for the three EAGLE flags, and SGLang's own resolution."""

from __future__ import annotations

import itertools

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
    max_draft_tokens,
    resolve_spec_flags,
    sglang_argv_flags,
)
from sglang_eagle3.launch.spec_resolve import resolve_spec_argv

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
    (SpecFlags(3, 4, 38), LLAMA, {}, ["at most 37 draft tokens", f"{DRAFT} between 4 and 37"]),
    # a tree needs draft tokens >= steps + 1: fewer crashed a real CPU server at its first verify
    # (eagle_worker_common._compact_accept_to_front), seen with steps 2, topk 2, draft tokens 2
    (
        SpecFlags(2, 2, 2),
        LLAMA,
        {},
        [f"{DRAFT} >= {STEPS} + 1 = 3", f"{STEPS} 1 (a topk-2 tree", f"{DRAFT} between 3 and 7"],
    ),
    (SpecFlags(None, 4, 3), DSV3, {}, (2, 4, 3)),
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
    assert [(c.flag, c.from_, c.to) for c in res.changes] == [(STEPS, None, 7)]
    assert sglang_argv_flags(res) == [STEPS, "7", TOPK, "1", DRAFT, "8"]
    paged = resolve_spec_flags(SpecFlags(), architecture=LLAMA, page_size=16)
    assert any("pass --attention-backend" in n for n in paged.notes)
    change = FlagChange(STEPS, None, 7, "x")
    assert change.to_dict() == {"flag": STEPS, "from": None, "to": 7, "why": "x"}


def test_argv_resolution_reads_every_flag_the_rules_use():
    tree = [STEPS, "3", TOPK, "2", DRAFT, "6"]
    assert resolve_spec_argv(tree, architecture=DSV3).flags.as_tuple() == (3, 2, 6)
    for extra, why in [
        (["--speculative-use-rejection-sampling"], "rejection sampling"),
        (["--speculative-use-block-verification"], r"block verification\) needs"),
        (["--attention-backend", "trtllm_mha"], "trtllm_mha"),
        (["--decode-attention-backend=trtllm_mha"], "trtllm_mha"),
        (["--prefill-attention-backend", "trtllm_mha", "--attention-backend", "fa3"], "trtllm"),
        (["--page-size", "16", "--attention-backend", "torch_native"], "--page-size 16"),
    ]:
        with pytest.raises(FlagConflict, match=why):
            resolve_spec_argv(tree + extra, architecture=DSV3)
    # unset topk with a chain-only option: a chain is derived, not a conflict
    chain = resolve_spec_argv(["--speculative-use-rejection-sampling"], architecture=LLAMA)
    assert chain.flags.eagle_topk == 1
    assert not resolve_spec_argv(["--max-running-requests", "8"], architecture=DSV3).notes
    with pytest.raises(WiringError, match="--page-size must be a whole number"):
        resolve_spec_argv(["--page-size", "0"], architecture=DSV3)
    with pytest.raises(WiringError, match="must be an integer"):
        resolve_spec_argv([STEPS, "three"], architecture=DSV3)


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
    # d >= s + 1: fewer crashes the first verify (eagle_worker_common._compact_accept_to_front)
    return tree_ok and paged_ok and s + 1 <= d <= 1 + k + (s - 1) * k * k


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
