"""The reference draft forward against speculators' own Eagle3DraftModel on random weights."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from sglang_eagle3.doctor.draft_forward import load_draft
from sglang_eagle3.errors import WiringError

pytest.importorskip("speculators.models.eagle3")

VOCAB, HIDDEN, TOKENS = 1024, 64, 48


def speculators_model(nbr: bool, *, draft_vocab=256, layers=1, **flags):
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    layer = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,  # GQA
        num_hidden_layers=layers,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        rope_theta=10000.0,
    )
    layer._attn_implementation = "sdpa"  # speculators' default flex attention needs a GPU
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=draft_vocab,
        norm_before_residual=nbr,
        eagle_aux_hidden_state_layer_ids=[0, 3, 6],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["DeepseekV3ForCausalLM"]),
        ),
        **flags,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Eagle3DraftModel(cfg)
        with torch.no_grad():
            for p in model.parameters():  # norms away from 1 so a missed norm shows
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if p.ndim == 1 else 0.0))
            if model.use_draft_vocab:
                hot = torch.randperm(VOCAB)[:draft_vocab].sort().values
                model.t2d.copy_(torch.zeros(VOCAB, dtype=torch.bool).index_fill(0, hot, True))
                model.d2t.copy_(hot - torch.arange(draft_vocab))
    return model.eval()


def run_speculators(model, hs, ids, steps=3):
    """speculators' TTT forward; returns per-step logits (hooked) and argmax ids."""
    logits: list[torch.Tensor] = []
    hook = model.lm_head.register_forward_hook(lambda m, i, o: logits.append(o[0].detach()))
    try:
        with torch.no_grad():
            tokens = model(
                hs[None], ids[None], torch.zeros(1, len(ids), dtype=torch.long), ttt_steps=steps
            )
    finally:
        hook.remove()
    return logits, [t[0] for t in tokens]


def teacher_feed(ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """What speculators feeds TTT step k+1: the data's ids shifted by k, zero padded."""
    return [torch.cat([ids[1 + k :], ids.new_zeros(1 + k)]) for k in range(steps - 1)]


VARIANTS = {
    "plain": {},
    "full-vocab": {"draft_vocab": VOCAB},
    "fc_norm": {"fc_norm": True},
    "norm_before_fc+norm_output+2 layers": {
        "norm_before_fc": True,
        "norm_output": True,
        "layers": 2,
    },
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("nbr", [True, False], ids=["norm_before_residual", "sglang_residual"])
def test_matches_speculators(tmp_path, nbr, variant, figures):
    model = speculators_model(nbr, **VARIANTS[variant])
    model.save_pretrained(str(tmp_path))
    gen = torch.Generator().manual_seed(1)
    hs = torch.randn(TOKENS, 3 * HIDDEN, generator=gen)
    ids = torch.randint(0, VOCAB, (TOKENS,), generator=gen)
    ref_logits, ref_tokens = run_speculators(model, hs, ids)
    draft = load_draft(tmp_path, dtype="float32")
    outs = draft.forward(hs, ids, steps=3, feed=teacher_feed(ids, 3))
    for k, out in enumerate(outs):
        err = (out.logits - ref_logits[k]).abs().max().item()
        print(f"{variant} nbr={nbr} step {k + 1}: max |logit diff| {err:.2e}")
        figures.record_max("doctor's draft forward vs speculators' model: max |logit diff|", err)
        assert err < 1e-4
        assert torch.equal(out.draft_ids, ref_tokens[k])


def test_own_tokens_chain_through_d2t(tmp_path):
    model = speculators_model(True)
    model.save_pretrained(str(tmp_path))
    hs, ids = torch.randn(TOKENS, 3 * HIDDEN), torch.randint(0, VOCAB, (TOKENS,))
    draft = load_draft(tmp_path, dtype="float32")
    own = draft.forward(hs, ids, steps=3)
    # target id = draft id + d2t[draft id], and always a token t2d marks as drafted
    for out in own:
        assert torch.equal(out.target_ids, out.draft_ids + model.d2t[out.draft_ids])
        assert bool(model.t2d[out.target_ids].all())
    fed = draft.forward(hs, ids, steps=3, feed=[own[0].target_ids, own[1].target_ids])
    for a, b in zip(own, fed, strict=True):
        assert torch.equal(a.logits, b.logits)


def test_flat_and_specforge_names_with_target_embedding(tmp_path):
    """A SpecForge-style flat draft (``midlayer.*``, no embedding) reads like the original,
    its embedding taken from the target's ``model.embed_tokens.weight``."""
    model = speculators_model(False)
    spec_dir, flat_dir, target_dir = tmp_path / "spec", tmp_path / "flat", tmp_path / "target"
    model.save_pretrained(str(spec_dir))
    for d in (flat_dir, target_dir):
        d.mkdir()
    cfg = json.loads((spec_dir / "config.json").read_text())
    flat = {**cfg["transformer_layer_config"], "architectures": ["LlamaForCausalLMEagle3"]}
    flat.update(
        model_type="llama",
        draft_vocab_size=256,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [-1, 2, 5]},
    )
    (flat_dir / "config.json").write_text(json.dumps(flat))
    weights = load_file(str(next(spec_dir.glob("*.safetensors"))))
    embed = weights.pop("embed_tokens.weight")
    renamed = {k.replace("layers.0.", "midlayer."): v for k, v in weights.items()}
    save_file(renamed, str(flat_dir / "model.safetensors"))
    save_file({"model.embed_tokens.weight": embed}, str(target_dir / "model.safetensors"))
    hs, ids = torch.randn(TOKENS, 3 * HIDDEN), torch.randint(0, VOCAB, (TOKENS,))
    want = load_draft(spec_dir, dtype="float32").forward(hs, ids, steps=2)
    with pytest.raises(WiringError, match="no embed_tokens.weight"):
        load_draft(flat_dir)
    got = load_draft(flat_dir, target_dir=target_dir).forward(hs, ids, steps=2)
    for a, b in zip(want, got, strict=True):
        assert torch.allclose(a.logits, b.logits, atol=1e-6)


def test_bad_inputs_are_wiring_errors(tmp_path):
    model = speculators_model(True)
    model.save_pretrained(str(tmp_path / "ok"))
    draft = load_draft(tmp_path / "ok", dtype="float32")
    with pytest.raises(WiringError, match="3 taps x 64"):
        draft.forward(torch.randn(4, 2 * HIDDEN), torch.zeros(4, dtype=torch.long))
    with pytest.raises(WiringError, match="outside the embedding"):
        draft.forward(torch.randn(4, 3 * HIDDEN), torch.full((4,), VOCAB))
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((tmp_path / "ok" / "config.json").read_text())
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")
    with pytest.raises(WiringError, match="no .safetensors weights"):
        load_draft(pickled)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((tmp_path / "ok" / "config.json").read_text())
    src = next((tmp_path / "ok").glob("*.safetensors")).read_bytes()
    (broken / "model.safetensors").write_bytes(src[: len(src) // 2])
    with pytest.raises(WiringError, match="truncated"):
        load_draft(broken)


def test_bfloat16_close_to_float32(tmp_path):
    model = speculators_model(True)
    model.save_pretrained(str(tmp_path))
    hs, ids = torch.randn(TOKENS, 3 * HIDDEN), torch.randint(0, VOCAB, (TOKENS,))
    f32 = load_draft(tmp_path, dtype="float32").forward(hs, ids)[0]
    bf16 = load_draft(tmp_path, dtype="bfloat16").forward(hs, ids)[0]
    agree = (f32.draft_ids == bf16.draft_ids).float().mean().item()
    assert agree > 0.8, agree


def test_keep_narrows_later_steps_without_changing_them(tmp_path):
    model = speculators_model(True)
    model.save_pretrained(str(tmp_path))
    hs, ids = torch.randn(TOKENS, 3 * HIDDEN), torch.randint(0, VOCAB, (TOKENS,))
    draft = load_draft(tmp_path, dtype="float32")
    full = draft.forward(hs, ids, steps=3)
    every_other = torch.arange(TOKENS) % 2 == 0
    seen: list[int] = []

    def keep(step, out):
        seen.append(step)
        return every_other[out.rows] if step == 0 else torch.ones_like(out.rows, dtype=torch.bool)

    narrow = draft.forward(hs, ids, steps=3, keep=keep)
    assert seen == [0, 1, 2]
    assert torch.equal(narrow[1].rows, torch.arange(0, TOKENS, 2))
    for k in (1, 2):
        assert torch.allclose(narrow[k].logits, full[k].logits[narrow[k].rows], atol=1e-5)
    stop = draft.forward(
        hs, ids, steps=3, keep=lambda s, o: torch.zeros_like(o.rows, dtype=torch.bool)
    )
    assert len(stop) == 1
