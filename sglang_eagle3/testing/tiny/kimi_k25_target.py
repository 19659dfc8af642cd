"""A tiny random Kimi-K2.5 target (``KimiK25ForConditionalGeneration``), served text only.

The language model is the cached untrained tiny DeepSeek-V3 target, its config nested as
``text_config``, its tensors renamed ``language_model.<name>`` (Kimi-K2.5's checkpoint names);
a 1-layer random MoonViT tower and projector come under the checkpoint's names too. SGLang
parses it with its own ``KimiK25Config`` (no remote code). The ``language_model_only`` key
makes SGLang serve it text-only; without it SGLang needs Kimi's image processor (a
preprocessor_config.json and the remote-code ``media_processor``). transformers'
``Kimi_K25ForConditionalGeneration`` loads the same directory (``load_hf_kimi_k25``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from sglang_eagle3.testing.tiny import cache

SOURCE_NAME = "kimi_source.txt"  # the DeepSeek-V3 directory the language weights came from
_COPIED = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
           "generation_config.json")  # fmt: skip
_REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", SOURCE_NAME)
# MoonViT at toy scale; head dim 16 keeps the 2D rope's "divisible by 4" rule.
_VISION: dict[str, Any] = {
    "patch_size": 14, "init_pos_emb_height": 4, "init_pos_emb_width": 4,
    "init_pos_emb_time": 4, "pos_emb_type": "divided_fixed", "merge_kernel_size": [2, 2],
    "video_attn_type": "spatial_temporal", "merge_type": "sd2_tpool",
    "mm_projector_type": "patchmerger", "projector_hidden_act": "gelu",
    "projector_ln_eps": 1e-5, "hidden_size": 32, "num_hidden_layers": 1,
    "num_attention_heads": 2, "intermediate_size": 64,
}  # fmt: skip


def kimi_k25_config(text: dict[str, Any]) -> dict[str, Any]:
    """config.json for a Kimi-K2.5 wrapper around the DeepSeek-V3 text config ``text``."""
    v = dict(_VISION, text_hidden_size=text["hidden_size"], mm_hidden_size=_VISION["hidden_size"])
    # SGLang's tower reads hidden_size & co., its projector vt_hidden_size (the real key names).
    v |= {f"vt_{k}": v[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                     "intermediate_size")}  # fmt: skip
    # transformers' own Kimi_K25 classes (the HF reference) name these differently.
    v |= {f"pos_emb_{k}": v[f"init_pos_emb_{k}"] for k in ("height", "width", "time")}
    return {
        "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "text_config": text, "vision_config": v, "language_model_only": True,
        "projection_hidden_size": _VISION["hidden_size"],
        "bos_token_id": text["bos_token_id"], "eos_token_id": text["eos_token_id"],
        "pad_token_id": text["pad_token_id"], "tie_word_embeddings": False, "dtype": "float32",
    }  # fmt: skip


def vision_weights(text_hidden: int, seed: int = 0) -> dict[str, Any]:
    """Seeded random MoonViT + projector tensors under Kimi-K2.5's checkpoint names."""
    import torch

    g = torch.Generator().manual_seed(seed)
    h, inner, p = _VISION["hidden_size"], _VISION["intermediate_size"], _VISION["patch_size"]
    merged = h * 4  # 2x2 patch merge

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.02

    out = {
        "vision_tower.patch_embed.proj.weight": rnd(h, 3, p, p),
        "vision_tower.patch_embed.proj.bias": rnd(h),
        "vision_tower.patch_embed.pos_emb.weight": rnd(
            _VISION["init_pos_emb_height"], _VISION["init_pos_emb_width"], h),
        "mm_projector.proj.0.weight": rnd(merged, merged), "mm_projector.proj.0.bias": rnd(merged),
        "mm_projector.proj.2.weight": rnd(text_hidden, merged),
        "mm_projector.proj.2.bias": rnd(text_hidden),
    }  # fmt: skip
    shapes = {"wqkv": (3 * h, h), "wo": (h, h), "mlp.fc0": (inner, h), "mlp.fc1": (h, inner)}
    norms = ["vision_tower.encoder.final_layernorm", "mm_projector.pre_norm"]
    for i in range(_VISION["num_hidden_layers"]):
        block = f"vision_tower.encoder.blocks.{i}"
        for name, (rows, cols) in shapes.items():
            out[f"{block}.{name}.weight"], out[f"{block}.{name}.bias"] = rnd(rows, cols), rnd(rows)
        norms += [f"{block}.norm0", f"{block}.norm1"]
    for norm in norms:
        out[f"{norm}.weight"], out[f"{norm}.bias"] = torch.ones(h), torch.zeros(h)
    return out


def build_kimi_k25_target(source: Path | str, out_dir: Path | str) -> Path:
    """Write the Kimi-K2.5 wrapper of the DeepSeek-V3 target ``source`` into ``out_dir``."""
    from safetensors.torch import load_file, save_file

    src, out = Path(source), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = json.loads((src / "config.json").read_text())
    tensors = {f"language_model.{k}": t for k, t in load_file(src / "model.safetensors").items()}
    tensors |= vision_weights(text["hidden_size"])
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(kimi_k25_config(text), indent=2) + "\n")
    for name in (n for n in _COPIED if (src / n).is_file()):
        shutil.copy2(src / name, out / name)
    (out / SOURCE_NAME).write_text(str(src) + "\n")
    return out


def _complete(path: Path) -> bool:
    return path.is_dir() and all((path / f).is_file() for f in _REQUIRED)


def tiny_kimi_k25_target(root: Path | str | None = None) -> Path:
    """Path to the cached tiny Kimi-K2.5 target, built (seconds) on first use."""
    root = Path(root) if root is not None else cache.cache_root()
    source = cache.tiny_target_dir(train_steps=0, root=root)
    doc = {"source": source.name, "code": cache.source_fingerprint(Path(__file__))}
    key = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    return cache.cached_build(
        root, f"kimi_k25-{key}", _complete, lambda tmp: build_kimi_k25_target(source, tmp)
    )


def load_hf_kimi_k25(path: Path | str):  # -> transformers Kimi_K25ForConditionalGeneration
    """Reload a built target into transformers' class (fp32, eval); any weight mismatch fails."""
    import torch
    from transformers.models.kimi_k25.modeling_kimi_k25 import Kimi_K25ForConditionalGeneration

    with torch.random.fork_rng(devices=[]):  # HF's init before loading: keep the caller's RNG
        model, info = Kimi_K25ForConditionalGeneration.from_pretrained(
            str(path), dtype=torch.float32, output_loading_info=True
        )
    bad = {k: v for k, v in info.items() if v}
    if bad:
        raise ValueError(f"{path}: weights do not match the model: {bad}")
    return model.eval()
