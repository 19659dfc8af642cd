"""The doctor's MLA draft forward (doctor/draft_mla.py) on a random Eagle3DeepseekV2 draft,
in the fast tier: its attention against transformers' own DeepseekV3Attention on the same
weights, later steps narrowed without changing them. Against SGLang's drafter itself:
tests/test_mla_draft_fidelity.py."""

from __future__ import annotations

import pytest
import torch

from sglang_eagle3.doctor.draft_attention import LayerCache, attention
from sglang_eagle3.doctor.draft_forward import load_draft
from sglang_eagle3.doctor.draft_mla import mla_config, mla_qkv, mla_softmax_scale
from sglang_eagle3.testing.tiny.random_mla_draft import write_random_mla_draft

TOKENS = 40
LAYOUT = {"hidden_state_layout": ["embed", "layer:2", "layer:5"]}


@pytest.fixture
def draft(tiny_target, tmp_path):
    path = write_random_mla_draft(tmp_path / "d", tiny_target, eagle_config=LAYOUT,
                                  fc_norm=True, norm_output=True, d2t=True)  # fmt: skip
    return load_draft(path, target_dir=tiny_target, dtype="float32")


def test_mla_attention_is_transformers_deepseek_v3_attention(draft):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    c, w, p = draft.config, draft.w, "layers.0.self_attn."
    x = torch.randn(TOKENS, 2 * c.hidden_size)  # what the layer's attention gets: 2h wide
    rows = torch.arange(TOKENS)
    cos, sin = draft.rope(x[None], (rows + 1)[None])
    q, k, v = mla_qkv(c, w, x, (cos, sin))
    cache = LayerCache()
    cache.add(k, v, rows)
    ours = attention(q, rows, cache, scale=mla_softmax_scale(c)).transpose(0, 1).reshape(TOKENS, -1)
    ours = ours @ w[p + "o_proj.weight"].T

    cfg = mla_config(c)
    cfg.hidden_size = 2 * c.hidden_size  # the a-projections read 2h; o_proj maps back to h
    cfg._attn_implementation = "eager"
    hf = DeepseekV3Attention(cfg, layer_idx=0)
    hf.o_proj = torch.nn.Linear(hf.o_proj.in_features, c.hidden_size, bias=False)
    hf.load_state_dict({n: w[p + n] for n in hf.state_dict()})
    mask = torch.full((TOKENS, TOKENS), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        theirs, _ = hf(x[None], position_embeddings=(cos, sin), attention_mask=mask)
    assert torch.allclose(ours, theirs[0], atol=1e-5), (ours - theirs[0]).abs().max()
    wrong = attention(q, rows, cache).transpose(0, 1).reshape(TOKENS, -1) @ w[p + "o_proj.weight"].T
    assert (wrong - theirs[0]).abs().max() > 1e-3  # without yarn's mscale: the check can fail


def test_mla_keep_narrows_later_steps_without_changing_them(draft):
    c = draft.config
    hs = torch.randn(TOKENS, c.num_aux * c.target_hidden_size)
    ids = torch.randint(0, c.vocab_size, (TOKENS,))
    full = draft.forward(hs, ids, steps=3)
    assert full[0].logits.shape == (TOKENS, c.draft_vocab_size)
    every_other = torch.arange(TOKENS) % 2 == 0

    def keep(step, out):
        return every_other[out.rows] if step == 0 else torch.ones_like(out.rows, dtype=torch.bool)

    narrow = draft.forward(hs, ids, steps=3, keep=keep)
    assert torch.equal(narrow[1].rows, torch.arange(0, TOKENS, 2))
    for k in (1, 2):
        assert torch.allclose(narrow[k].logits, full[k].logits[narrow[k].rows], atol=1e-5)
