"""Load a DeepSeek-V3-family checkpoint with per-expert tensors into HF transformers.

transformers 5 keeps each MoE layer's experts fused (``experts.gate_up_proj`` [E, 2I, H],
``experts.down_proj`` [E, H, I]); DeepSeek-V3 checkpoints, and SGLang's
``FusedMoE.make_expert_params_mapping``, name every expert separately
(``experts.{e}.gate_proj.weight`` ...). The doctor and the tests fuse them here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file

WEIGHTS_NAME = "model.safetensors"
_PER_EXPERT = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


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
