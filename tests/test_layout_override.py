"""A --hidden-state-layout that contradicts the draft checkpoint is an error (exit 2, both
layouts shown) unless --override-draft-layout forces it; then the wiring says "overridden".
A layout that agrees is accepted silently; one that settles ambiguous ids is accepted."""

from __future__ import annotations

import json

import pytest
from conftest_helpers_layout import (
    eagle_tensors,
    flat_config,
    make_flat_draft,
    write_json,
    write_safetensors,
)

from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.cli import main
from sglang_eagle3.layout.conventions import Convention

N, H = 8, 16
WRONG = "layer:5,embed,layer:2"  # the trained taps, in the wrong order
TRAINED = "embed, layer:2, layer:5"


@pytest.fixture
def target(tmp_path):
    return write_json(tmp_path / "T" / "config.json", {
        "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": N, "hidden_size": H,
    }).parent  # fmt: skip


def ids_draft(tmp_path, ids=(-1, 2, 5), layout=None, name="D"):
    cfg = flat_config(hidden=H, ids=list(ids) if ids is not None else None, layout=layout)
    return make_flat_draft(tmp_path / name, cfg, fc_in=3 * H)


def speculators_draft(tmp_path, ids=(0, 3, 6)):
    """A speculators config by hand (its ids are input-to-layer: unambiguous), zero weights."""
    d = tmp_path / "S"
    write_json(d / "config.json", {
        "speculators_model_type": "eagle3", "draft_vocab_size": 32,
        "transformer_layer_config": {"model_type": "llama", "hidden_size": H, "vocab_size": 64,
                                     "num_attention_heads": 2, "num_key_value_heads": 2},
        "eagle_aux_hidden_state_layer_ids": list(ids), "target_hidden_size": H,
    })  # fmt: skip
    write_safetensors(d / "model.safetensors", eagle_tensors(draft_hidden=H, fc_in=3 * H))
    return d


def launch(capsys, target, draft, *extra, cache=None):
    argv = ["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft), "--dry-run", *extra]  # fmt: skip
    if cache is not None:
        argv += ["--draft-cache-dir", str(cache)]
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_layout_contradicting_unambiguous_ids_exits_2_showing_both(tmp_path, target, capsys):
    draft = ids_draft(tmp_path)  # -1 settles output-of-layer: embed, layer:2, layer:5
    code, out, err = launch(capsys, target, draft, "--hidden-state-layout", WRONG)
    assert code == 2 and out == "", out
    assert err.count("\n") == 1, err
    assert str(draft / "config.json") in err
    assert "layer:5, embed, layer:2 contradicts the checkpoint" in err
    assert f"says {TRAINED}" in err and "--override-draft-layout" in err and "Fix:" in err


def test_layout_contradicting_an_explicit_checkpoint_layout_exits_2(tmp_path, target, capsys):
    draft = ids_draft(tmp_path, ids=None, layout=["embed", "layer:2", "layer:5"])
    code, out, err = launch(capsys, target, draft, "--hidden-state-layout", WRONG)
    assert code == 2 and out == ""
    assert f"eagle_config.hidden_state_layout says {TRAINED}" in err
    assert "layer:5, embed, layer:2" in err


def test_layout_contradicting_speculators_ids_exits_2(tmp_path, target, capsys):
    draft = speculators_draft(tmp_path)
    code, out, err = launch(capsys, target, draft, "--hidden-state-layout", WRONG,
                            cache=tmp_path / "cache")  # fmt: skip
    assert code == 2 and out == ""
    assert "speculators top-level eagle_aux_hidden_state_layer_ids (input-to-layer)" in err
    assert not (tmp_path / "cache").exists(), "nothing written"


def test_override_forces_the_layout_and_the_table_says_overridden(tmp_path, target, capsys):
    draft = ids_draft(tmp_path)
    code, out, err = launch(capsys, target, draft, "--hidden-state-layout", WRONG,
                            "--override-draft-layout")  # fmt: skip
    assert code == 0, err
    layout_line = next(line for line in out.splitlines() if line.startswith("layout  from"))
    assert "overridden" in layout_line and TRAINED in layout_line
    assert any(line.startswith("note    overridden: serving layer:5, embed, layer:2")
               for line in out.splitlines()), out  # fmt: skip
    assert "SGLANG_EAGLE3_LAYOUT=layer:5,embed,layer:2" in out
    code, out, _ = launch(capsys, target, draft, "--hidden-state-layout", WRONG,
                          "--override-draft-layout", "--json")  # fmt: skip
    plan = json.loads(out)
    assert code == 0 and plan["layout"] == ["layer:5", "embed", "layer:2"]
    assert "overridden" in plan["layout_source"]
    assert any(n.startswith("overridden:") for n in plan["notes"])


def test_agreeing_layout_is_accepted_silently(tmp_path, target, capsys):
    explicit = ids_draft(tmp_path, ids=None, layout=["embed", "layer:2", "layer:5"], name="L")
    for draft in (ids_draft(tmp_path), explicit):
        code, out, err = launch(capsys, target, draft, "--hidden-state-layout",
                                "embed,layer:2,layer:5")  # fmt: skip
        assert code == 0, err
        assert "ignored" not in out and "overridden" not in out, out
        assert "layout  from caller-supplied layout" in out


def test_layout_settles_ambiguous_ids(tmp_path, target, capsys):
    draft = ids_draft(tmp_path, ids=(2, 4, 5))  # valid in both conventions, no -1, no n
    code, out, err = launch(capsys, target, draft, "--hidden-state-layout",
                            "layer:1,layer:3,layer:4")  # fmt: skip
    assert code == 0, err
    assert "overridden" not in out
    spec = read_draft(draft, num_layers=N, target_hidden_size=H, layout="layer:1,layer:3,layer:4")
    assert spec.convention is Convention.INPUT_TO_LAYER and spec.notes == ()
    other = read_draft(draft, num_layers=N, target_hidden_size=H, layout="embed,layer:1,layer:6")
    assert other.convention is None and "in neither convention" in other.notes[0]


def test_override_flag_alone_is_refused(tmp_path, target, capsys):
    code, out, err = launch(capsys, target, ids_draft(tmp_path), "--override-draft-layout")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--override-draft-layout overrides nothing without --hidden-state-layout" in err


def test_layout_against_a_config_whose_own_taps_disagree(tmp_path, target, capsys):
    # the explicit layout and the ids in the same config disagree: nothing to check against
    draft = ids_draft(tmp_path, ids=(2, 4, 5), layout=["embed", "layer:2", "layer:5"])
    code, out, err = launch(capsys, target, draft, "--hidden-state-layout", WRONG)
    assert code == 2 and "cannot be checked against the draft config" in err and "disagree" in err
    code, out, err = launch(capsys, target, draft, "--hidden-state-layout", WRONG,
                            "--override-draft-layout")  # fmt: skip
    assert code == 0, err
    assert "overridden" in out


def test_read_draft_override_semantics(tmp_path):
    draft = ids_draft(tmp_path)
    with pytest.raises(WiringError, match="contradicts the checkpoint"):
        read_draft(draft, num_layers=N, target_hidden_size=H, layout=WRONG)
    spec = read_draft(draft, num_layers=N, target_hidden_size=H, layout=WRONG,
                      override_layout=True)  # fmt: skip
    assert spec.layout.names() == ["layer:5", "embed", "layer:2"]
    assert spec.layout_source.startswith("caller-supplied layout (overridden; ")
    agree = read_draft(draft, num_layers=N, target_hidden_size=H, layout="embed,layer:2,layer:5")
    assert agree.notes == () and agree.convention is Convention.OUTPUT_OF_LAYER
    # no ids and no layout: the caller's layout is the only statement there is
    bare = read_draft(ids_draft(tmp_path, ids=None, name="B"), num_layers=N,
                      target_hidden_size=H, layout=WRONG)  # fmt: skip
    assert bare.layout.names() == ["layer:5", "embed", "layer:2"] and bare.notes == ()


def test_an_overridden_layout_gets_its_own_flat_copy(tmp_path, target, capsys):
    """Two launches of one speculators draft that serve different layouts never share the flat
    copy SGLang loads: a second launch would rewrite it under the first one's server."""
    draft, cache = speculators_draft(tmp_path), tmp_path / "cache"

    def served_from(*extra):
        code, out, err = launch(capsys, target, draft, *extra, "--json", cache=cache)
        assert code == 0, err
        return json.loads(out)["draft"]["served_from"]

    own = served_from()
    assert own == served_from(), "the same launch reuses its copy"
    forced = served_from("--hidden-state-layout", WRONG, "--override-draft-layout")
    assert forced != own and forced.startswith(str(cache))
