"""speculators 0.9 training data: our writer, our streaming reader, and speculators' own reader."""

from __future__ import annotations

import json

import pytest
import torch

from sglang_eagle3.data.tap_fingerprint import check_against_taps, fingerprint_taps
from sglang_eagle3.data.train_data import TrainData, TrainDataWriter
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import Tap, parse_taps

TAPS = ["embed", "layer:2", "layer:5", "layer:7"]


def write(path, n=3, taps=TAPS, dtype=torch.float32, hidden=16):
    gen = torch.Generator().manual_seed(0)
    rows = []
    with TrainDataWriter(path, taps=taps, num_layers=8, dtype=dtype) as w:
        for i in range(n):
            seq = 10 + i
            hs = torch.randn(seq, len(taps), hidden, generator=gen)
            ids = torch.randint(0, 100, (seq,), generator=gen)
            mask = torch.tensor([0] * 3 + [1] * (seq - 3))
            w.add(hs, ids, mask)
            rows.append((hs, ids, mask))
    return rows


def test_roundtrip_streams_samples_and_metadata(tmp_path):
    rows = write(tmp_path / "d")
    data = TrainData(tmp_path / "d")
    assert data.info.format == "speculators-0.9"
    assert data.info.taps == parse_taps(TAPS) and data.info.num_layers == 8
    assert (data.info.num_samples, data.info.num_taps, data.info.hidden_size) == (3, 4, 16)
    got = list(data)
    for s, (hs, ids, mask) in zip(got, rows, strict=True):
        assert torch.equal(s.hidden_states, hs) and torch.equal(s.input_ids, ids)
        assert torch.equal(s.loss_mask, mask.bool())
    # a bare hidden_states/ directory and a single file read too (loss mask all ones)
    bare = TrainData(tmp_path / "d" / "hidden_states")
    assert bare.info.format == "hidden-states-dir" and bool(next(iter(bare)).loss_mask.all())
    one = TrainData(tmp_path / "d" / "hidden_states" / "hs_1.safetensors")
    assert len(one) == 1 and next(iter(one)).index == 1


def test_speculators_reads_what_we_write(tmp_path):
    pytest.importorskip("speculators.train.data")
    pytest.importorskip("datasets")
    from speculators.train.data import ArrowDataset

    rows = write(tmp_path / "d", dtype=torch.bfloat16)
    ds = ArrowDataset(max_len=64, datapath=str(tmp_path / "d"), on_missing="raise")
    item = ds[2]
    hs, ids, mask = rows[2]
    hs = hs.to(torch.bfloat16)
    # speculators: fc input = every tap but the last, flattened; targets from the last tap
    assert torch.equal(item["hidden_states"], hs[:, :-1].flatten(1))
    assert torch.equal(item["verifier_last_hidden_states"], hs[:, -1])
    assert torch.equal(item["input_ids"], ids) and torch.equal(item["loss_mask"], mask)


def test_pickle_needs_explicit_permission(tmp_path):
    f = tmp_path / "data_0.pt"
    hs = [torch.randn(5, 8) for _ in range(3)]  # older dumps: one tensor per tap
    torch.save({"input_ids": torch.arange(5), "hidden_states": hs}, f)
    with pytest.raises(WiringError) as err:
        TrainData(f)
    assert str(f) in str(err.value) and "allow_pickle=True" in str(err.value)
    with pytest.raises(WiringError, match="allow_pickle"):
        TrainData(tmp_path)
    sample = next(iter(TrainData(f, allow_pickle=True)))
    assert sample.hidden_states.shape == (5, 3, 8)
    assert torch.equal(sample.hidden_states[:, 1], hs[1])


def test_pickles_load_weights_only(tmp_path):
    from fractions import Fraction  # any class torch.load(weights_only=True) will not rebuild

    f = tmp_path / "obj.pt"
    torch.save({"input_ids": torch.arange(4), "hidden_states": torch.randn(4, 2, 8),
                "extra": Fraction(1, 3)}, f)  # fmt: skip
    with pytest.raises(WiringError, match="weights_only=True") as err:
        TrainData(f, allow_pickle=True)
    assert err.value.path == str(f) and err.value.fix


LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 12345\n"


def test_lfs_pointers_and_truncated_files_get_clear_errors(tmp_path):
    write(tmp_path / "d")
    first = tmp_path / "d" / "hidden_states" / "hs_0.safetensors"
    good = first.read_bytes()
    for raw, message in [(LFS_POINTER, "Git LFS pointer"), (good[:-10], "data is truncated"),
                         (good[:5], "too short for a safetensors header")]:  # fmt: skip
        first.write_bytes(raw)
        with pytest.raises(WiringError, match=message) as err:
            TrainData(tmp_path / "d")  # the first file is read for the DataInfo
        assert err.value.path == str(first)
    first.write_bytes(good)
    later = tmp_path / "d" / "hidden_states" / "hs_2.safetensors"
    later.write_bytes(LFS_POINTER)
    with pytest.raises(WiringError, match="git lfs pull"):
        list(TrainData(tmp_path / "d"))


def test_corrupt_and_inconsistent_files_are_named(tmp_path):
    write(tmp_path / "d")
    f = tmp_path / "d" / "hidden_states" / "hs_1.safetensors"
    f.write_bytes(f.read_bytes()[:100])
    data = TrainData(tmp_path / "d")
    with pytest.raises(WiringError) as err:
        list(data)
    assert str(f) in str(err.value)
    # hidden states from another dataset: token ids disagree with the Arrow rows
    write(tmp_path / "e")
    other = tmp_path / "e" / "hidden_states" / "hs_0.safetensors"
    from safetensors.torch import load_file, save_file

    t = load_file(str(other))
    t["token_ids"] = t["token_ids"] + 1
    save_file(t, str(other))
    with pytest.raises(WiringError, match="token_ids differ"):
        list(TrainData(tmp_path / "e"))
    bad_meta = tmp_path / "e" / "sglang_eagle3_data.json"
    bad_meta.write_text(json.dumps({"taps": ["embed", "layer:2"]}))
    with pytest.raises(WiringError, match="names 2 taps"):
        TrainData(tmp_path / "e")


def test_missing_path_and_empty_dir(tmp_path):
    with pytest.raises(WiringError, match="does not exist"):
        TrainData(tmp_path / "nope")
    with pytest.raises(WiringError, match="no hidden-state files"):
        TrainData(tmp_path)


def test_fingerprint_finds_the_embedding_tap():
    gen = torch.Generator().manual_seed(0)
    seq, hidden = 64, 32
    embed = torch.randn(100, hidden, generator=gen) * 0.05
    ids = torch.randint(0, 100, (seq,), generator=gen)
    layers = [torch.randn(seq, hidden, generator=gen) * s for s in (2.0, 5.0, 9.0)]
    hs = torch.stack([layers[0], embed[ids], layers[1], layers[2]], dim=1)  # embed stored 2nd
    fp = fingerprint_taps([(hs, ids)])
    assert fp.embed_index == 1 and fp.ratio is not None and fp.ratio < 0.25
    exact = fingerprint_taps([(hs, ids)], embed=lambda i: embed[i])
    assert exact.embed_index == 1 and exact.exact_match[1] == 1.0
    problems = check_against_taps(fp, parse_taps(TAPS))
    assert problems and "#1" in problems[0]
    assert check_against_taps(fp, (Tap(3), Tap(0), Tap(5), Tap(8))) == []
