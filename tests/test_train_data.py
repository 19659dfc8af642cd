"""speculators 0.9 training data: our writer, our streaming reader, and speculators' own reader."""

from __future__ import annotations

import json

import pytest
import torch

from sglang_eagle3.data.tap_fingerprint import check_against_taps, fingerprint_taps
from sglang_eagle3.data.train_data import TrainData, TrainDataWriter
from sglang_eagle3.doctor.cli import main
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


# ---- stacked files: [num_samples, seq, ...] in one file, read as one sample per row ------


def stack(rows, seq=12):
    """``rows`` (hs, ids, mask) right-padded to ``seq``: the tensors and each row's length."""
    pad = torch.nn.functional.pad
    hs = torch.stack([pad(h, (0, 0, 0, 0, 0, seq - len(h))) for h, _, _ in rows])  # [n, seq, ..]
    ids = torch.stack([pad(i, (0, seq - len(i))) for _, i, _ in rows])  # [n, seq]
    mask = torch.stack([pad(m, (0, seq - len(m))) for _, _, m in rows])  # [n, seq]
    return hs, ids, mask, torch.tensor([len(i) for _, i, _ in rows])


def save_stacked(f, meta=None, **tensors):
    from safetensors.torch import save_file

    text = None if meta is None else {"sglang_eagle3": json.dumps(meta)}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(f), metadata=text)
    return f


def same_samples(got, want):
    assert len(got) == len(want)
    for s, w in zip(got, want, strict=True):
        assert torch.equal(s.hidden_states, w.hidden_states)
        assert torch.equal(s.input_ids, w.input_ids) and torch.equal(s.loss_mask, w.loss_mask)


def test_stacked_files_read_as_the_per_sequence_samples(tmp_path):
    rows = write(tmp_path / "d")  # seq 10, 11, 12
    want = list(TrainData(tmp_path / "d"))
    hs, ids, mask, lengths = stack(rows)  # [3, 12, 4, 16], [3, 12], [3, 12], [3]
    meta = {"taps": TAPS, "num_layers": 8}
    f = save_stacked(tmp_path / "s.safetensors", meta, hidden_states=hs, input_ids=ids,
                     loss_mask=mask, lengths=lengths)  # fmt: skip
    data = TrainData(f)
    assert data.info.format == "stacked-safetensors" and len(data) == 3
    assert (data.info.num_samples, data.info.num_taps, data.info.hidden_size) == (3, 4, 16)
    assert data.info.taps == parse_taps(TAPS) and data.info.num_layers == 8
    got = list(data)
    same_samples(got, want)
    assert [s.index for s in got] == [0, 1, 2] and {s.path for s in got} == {str(f)}

    # attention_mask, left padded, trims alike
    def left(t):  # each row's padding moved to its front
        return torch.stack([r.roll(12 - n, 0) for r, n in zip(t, lengths.tolist(), strict=True)])

    on = torch.arange(12) >= (12 - lengths)[:, None]  # [3, 12]
    f = save_stacked(tmp_path / "left.safetensors", hidden_states=left(hs), input_ids=left(ids),
                     loss_mask=left(mask), attention_mask=on.long())  # fmt: skip
    same_samples(list(TrainData(f)), want)
    # no padding keys: rows are full length, loss mask all ones
    f = save_stacked(tmp_path / "full.safetensors", hidden_states=hs, input_ids=ids)
    full = list(TrainData(f))
    assert [s.input_ids.shape[0] for s in full] == [12] * 3 and all(s.loss_mask.all() for s in full)
    assert torch.equal(full[1].hidden_states, hs[1])
    # the same rows as a torch pickle, hidden states as one tensor or a list per tap
    taps = list(hs.unbind(2))  # 4 x [3, 12, 16]
    for i, stored in enumerate([hs, taps]):
        pt = tmp_path / f"s{i}.pt"
        torch.save({"input_ids": ids, "hidden_states": stored, "loss_mask": mask,
                    "lengths": lengths}, pt)  # fmt: skip
        with pytest.raises(WiringError, match="allow_pickle=True"):
            TrainData(pt)
        data = TrainData(pt, allow_pickle=True)
        assert data.info.format == "stacked-torch-pickle" and data.info.num_samples == 3
        same_samples(list(data), want)


def test_a_directory_of_stacked_files_numbers_rows_in_file_order(tmp_path):
    rows = write(tmp_path / "d")
    want = list(TrainData(tmp_path / "d"))
    hs, ids, mask, lengths = stack(rows)
    st, pt = tmp_path / "st", tmp_path / "pt"
    st.mkdir(), pt.mkdir()
    for i, part in enumerate([slice(0, 1), slice(1, 3)]):
        save_stacked(st / f"hs_{i}.safetensors", hidden_states=hs[part], input_ids=ids[part],
                     loss_mask=mask[part], lengths=lengths[part])  # fmt: skip
        torch.save({"input_ids": ids[part], "hidden_states": hs[part], "loss_mask": mask[part],
                    "lengths": lengths[part]}, pt / f"part{i}.pt")  # fmt: skip
    for data in (TrainData(st), TrainData(pt, allow_pickle=True)):
        assert len(data) == data.info.num_samples == 3
        got = list(data)
        same_samples(got, want)
        assert [s.index for s in got] == [0, 1, 2]
    # one layout per directory: a one-sequence file among stacked ones is named
    one = save_stacked(st / "hs_2.safetensors", hidden_states=hs[0], token_ids=ids[0])
    with pytest.raises(WiringError, match="holds one sequence") as err:
        TrainData(st)
    assert err.value.path == str(one)
    # speculators 0.9 keeps one Arrow row per hs file: a stacked one there is refused
    first = tmp_path / "d" / "hidden_states" / "hs_0.safetensors"
    save_stacked(first, hidden_states=hs, input_ids=ids)
    with pytest.raises(WiringError, match="one Arrow row") as err:
        TrainData(tmp_path / "d")
    assert err.value.path == str(first)


HS4, IDS2 = torch.randn(3, 6, 4, 8), torch.randint(0, 100, (3, 6))
BAD_STACKS = {  # name: (tensors joining or replacing [3, 6, 4, 8] and [3, 6], message)
    "4-D hidden states, 1-D ids": ({"input_ids": IDS2[0]}, "is stacked"),
    "num_samples differ": ({"input_ids": IDS2[:2]}, "holds 3 samples"),
    "seq differs": ({"input_ids": IDS2[:, :5]}, "of 6 tokens"),
    "3-D hidden states, 2-D ids": ({"hidden_states": HS4[0]}, "is one sequence"),
    "loss_mask shape": ({"loss_mask": IDS2[:, :4]}, r"loss_mask \[3, 4\]"),
    "lengths shape": ({"lengths": torch.tensor([6, 6])}, r"lengths \[2\]"),
    "length past seq": ({"lengths": torch.tensor([6, 7, 6])}, "row 1: length 7"),
    "packed attention_mask": ({"attention_mask": torch.tensor([[1, 1, 0, 1, 1, 1]] * 3)},
                              "row 0: attention_mask is not one block"),
    "empty attention_mask row": ({"attention_mask": torch.tensor([[0] * 6] * 3)},
                                 "row 0: attention_mask is all zeros"),
    "attention_mask of 2s": ({"attention_mask": torch.full((3, 6), 2)}, "other than 0 and 1"),
    "float lengths": ({"lengths": torch.tensor([6.0, 6.0, 6.0])}, "expected integers"),
    "lengths against the mask": ({"lengths": torch.tensor([6, 5, 6]),
                                  "attention_mask": torch.ones(3, 6, dtype=torch.long)},
                                 "row 1: lengths says 5 tokens, attention_mask 6"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD_STACKS))
def test_bad_stacked_shapes_give_one_error_naming_the_file(tmp_path, name):
    change, message = BAD_STACKS[name]
    tensors = {"hidden_states": HS4, "input_ids": IDS2, **change}
    f = save_stacked(tmp_path / "bad.safetensors", **tensors)
    with pytest.raises(WiringError, match=message) as err:
        list(TrainData(f))
    assert err.value.path == str(f) and str(f) in str(err.value)
    assert err.value.fix, f"{name}: the message says what is wrong but not how to fix it"
    pt = tmp_path / "bad.pt"
    torch.save(tensors, pt)
    with pytest.raises(WiringError, match=message) as err:
        list(TrainData(pt, allow_pickle=True))
    assert err.value.path == str(pt)


def test_stacked_rows_keep_the_per_sequence_checks(tmp_path):
    hs = HS4.clone()
    hs[2, 1, 0, 0] = float("nan")
    f = save_stacked(tmp_path / "nan.safetensors", hidden_states=hs, input_ids=IDS2)
    data = TrainData(f)
    assert len(data) == 3
    with pytest.raises(WiringError, match="row 2: hidden_states contain inf or NaN") as err:
        list(data)
    assert err.value.path == str(f)
    f = save_stacked(tmp_path / "meta.safetensors", {"taps": ["embed", "layer:2"]},
                     hidden_states=HS4, input_ids=IDS2)  # fmt: skip
    with pytest.raises(WiringError, match="names 2 taps"):
        TrainData(f)


def test_the_doctor_reads_a_stacked_file(random_draft, tmp_path, capsys):
    hs, ids = torch.randn(3, 16, 4, 64), torch.randint(0, 1024, (3, 16))
    meta = {"taps": ["embed", "layer:2", "layer:5", "layer:7"], "num_layers": 8}
    f = save_stacked(tmp_path / "stacked.safetensors", meta, hidden_states=hs, input_ids=ids,
                     lengths=torch.tensor([16, 12, 9]))  # fmt: skip
    code = main(["--draft", str(random_draft), "--data", str(f), "--json", "--no-progress",
                 "--max-tokens", "32"])  # fmt: skip
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    report = json.loads(out.out)["data"]
    assert (report["format"], report["num_samples"], report["num_taps"]) == (
        "stacked-safetensors", 3, 4)  # fmt: skip
