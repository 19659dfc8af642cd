"""Reorder a drafter's fc input blocks in its weight stream, before SGLang writes a tensor.

SGLang packs taps in ascending capture order; the weights were trained on the declared order.
Moving fc input block j to position order[j] once, as the weights load, avoids a per-token copy
of the hidden states. Doing it on the stream (not on the loaded modules) makes every load path
alike: the first load, a full or partial online update, with or without the fused fc (which
hides the norm modules), and quantized fcs whose scales are laid out along the input.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from sglang_eagle3.errors import WiringError

# SGLang 0.5.23 llama_eagle3.load_weights' legacy names for the per-tap norms.
LEGACY_FC_NORM = {"aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1",
                  "aux_norm_high": "fc_norm.2"}  # fmt: skip
_FC = re.compile(r"^(?P<pre>(model\.)?)fc\.(?P<attr>\w+)$")
_INPUT_NORM = re.compile(r"^(model\.)?input_norm\.weight$")
_FC_NORM = re.compile(r"^(?P<pre>(model\.)?)fc_norm\.(?P<j>\d+)\.(?P<rest>.+)$")

# fc tensors and how they lie along the fc's input (dim 1 of a Linear weight [out, in]):
# "cols": one column per input feature; "blocks": one column per block of input features
# (fp8 block scales, group zero points; a per-tensor or per-channel one has width 1 and is not
# along the input); "none": not along the input. Anything else (packed int4 `qweight`, GPTQ
# `g_idx`, ...) cannot be permuted exactly and is refused when a permutation is needed.
FC_INPUT_LAYOUT = {
    "weight": "cols",
    "weight_scale_inv": "blocks",
    "weight_scale": "blocks",
    "weight_zero_point": "blocks",
    "bias": "none",
    "input_scale": "none",
    "input_scale_inv": "none",
}


@dataclass(frozen=True)
class FcPermutation:
    """Where each declared tap's block goes: order[j] is the capture position of tap j."""

    order: tuple[int, ...]
    in_width: int  # the fc's input features, k * tap width
    quant_method: str  # for messages: the fc's quant method class, "none" when unquantized
    draft: str  # the checkpoint, for messages

    @property
    def taps(self) -> int:
        return len(self.order)

    @property
    def identity(self) -> bool:
        return self.order == tuple(range(len(self.order)))


def _refuse(p: FcPermutation, name: str, why: str) -> WiringError:
    return WiringError(
        f"the drafter's fc input must be permuted to serve the declared layout, but {name} "
        f"({why}) cannot be permuted exactly with quant method {p.quant_method}",
        path=p.draft,
        fix="declare the taps in ascending capture order (then nothing is permuted), or serve "
        "an unquantized or block-scaled (fp8) fc whose blocks divide one tap's width",
    )


def _move_blocks(x: torch.Tensor, order: tuple[int, ...], dim: int) -> torch.Tensor:
    """Split x [..] into len(order) equal blocks along dim; block j goes to order[j]."""
    chunks = x.chunk(len(order), dim=dim)
    dst = [None] * len(order)
    for j, pos in enumerate(order):
        dst[pos] = chunks[j]
    return torch.cat(dst, dim=dim).contiguous()


def permute_fc_tensor(p: FcPermutation, name: str, attr: str, x: torch.Tensor) -> torch.Tensor:
    """One fc tensor with its input blocks moved (unchanged when not along the input)."""
    layout = FC_INPUT_LAYOUT.get(attr)
    if layout is None:
        raise _refuse(p, name, f"a {attr!r} tensor of shape {list(x.shape)}")
    if layout == "none" or (layout == "blocks" and (x.dim() < 2 or x.shape[-1] == 1)):
        return x
    cols = x.shape[-1]
    if p.in_width % cols:
        raise _refuse(p, name, f"{cols} columns for {p.in_width} input features")
    block = p.in_width // cols
    if (p.in_width // p.taps) % block:
        raise _refuse(p, name, f"blocks of {block} features straddle taps of "
                      f"{p.in_width // p.taps}")  # fmt: skip
    return _move_blocks(x, p.order, dim=x.dim() - 1)


def permute_fc_stream(
    weights: Iterable[tuple[str, torch.Tensor]], p: FcPermutation
) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint stream with fc input blocks, the input norm and the per-tap norms moved
    to capture order; every other tensor passes as it is."""
    for name, tensor in weights:
        for legacy, new in LEGACY_FC_NORM.items():
            name = name.replace(legacy, new)
        if p.identity:
            yield name, tensor
        elif m := _FC.match(name):
            yield name, permute_fc_tensor(p, name, m["attr"], tensor)
        elif _INPUT_NORM.match(name):  # [k * width]
            yield name, _move_blocks(tensor, p.order, dim=0)
        elif (m := _FC_NORM.match(name)) and int(m["j"]) < p.taps:
            yield f"{m['pre']}fc_norm.{p.order[int(m['j'])]}.{m['rest']}", tensor
        else:
            yield name, tensor


def fc_geometry(fc: torch.nn.Module) -> tuple[int, str]:
    """(input features, quant method name) of an nn.Linear or SGLang parallel linear fc."""
    width = getattr(fc, "input_size", None) or getattr(fc, "in_features", None)
    if width is None:
        width = fc.weight.shape[1]
    method = getattr(fc, "quant_method", None)
    name = type(method).__name__ if method is not None else "none"
    return int(width), "none" if name == "UnquantizedLinearMethod" else name
