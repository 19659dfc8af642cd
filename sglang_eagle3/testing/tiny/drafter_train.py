"""Train the tiny drafter with speculators' own model code (its forward, loss and TTT).

speculators' trainer wants torch.distributed and a GPU, so a small AdamW loop drives
``Eagle3DraftModel.forward`` directly, with speculators' eager KL loss (the default fused loss
is a Triton kernel) and its ``shift_batch`` pairing done here per sequence.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from sglang_eagle3.layout.taps import parse_taps
from sglang_eagle3.log import get_logger
from sglang_eagle3.testing.tiny.drafter import DrafterRecipe


def speculators_draft(recipe: DrafterRecipe, target_dir: Path, target):
    """speculators' Eagle3DraftModel for the tiny target, verifier weights copied and frozen."""
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    tc = target.config
    layer = LlamaConfig(
        vocab_size=tc.vocab_size,
        hidden_size=tc.hidden_size,
        intermediate_size=3 * tc.hidden_size,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=1,
        rms_norm_eps=tc.rms_norm_eps,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        bos_token_id=tc.bos_token_id,
        eos_token_id=tc.eos_token_id,
        tie_word_embeddings=False,
    )
    layer._attn_implementation = "sdpa"  # flex attention needs a GPU
    ids = [t.hf_index for t in parse_taps(list(recipe.taps))]  # input-to-layer ids
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=tc.vocab_size,
        norm_before_residual=recipe.norm_before_residual,
        eagle_aux_hidden_state_layer_ids=ids,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=recipe.ttt_steps)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(
                name_or_path=str(target_dir), architectures=list(tc.architectures or [])
            ),
        ),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        model = Eagle3DraftModel(cfg)
    sd = target.state_dict()
    with torch.no_grad():  # verifier-owned weights: copied and frozen
        model.embed_tokens.weight.copy_(sd["model.embed_tokens.weight"])
        model.lm_head.weight.copy_(sd["lm_head.weight"])
        model.verifier_lm_head.weight.copy_(sd["lm_head.weight"])
        model.verifier_norm.weight.copy_(sd["model.norm.weight"])
    for p in (model.embed_tokens, model.lm_head, model.verifier_lm_head, model.verifier_norm):
        p.weight.requires_grad_(False)
    return model


def _batch(hs: torch.Tensor, ids: torch.Tensor, pick: torch.Tensor) -> dict:
    """speculators' shift_batch per sequence, packed into one row with document ids."""
    seqs, length = pick.numel(), ids.shape[1] - 1
    h = hs[pick]  # [B, L, taps, hidden]
    return {
        "hidden_states": h[:, :-1, :-1].flatten(2).reshape(1, seqs * length, -1),
        "input_ids": ids[pick, 1:].reshape(1, -1),
        "verifier_last_hidden_states": h[:, 1:, -1].reshape(1, seqs * length, -1),
        "loss_mask": torch.ones(1, seqs * length, dtype=torch.bool),
        "position_ids": torch.arange(1, length + 1).repeat(seqs)[None],
        "document_ids": torch.arange(seqs).repeat_interleave(length)[None],
    }


def train_drafter(model, data_dir: Path, recipe: DrafterRecipe) -> dict:
    from speculators.losses import resolve_loss_config

    from sglang_eagle3.data.train_data import TrainData

    loss_config = resolve_loss_config("kl_div", "eager")  # the fused default is a Triton kernel
    samples = list(TrainData(data_dir))
    hs = torch.stack([s.hidden_states for s in samples])  # [N, L, taps, hidden]
    ids = torch.stack([s.input_ids for s in samples])  # [N, L]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(recipe.seed + 1)
    model.train()
    t0, recent = time.monotonic(), []
    for step in range(recipe.steps):
        warm = min(1.0, (step + 1) / max(1, recipe.warmup_steps))
        cos = 0.5 * (1 + math.cos(math.pi * step / recipe.steps))
        for group in opt.param_groups:
            group["lr"] = recipe.lr * warm * (0.1 + 0.9 * cos)
        pick = torch.randperm(ids.shape[0], generator=gen)[: recipe.batch_sequences]
        _, loss, metrics = model(
            **_batch(hs, ids, pick), ttt_steps=recipe.ttt_steps, loss_config=loss_config
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        recent = (recent + [loss.item()])[-20:]
        if (step + 1) % 50 == 0:
            get_logger().info(
                "tiny drafter: step %d/%d loss %.3f",
                step + 1,
                recipe.steps,
                sum(recent) / len(recent),
            )
    model.eval()
    return {
        "loss_last20": round(sum(recent) / len(recent), 4),
        "train_seconds": round(time.monotonic() - t0, 1),
    }
