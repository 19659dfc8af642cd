"""A served drafter's life on real CPU SGLang servers: online weight updates through SGLang's
own HTTP update path keep the wiring, and the live accept-length watch warns when the served
accept length falls below what the drafter should reach.

Server A starts with draft 1 and is updated to draft 2 through /update_weights_from_tensor
(selector "draft"); server B starts fresh with draft 2. Both drafts are the trained tiny
drafter re-declared in a non-ascending layout (layer:5, embed, layer:2: SGLang fills embed,
layer:2, layer:5, so the fc input is permuted at load) with per-tap norms (fc_norm), and the
fused fc block is installed with its PyTorch path (a test-only switch): the code a Hopper
server runs, where the fused block hides the norm modules from a module-level permutation.
Before the fix the updated server's drafter logits differed from the fresh one's by 10.2.

A is started expecting an accept length of 3.9 (its drafts reach about 2.2), B expecting 1.5.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.request

import pytest
import torch
from safetensors.torch import load_file, save_file
from sglang_checks import generate

from sglang_eagle3 import env_names
from sglang_eagle3.testing.cpu_harness.tap_recorder import recorded_taps
from sglang_eagle3.testing.tiny.drafter import tiny_drafter

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

LAYOUT_IDS = [6, 0, 3]  # speculators' ids of layer:5, embed, layer:2
TRAINED_ORDER = (2, 0, 1)  # the trained draft's blocks (embed, layer:2, layer:5) in that order
PROMPTS = ["def main(", "import os\n", "class Foo:", "for i in range("]
SPEC = ["--cpu", "--dtype", "float32", "--disable-radix-cache", "--speculative-algorithm",
        "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--enable-metrics", "--decode-log-interval", "8",
        "--accept-watch-window", "32"]  # fmt: skip
WARNING = re.compile(r"accept-length watch: served accept length ([\d.]+) over the last (\d+) "
                     r"verified tokens is below 0.8 x the expected ([\d.]+)")  # fmt: skip


def _write_draft(out, trained, seed: int):
    """The trained draft, its fc blocks in LAYOUT_IDS order, with seeded per-tap norms; seed
    1 also moves every other weight a little (a different draft of the same shapes)."""
    shutil.copytree(trained, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(fc_norm=True, eagle_aux_hidden_state_layer_ids=LAYOUT_IDS)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    w = load_file(str(out / "model.safetensors"))
    gen = torch.Generator().manual_seed(seed)
    blocks = w["fc.weight"].chunk(3, dim=1)
    w["fc.weight"] = torch.cat([blocks[i] for i in TRAINED_ORDER], 1).contiguous()
    width = blocks[0].shape[1]
    for j in range(3):
        w[f"fc_norm.{j}.weight"] = 1 + 0.3 * torch.randn(width, generator=gen)
    if seed == 1:
        for name, t in w.items():
            if name not in ("embed_tokens.weight",) and t.is_floating_point():
                w[name] = t + 0.02 * t.std() * torch.randn(t.shape, generator=gen)
    save_file(w, str(out / "model.safetensors"))
    return out


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    d = tiny_drafter()
    root = tmp_path_factory.mktemp("drafts")
    return (
        d.target_dir,
        _write_draft(root / "one", d.draft_dir, 1),
        _write_draft(root / "two", d.draft_dir, 2),
    )


def _server(factory, target, draft, record, name, expected):
    env = {env_names.FUSED_FC_TEST_INSTALL: "1", env_names.RECORD_TAPS: str(record)}
    argv = [*SPEC, "--speculative-draft-model-path", str(draft), "--expected-accept-length",
            expected]  # fmt: skip
    return factory(target, argv, name=name, module="sglang_eagle3.launch", env=env)


@pytest.fixture(scope="module")
def servers(module_server_factory, drafts, tmp_path_factory):
    target, one, two = drafts
    rec = tmp_path_factory.mktemp("records")
    a = _server(module_server_factory, target, one, rec / "a", "updated", "3.9")
    b = _server(module_server_factory, target, two, rec / "b", "fresh", "1.5")
    return a, b, rec


def _update(srv, tensors: dict, selector: str = "draft") -> tuple[int, dict]:
    """SGLang's own session: begin, update_weights_from_tensor, end, on one runner."""
    import urllib.error

    import torch.multiprocessing as mp
    from sglang.srt.utils import MultiprocessingSerializer

    # file_system: the server maps the tensors by file name; fd passing needs the client's
    # multiprocessing authkey, which an HTTP client does not share with SGLang's scheduler
    mp.set_sharing_strategy("file_system")
    payload = MultiprocessingSerializer.serialize(list(tensors.items()), output_str=True)
    assert srv.post("/begin_weight_update", {"selector": selector})["success"]
    try:
        body = {"serialized_named_tensors": [payload], "selector": selector}
        try:
            return 200, srv.post("/update_weights_from_tensor", body)
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())
    finally:
        assert srv.post("/end_weight_update", {})["success"]


def _served(srv, folder) -> tuple[dict, list[torch.Tensor]]:
    """Greedy outputs and accept lengths of PROMPTS, one at a time, and the drafter's logits
    of every draft forward they ran."""
    shutil.rmtree(folder / "draft", ignore_errors=True)
    outs = {p: generate(srv, p, 16) for p in PROMPTS}
    got = {p: (o["output_ids"], o["meta_info"]["completion_tokens"] / o["meta_info"]
               ["spec_verify_ct"]) for p, o in outs.items()}  # fmt: skip
    return got, [r["logits"] for r in recorded_taps(folder / "draft")]


def _assert_same_drafter(got, want, label):
    (outs_a, logits_a), (outs_b, logits_b) = got, want
    assert outs_a == outs_b, f"{label}: outputs or accept lengths differ"
    assert logits_a and len(logits_a) == len(logits_b), (len(logits_a), len(logits_b))
    worst = max((x - y).abs().max().item() for x, y in zip(logits_a, logits_b, strict=True))
    assert worst < 1e-5, f"{label}: drafter logits differ by {worst}"
    return worst


def test_update_to_a_second_draft_serves_what_a_fresh_start_serves(servers, drafts, figures):
    a, b, rec = servers
    _, one, two = drafts
    before = _served(a, rec / "a")
    fresh = _served(b, rec / "b")
    with pytest.raises(AssertionError):  # the drafts differ, so the comparison can fail
        _assert_same_drafter(before, fresh, "draft 1 vs draft 2")
    status, answer = _update(a, load_file(str(two / "model.safetensors")))
    assert status == 200 and answer["success"], answer
    assert "weight update loaded and re-wired" in a.log()
    worst = _assert_same_drafter(_served(a, rec / "a"), fresh, "updated vs fresh")
    figures.record("weight update: drafter logits, updated vs fresh (max abs)", f"{worst:.1e}")
    accept = sum(v[1] for v in fresh[0].values()) / len(PROMPTS)
    figures.record("weight update: accept length, updated = fresh server", f"{accept:.2f}")
    # lossless: greedy output does not depend on the drafter
    assert {p: v[0] for p, v in before[0].items()} == {p: v[0] for p, v in fresh[0].items()}


@pytest.mark.parametrize("bad", ["wrong_shape", "unknown_name", "target_tensor"])
def test_a_bad_update_is_refused_and_the_old_weights_keep_serving(servers, drafts, bad):
    a, b, rec = servers
    _, _, two = drafts
    w = load_file(str(two / "model.safetensors"))
    status, answer = _update(a, w)  # A serves draft 2, whichever test ran before
    assert status == 200 and answer["success"], answer
    ref = _served(b, rec / "b")
    partial = {"layers.0.mlp.up_proj.weight": torch.zeros_like(w["layers.0.mlp.up_proj.weight"])}
    if bad == "wrong_shape":
        partial["fc.weight"] = w["fc.weight"][:, :-1].contiguous()
        named = "fc.weight"
    elif bad == "unknown_name":
        partial["layers.0.self_attn.rotary.weight"] = torch.ones(4)
        named = "layers.0.self_attn.rotary.weight"
    else:  # a tensor of the target's, sent to the drafter
        named = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight"
        partial[named] = torch.ones(4, 4)
    status, answer = _update(a, partial)
    assert status == 400 and not answer["success"], answer
    assert "weight update refused" in answer["message"] and named in answer["message"], answer
    _assert_same_drafter(_served(a, rec / "a"), ref, f"after the refused {bad} update")


def test_a_partial_update_is_rewired_and_a_target_update_keeps_the_capture_plan(servers, drafts):
    a, b, rec = servers
    target, one, two = drafts
    ref = _served(b, rec / "b")
    w1, w2 = (load_file(str(d / "model.safetensors")) for d in (one, two))
    assert _update(a, w2)[1]["success"]
    # only the fc block and the per-tap norms of draft 1: A now serves a third drafter
    fc_only = {n: t for n, t in w1.items() if n.startswith(("fc.", "fc_norm."))}
    assert _update(a, fc_only)[1]["success"]
    with pytest.raises(AssertionError):
        _assert_same_drafter(_served(a, rec / "a"), ref, "draft 2 with draft 1's fc")
    assert _update(a, {n: w2[n] for n in fc_only})[1]["success"]
    _assert_same_drafter(_served(a, rec / "a"), ref, "back to draft 2's fc")
    # the target reloaded with its own weights: the drafter still gets the declared taps
    status, answer = _update(a, load_file(str(target / "model.safetensors")), selector="target")
    assert status == 200 and answer["success"], answer
    _assert_same_drafter(_served(a, rec / "a"), ref, "after a target update")


def test_the_fused_fc_install_is_decided_from_the_weights_own_device(monkeypatch):
    from sglang_eagle3.hooks.drafter import fused_fc_decision

    monkeypatch.delenv(env_names.FUSED_FC_TEST_INSTALL, raising=False)
    monkeypatch.delenv(env_names.FUSED_FC, raising=False)
    for device in ("cpu", "meta"):  # a GPU host serving from CPU, or offloaded weights
        install, why = fused_fc_decision(torch.empty(2, 6, device=device))
        assert not install and f"the fc weight is on {device}, not a CUDA device" in why
    monkeypatch.setenv(env_names.FUSED_FC, "0")
    assert fused_fc_decision(torch.empty(2, 6)) == (False, f"{env_names.FUSED_FC}=0")
    monkeypatch.setenv(env_names.FUSED_FC_TEST_INSTALL, "1")
    assert fused_fc_decision(torch.empty(2, 6))[0]


def _metrics(srv) -> str:
    with urllib.request.urlopen(srv.url + "/metrics", timeout=30) as r:
        return r.read().decode()


def test_the_accept_watch_warns_once_per_low_window_and_exports_the_layout(servers):
    a, b, rec = servers
    outs = [generate(srv, p, 64) for srv in (a, b) for p in PROMPTS]
    assert all(o["meta_info"]["spec_verify_ct"] > 0 for o in outs)  # both speculated
    warnings = WARNING.findall(a.log())
    verified = sum(o["meta_info"]["completion_tokens"] for o in outs[: len(PROMPTS)])
    # every window of 32 verified tokens that closed was low; at most one warning each
    assert 1 <= len(warnings) <= verified // 32, (len(warnings), verified)
    for served, tokens, expected in warnings:
        assert float(served) < 0.8 * 3.9 and int(tokens) >= 32 and expected == "3.90"
    line = next(x for x in a.log().splitlines() if "accept-length watch: served" in x)
    assert "python -m sglang_eagle3.doctor --draft" in line and "--steps 3 --topk 1" in line
    assert "accept-length watch: served" not in b.log()  # within its expectation: silent
    for srv, expected in ((a, "3.9"), (b, "1.5")):
        text = _metrics(srv)
        assert re.search(r'sglang_eagle3:layout_info\{[^}]*layout="layer:5,embed,layer:2"', text)
        assert 'capture_order="embed,layer:2,layer:5"' in text
        assert re.search(rf"sglang_eagle3:expected_accept_length\{{[^}}]*\}} {expected}", text)
        served = re.search(r"sglang_eagle3:window_accept_length(?:\{[^}]*\})? ([\d.]+)", text)
        assert served and 1 < float(served.group(1)) <= 4, text[-2000:]
