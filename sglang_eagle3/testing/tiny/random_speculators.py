"""A seeded random-weight drafter in speculators 0.9's own format (``save_pretrained``).

For settings the trained tiny drafter does not exercise: several decoder layers (speculators'
later layers are stock Llama layers) and a trained embedding (``embed_requires_grad``). Norm
weights are randomised too, so a norm SGLang skips or swaps changes the logits.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


def write_random_speculators_draft(
    out_dir: Path | str,
    target_dir: Path | str,
    *,
    hf_ids: tuple[int, ...] = (0, 3, 6),
    num_layers: int = 2,
    norm_before_residual: bool = True,
    embed_requires_grad: bool = True,
    seed: int = 0,
) -> Path:
    """``hf_ids``: the fc taps as speculators stores them (input-to-layer ids)."""
    from safetensors.torch import load_file
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    target_dir = Path(target_dir)
    tc = json.loads((target_dir / "config.json").read_text())
    h = tc["hidden_size"]
    layer = LlamaConfig(
        vocab_size=tc["vocab_size"],
        hidden_size=h,
        intermediate_size=2 * h,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=h // 4,
        num_hidden_layers=num_layers,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        tie_word_embeddings=False,
    )
    layer._attn_implementation = "sdpa"  # flex attention needs a GPU
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=tc["vocab_size"],
        norm_before_residual=norm_before_residual,
        embed_requires_grad=embed_requires_grad,
        eagle_aux_hidden_state_layer_ids=list(hf_ids),
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(
                name_or_path=str(target_dir), architectures=list(tc.get("architectures") or [])
            ),
        ),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Eagle3DraftModel(cfg)
        target = load_file(str(target_dir / "model.safetensors"))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.copy_(1 + 0.3 * torch.randn_like(p))  # a skipped norm must show
                else:
                    p.copy_(0.08 * torch.randn_like(p))
            embed = target["model.embed_tokens.weight"].float()
            if embed_requires_grad:  # "trained": moved away from the target's
                embed = embed + 0.5 * embed.std() * torch.randn_like(embed)
            model.embed_tokens.weight.copy_(embed)
    out = Path(out_dir)
    model.save_pretrained(str(out))
    return out
