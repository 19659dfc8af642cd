"""Permuting fc input blocks in the weight stream == feeding the taps in declared order (real
torch), for unquantized and fp8 block-scaled fcs; what cannot be permuted exactly is refused."""

from __future__ import annotations

import itertools

import pytest
import torch

from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.fc_permute import FcPermutation, permute_fc_stream


def permute_fc_blocks(head: torch.nn.Module, order: tuple[int, ...]) -> None:
    """Load head's own state dict through the stream permutation, as SGLang's loader would."""
    perm = FcPermutation(order, head.fc.in_features, "none", "draft")
    # cloned: a checkpoint's tensors never alias the parameters they are written to
    state = {k: v.clone() for k, v in head.state_dict().items()}
    head.load_state_dict(dict(permute_fc_stream(state.items(), perm)))


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


def _fp8_block(out: int, width: int, block: int, seed: int = 0):
    """A block-scaled fp8 fc: weight [out, width] e4m3 and weight_scale_inv [out/b, width/b]."""
    gen = torch.Generator().manual_seed(seed)
    w = (torch.randn(out, width, generator=gen) * 4).to(torch.float8_e4m3fn)
    scale = torch.rand(out // block, -(-width // block), generator=gen) + 0.5
    return w, scale


def _dequant(w: torch.Tensor, scale: torch.Tensor, block: int) -> torch.Tensor:
    full = scale.repeat_interleave(block, 0).repeat_interleave(block, 1)
    return w.float() * full[: w.shape[0], : w.shape[1]]


@pytest.mark.parametrize("order", [(2, 0, 1), (1, 2, 0), (0, 2, 1)])
def test_fp8_block_scales_move_with_their_columns(order):
    block, tap = 128, 256
    w, scale = _fp8_block(256, 3 * tap, block)
    perm = FcPermutation(order, 3 * tap, "Fp8LinearMethod", "draft")
    moved = dict(permute_fc_stream([("fc.weight", w), ("fc.weight_scale_inv", scale),
                                    ("fc.input_scale", torch.ones(1))], perm))  # fmt: skip
    dense = _dequant(w, scale, block).chunk(3, dim=1)
    expected = torch.cat([dense[order.index(pos)] for pos in range(3)], dim=1)
    got = _dequant(moved["fc.weight"], moved["fc.weight_scale_inv"], block)
    assert moved["fc.weight"].dtype == torch.float8_e4m3fn
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert torch.equal(moved["fc.input_scale"], torch.ones(1))  # per-tensor: not along the input


@pytest.mark.parametrize(
    "name,tensor,why",
    [
        ("fc.weight_scale_inv", torch.rand(2, 5), "5 columns for 288 input features"),
        ("fc.weight_scale", torch.rand(2, 4), "blocks of 72 features straddle taps of 96"),
        ("fc.qweight", torch.zeros(36, 256, dtype=torch.int32), "a 'qweight' tensor"),
    ],
)
def test_a_layout_that_cannot_be_permuted_exactly_is_refused_naming_the_quant_method(
    name, tensor, why
):
    perm = FcPermutation((2, 0, 1), 288, "GPTQLinearMethod", "/drafts/d")
    with pytest.raises(WiringError) as err:
        list(permute_fc_stream([(name, tensor)], perm))
    text = str(err.value)
    assert why in text and name in text and "GPTQLinearMethod" in text and "/drafts/d" in text


def test_ascending_layout_touches_nothing_even_a_packed_quant_tensor():
    packed = torch.zeros(36, 256, dtype=torch.int32)
    perm = FcPermutation((0, 1, 2), 288, "GPTQLinearMethod", "draft")
    [(name, out)] = list(permute_fc_stream([("fc.qweight", packed)], perm))
    assert name == "fc.qweight" and out is packed


def test_legacy_per_tap_norm_names_are_moved_by_their_tap():
    perm = FcPermutation((2, 0, 1), 12, "none", "draft")
    names = [n for n, _ in permute_fc_stream(
        [(f"{old}.weight", torch.ones(4)) for old in ("aux_norm_low", "aux_norm_mid",
                                                     "aux_norm_high")], perm)]  # fmt: skip
    assert names == ["fc_norm.2.weight", "fc_norm.0.weight", "fc_norm.1.weight"]
