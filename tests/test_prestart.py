"""Pre-start checks (checkpoint/prestart.py), through the launcher's dry run: weight files that
are not whole safetensors files and vocab maps that do not fit the target get exit 2 and one
line naming the file and the fix, before anything starts or is written. Header-only files."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from conftest_helpers_layout import eagle_tensors, flat_config, write_json

from sglang_eagle3.checkpoint.prestart import (
    check_safetensors_file,
    prestart_check,
    read_int_tensor,
)
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.cli import main

N, H = 8, 16
BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "BOOL": 1}
Spec = dict[str, tuple[str, list[int]] | tuple[str, list[int], bytes]]


def write_st(path: Path, tensors: Spec, *, tail: bytes = b"") -> Path:
    """A safetensors file: zeros unless a tensor's bytes are given; ``tail`` appended."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    data = b""
    for name, (dtype, shape, *raw) in tensors.items():
        n = BYTES[dtype]
        for d in shape:
            n *= d
        blob = raw[0] if raw else bytes(n)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}  # fmt: skip
        data += blob
    raw_header = json.dumps(header).encode()
    raw_header += b" " * (-len(raw_header) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(raw_header)) + raw_header + data + tail)
    return path


def i64(values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}q", *values)


def target_dir(root: Path, *, vocab: int | None = None, weights: Spec | None = None) -> Path:
    cfg: dict[str, Any] = {"architectures": ["DeepseekV3ForCausalLM"],
                           "num_hidden_layers": N, "hidden_size": H}  # fmt: skip
    if vocab is not None:
        cfg["vocab_size"] = vocab
    d = write_json(root / "T" / "config.json", cfg).parent
    if weights is not None:
        write_st(d / "model.safetensors", weights)
    return d


def draft_dir(root: Path, cfg: dict[str, Any] | None = None, **changes: Any) -> Path:
    """A flat draft (vocab 64, draft vocab 32, ids [-1, 2, 5]); ``cfg``: config keys changed
    (None drops one); ``changes``: tensor -> spec (None drops it)."""
    config = flat_config(hidden=H, ids=[-1, 2, 5], extra=cfg)
    d = write_json(root / "D" / "config.json", {k: v for k, v in config.items() if v is not None})
    d = d.parent
    tensors: Spec = dict(eagle_tensors(draft_hidden=H, fc_in=3 * H))
    for name, spec in changes.items():
        if spec is None:
            tensors.pop(name)
        else:
            tensors[name] = spec
    write_st(d / "model.safetensors", tensors)
    return d


TARGET_WEIGHTS: Spec = {
    "model.embed_tokens.weight": ("F32", [64, H]),
    "lm_head.weight": ("F32", [64, H]),
}


def launch(capsys, target: Path, draft: Path, tmp_path: Path) -> tuple[int, str, str]:
    code = main(["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
                 "--speculative-draft-model-path", str(draft), "--dry-run",
                 "--draft-cache-dir", str(tmp_path / "cache")])  # fmt: skip
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(capsys, target, draft, tmp_path, *needles: str) -> str:
    code, out, err = launch(capsys, target, draft, tmp_path)
    assert code == 2, (out, err)
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith("python -m sglang_eagle3.launch: error: ") and "Fix:" in err, err
    for needle in needles:
        assert needle in err, err
    assert not (tmp_path / "cache").exists(), "nothing written"
    return err


def test_good_inputs_pass_including_a_config_only_target(tmp_path, capsys):
    draft = draft_dir(tmp_path)
    code, _, err = launch(capsys, target_dir(tmp_path / "a"), draft, tmp_path)
    assert code == 0, err
    code, _, err = launch(capsys, target_dir(tmp_path / "b", weights=TARGET_WEIGHTS), draft,
                          tmp_path)  # fmt: skip
    assert code == 0, err


# ---- the target's weights -----------------------------------------------------------


def test_truncated_target_weights(tmp_path, capsys):
    t = target_dir(tmp_path, weights=TARGET_WEIGHTS)
    f = t / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    refused(capsys, t, draft_dir(tmp_path), tmp_path, str(f), "truncated")


def test_target_weights_that_are_a_git_lfs_pointer(tmp_path, capsys):
    t = target_dir(tmp_path)
    f = t / "model.safetensors"
    f.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 123\n")
    refused(capsys, t, draft_dir(tmp_path), tmp_path, str(f), "Git LFS pointer", "git lfs pull")


def test_target_weights_with_bytes_past_the_data(tmp_path, capsys):
    t = target_dir(tmp_path)
    f = write_st(t / "model.safetensors", TARGET_WEIGHTS, tail=b"\0" * 16)
    refused(capsys, t, draft_dir(tmp_path), tmp_path, str(f), "16 bytes follow")


def test_sharded_target_missing_a_shard(tmp_path, capsys):
    t = target_dir(tmp_path)
    write_st(t / "model-00001-of-00002.safetensors", {"lm_head.weight": ("F32", [64, H])})
    index = {
        "weight_map": {
            "lm_head.weight": "model-00001-of-00002.safetensors",
            "model.embed_tokens.weight": "model-00002-of-00002.safetensors",
        }
    }
    write_json(t / "model.safetensors.index.json", index)
    refused(capsys, t, draft_dir(tmp_path), tmp_path, "model.safetensors.index.json",
            "model-00002-of-00002.safetensors", "download every shard")  # fmt: skip
    write_st(
        t / "model-00002-of-00002.safetensors", {"model.embed_tokens.weight": ("F32", [64, H])}
    )
    code, _, err = launch(capsys, t, draft_dir(tmp_path), tmp_path)
    assert code == 0, err


@pytest.mark.parametrize(
    "offsets,message",
    [
        ([[0, 4096], [4096, 8188]], "hold 4092"),  # a tensor 4 bytes short of its shape
        ([[0, 4096], [4100, 8196]], "leaves a gap"),
        ([[0, 4096], [4000, 8096]], "overlaps the tensor before it"),
    ],
)
def test_target_offsets_that_do_not_match_the_shapes(tmp_path, capsys, offsets, message):
    t = target_dir(tmp_path)
    header = {
        "a.weight": {"dtype": "F32", "shape": [64, H], "data_offsets": offsets[0]},
        "b.weight": {"dtype": "F32", "shape": [64, H], "data_offsets": offsets[1]},
    }
    raw = json.dumps(header).encode()
    f = t / "model.safetensors"
    f.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offsets[1][1]))
    refused(capsys, t, draft_dir(tmp_path), tmp_path, str(f), message)


# ---- the draft's vocab maps ---------------------------------------------------------


def test_d2t_of_the_wrong_length(tmp_path, capsys):
    d = draft_dir(tmp_path, d2t=("I64", [31]))
    refused(capsys, target_dir(tmp_path), d, tmp_path, str(d / "model.safetensors"),
            "d2t has shape [31]; the draft vocab is 32", "Fix: use the d2t saved")  # fmt: skip


def test_d2t_values_out_of_range(tmp_path, capsys):
    values = [0] * 32
    values[3], values[7] = 64, -8  # 3 + 64 = 67 >= 64; 7 - 8 = -1 < 0
    d = draft_dir(tmp_path, d2t=("I64", [32], i64(values)))
    err = refused(capsys, target_dir(tmp_path), d, tmp_path, "draft id 3 -> 67",
                  "draft id 7 -> -1", "outside the target vocab 0..63")  # fmt: skip
    assert "target id = draft id + d2t[draft id]" in err
    # against the target's own vocab when it states one: 31 + 20 = 51 >= 40
    fine = [20] * 32
    d = draft_dir(tmp_path / "x", d2t=("I64", [32], i64(fine)))
    code, _, err = launch(capsys, target_dir(tmp_path / "t64", vocab=64), d, tmp_path)
    assert code == 0, err
    d = draft_dir(tmp_path / "y", {"vocab_size": 40}, d2t=("I64", [32], i64(fine)),
                  t2d=("BOOL", [40]))  # fmt: skip
    refused(
        capsys,
        target_dir(tmp_path / "t40", vocab=40),
        d,
        tmp_path,
        "0..39 (the target's config.json vocab_size)",
        "draft id 20 -> 40",
        "... and 9 more",
    )


def test_d2t_that_is_not_integers(tmp_path, capsys):
    d = draft_dir(tmp_path, d2t=("F32", [32]))
    refused(capsys, target_dir(tmp_path), d, tmp_path, "d2t is F32, not integers")


def test_t2d_of_the_wrong_length(tmp_path, capsys):
    d = draft_dir(tmp_path, t2d=("BOOL", [100]))
    refused(capsys, target_dir(tmp_path), d, tmp_path, "t2d has shape [100]",
            "the target vocab is 64")  # fmt: skip


def test_reduced_draft_vocab_without_d2t(tmp_path, capsys):
    d = draft_dir(tmp_path, d2t=None, t2d=None)  # draft vocab 32, target vocab 64
    refused(capsys, target_dir(tmp_path), d, tmp_path, "draft vocab is 32",
            "the target's 64", "no d2t")  # fmt: skip


def test_lm_head_rows_that_do_not_match_the_draft_vocab(tmp_path, capsys):
    d = draft_dir(tmp_path, **{"lm_head.weight": ("F16", [30, H])})
    refused(capsys, target_dir(tmp_path), d, tmp_path, "lm_head.weight has 30 rows",
            "the draft vocab is 32")  # fmt: skip


def test_a_draft_trained_on_another_vocab(tmp_path, capsys):
    d = draft_dir(tmp_path)  # vocab_size 64
    t = target_dir(tmp_path, vocab=100)
    refused(capsys, t, d, tmp_path, str(d / "config.json"), str(t / "config.json"),
            "trained on a 64-token vocab (vocab_size), the target has 100",
            "Fix: use a draft trained for this target")  # fmt: skip
    with pytest.raises(WiringError, match="the target has 100"):  # the doctor's gate too
        prestart_check(d, t)
    code, _, err = launch(capsys, target_dir(tmp_path / "same", vocab=64), d, tmp_path)
    assert code == 0, err


def test_a_reduced_draft_vocab_without_its_lm_head(tmp_path, capsys):
    d = draft_dir(tmp_path, **{"lm_head.weight": None})  # draft_vocab_size 32 of 64
    err = refused(capsys, target_dir(tmp_path), d, tmp_path, str(d / "model.safetensors"),
                  "draft_vocab_size is 32 but the weights hold no lm_head.weight",
                  "builds a 32-row draft head and fills it only from these weights",
                  "Fix: use the draft's full checkpoint (with its lm_head.weight)")  # fmt: skip
    assert "drop draft_vocab_size" not in err  # a reduced vocab needs its own head


def test_an_explicit_full_draft_vocab_without_lm_head(tmp_path, capsys):
    """SGLang takes the target's head only when draft_vocab_size is unset."""
    full = {"d2t": None, "t2d": None, "lm_head.weight": None}
    d = draft_dir(tmp_path, {"draft_vocab_size": 64}, **full)
    refused(capsys, target_dir(tmp_path), d, tmp_path, "draft_vocab_size is 64",
            "or drop draft_vocab_size from config.json")  # fmt: skip
    tied = {"draft_vocab_size": 64, "tie_word_embeddings": True}
    for i, ok in enumerate([{"draft_vocab_size": None}, tied]):
        d = draft_dir(tmp_path / str(i), ok, **full)
        code, _, err = launch(capsys, target_dir(tmp_path), d, tmp_path)
        assert code == 0, err  # the target's head, or the (target's) embedding


def test_a_speculators_draft_without_lm_head(tmp_path):
    """Its flat copy always sets draft_vocab_size, so SGLang never takes the target's head."""
    d = write_json(tmp_path / "S" / "config.json", {
        "speculators_model_type": "eagle3", "draft_vocab_size": 64,
        "transformer_layer_config": {"model_type": "llama", "hidden_size": H, "vocab_size": 64,
                                     "num_attention_heads": 2, "num_key_value_heads": 2},
        "eagle_aux_hidden_state_layer_ids": [0, 3, 6], "target_hidden_size": H,
    }).parent  # fmt: skip
    tensors = dict(eagle_tensors(draft_hidden=H, fc_in=3 * H))
    for name in ("d2t", "t2d", "lm_head.weight"):
        tensors.pop(name)
    write_st(d / "model.safetensors", tensors)
    with pytest.raises(WiringError, match="draft_vocab_size is 64 but") as err:
        prestart_check(d, target_dir(tmp_path))
    assert "drop draft_vocab_size" not in str(err.value)


def test_draft_offsets_that_do_not_match_the_shapes(tmp_path, capsys):
    d = draft_dir(tmp_path)
    f = d / "model.safetensors"
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header["norm.weight"]["shape"] = [H + 1]  # the offsets still hold H halves
    text = json.dumps(header).encode()
    f.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n :])
    refused(capsys, target_dir(tmp_path), d, tmp_path, str(f), "'norm.weight' is F16 [17]")


# ---- the module itself --------------------------------------------------------------


def test_read_int_tensor_and_the_header_check(tmp_path):
    f = write_st(
        tmp_path / "m.safetensors", {"x": ("F32", [2]), "d2t": ("I64", [3], i64([5, -1, 0]))}
    )
    h = check_safetensors_file(f)
    assert read_int_tensor(h, h.entries["d2t"]) == [5, -1, 0]
    with pytest.raises(WiringError, match="not an integer type"):
        read_int_tensor(h, h.entries["x"])


def test_prestart_without_a_target_uses_the_draft_vocab(tmp_path):
    prestart_check(draft_dir(tmp_path))  # the doctor without --target
    bad = draft_dir(tmp_path / "b", d2t=("I64", [32], i64([40] * 32)))
    with pytest.raises(WiringError, match=r"0\.\.63 \(the draft config's vocab_size\)"):
        prestart_check(bad)
