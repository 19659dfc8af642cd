"""Resolve the three EAGLE speculative flags into a set SGLang 0.5.23 keeps exactly as given.

SGLang (``srt/arg_groups/speculative_hook.py``, ``_handle_eagle_family``) fills unset values
from per-architecture defaults (L1430-1461) and silently rewrites one explicit value: with
``--speculative-eagle-topk 1`` it sets ``--speculative-num-draft-tokens`` to steps + 1
(L1255-1266) under a warning that shows no numbers. We never change an explicit value: a
contradiction raises :class:`FlagConflict` listing ways out; an unset value is derived and
reported as a :class:`FlagChange`. Where SGLang stops with a bare ``AssertionError``
(steps unset but topk or draft tokens set, L1159-1163) we derive steps instead (for topk 1:
draft tokens - 1); with steps set SGLang fills no topk (TypeError at L1274), we do.
With ``--speculative-adaptive`` (or ``--speculative-adaptive-config``) SGLang resolves the
three differently (L261-264, L1374-1427): :func:`resolve_spec_argv` hands such a command line
to ``launch/adaptive.py``, whose steps may be 0. Pure Python: no torch, no sglang.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_eagle3.draft_tree_size import max_draft_tokens
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.argv import argv_get, argv_has, argv_int

STEPS, TOPK, DRAFT = (
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
)
_FIELDS = {"num_steps": STEPS, "eagle_topk": TOPK, "num_draft_tokens": DRAFT}
# The other SGLang flags the rules read (store_true for the two booleans).
PAGE_SIZE, MAX_RUNNING = "--page-size", "--max-running-requests"
ATTENTION = "--attention-backend"
PREFILL_ATTENTION, DECODE_ATTENTION = "--prefill-attention-backend", "--decode-attention-backend"
REJECTION_SAMPLING = "--speculative-use-rejection-sampling"
BLOCK_VERIFICATION = "--speculative-use-block-verification"
ADAPTIVE, ADAPTIVE_CONFIG = "--speculative-adaptive", "--speculative-adaptive-config"
MAX_RUNNING_NOTE = (
    "SGLang sets --max-running-requests to 48 when speculative decoding is on and it is "
    "unset; pass --max-running-requests to choose another limit"
)
# _auto_choose_speculative_params: these get (5, 4, 8); DeepSeek family and anything unlisted
# (Qwen, Mistral, ...) get (3, 1, 4). SGLang compares architectures[0] exactly.
TREE_DEFAULT_ARCHS = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")
# L1268-1282: topk > 1 with page size > 1 needs the two-pass cascade only these implement.
PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")


class FlagConflict(WiringError):
    """Explicit speculative flags that contradict each other or the rest of the launch."""


def _check_count(value: object, flag: str, allow_none: bool = True, least: int = 1) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise FlagConflict(f"{flag} must be a whole number >= {least}, got {value!r}")


def _least(flag: str, adaptive: bool) -> int:
    # adaptive mode's steps 0 is a slot that does not draft (SGLang 0.5.23 serves it)
    return 0 if adaptive and flag == STEPS else 1


@dataclass(frozen=True)
class SpecFlags:
    """The three flags as given (``None`` = not on the command line)."""

    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    adaptive: bool = False  # --speculative-adaptive: steps 0 is legal

    def __post_init__(self) -> None:
        for name, flag in _FIELDS.items():
            _check_count(getattr(self, name), flag, least=_least(flag, self.adaptive))

    def as_tuple(self) -> tuple[int | None, int | None, int | None]:
        return (self.num_steps, self.eagle_topk, self.num_draft_tokens)


@dataclass(frozen=True)
class FlagChange:
    """One value that differs from what the user gave (``from_ is None``: it was unset)."""

    flag: str
    from_: int | None
    to: int
    why: str

    def __post_init__(self) -> None:
        if self.flag not in _FIELDS.values():
            raise ValueError(f"unknown speculative flag {self.flag!r}")
        # a change does not know the mode: SpecFlags holds the mode's own floor
        _check_count(self.from_, self.flag, least=_least(self.flag, True))
        _check_count(self.to, self.flag, allow_none=False, least=_least(self.flag, True))
        if not self.why.strip():
            raise ValueError(f"a change of {self.flag} needs a reason")

    def to_dict(self) -> dict[str, object]:
        return {"flag": self.flag, "from": self.from_, "to": self.to, "why": self.why}


@dataclass(frozen=True)
class Resolution:
    """A complete flag set SGLang will not change, what was derived and why, and notes."""

    flags: SpecFlags
    changes: tuple[FlagChange, ...] = ()
    notes: tuple[str, ...] = ()
    adaptive: object | None = None  # launch/adaptive.py's AdaptiveConfig: the steps it moves among

    def __post_init__(self) -> None:
        if None in self.flags.as_tuple():
            raise ValueError(f"a resolution needs all three flags, got {self.flags}")
        object.__setattr__(self, "changes", tuple(self.changes))
        object.__setattr__(self, "notes", tuple(self.notes))


def auto_params(architecture: str) -> tuple[int, int, int]:
    """SGLang 0.5.23's (steps, topk, draft tokens) when all three are unset."""
    return (5, 4, 8) if architecture in TREE_DEFAULT_ARCHS else (3, 1, 4)


def _problems(s: int, k: int, d: int, blockers: dict[str, str]) -> list[str]:
    if k == 1 and d != s + 1:
        chain = f"with {TOPK} 1 the draft is a chain, so SGLang needs {DRAFT} == {STEPS} + 1"
        return [f"{chain} = {s + 1}, and would silently change {d} to {s + 1}"]
    if k == 1:
        return []
    found = list(blockers)
    if d < 2:
        found.append(f"a tree ({TOPK} {k}) with {DRAFT} {d} verifies no draft token at all")
    elif d < s + 1:  # eagle_worker_common._compact_accept_to_front: [bs, steps+1] into [bs, d]
        found.append(
            f"a {s}-step tree keeps accepted paths of up to {s + 1} tokens in {d} slots: SGLang "
            f"0.5.23 needs {DRAFT} >= {STEPS} + 1 = {s + 1} (fewer crashes its first verify)"
        )
    elif d > max_draft_tokens(s, k):
        found.append(
            f"{s} steps of topk {k} propose at most {max_draft_tokens(s, k) - 1} tokens, so at "
            f"most {max_draft_tokens(s, k)} draft tokens (more crashes SGLang's torch.topk)"
        )
    return found


def _fill(user: SpecFlags, k: int, auto: tuple[int, int, int], arch: str):
    """Complete ``user`` with topk ``k``; returns ((s, k, d), {field: why for derived ones})."""
    s, _, d = user.as_tuple()
    why: dict[str, str] = {}
    if s is None:
        if k == 1 and d is not None and d >= 2:
            s, why["num_steps"] = d - 1, f"a chain of {d} draft tokens is the root + {d - 1} steps"
        elif k > 1 and d is not None and 2 <= d < auto[0] + 1:
            s, why["num_steps"] = d - 1, f"a topk-{k} tree of {d} draft tokens runs {d - 1} steps"
        elif k > 1 and d is not None and d > max_draft_tokens(auto[0], k):
            s = next(n for n in range(1, d) if max_draft_tokens(n, k) >= d)
            why["num_steps"] = f"the fewest steps whose topk-{k} tree can hold {d} draft tokens"
        else:
            s, why["num_steps"] = auto[0], f"SGLang 0.5.23's default for {arch}"
    if d is None:
        if k == 1:
            d, why["num_draft_tokens"] = s + 1, f"topk 1 is a chain: {STEPS} + 1"
        else:
            d = min(max(auto[2], s + 1), max_draft_tokens(s, k))
            why["num_draft_tokens"] = (
                f"SGLang 0.5.23's default for {arch} ({auto[2]}), kept within the {s} + 1 .. "
                f"{max_draft_tokens(s, k)} a {s}-step topk-{k} tree can use"
            )
    return (s, k, d), why


def _ways_out(s: int, k: int, d: int, blockers: dict[str, str]) -> list[str]:
    ways = []
    if k == 1 and d >= 2:
        ways.append(f"{STEPS} {d - 1} (a chain of {d} tokens)")
    if k > 1 and not blockers and d >= 2:  # a tree of d tokens: fewest steps that hold d .. d-1
        low = next(n for n in range(1, d + 1) if max_draft_tokens(n, k) >= d)
        if low <= d - 1:
            span = f"{low}" if low == d - 1 else f"{low} to {d - 1}"
            ways.append(f"{STEPS} {span} (a topk-{k} tree that holds {d} draft tokens)")
    if d == s + 1 and k != 1:
        ways.append(f"{TOPK} 1 (a chain)")
    if not blockers and d >= s + 1:
        m = next(m for m in range(2, d + 1) if max_draft_tokens(s, m) >= d)
        ways.append(f"{TOPK} {m} or more (a {s}-step tree of {d} draft tokens)")
    if k == 1 or blockers:
        ways.append(f"{DRAFT} {s + 1}" + ("" if k == 1 else f" with {TOPK} 1 (a chain)"))
    else:
        ways.append(f"{DRAFT} between {s + 1} and {max_draft_tokens(s, k)}")
    if blockers and d >= 2:
        ways.append(f"a tree ({TOPK} > 1) after: {', '.join(blockers.values())}")
    return list(dict.fromkeys(ways))


def resolve_spec_flags(
    user: SpecFlags,
    *,
    architecture: str,
    page_size: int = 1,
    attention_backend: str | None = None,
    prefill_attention_backend: str | None = None,
    decode_attention_backend: str | None = None,
    use_rejection_sampling: bool = False,
    use_block_verification: bool = False,
    max_running_requests: int | None = None,
) -> Resolution:
    """Complete ``user`` for an EAGLE/EAGLE3 launch of ``architecture`` (config.json's
    ``architectures[0]``); the other arguments are the matching SGLang flags."""
    _check_count(page_size, "--page-size", allow_none=False)
    blockers = {}  # why a tree (topk > 1) makes SGLang raise -> how to lift that
    backends = {prefill_attention_backend or attention_backend}
    backends.add(decode_attention_backend or attention_backend)
    if "trtllm_mha" in backends:  # L1176-1180
        blockers[f"the trtllm_mha attention backend supports only {TOPK} 1"] = (
            "another --attention-backend (and prefill/decode backends)"
        )
    if use_rejection_sampling or use_block_verification:  # L1220-1224; block verif. turns it on
        blockers[f"rejection sampling (or block verification) needs {TOPK} 1"] = (
            "no --speculative-use-rejection-sampling / --speculative-use-block-verification"
        )
    trees = "/".join(PAGE_TREE_BACKENDS)
    if page_size > 1 and attention_backend and attention_backend not in PAGE_TREE_BACKENDS:
        blockers[
            f"{TOPK} > 1 with --page-size {page_size} works only with --attention-backend "
            f"{trees}, not {attention_backend}"
        ] = f"--page-size 1 or --attention-backend {trees}"
    auto = auto_params(architecture)
    if blockers and auto[1] > 1:
        auto = (auto[0], 1, auto[0] + 1)
    if user.eagle_topk is not None:
        tries = [user.eagle_topk]
    else:  # SGLang's default first, then the smallest topk that fits the given values
        tries = [auto[1], 1] + (
            [] if blockers else list(range(2, (user.num_draft_tokens or 2) + 1))
        )
    fills = [_fill(user, k, auto, architecture) for k in dict.fromkeys(tries)]
    (s, k, d), why = next((f for f in fills if not _problems(*f[0], blockers)), fills[0])
    problems = _problems(s, k, d, blockers)
    if problems:
        given = " ".join(
            f"{flag} {v}" + ("" if getattr(user, n) is not None else " (derived)")
            for (n, flag), v in zip(_FIELDS.items(), (s, k, d), strict=True)
        )
        raise FlagConflict(
            f"conflicting speculative flags {given}: {'; '.join(problems)}",
            fix="use one of: " + "; ".join(_ways_out(s, k, d, blockers)),
        )
    if user.eagle_topk is None:
        if k == auto_params(architecture)[1]:
            why["eagle_topk"] = f"SGLang 0.5.23's default for {architecture}"
        elif blockers:
            why["eagle_topk"] = "a chain (topk 1) because " + "; ".join(blockers)
        else:
            why["eagle_topk"] = f"the smallest topk consistent with the given {STEPS}/{DRAFT}"
    values = dict(zip(_FIELDS, (s, k, d), strict=True))
    changes = tuple(
        FlagChange(flag, None, values[n], f"not given; {why[n]}")
        for n, flag in _FIELDS.items()
        if getattr(user, n) is None
    )
    notes = []
    if user.num_steps is None and (user.eagle_topk or user.num_draft_tokens):
        notes.append(
            f"SGLang 0.5.23 stops with a bare AssertionError when {STEPS} is unset but "
            f"{TOPK} or {DRAFT} is set; {STEPS} {s} was derived so all three are passed"
        )
    if k > 1 and page_size > 1 and not attention_backend:
        notes.append(
            f"{TOPK} {k} with --page-size {page_size}: SGLang accepts this only if the attention "
            f"backend it picks is one of {', '.join(PAGE_TREE_BACKENDS)}; pass --attention-backend"
        )
    if max_running_requests is None:
        notes.append(MAX_RUNNING_NOTE)
    return Resolution(SpecFlags(s, k, d), changes, tuple(notes))


def sglang_argv_flags(resolution: Resolution) -> list[str]:
    """The three flags as SGLang argv, always all three (so SGLang derives none of them)."""
    values = resolution.flags.as_tuple()
    return [
        part for flag, v in zip(_FIELDS.values(), values, strict=True) for part in (flag, str(v))
    ]


def resolve_static_argv(argv: list[str], *, architecture: str) -> Resolution:
    """:func:`resolve_spec_flags` with the flags read from an SGLang command line, so the
    launcher refuses before start what SGLang would raise on (or silently change); adaptive
    mode is launch/spec_resolve.py's to dispatch."""
    page_size = argv_int(argv, PAGE_SIZE)
    return resolve_spec_flags(
        SpecFlags(argv_int(argv, STEPS), argv_int(argv, TOPK), argv_int(argv, DRAFT)),
        architecture=architecture,
        page_size=1 if page_size is None else page_size,
        attention_backend=argv_get(argv, ATTENTION),
        prefill_attention_backend=argv_get(argv, PREFILL_ATTENTION),
        decode_attention_backend=argv_get(argv, DECODE_ATTENTION),
        use_rejection_sampling=argv_has(argv, REJECTION_SAMPLING),
        use_block_verification=argv_has(argv, BLOCK_VERIFICATION),
        max_running_requests=argv_int(argv, MAX_RUNNING),
    )
