"""Tiny random (untrained) targets of other SGLang EAGLE-3 families, built locally, cached.

``tiny_family_target("llama")`` returns a directory SGLang's ``--model-path`` and HF
``from_pretrained`` both load: HF ``save_pretrained`` weights (safetensors, fp32, seeded) plus
the tiny tokenizer of ``tokenizer.py``. Capture tests need the families' decoder loops and
weight layouts, not trained weights, so nothing is trained. The cache follows ``cache.py``:
one key-named directory under ``cache_root()``, built in a temp sibling, renamed into place
under a file lock.
"""

from __future__ import annotations

import hashlib
import json
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from sglang_eagle3.testing.tiny import cache, corpus
from sglang_eagle3.testing.tiny import tokenizer as tok_mod

RECIPE_NAME = "family_recipe.json"
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", RECIPE_NAME)
_VERSIONED = ("torch", "transformers", "tokenizers", "safetensors")

# Shared shapes: 8 layers keep SGLang's default EAGLE-3 taps [2, n//2, n-3] distinct;
# hidden 64 with 4 query / 2 kv heads also exercises grouped-query attention.
_COMMON: dict[str, Any] = {
    "vocab_size": tok_mod.TokenizerRecipe().vocab_size,
    "hidden_size": 64,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "max_position_embeddings": 2048,
    "initializer_range": 0.02,
    "bos_token_id": tok_mod.BOS_ID,
    "eos_token_id": tok_mod.EOS_ID,
    "pad_token_id": tok_mod.PAD_ID,
    "tie_word_embeddings": False,
}
_MOE = {"moe_intermediate_size": 32, "num_experts_per_tok": 2}

# family -> (HF config class, HF model class, config overrides, extra config.json keys).
# The extra keys are ones HF's class does not define but SGLang's model reads with a default
# that differs from what HF computes.
FAMILIES: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}, {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}, {}),
    "qwen3_moe": (
        "Qwen3MoeConfig", "Qwen3MoeForCausalLM",
        {**_MOE, "num_experts": 8, "decoder_sparse_step": 1, "norm_topk_prob": True}, {},
    ),
    "glm4_moe": (
        "Glm4MoeConfig", "Glm4MoeForCausalLM",
        {**_MOE, "n_routed_experts": 8, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
         "first_k_dense_replace": 1, "norm_topk_prob": True}, {},
    ),
    # HF's default yarn rope (factor 32 over 4096) fixes the table size; keep it consistent.
    "gpt_oss": (
        "GptOssConfig", "GptOssForCausalLM",
        {"num_local_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 131072,
         "sliding_window": 16}, {},
    ),
    # HF's MiniMax-M2 always has q/k norm over all heads, a routing bias and sigmoid scores;
    # SGLang reads those from config keys the real checkpoint carries.
    "minimax_m2": (
        "MiniMaxM2Config", "MiniMaxM2ForCausalLM",
        {"num_local_experts": 8, "num_experts_per_tok": 2},
        {"use_qk_norm": True, "qk_norm_type": "per_layer", "use_routing_bias": True,
         "scoring_func": "sigmoid", "rotary_dim": 16},
    ),
    # Not an EAGLE-3 family: SGLang serves OLMo-2 but has no capture for it, so a declared
    # layout on it must be refused.
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}, {}),
}  # fmt: skip


def family_config(family: str):  # -> transformers.PretrainedConfig
    """The HF config of a family's tiny target (no weights built)."""
    import transformers

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    config_cls, model_cls, overrides, _ = FAMILIES[family]
    return getattr(transformers, config_cls)(
        **{**_COMMON, **overrides}, architectures=[model_cls], dtype="float32"
    )


def family_key(family: str, seed: int = 0) -> str:
    """Hash of what shapes the files: the family spec, this builder, tokenizer, versions."""
    here = Path(__file__).resolve().parent
    doc = {
        "family": family,
        "seed": seed,
        "spec": FAMILIES[family],
        "common": _COMMON,
        "sources": {m: cache.source_fingerprint(here / f"{m}.py") for m in (
            "family_targets", "tokenizer", "checkpoint")},
        "corpus_digest": corpus.corpus_digest(),
        "versions": {d: metadata.version(d) for d in _VERSIONED},
    }  # fmt: skip
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def build_family_target(family: str, out_dir: Path | str, seed: int = 0) -> Path:
    """Build the seeded random target into ``out_dir`` (no cache) and return it."""
    import torch
    import transformers

    from sglang_eagle3.testing.tiny import checkpoint

    t0 = time.monotonic()
    out = Path(out_dir)
    config = family_config(family)
    model_cls = getattr(transformers, FAMILIES[family][1])
    with torch.random.fork_rng(devices=[]):  # keep the caller's RNG stream untouched
        torch.manual_seed(seed)
        model = model_cls(config).to(torch.float32).eval()
    # HF 5 writes per-expert tensors back out (the names SGLang's loaders map).
    model.save_pretrained(str(out), safe_serialization=True)
    extra = FAMILIES[family][3]
    if extra:
        path = out / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **extra}, indent=2) + "\n")
    checkpoint.save_generation_config(out, tok_mod.BOS_ID, tok_mod.EOS_ID, tok_mod.PAD_ID)
    tok_mod.save_tokenizer(tok_mod.train_tokenizer(), out)
    doc = {
        "family": family,
        "seed": seed,
        "architectures": config.architectures,
        "num_hidden_layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "build_seconds": round(time.monotonic() - t0, 1),
    }
    (out / RECIPE_NAME).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return out


def _complete(path: Path) -> bool:
    return path.is_dir() and all((path / f).is_file() for f in _REQUIRED_FILES)


def tiny_family_target(family: str, root: Path | str | None = None, seed: int = 0) -> Path:
    """Path to the cached tiny ``family`` target, building it first (seconds) if needed."""
    root = Path(root) if root is not None else cache.cache_root()
    name = f"family-{family}-s{seed}-{family_key(family, seed)}"
    return cache.cached_build(
        root, name, _complete, lambda tmp: build_family_target(family, tmp, seed)
    )


def load_family_target(path: Path | str, *, attn_implementation: str | None = None):
    """Reload a built target into its HF class (fp32, eval), for reference hidden states.

    ``attn_implementation`` None lets HF pick (sdpa where the family has it; gpt-oss's
    attention sinks need eager).
    """
    import torch
    from transformers import AutoModelForCausalLM

    # Construction runs HF's random init before loading; keep it off the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        model, info = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=torch.float32, attn_implementation=attn_implementation,
            output_loading_info=True,
        )  # fmt: skip
    # A missing tensor would be silently re-initialised; fail instead.
    bad = {k: v for k, v in info.items() if k != "error_msgs" and v} | (
        {"error_msgs": info["error_msgs"]} if info.get("error_msgs") else {}
    )
    if bad:
        raise ValueError(f"{path}: weights do not match the model: {bad}")
    return model.eval()
