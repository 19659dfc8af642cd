"""Save the tiny target in the layout SGLang 0.5.23 loads, and load it back into HF.

transformers 5 keeps each MoE layer's experts fused (``experts.gate_up_proj`` [E, 2I, H],
``experts.down_proj`` [E, H, I]); DeepSeek-V3 checkpoints, and SGLang's
``FusedMoE.make_expert_params_mapping``, name every expert separately
(``experts.{e}.gate_proj.weight`` ...). We write the per-expert form and fuse again on load.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

WEIGHTS_NAME = "model.safetensors"
_FUSED_GATE_UP = ".mlp.experts.gate_up_proj"
_FUSED_DOWN = ".mlp.experts.down_proj"
_PER_EXPERT = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


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


def to_fused(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint names -> HF transformers 5 state dict (inverse of ``to_per_expert``)."""
    out: dict[str, torch.Tensor] = {}
    experts: dict[str, dict[str, dict[int, torch.Tensor]]] = {}
    for name, t in state.items():
        m = _PER_EXPERT.match(name)
        if m is None:
            out[name] = t
            continue
        prefix, e, kind = m.group(1), int(m.group(2)), m.group(3)
        experts.setdefault(prefix, {}).setdefault(kind, {})[e] = t
    for prefix, kinds in experts.items():
        ids = sorted(kinds.get("down_proj", {}))
        if ids != list(range(len(ids))) or any(sorted(kinds.get(k, {})) != ids for k in kinds):
            raise ValueError(f"{prefix}: experts missing or incomplete")
        gate_up = [torch.cat([kinds["gate_proj"][e], kinds["up_proj"][e]]) for e in ids]
        out[f"{prefix}.gate_up_proj"] = torch.stack(gate_up)
        out[f"{prefix}.down_proj"] = torch.stack([kinds["down_proj"][e] for e in ids])
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


def load_hf_target(path: Path | str, *, attn_implementation: str = "sdpa"):
    """Load a saved tiny target into HF ``DeepseekV3ForCausalLM`` (fp32, eval mode).

    Fuses the per-expert tensors ourselves and loads with ``strict=True``, so a missing or
    extra tensor fails here instead of being silently re-initialised.
    """
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    path = Path(path)
    config = DeepseekV3Config.from_pretrained(str(path))
    config._attn_implementation = attn_implementation
    # Construction runs HF's random init; keep it off the caller's global RNG stream.
    with torch.random.fork_rng(devices=[]):
        model = DeepseekV3ForCausalLM(config).to(torch.float32)
    model.load_state_dict(to_fused(load_file(str(path / WEIGHTS_NAME))), strict=True)
    return model.eval()
