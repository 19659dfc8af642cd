"""install_fused_fc / eagle3_fc_block against SGLang's fc block.

In process: a torch-only copy of ``LlamaModel.forward``'s fc block (SGLang 0.5.23
``srt/models/llama_eagle3.py`` L235-247) around an nn.Module shaped like SGLang's LlamaModel.
In a subprocess (marked ``sglang``): SGLang's real ``LlamaModel.forward`` and RMSNorm modules,
and the Triton kernel through the interpreter (tests/scripts/eagle3_fused_fc_patch_sglang.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import sglang_eagle3.ops.eagle3_fused_fc_patch as patch
from sglang_eagle3.ops.eagle3_fused_fc import NORMS

SCRIPT = Path(__file__).parent / "scripts" / "eagle3_fused_fc_patch_sglang.py"
K, H, HID = 3, 16, 24


class RMSNorm(nn.Module):
    """SGLang RMSNorm.forward_native, default flags."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(width) + 0.5)
        self.variance_epsilon = eps

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (x32 * self.weight).to(x.dtype)


class DraftModel(nn.Module):
    """The attributes LlamaForCausalLMEagle3.model has, and its forward's fc block."""

    def __init__(self, norm: str, bias: bool):
        super().__init__()
        self.num_aux_hidden_states = K
        self.fc = nn.Linear(K * H, HID, bias=bias)
        self.input_norm = RMSNorm(K * H) if norm in ("before_fc", "both") else None
        per_tap = norm in ("per_tap", "both")
        self.fc_norm = nn.ModuleList(RMSNorm(H) for _ in range(K)) if per_tap else None

    def forward(self, hidden_states, embeds):  # llama_eagle3.py L235-247, verbatim logic
        if hidden_states.shape[-1] != embeds.shape[-1]:
            if self.input_norm is not None:
                hidden_states = self.input_norm(hidden_states)
            if self.fc_norm is not None:
                chunks = hidden_states.chunk(self.num_aux_hidden_states, dim=-1)
                hidden_states = torch.cat(
                    [norm(chunk) for norm, chunk in zip(self.fc_norm, chunks)],  # noqa: B905
                    dim=-1,
                )
            hidden_states = self.fc(hidden_states)
        return hidden_states


class Eagle3(nn.Module):  # LlamaForCausalLMEagle3: the fc block lives in .model
    def __init__(self, norm: str, bias: bool = True):
        super().__init__()
        self.model = DraftModel(norm, bias)


def _run(model, packed):
    return model.model(packed, torch.zeros(packed.shape[0], HID, dtype=packed.dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("norm", NORMS)
@torch.no_grad()
def test_install_on_cpu_is_the_fallback_and_matches_sglang(norm, dtype, monkeypatch):
    torch.manual_seed(0)
    model = Eagle3(norm).to(dtype)
    packed = (torch.randn(6, K * H) * 2).to(dtype)
    stock = _run(model, packed)
    names = [n for n, _ in model.named_parameters()]
    assert torch.equal(patch.eagle3_fc_block(model, packed), stock)
    assert patch.install_fused_fc(model) is True
    assert patch.install_fused_fc(model) is False  # idempotent
    assert [n for n, _ in model.named_parameters()] == names  # load_weights still finds them
    assert model.model.input_norm is None and model.model.fc_norm is None  # forward skips them
    assert not patch.use_fused(6, H, K, norm, packed.device)  # CPU: the fallback
    assert torch.equal(_run(model, packed), stock)
    # the fused branch's argument mapping (on CPU eagle3_fused_fc runs its reference)
    monkeypatch.setattr(patch, "use_fused", lambda *a: True)
    assert torch.equal(_run(model, packed), stock)


@torch.no_grad()
def test_tap_weight_cache_follows_weight_updates(monkeypatch):
    model = Eagle3("per_tap")
    patch.install_fused_fc(model)
    monkeypatch.setattr(patch, "use_fused", lambda *a: True)
    packed = torch.randn(3, K * H)
    _run(model, packed)
    model.model._modules["fc_norm"][1].weight.mul_(3.0)  # what load_weights' copy_ does
    expected = patch.eagle3_fc_block(model, packed)
    assert torch.equal(_run(model, packed), expected)


def test_unusual_norms_keep_sglang_modules():
    model = Eagle3("both")
    model.model.fc_norm[0].variance_epsilon = 1e-3  # eps differs from input_norm's
    assert patch._block_norm(model.model) is None
    model = Eagle3("per_tap")
    model.model.fc_norm[2].cast_x_before_out_mul = True
    assert patch._block_norm(model.model) is None
    assert patch._block_norm(Eagle3("none").model) == ("none", 1e-6)


@pytest.mark.sglang
def test_real_sglang_llama_eagle3_forward():
    pytest.importorskip("sglang")
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 8, proc.stderr[-4000:]
    failed = {r["case"]: [k for k, ok in r["checks"].items() if not ok] for r in rows}
    assert not any(failed.values()), failed
