"""Build the tiny DeepSeek-V3 target: seeded init, optional short training, SGLang layout.

Output directory (everything SGLang's ``--model-path`` and HF need, nothing downloaded):
``config.json``, ``generation_config.json``, ``model.safetensors`` (per-expert names),
``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``, ``tiny_recipe.json``
(the recipe, deterministic) and ``build_info.json`` (losses and timings, not deterministic).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from sglang_eagle3.testing.tiny import checkpoint, corpus
from sglang_eagle3.testing.tiny import tokenizer as tok_mod
from sglang_eagle3.testing.tiny.config import TargetRecipe, hf_config, sglang_extra_config_keys
from sglang_eagle3.testing.tiny.train import train_target

RECIPE_NAME = "tiny_recipe.json"
BUILD_INFO_NAME = "build_info.json"


def init_model(recipe: TargetRecipe):  # -> DeepseekV3ForCausalLM
    """The seeded, untrained model. Leaves the caller's global RNG state untouched."""
    from transformers import DeepseekV3ForCausalLM

    config = hf_config(recipe)
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        model = DeepseekV3ForCausalLM(config).to(torch.float32)
        gen = torch.Generator().manual_seed(recipe.seed + 7919)  # independent of init order
        with torch.no_grad():
            for layer in model.model.layers:
                gate = getattr(layer.mlp, "gate", None)
                if gate is not None and hasattr(gate, "e_score_correction_bias"):
                    bias = gate.e_score_correction_bias
                    bias.copy_(torch.randn(bias.shape, generator=gen) * recipe.correction_bias_std)
    return model.eval()


def make_tiny_target(recipe: TargetRecipe) -> tuple[Any, Any, dict[str, Any]]:
    """(HF model, ``tokenizers.Tokenizer``, train metrics), all in memory."""
    tok = tok_mod.train_tokenizer(recipe.tokenizer)
    model = init_model(recipe)
    metrics = train_target(model, tok, recipe.train, recipe.seed)
    return model.eval(), tok, metrics


def save_tiny_target(model: Any, tok: Any, recipe: TargetRecipe, out_dir: Path) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint.save_weights(model, out_dir)
    checkpoint.save_config(model, out_dir, sglang_extra_config_keys(recipe))
    checkpoint.save_generation_config(out_dir, tok_mod.BOS_ID, tok_mod.EOS_ID, tok_mod.PAD_ID)
    tok_mod.save_tokenizer(tok, out_dir, recipe.tokenizer)
    recipe_doc = {
        "recipe": recipe.as_dict(),
        "corpus_digest": corpus.corpus_digest(),
        "default_taps": recipe.default_taps(),
    }
    (out_dir / RECIPE_NAME).write_text(json.dumps(recipe_doc, indent=2, sort_keys=True) + "\n")
    return out_dir


def build_tiny_target(
    out_dir: Path | str,
    *,
    seed: int = 0,
    num_layers: int = 8,
    train_steps: int = 0,
    recipe: TargetRecipe | None = None,
) -> Path:
    """Build the tiny target into ``out_dir`` and return it.

    ``recipe`` overrides ``seed`` / ``num_layers`` / ``train_steps`` when given. The files are
    a pure function of the recipe and the interpreter's stdlib sources (and, once trained, of
    the CPU's float arithmetic).
    """
    if recipe is None:
        recipe = TargetRecipe.make(seed=seed, num_layers=num_layers, train_steps=train_steps)
    t0 = time.monotonic()
    model, tok, metrics = make_tiny_target(recipe)
    out = save_tiny_target(model, tok, recipe, Path(out_dir))
    info = {
        "train": metrics,
        "parameters": sum(p.numel() for p in model.parameters()),
        "build_seconds": round(time.monotonic() - t0, 1),
        "torch_threads": torch.get_num_threads(),
    }
    (out / BUILD_INFO_NAME).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return out
