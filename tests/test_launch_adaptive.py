"""Adaptive speculative decoding (--speculative-adaptive): the config checker against SGLang
0.5.23's own loader, and the launcher refusing what SGLang would refuse or silently change."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from conftest_helpers_layout import flat_config, make_flat_draft, write_json

from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.adaptive import DEFAULT_ADAPTIVE_CONFIG, check_adaptive_config
from sglang_eagle3.launch.cli import PROG, main
from sglang_eagle3.launch.spec_flags import FlagConflict, SpecFlags
from sglang_eagle3.launch.spec_resolve import resolve_spec_argv

ADAPTIVE = "--speculative-adaptive"
CONFIG = "--speculative-adaptive-config"


def _sglang_adaptive() -> dict:
    """SGLang's own DEFAULT_ADAPTIVE_CONFIG, _load_adaptive_config and
    resolve_candidate_steps_from_config, compiled from the installed file as they stand:
    importing their module imports all of SGLang (about 10 s), these need only json."""
    spec = importlib.util.find_spec("sglang")  # finds the package without importing it
    root = Path(next(iter(spec.submodule_search_locations)))  # type: ignore[union-attr]
    path = root / "srt" / "speculative" / "adaptive_spec_params.py"
    wanted = {"DEFAULT_ADAPTIVE_CONFIG", "_load_adaptive_config",
              "resolve_candidate_steps_from_config"}  # fmt: skip
    body = [
        node
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if getattr(node, "name", None) in wanted
        or getattr(getattr(node, "target", None), "id", None) in wanted
    ]
    assert len(body) == len(wanted), [getattr(n, "name", None) for n in body]
    namespace: dict = {"json": json}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


SGLANG = _sglang_adaptive()
SLOT = {"candidate_steps": [1, 3]}
# (name, file contents: JSON value or raw text, verdict): "ok" both accept; "sglang" SGLang
# refuses (any exception) and so do we; "ours" SGLang accepts and we refuse (the extras).
CASES = [
    ("default table", DEFAULT_ADAPTIVE_CONFIG, "ok"),
    ("all zero", {"1": {"candidate_steps": [0]}, "64": {"candidate_steps": [0]}}, "ok"),
    ("batch size 0", {"0": {"candidate_steps": [0, 2]}}, "ok"),
    ("repeated steps", {"1": {"candidate_steps": [3, 1, 3]}}, "ok"),
    ("every tuning key", {"ema_alpha": 1, "update_interval": 1, "warmup_batches": 0,
                          "1": {**SLOT, "ema_alpha": 0.5, "update_interval": 3,
                                "warmup_batches": 2, "up_hysteresis": -0.1,
                                "down_hysteresis": 0.25, "ceiling_coeff": 1.5}}, "ok"),
    ("not JSON", "{'1': oops", "sglang"),
    ("empty file", "", "sglang"),
    ("UTF-8 BOM", '\ufeff{"1": {"candidate_steps": [1]}}', "sglang"),
    ("a list", [1, 3], "sglang"),
    ("no slot", {}, "sglang"),
    ("tuning only", {"ema_alpha": 0.2}, "sglang"),
    ("negative step", {"1": {"candidate_steps": [-1]}}, "sglang"),
    ("no steps", {"1": {"candidate_steps": []}}, "sglang"),
    ("float step", {"1": {"candidate_steps": [1.0]}}, "sglang"),
    ("steps as text", {"1": {"candidate_steps": "1,3"}}, "sglang"),
    ("slot without steps", {"1": {}}, "sglang"),
    ("misspelled candidate_steps", {"1": {"candidate_step": [1, 3]}}, "sglang"),
    ("slot is a list", {"1": [1, 3]}, "sglang"),
    ("superscript digit", {"\u00b2": SLOT}, "sglang"),  # isdigit, but int() raises
    ("bool step", {"1": {"candidate_steps": [True, 3]}}, "ours"),
    ("misspelled tuning key", {"1": {**SLOT, "ema_alpa": 0.3}}, "ours"),
    ("space in batch size", {"1": SLOT, "8 ": {"candidate_steps": [-1]}}, "ours"),
    ("Arabic-Indic digit", {"\u0661": SLOT}, "ours"),  # SGLang reads it as batch size 1
    ("top-level candidate_steps", {"1": SLOT, "candidate_steps": [5]}, "ours"),
    ("two slots for 8", {"8": SLOT, "08": {"candidate_steps": [0]}}, "ours"),
    ("duplicate key", '{"1": {"candidate_steps": [1]}, "1": {"candidate_steps": [3]}}', "ours"),
    ("ema_alpha 0", {"1": {**SLOT, "ema_alpha": 0}}, "ours"),
    ("ema_alpha above 1", {"1": SLOT, "ema_alpha": 1.5}, "ours"),
    ("ema_alpha text", {"1": {**SLOT, "ema_alpha": "0.2"}}, "ours"),
    ("ema_alpha NaN", '{"1": {"candidate_steps": [1], "ema_alpha": NaN}}', "ours"),
    ("update_interval 0", {"1": {**SLOT, "update_interval": 0}}, "ours"),
    ("update_interval float", {"1": {**SLOT, "update_interval": 2.5}}, "ours"),
    ("warmup_batches -1", {"1": {**SLOT, "warmup_batches": -1}}, "ours"),
    ("warmup_batches bool", {"1": {**SLOT, "warmup_batches": True}}, "ours"),
    ("hysteresis text", {"1": {**SLOT, "up_hysteresis": "x"}}, "ours"),
    ("hysteresis infinite", '{"1": {"candidate_steps": [1], "down_hysteresis": -Infinity}}',
     "ours"),
    ("ceiling_coeff -1", {"1": {**SLOT, "ceiling_coeff": -1}}, "ours"),
]  # fmt: skip


def _write(path: Path, content) -> Path:
    text = content if isinstance(content, str) else json.dumps(content)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name,content,verdict", CASES, ids=[c[0] for c in CASES])
def test_config_checker_agrees_with_sglangs_loader(tmp_path, name, content, verdict):
    path = str(_write(tmp_path / "adaptive.json", content))
    try:
        expected = SGLANG["resolve_candidate_steps_from_config"](path)
    except Exception:  # SGLang refuses, with whatever it happens to raise
        expected = None
    assert (expected is None) == (verdict == "sglang"), (name, expected)
    if verdict == "ok":
        assert list(check_adaptive_config(path).candidates) == expected
        return
    with pytest.raises(WiringError) as err:
        check_adaptive_config(path)
    assert str(err.value).startswith(f"{path}: "), str(err.value)
    assert "Fix: " in str(err.value) and "\n" not in str(err.value)


def test_unreadable_files_are_refused_like_sglang_refuses_them(tmp_path):
    for path in (tmp_path / "missing.json", tmp_path):  # no file; a directory
        with pytest.raises(OSError):
            SGLANG["_load_adaptive_config"](str(path))
        with pytest.raises(WiringError, match=f"^{path}: cannot read the adaptive config"):
            check_adaptive_config(path)


def test_messages_name_the_slot_and_the_field(tmp_path):
    def refusal(content) -> str:
        with pytest.raises(WiringError) as err:
            check_adaptive_config(_write(tmp_path / "a.json", content))
        return str(err.value)

    assert 'slot "1": candidate_steps must be a non-empty list' in refusal(
        {"1": {"candidate_steps": [-1]}}
    )
    typo = refusal({"1": {**SLOT, "ema_alpa": 0.3}})
    assert 'slot "1": unknown key "ema_alpa"' in typo and "did you mean ema_alpha?" in typo
    space = refusal({"1": SLOT, "8 ": SLOT})
    assert 'unknown key "8 "' in space and 'write the batch size as "8"' in space
    assert 'slot "1": update_interval must be a whole number >= 1, got 0' in refusal(
        {"1": {**SLOT, "update_interval": 0}}
    )
    assert "top level: ema_alpha must be a number in (0, 1], got 1.5" in refusal(
        {"1": SLOT, "ema_alpha": 1.5}
    )
    assert 'key "1" is given twice' in refusal('{"1": {"candidate_steps": [1]}, "1": {}}')
    assert "not in ASCII digits" in refusal({"\u0661": SLOT})  # SGLang: batch size 1


def test_default_table_is_sglangs():
    assert DEFAULT_ADAPTIVE_CONFIG == SGLANG["DEFAULT_ADAPTIVE_CONFIG"]
    default = check_adaptive_config(None)
    assert list(default.candidates) == SGLANG["resolve_candidate_steps_from_config"](None)
    assert default.start == 3  # SGLang's middle candidate: [0, 1, 3, 5, 7][5 // 2]


def test_static_flags_keep_their_floor_and_adaptive_steps_may_be_zero():
    with pytest.raises(FlagConflict, match="whole number >= 1"):
        SpecFlags(num_steps=0)
    assert SpecFlags(0, 1, 1, adaptive=True).as_tuple() == (0, 1, 1)
    res = resolve_spec_argv([ADAPTIVE, "--speculative-num-steps", "0"], architecture="X")
    assert res.flags.as_tuple() == (0, 1, 1) and res.adaptive is not None
    res = resolve_spec_argv([ADAPTIVE], architecture="LlamaForCausalLM")  # not (5, 4, 8)
    assert res.flags.as_tuple() == (3, 1, 4)


# --- the launcher, in this process: its --dry-run, and its one-line refusals ----------------


@pytest.fixture(
    scope="module",
    params=["config-only", pytest.param("tiny", marks=[pytest.mark.sglang, pytest.mark.slow])],
)
def launch(request, tmp_path_factory):
    """``run(extra, capsys) -> (rc, stdout, stderr)``: the launcher's main with --dry-run on an
    EAGLE-3 target + drafter: config-only fakes (fast tier), or the tiny target and drafter
    (`python -m sglang_eagle3.tiny --drafter`; cached, but built through SGLang when not)."""
    root = tmp_path_factory.mktemp("adaptive_launch")
    if request.param == "tiny":
        from sglang_eagle3.testing.tiny.drafter import tiny_drafter

        drafter = tiny_drafter()
        target, draft = drafter.target_dir, drafter.draft_dir
    else:
        target = write_json(root / "t" / "config.json", {"architectures": ["LlamaForCausalLM"],
                            "num_hidden_layers": 8, "hidden_size": 16}).parent  # fmt: skip
        draft = make_flat_draft(root / "d", flat_config(hidden=16, ids=[-1, 2, 5]), fc_in=48)
    base = ["--dry-run", "--model-path", str(target), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft), "--draft-cache-dir",
            str(root / "cache")]  # fmt: skip

    def run(extra: list[str], capsys) -> tuple[int, str, str]:
        before = "sglang" in sys.modules
        rc = main([*base, *extra])
        out, err = capsys.readouterr()
        assert before or "sglang" not in sys.modules, "the launcher imported SGLang"
        return rc, out, err

    return run


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("adaptive_configs")
    files = {
        "zero": {"1": {"candidate_steps": [0]}, "8": {"candidate_steps": [0]}},
        "negative": {"1": {"candidate_steps": [-1]}},
        "typo": {"1": {"candidate_steps": [1, 3], "warmup_batchs": 4}},
        "custom": {"1": {"candidate_steps": [2, 4, 6]}, "16": {"candidate_steps": [0, 2]}},
    }
    return {name: str(_write(root / f"{name}.json", c)) for name, c in files.items()}


BAD = [  # (case, extra flags, what the one line says)
    ("topk 2", [ADAPTIVE, "--speculative-eagle-topk", "2"],
     ["--speculative-eagle-topk 2", "would turn adaptive off", "Fix: --speculative-eagle-topk 1"]),
    ("steps not a candidate", [ADAPTIVE, "--speculative-num-steps", "2"],
     ["--speculative-num-steps 2 is not one of the adaptive candidate steps [0, 1, 3, 5, 7]",
      "Fix: --speculative-num-steps one of [0, 1, 3, 5, 7]"]),
    ("steps outside the file's", [ADAPTIVE, CONFIG, "{custom}", "--speculative-num-steps", "3"],
     ["candidate steps [0, 2, 4, 6] (from {custom})"]),
    ("draft tokens", [ADAPTIVE, "--speculative-num-steps", "3",
                      "--speculative-num-draft-tokens", "8"],
     ["--speculative-num-draft-tokens 8 with --speculative-adaptive",
      "Fix: --speculative-num-draft-tokens 4"]),
    ("draft tokens, steps derived", [ADAPTIVE, "--speculative-num-draft-tokens", "2"],
     ["--speculative-num-steps 3 (derived)", "Fix: --speculative-num-draft-tokens 4"]),
    ("negative step in the file", [ADAPTIVE, CONFIG, "{negative}"],
     ['{negative}: slot "1": candidate_steps must be a non-empty list', "got [-1]. Fix: "]),
    ("misspelled key in the file", [ADAPTIVE, CONFIG, "{typo}"],
     ['{typo}: slot "1": unknown key "warmup_batchs"', "Fix: did you mean warmup_batches?"]),
    ("missing file", [ADAPTIVE, CONFIG, "{custom}.missing"],
     ["{custom}.missing: cannot read the adaptive config"]),
    ("config without adaptive", [CONFIG, "{custom}"],
     ["--speculative-adaptive-config {custom} without --speculative-adaptive",
      "Fix: add --speculative-adaptive"]),
    ("DP attention", [ADAPTIVE, "--enable-dp-attention", "--dp-size", "2"],
     ["attention DP (--enable-dp-attention --dp-size 2)", "Fix: no --enable-dp-attention"]),
    ("attention DP size", [ADAPTIVE, "--attn-dp-size", "2"], ["attention DP (--attn-dp-size 2)"]),
    ("multi-layer EAGLE and pdmux", [ADAPTIVE, "--enable-multi-layer-eagle", "--enable-pdmux"],
     ["with --enable-multi-layer-eagle; --enable-pdmux: SGLang 0.5.23 would turn adaptive off"]),
]  # fmt: skip


@pytest.mark.parametrize("case,extra,says", BAD, ids=[b[0] for b in BAD])
def test_bad_adaptive_launch_is_one_line_and_exit_2(launch, configs, capsys, case, extra, says):
    rc, out, err = launch([a.format(**configs) for a in extra], capsys)
    assert rc == 2 and not out, (case, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: error: "), err
    for part in says:
        assert part.format(**configs) in lines[0], (part, lines[0])


def _flags(steps: int) -> str:
    return (f"--speculative-num-steps {steps} --speculative-eagle-topk 1 "
            f"--speculative-num-draft-tokens {steps + 1}")  # fmt: skip


DEFAULT_FLAGS, ZERO_FLAGS = _flags(3), _flags(0)
GOOD = [  # (extra flags, the flags line, a derivation the dry run states, the candidate union)
    ([ADAPTIVE], DEFAULT_FLAGS, "unset -> 3  (not given; SGLang 0.5.23's adaptive start, the "
     "middle of the candidates [0, 1, 3, 5, 7])", [0, 1, 3, 5, 7]),
    ([ADAPTIVE, CONFIG, "{zero}"], ZERO_FLAGS, "every adaptive slot holds only steps 0", [0]),
    ([ADAPTIVE, CONFIG, "{zero}", "--speculative-num-steps", "0"], ZERO_FLAGS,
     "--speculative-num-draft-tokens: unset -> 1  (not given; adaptive mode keeps it at", [0]),
    ([ADAPTIVE, "--speculative-num-steps", "0", "--speculative-eagle-topk", "1"], ZERO_FLAGS,
     "among [0, 1, 3, 5, 7] (from batch size 1: [1, 3, 5, 7]; from batch size 8: [0, 1, 3]",
     [0, 1, 3, 5, 7]),
    ([ADAPTIVE, CONFIG, "{custom}", "--speculative-num-steps", "6",
      "--speculative-num-draft-tokens", "7", "--enable-dp-attention"],  # one DP rank: kept
     _flags(6), "from {custom})", [0, 2, 4, 6]),
]  # fmt: skip


@pytest.mark.parametrize("extra,flags,says,union", GOOD, ids=[" ".join(g[0]) for g in GOOD])
def test_good_adaptive_launch_prints_the_resolved_steps(launch, configs, capsys, extra, flags,
                                                        says, union):  # fmt: skip
    extra = [a.format(**configs) for a in extra]
    rc, out, err = launch(extra, capsys)
    assert rc == 0, err
    assert f"flags   {flags}" in out and says.format(**configs) in out, out
    command = out.splitlines()[-1]  # all three go to SGLang, so it derives none of them
    words = flags.split()
    assert all(
        f" {f} {v} " in f"{command} " for f, v in zip(words[::2], words[1::2], strict=True)
    ), command
    assert ADAPTIVE in command and (CONFIG in command) == (CONFIG in extra)
    rc, out, _ = launch([*extra, "--json"], capsys)
    assert rc == 0 and json.loads(out)["speculative"]["adaptive"]["candidate_steps"] == union


def test_the_accept_length_watch_allows_the_deepest_candidate(launch, configs, capsys):
    # adaptive mode may run any candidate: steps 2 start, 6 the deepest, so 5.5 can be reached;
    # an all-[0] config never drafts, so nothing above 1 can
    rc, out, err = launch([ADAPTIVE, CONFIG, configs["custom"], "--speculative-num-steps", "2",
                           "--expected-accept-length", "5.5"], capsys)  # fmt: skip
    assert rc == 0 and "accept-length watch: expected 5.50" in out, err
    rc, out, err = launch([ADAPTIVE, CONFIG, configs["zero"], "--expected-accept-length", "1.5"],
                          capsys)  # fmt: skip
    assert rc == 2 and len(err.splitlines()) == 1 and "1.5" in err, err
