"""Helpers shared by the layout / draft-reader / flat-draft tests (not fixtures: plain code).

Fake checkpoints are written with pure Python (a real safetensors header over zero bytes);
speculators checkpoints come from the real speculators 0.9.0 package.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

_DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "BOOL": 1}


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> Path:
    """A valid .safetensors file holding zeros, from ``{name: (dtype, shape)}``."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = _DTYPE_BYTES[dtype]
        for d in shape:
            size *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return path


def eagle_tensors(
    *, draft_hidden: int, fc_in: int, prefix: str = "layers.0.", vocab: int = 32
) -> dict[str, tuple[str, list[int]]]:
    """The tensor names/shapes of a 1-layer EAGLE-3 draft (tiny sizes)."""
    h = draft_hidden
    return {
        "fc.weight": ("F16", [h, fc_in]),
        f"{prefix}hidden_norm.weight": ("F16", [h]),
        f"{prefix}input_layernorm.weight": ("F16", [h]),
        f"{prefix}self_attn.q_proj.weight": ("F16", [h, 2 * h]),
        "norm.weight": ("F16", [h]),
        "lm_head.weight": ("F16", [vocab, h]),
        "d2t": ("I64", [vocab]),
        "t2d": ("BOOL", [2 * vocab]),
    }


def flat_config(
    *,
    hidden: int = 16,
    ids: list[int] | None = None,
    layout: list[str] | None = None,
    target_hidden_size: Any = "absent",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An SGLang-flat (or SpecForge) draft config.json."""
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "intermediate_size": 2 * hidden,
        "vocab_size": 64,
        "draft_vocab_size": 32,
        "rms_norm_eps": 1e-6,
    }
    eagle: dict[str, Any] = {}
    if ids is not None:
        eagle["eagle_aux_hidden_state_layer_ids"] = ids
    if layout is not None:
        eagle["hidden_state_layout"] = layout
    if eagle:
        cfg["eagle_config"] = {**eagle, "use_aux_hidden_state": True}
    if target_hidden_size != "absent":
        cfg["target_hidden_size"] = target_hidden_size
    cfg.update(extra or {})
    return cfg


def make_flat_draft(
    directory: Path,
    cfg: dict[str, Any],
    *,
    fc_in: int | None = None,
    prefix: str = "layers.0.",
) -> Path:
    """Write config.json and (when ``fc_in`` is given) a fake model.safetensors."""
    write_json(directory / "config.json", cfg)
    if fc_in is not None:
        tensors = eagle_tensors(draft_hidden=cfg["hidden_size"], fc_in=fc_in, prefix=prefix)
        write_safetensors(directory / "model.safetensors", tensors)
    return directory


def build_speculators_draft(
    directory: Path,
    *,
    ids: list[int] | None,
    hidden: int = 64,
    target_hidden_size: int | None = None,
    norm_before_fc: bool = False,
    verifier: str = "tiny/deepseek-8-layers",
) -> Path:
    """Save a real speculators 0.9.0 Eagle3DraftModel (1 layer, random weights)."""
    import torch
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3SpeculatorConfig
    from speculators.models.eagle3.core import Eagle3DraftModel
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    torch.manual_seed(0)
    layer = LlamaConfig(
        vocab_size=256,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
    )
    layer._attn_implementation = "sdpa"  # the flex-attention default needs a GPU
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=128,
        eagle_aux_hidden_state_layer_ids=ids,
        target_hidden_size=target_hidden_size,
        norm_before_fc=norm_before_fc,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=verifier, architectures=["DeepseekV3ForCausalLM"]),
        ),
    )
    Eagle3DraftModel(config).save_pretrained(str(directory))
    return directory


def run_main(module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``module``'s ``main(args)`` in a fresh interpreter; stderr ends with SGLANG_IMPORTED when
    it imported SGLang (validation must not)."""
    code = (
        f"import sys; from {module} import main; rc = main(sys.argv[1:]); "
        "print('SGLANG_IMPORTED' if 'sglang' in sys.modules else '', file=sys.stderr); "
        "sys.exit(rc)"
    )
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
