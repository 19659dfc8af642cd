"""The plan record PD servers compare (layout/served_plan.py) and the drafter's weights
identity it carries (checkpoint/draft_identity.py)."""

from __future__ import annotations

import pytest

from sglang_eagle3.checkpoint.draft_identity import draft_weights_sha256
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.served_plan import (
    COMPARED,
    ServedPlan,
    plan_mismatch,
    read_peer_plan,
)

BASE = dict(role="decode", taps=("embed", "layer:2", "layer:5"), capture_indices=(0, 3, 6),
            fc_block_order=(0, 1, 2), drafter="ab" * 32, algorithm="EAGLE3", num_steps=3,
            topk=2, num_draft_tokens=6, sglang_eagle3="0.1.0")  # fmt: skip
OTHER = {"taps": ("layer:5", "embed", "layer:2"), "fc_block_order": (2, 0, 1),
         "drafter": "cd" * 32, "algorithm": "EAGLE", "num_steps": 2, "topk": 1,
         "num_draft_tokens": 4}  # fmt: skip


def _plan(**changes) -> ServedPlan:
    return ServedPlan(**{**BASE, **changes})


def test_fingerprint_covers_exactly_the_compared_fields():
    base = _plan()
    assert base.fingerprint == _plan(role="prefill", sglang_eagle3="9").fingerprint
    for name, value in OTHER.items():
        assert _plan(**{name: value}).fingerprint != base.fingerprint, name
    assert set(OTHER) | {"capture_indices"} == set(COMPARED)


def test_mismatch_names_both_plans_and_what_differs():
    mine, peer = _plan(), _plan(role="prefill", drafter="cd" * 32)
    assert plan_mismatch(mine, _plan(role="prefill"), peer_name="h:1") is None
    err = str(plan_mismatch(mine, peer, peer_name="h:1"))
    assert "prefill server h:1 serves another plan (drafter differ)" in err
    assert f"[plan {peer.fingerprint}]" in err and f"[plan {mine.fingerprint}]" in err
    assert "drafter cdcdcdcdcdcdcdcd" in err and "Fix: start every prefill" in err
    err = str(plan_mismatch(mine, _plan(**{k: OTHER[k] for k in ("taps", "fc_block_order")}),
                            peer_name="h:1"))  # fmt: skip
    assert "(taps, fc_block_order differ)" in err and "fc blocks permuted [2, 0, 1]" in err
    err = str(plan_mismatch(mine, None, peer_name="h:1", why_none="HTTP 404"))
    assert "publishes no sglang-eagle3 plan (HTTP 404)" in err
    assert "this decode server serves taps embed, layer:2, layer:5" in err


def test_peer_plan_is_read_strictly():
    good = _plan(role="prefill").to_json()
    assert read_peer_plan(good, peer="p").fingerprint == good["fingerprint"]
    cases = [
        ({**good, "fingerprint": "0" * 16}, "hash to"),  # fields edited after hashing
        ([good], "not a JSON object"),
        ({**good, "topk": "2"}, "topk"),
        ({**good, "capture_indices": [0, 3]}, "must describe the 3 taps"),
        ({**good, "extra": 1}, "extra"),
    ]
    for data, words in cases:
        with pytest.raises(WiringError, match=words):
            read_peer_plan(data, peer="p")


def test_stock_capture_plan_has_no_taps():
    plan = _plan(taps=None, capture_indices=(), fc_block_order=())
    assert "taps stock SGLang capture" in plan.describe()
    assert plan.fingerprint != _plan().fingerprint


def test_draft_weights_identity(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"\x01" * 1000)
        (d / "config.json").write_text("{}")
    (b / "config.json").write_text('{"eagle_aux_hidden_state_layer_ids": [0, 3, 6]}')
    assert draft_weights_sha256(a) == draft_weights_sha256(b)  # the config is not the weights
    (b / "model.safetensors").write_bytes(b"\x01" * 999 + b"\x02")
    assert draft_weights_sha256(a) != draft_weights_sha256(b)
    (a / "model.safetensors").rename(a / "model-00001.safetensors")
    renamed = draft_weights_sha256(a)  # the file name is part of the identity
    (a / "model-00001.safetensors").rename(a / "model.safetensors")
    assert renamed != draft_weights_sha256(a)
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder in (empty, tmp_path / "missing"):
        with pytest.raises(WiringError, match="no weight files"):
            draft_weights_sha256(folder)
