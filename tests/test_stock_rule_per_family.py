"""What stock SGLang 0.5.23 would capture, as the readers' errors and notes, the doctor's
candidates and the launcher say it, follows the target's family rule, not always DeepSeek's.

Ids [2, 4, 5] on 8 layers tell the rules apart by their taps (DeepSeek keeps them as is,
llama adds 1); ids [1, 3, 5] give the same taps by two different reasons (DeepSeek: the
first id is 1; llama: always). Pure: config files and fake weights in tmp_path, no server.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_helpers_layout import flat_config, make_flat_draft, write_json

from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.doctor.candidates import build_candidates, draft_layouts
from sglang_eagle3.doctor.cli import target_family
from sglang_eagle3.errors import AmbiguousIdsError, WiringError
from sglang_eagle3.launch.plan import LaunchOptions, plan_launch
from sglang_eagle3.layout.conventions import DEEPSEEK
from sglang_eagle3.layout.families import family_named
from sglang_eagle3.layout.taps import format_taps, parse_taps

N, H = 8, 16
LLAMA = family_named("llama")
MINIMAX_VL = family_named("minimax_m3_vl")  # adds 1 to its default [2, n//2, n-3] too
ON_LLAMA = "stock SGLang 0.5.23 on llama (ids +1 always) would"
ON_DEEPSEEK = (
    "stock SGLang 0.5.23 on DeepSeek (ids +1 only when the first id is 1, else as is) would"
)
UNKNOWN = "a target family sglang-eagle3 does not know, so it cannot say which taps"


def flat_draft(directory: Path, ids: list[int] | None) -> Path:
    return make_flat_draft(directory, flat_config(hidden=H, ids=ids), fc_in=3 * H)


def ambiguity(draft: Path, **kw) -> str:
    with pytest.raises(AmbiguousIdsError) as info:
        read_draft(draft, num_layers=N, target_hidden_size=H, **kw)
    return str(info.value)


# ---- readers ---------------------------------------------------------------------------------


def test_reader_error_on_ambiguous_ids_uses_the_targets_rule(tmp_path):
    d = flat_draft(tmp_path, [2, 4, 5])
    llama = ambiguity(d, family=LLAMA)
    assert f"{ON_LLAMA} capture layer:2, layer:4, layer:5" in llama
    assert "DeepSeek" not in llama
    deepseek = ambiguity(d)  # no family given: the seed's, DeepSeek
    assert f"{ON_DEEPSEEK} capture layer:1, layer:3, layer:4" in deepseek
    assert ambiguity(d, family=DEEPSEEK) == deepseek


def test_reader_error_names_the_rule_when_the_taps_agree(tmp_path):
    d = flat_draft(tmp_path, [1, 3, 5])
    assert f"{ON_LLAMA} capture layer:1, layer:3, layer:5" in ambiguity(d, family=LLAMA)
    assert f"{ON_DEEPSEEK} capture layer:1, layer:3, layer:5" in ambiguity(d)


def test_reader_error_for_a_family_outside_the_table_says_so(tmp_path):
    msg = ambiguity(flat_draft(tmp_path, [2, 4, 5]), family=None)
    assert f"stock SGLang 0.5.23 on this target: {UNKNOWN}" in msg
    assert "would capture" not in msg and "DeepSeek" not in msg


def test_reader_note_without_ids_uses_the_targets_default_rule(tmp_path):
    d = flat_draft(tmp_path, None)

    def note(family):
        spec = read_draft(d, num_layers=N, target_hidden_size=H, family=family)
        assert spec.layout is None
        return spec.notes[0]

    assert note(LLAMA).startswith("stock SGLang 0.5.23 (llama) with no ids: default")
    assert note(LLAMA).endswith("= layer:1, layer:3, layer:4")
    assert note(MINIMAX_VL).endswith("capture indices [3, 5, 6] (input-to-layer ids) = "
                                     "layer:2, layer:4, layer:5")  # fmt: skip
    assert "(DeepSeek) with no ids" in note(DEEPSEEK)
    assert note(None) == f"stock SGLang 0.5.23: {UNKNOWN}"


# ---- doctor ----------------------------------------------------------------------------------


def layouts(draft: Path, family, served_by: str = "stock"):
    return draft_layouts(
        draft, num_layers=N, target_hidden_size=H, served_by=served_by, family=family
    )


def by_name(cands, name: str):
    return next(c for c in cands if name in c.names)


def test_doctor_stock_candidate_follows_the_targets_rule(tmp_path):
    d = flat_draft(tmp_path, [2, 4, 5])
    stored = parse_taps("embed,layer:0,layer:1,layer:2,layer:3,layer:4,layer:5,layer:7")
    llama, deepseek = layouts(d, LLAMA), layouts(d, DEEPSEEK)
    assert format_taps(llama.stock) == "layer:2, layer:4, layer:5"
    assert format_taps(deepseek.stock) == "layer:1, layer:3, layer:4"
    assert llama.served == llama.stock and llama.served_crash is None
    assert llama.stock_text.startswith("stock SGLang 0.5.23 (llama) with ids [2, 4, 5]: its rule")
    assert llama.served_source == llama.stock_text  # named once, not "stock ...: stock ..."
    assert llama.served_source.count("stock SGLang 0.5.23") == 1
    cand = by_name(build_candidates(llama, stored, len(stored), N), "stock SGLang 0.5.23")
    assert format_taps(cand.taps) == "layer:2, layer:4, layer:5"
    assert cand.indices == (3, 5, 6)  # merged with the output-of-layer reading of the ids
    assert any(src.startswith("stock SGLang 0.5.23 (llama)") for src in cand.sources)


def test_doctor_stock_text_names_the_reason_when_the_taps_agree(tmp_path):
    d = flat_draft(tmp_path, [1, 3, 5])
    llama, deepseek = layouts(d, LLAMA), layouts(d, DEEPSEEK)
    assert llama.stock == deepseek.stock  # both +1 here, for different reasons
    assert "(llama) with ids [1, 3, 5]: its rule is +1 always" in llama.stock_text
    assert "(DeepSeek) with ids [1, 3, 5]: first id is 1" in deepseek.stock_text


def test_doctor_default_candidate_follows_the_targets_rule(tmp_path):
    d = flat_draft(tmp_path, [-1, 2, 5])  # declared: embed, layer:2, layer:5
    stored = parse_taps("embed,layer:1,layer:2,layer:3,layer:4,layer:5,layer:7")
    name = "SGLang default [2, n//2, n-3]"

    def default(family):
        cands = build_candidates(layouts(d, family, "plugin"), stored, len(stored), N)
        return next((c for c in cands if name in c.names), None)

    assert format_taps(default(DEEPSEEK).taps) == "layer:1, layer:3, layer:4"
    minimax = default(MINIMAX_VL)
    assert format_taps(minimax.taps) == "layer:2, layer:4, layer:5"
    assert "(minimax_m3_vl) with no ids" in minimax.sources[-1]
    assert default(None) is None  # an unknown family's default is not guessed


def test_doctor_with_a_family_outside_the_table_does_not_guess(tmp_path):
    from sglang_eagle3.doctor.report import UNKNOWN as VERDICT_UNKNOWN
    from sglang_eagle3.doctor.report import _verdict

    lay = layouts(flat_draft(tmp_path, [2, 4, 5]), None)
    assert lay.stock is None and lay.served is None and lay.served_crash is None
    assert lay.stock_text == f"stock SGLang 0.5.23 on this target: {UNKNOWN}"
    stored = parse_taps("embed,layer:1,layer:2,layer:3,layer:4,layer:5,layer:7")
    names = {n for c in build_candidates(lay, stored, len(stored), N) for n in c.names}
    assert "stock SGLang 0.5.23" not in names and "SGLang default [2, n//2, n-3]" not in names
    row = {"evaluable": True, "is_floor": False, "accuracy": 0.5, "is_served": False, "_id": 0}
    verdict, reason, code = _verdict([row], {}, lay, (0.05, 4.0))
    assert (verdict, code) == (VERDICT_UNKNOWN, 0) and UNKNOWN in reason


def target(directory: Path, arch: str | None) -> str:
    cfg = {"num_hidden_layers": N, "hidden_size": H, "vocab_size": 64}
    if arch is not None:
        cfg["architectures"] = [arch]
    return str(write_json(directory / "config.json", cfg).parent)


def test_doctor_reads_the_family_from_the_targets_config(tmp_path):
    assert target_family(None) is DEEPSEEK  # no target: the seed's family
    assert target_family(target(tmp_path / "llama", "LlamaForCausalLM")) is LLAMA
    assert target_family(target(tmp_path / "bare", None)) is DEEPSEEK
    assert target_family(target(tmp_path / "odd", "MadeUpForCausalLM")) is None
    kimi = write_json(tmp_path / "kimi" / "config.json", {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61},
    }).parent  # fmt: skip
    assert target_family(str(kimi)) is family_named("kimi_k25")  # the wrapper's own row


# ---- launcher --------------------------------------------------------------------------------


def test_launcher_refusal_of_ambiguous_ids_speaks_of_the_targets_family(tmp_path):
    draft = flat_draft(tmp_path / "draft", [2, 4, 5])
    model = target(tmp_path / "llama", "LlamaForCausalLM")
    argv = ["--model-path", model, "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft)]  # fmt: skip
    with pytest.raises(WiringError) as info:
        plan_launch(argv, LaunchOptions(cache_dir=tmp_path / "cache"))
    assert f"{ON_LLAMA} capture layer:2, layer:4, layer:5" in str(info.value)
    assert "DeepSeek" not in str(info.value)
