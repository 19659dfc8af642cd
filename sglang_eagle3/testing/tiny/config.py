"""The tiny DeepSeek-V3 recipe and the Hugging Face config it produces.

Shapes follow DeepSeek-V3's structure at toy scale (MLA with a q LoRA, grouped noaux_tc MoE
with a shared expert, one leading dense layer, yarn rope) so that SGLang runs the same code
paths it runs for the real model, just on a 2.5 M-parameter network that trains on 2 CPU cores.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sglang_eagle3.testing.tiny.tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizerRecipe
from sglang_eagle3.testing.tiny.train import TrainRecipe

# SGLang's CPU rope factory accepts only (deepseek_)yarn for DeepSeek; factor * original
# context = max_position_embeddings keeps HF and SGLang on the same cos/sin table size.
# mscale == mscale_all_dim makes the yarn attention factor exactly 1 in both implementations.
_YARN = {
    "type": "yarn",  # v4-style key, still read by some tools
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 512,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}


@dataclass(frozen=True)
class TargetRecipe:
    seed: int = 0
    num_layers: int = 8
    hidden_size: int = 128
    num_heads: int = 4
    # A q LoRA (not None) matches DeepSeek-V3 and exercises SGLang's fused q_a/kv_a projection
    # (fused_qkv_a_proj_with_mqa), the layout the real checkpoint loads through.
    q_lora_rank: int | None = 64
    kv_lora_rank: int = 64
    qk_rope_head_dim: int = 32
    qk_nope_head_dim: int = 32
    v_head_dim: int = 32
    intermediate_size: int = 384  # the dense layer(s)
    moe_intermediate_size: int = 64
    n_routed_experts: int = 8
    n_shared_experts: int = 1
    num_experts_per_tok: int = 2
    # 4 groups of 2 experts, 2 groups kept: group-limited routing, as in DeepSeek-V3.
    n_group: int = 4
    topk_group: int = 2
    routed_scaling_factor: float = 2.5
    first_k_dense_replace: int = 1
    vocab_size: int = 1024
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    initializer_range: float = 0.02
    # Router bias (DeepSeek-V3's load-balancing term): seeded and nonzero, so a loader that
    # skipped or mis-named it would change routing and show up in logit comparisons.
    correction_bias_std: float = 0.02
    train: TrainRecipe = field(default_factory=TrainRecipe)
    tokenizer: TokenizerRecipe = field(default_factory=TokenizerRecipe)

    def __post_init__(self) -> None:
        if self.num_layers < 8:
            # SGLang's default EAGLE-3 taps [2, n//2, n-3] are distinct only from 8 layers on.
            raise ValueError("num_layers must be >= 8 so the default taps are distinct")
        if not 0 <= self.first_k_dense_replace < self.num_layers:
            raise ValueError("first_k_dense_replace must leave at least one MoE layer")
        if self.n_routed_experts % self.n_group:
            raise ValueError("n_group must divide n_routed_experts")
        if self.n_routed_experts // self.n_group < 2:
            raise ValueError("each expert group needs >= 2 experts (group score = top-2 sum)")
        if not 1 <= self.topk_group <= self.n_group:
            raise ValueError("topk_group must be in [1, n_group]")
        if self.num_experts_per_tok > self.topk_group * (self.n_routed_experts // self.n_group):
            raise ValueError("num_experts_per_tok exceeds the experts in the kept groups")
        if self.qk_rope_head_dim % 2:
            raise ValueError("qk_rope_head_dim must be even")
        if self.vocab_size != self.tokenizer.vocab_size:
            raise ValueError("vocab_size must equal the tokenizer's vocab_size")
        if self.max_position_embeddings != int(
            _YARN["factor"] * _YARN["original_max_position_embeddings"]
        ):
            raise ValueError("max_position_embeddings must equal yarn factor * original length")
        if self.seed < 0:
            raise ValueError("seed must be >= 0")
        for name in ("hidden_size", "num_heads", "kv_lora_rank", "v_head_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive")

    @classmethod
    def make(cls, *, seed: int = 0, num_layers: int = 8, train_steps: int = 0) -> TargetRecipe:
        return cls(seed=seed, num_layers=num_layers, train=TrainRecipe(steps=train_steps))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def default_taps(self) -> list[int]:
        """SGLang 0.5.23's default EAGLE-3 capture layers for this depth."""
        n = self.num_layers
        return [2, n // 2, n - 3]


def rope_parameters(recipe: TargetRecipe) -> dict[str, Any]:
    return {**_YARN, "rope_theta": recipe.rope_theta}


def hf_config(recipe: TargetRecipe):  # -> transformers.DeepseekV3Config
    from transformers import DeepseekV3Config

    return DeepseekV3Config(
        architectures=["DeepseekV3ForCausalLM"],
        vocab_size=recipe.vocab_size,
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        moe_intermediate_size=recipe.moe_intermediate_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_heads,
        n_shared_experts=recipe.n_shared_experts,
        n_routed_experts=recipe.n_routed_experts,
        num_experts_per_tok=recipe.num_experts_per_tok,
        n_group=recipe.n_group,
        topk_group=recipe.topk_group,
        routed_scaling_factor=recipe.routed_scaling_factor,
        norm_topk_prob=True,
        first_k_dense_replace=recipe.first_k_dense_replace,
        q_lora_rank=recipe.q_lora_rank,
        kv_lora_rank=recipe.kv_lora_rank,
        qk_rope_head_dim=recipe.qk_rope_head_dim,
        qk_nope_head_dim=recipe.qk_nope_head_dim,
        v_head_dim=recipe.v_head_dim,
        max_position_embeddings=recipe.max_position_embeddings,
        rope_parameters=rope_parameters(recipe),
        rope_interleave=True,  # DeepSeek's layout; SGLang reads it as is_neox_style=False
        initializer_range=recipe.initializer_range,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        tie_word_embeddings=False,
        dtype="float32",
        # Keys HF's class does not define but SGLang's deepseek_v2 reads as plain attributes.
        topk_method="noaux_tc",
        scoring_func="sigmoid",
        moe_layer_freq=1,
        num_nextn_predict_layers=0,  # no MTP layer in the checkpoint
    )


def sglang_extra_config_keys(recipe: TargetRecipe) -> dict[str, Any]:
    """Keys added to config.json on top of HF's own serialisation.

    ``rope_scaling`` duplicates ``rope_parameters`` for readers written against transformers
    4 (which only know ``rope_scaling``); transformers 5 and SGLang read ``rope_parameters``.
    """
    return {"rope_scaling": rope_parameters(recipe)}
