"""Permuting fc column blocks at load == feeding the taps in declared order (real torch)."""

from __future__ import annotations

import itertools

import pytest
import torch

from sglang_eagle3.hooks.fc_permute import permute_fc_blocks


class RMSNorm(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(width) + 0.5)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class DraftHead(torch.nn.Module):
    """SGLang llama_eagle3's fc path: optional norm over the concat, per-chunk norms, fc."""

    def __init__(self, k: int, width: int, norm_before_fc: bool, fc_norm: bool):
        super().__init__()
        self.k = k
        self.fc = torch.nn.Linear(k * width, 24, bias=False)
        self.input_norm = RMSNorm(k * width) if norm_before_fc else None
        self.fc_norm = torch.nn.ModuleList(RMSNorm(width) for _ in range(k)) if fc_norm else None

    def forward(self, packed):  # [T, k * width]
        if self.input_norm is not None:
            packed = self.input_norm(packed)
        if self.fc_norm is not None:
            chunks = packed.chunk(self.k, dim=-1)
            packed = torch.cat([n(c) for n, c in zip(self.fc_norm, chunks, strict=True)], -1)
        return self.fc(packed)


@pytest.mark.parametrize("norm_before_fc,fc_norm", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_permuted_weights_on_ascending_taps_equal_original_on_declared_taps(
    order, norm_before_fc, fc_norm
):
    torch.manual_seed(0)
    width = 8
    head = DraftHead(3, width, norm_before_fc, fc_norm).double()
    taps = [torch.randn(5, width, dtype=torch.float64) for _ in range(3)]  # ascending order
    declared = [taps[i] for i in order]  # the drafter was trained on cat(declared)
    expected = head(torch.cat(declared, -1))
    permute_fc_blocks(head, tuple(order))  # order[j] = fill position of declared tap j
    got = head(torch.cat(taps, -1))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_identity_order_changes_nothing():
    head = DraftHead(3, 4, True, True)
    before = {k: v.clone() for k, v in head.state_dict().items()}
    permute_fc_blocks(head, (0, 1, 2))
    for k, v in head.state_dict().items():
        assert torch.equal(v, before[k]), k
