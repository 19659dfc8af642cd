"""install_fused_fc on SGLang 0.5.23's real ``llama_eagle3.LlamaModel.forward`` (CPU).

Run as: TRITON_INTERPRET=1 python eagle3_fused_fc_patch_sglang.py. The model is a bare LlamaModel
(``__new__`` + nn.Module init: no distributed setup) holding SGLang's own RMSNorm modules, a real
nn.Linear fc and no decoder layers, so its forward returns the fc block's output. Prints one JSON
line per case with the checks that held.
"""

import json
import os
import types

import torch
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.models.llama_eagle3 import LlamaModel
from torch import nn

import sglang_eagle3.ops.eagle3_fused_fc_patch as patch
from sglang_eagle3.ops.eagle3_fused_fc import eagle3_fused_fc_reference
from sglang_eagle3.ops.eagle3_fused_fc_dispatch import use_fused

assert os.environ.get("TRITON_INTERPRET") == "1"
torch.set_grad_enabled(False)  # SGLang runs the drafter under inference mode
K, H, HID, T, EPS = 3, 48, 40, 7, 1e-5


class _FinalNorm(nn.Module):  # stands in for RMSNorm(hidden, residual): no layers ran
    def forward(self, hidden, residual):
        return hidden, hidden


def build(norm: str, dtype: torch.dtype, bias: bool, seed: int) -> LlamaModel:
    torch.manual_seed(seed)
    m = LlamaModel.__new__(LlamaModel)
    nn.Module.__init__(m)
    m.embed_tokens = nn.Embedding(10, HID)
    m.is_mrope_enabled = False
    m.num_aux_hidden_states = K
    m.fc = nn.Linear(K * H, HID, bias=bias)
    m.input_norm = RMSNorm(K * H, eps=EPS) if norm in ("before_fc", "both") else None
    per_tap = norm in ("per_tap", "both")
    m.fc_norm = nn.ModuleList(RMSNorm(H, eps=EPS) for _ in range(K)) if per_tap else None
    m.layers = nn.ModuleList()
    m.norm = _FinalNorm()
    m.norm_output = False
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.rand_like(p) + 0.5 if p.dim() == 1 and p.numel() != HID else p)
    return m.to(dtype)


def forward(m: LlamaModel, packed: torch.Tensor) -> torch.Tensor:
    batch = types.SimpleNamespace(spec_info=types.SimpleNamespace(hidden_states=packed))
    embeds = torch.zeros(packed.shape[0], HID, dtype=packed.dtype)
    out, _aux = LlamaModel.forward(m, None, None, batch, input_embeds=embeds)
    return out


def run(norm: str, dtype: torch.dtype, bias: bool, seed: int) -> dict:
    m = build(norm, dtype, bias, seed)
    packed = (torch.randn(T, K * H) * 3).to(dtype)
    stock = forward(m, packed)
    names = sorted(n for n, _ in m.named_parameters())
    inorm, fcn = m.input_norm, m.fc_norm
    checks = {
        "fc_block_equals_stock": torch.equal(patch.eagle3_fc_block(m, packed), stock),
        "reference_equals_stock": torch.equal(
            eagle3_fused_fc_reference(
                packed,
                m.fc.weight,
                norm=norm,
                eps=EPS,
                bias=m.fc.bias,
                num_taps=K,
                norm_weight=inorm.weight if inorm is not None else None,
                norm_weights=[n.weight for n in fcn] if fcn is not None else None,
            ),
            stock,
        ),  # fmt: skip
        "cpu_dispatch_is_fallback": not use_fused(T, H, K, norm, packed.device),
    }
    patch.install_fused_fc(m)
    checks["idempotent"] = patch.install_fused_fc(m) is False
    checks["installed_cpu_equals_stock"] = torch.equal(forward(m, packed), stock)
    checks["names_unchanged"] = sorted(n for n, _ in m.named_parameters()) == names
    real_use_fused = patch.use_fused
    patch.use_fused = lambda *a: True  # the kernel itself, through the interpreter
    try:
        fused = forward(m, packed)
    finally:
        patch.use_fused = real_use_fused
    tol = 1e-5 if dtype == torch.float32 else (2e-2 if norm == "none" else 4e-2)
    err = ((fused.double() - stock.double()).abs() / (tol + tol * stock.double().abs())).max()
    checks["kernel_close_to_stock"] = bool(err <= 1.0)
    return {"case": f"{norm}-{dtype}-bias{bias}", "checks": checks, "ratio": float(err)}


if __name__ == "__main__":
    for i, norm in enumerate(("none", "before_fc", "per_tap", "both")):
        for j, dtype in enumerate((torch.float32, torch.bfloat16)):
            print(json.dumps(run(norm, dtype, bias=(i + j) % 2 == 0, seed=i * 2 + j)), flush=True)
