"""Save the tiny target in the layout SGLang 0.5.23 loads (``checkpoint.hf_target`` loads it).

transformers 5 keeps each MoE layer's experts fused (``experts.gate_up_proj`` [E, 2I, H],
``experts.down_proj`` [E, H, I]); DeepSeek-V3 checkpoints, and SGLang's
``FusedMoE.make_expert_params_mapping``, name every expert separately
(``experts.{e}.gate_proj.weight`` ...). We write the per-expert form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import save_file

from sglang_eagle3.checkpoint.hf_target import WEIGHTS_NAME

_FUSED_GATE_UP = ".mlp.experts.gate_up_proj"
_FUSED_DOWN = ".mlp.experts.down_proj"


def to_per_expert(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """HF (fused) state dict -> checkpoint names; every tensor an independent contiguous copy."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        t = t.detach()
        if name.endswith(_FUSED_GATE_UP):
            prefix = name[: -len("gate_up_proj")]
            inter = t.shape[1] // 2  # HF splits gate_up with chunk(2): gate rows come first
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = t[e, :inter].clone().contiguous()
                out[f"{prefix}{e}.up_proj.weight"] = t[e, inter:].clone().contiguous()
        elif name.endswith(_FUSED_DOWN):
            prefix = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.down_proj.weight"] = t[e].clone().contiguous()
        else:
            out[name] = t.clone().contiguous()
    return out


def save_weights(model: torch.nn.Module, out_dir: Path) -> Path:
    """Write ``model.safetensors`` (per-expert names, fp32). Byte-identical for equal weights:
    safetensors orders tensors by dtype and name and the metadata is fixed."""
    path = Path(out_dir) / WEIGHTS_NAME
    save_file(to_per_expert(model.state_dict()), str(path), metadata={"format": "pt"})
    return path


def save_config(model: torch.nn.Module, out_dir: Path, extra: Mapping[str, object]) -> Path:
    """HF's config.json plus ``extra`` keys; keys sorted so the file is reproducible."""
    out_dir = Path(out_dir)
    model.config.save_pretrained(str(out_dir))
    path = out_dir / "config.json"
    data = json.loads(path.read_text())
    data.update(extra)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def save_generation_config(out_dir: Path, bos: int, eos: int, pad: int) -> None:
    from transformers import GenerationConfig

    # Greedy by default: the tiny target is used for exact-match comparisons.
    GenerationConfig(
        bos_token_id=bos, eos_token_id=eos, pad_token_id=pad, do_sample=False
    ).save_pretrained(str(out_dir))
