"""Run eagle3_fused_fc cases through the Triton interpreter against an fp64 reference.

Run as: TRITON_INTERPRET=1 python eagle3_fused_fc_interp.py < cases.json  (the variable must be
set before triton is first imported). Prints one JSON line per case: its id, whether it passed,
the worst |err| / (atol + rtol |ref|) ratio, and what went wrong if anything.
"""

import json
import os
import sys
import traceback

import torch

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before starting"

from sglang_eagle3.ops.eagle3_fused_fc import eagle3_fused_fc, eagle3_fused_fc_reference  # noqa: E402
from sglang_eagle3.ops.eagle3_fused_fc_configs import FusedFcConfig  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_taps(case, gen):
    """K taps of [T, H] in the case's layout; the tensors the kernel reads, and their values."""
    t, h, k, dtype = case["T"], case["H"], case["K"], DTYPES[case["dtype"]]
    scale = torch.rand(k, generator=gen) * 4 + 0.25  # taps of different magnitudes
    layout = case["layout"]
    if layout == "taps":  # separate tensors, each a column slice of a wider buffer: row stride > H
        taps = []
        for i in range(k):
            buf = torch.randn(t, h + 8, generator=gen) * scale[i]
            taps.append(buf.to(dtype)[:, 3 : 3 + h])
        return taps, torch.cat(taps, -1)
    packed = torch.randn(t, k * h, generator=gen).to(dtype)
    packed = (packed.float() * scale.repeat_interleave(h)).to(dtype)
    if layout == "slices":  # views into one packed buffer
        return [packed[:, i * h : (i + 1) * h] for i in range(k)], packed
    if layout == "scattered":  # separate contiguous tensors
        return [packed[:, i * h : (i + 1) * h].clone() for i in range(k)], packed
    return packed, packed


def run(case):
    gen = torch.Generator().manual_seed(case["seed"])
    dtype = DTYPES[case["dtype"]]
    t, h, k, n = case["T"], case["H"], case["K"], case["N"]
    inputs, packed = make_taps(case, gen)
    w = (torch.randn(n, k * h, generator=gen) / (k * h) ** 0.5).to(dtype)
    win = (torch.rand(k * h, generator=gen) + 0.5).to(dtype)
    wtap = (torch.rand(k, h, generator=gen) + 0.5).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype) if case["bias"] else None
    out = torch.full((t, n + 5), float("nan"), dtype=dtype)[:, :n] if case["strided_out"] else None
    if out is None:
        out = torch.full((t, n), float("nan"), dtype=dtype)
    norm = case["norm"]
    kw = dict(norm=norm, eps=1e-5)
    if norm in ("before_fc", "both"):
        kw["norm_weight"] = win
    if norm in ("per_tap", "both"):
        kw["norm_weights"] = wtap if case["seed"] % 2 else list(wtap.unbind(0))
    cfg = FusedFcConfig(
        case["bm"], case["bn"], case["bk"], case["split"], prescale=case["prescale"]
    )
    got = eagle3_fused_fc(
        inputs, w, bias=bias, out=out, num_taps=k, backend="triton", config=cfg, **kw
    )
    if got.data_ptr() != out.data_ptr():
        return False, None, "result is not the given out tensor"
    if torch.isnan(got).any():
        return False, None, "NaN left in out: some outputs never written"

    def f64(x):
        return (
            None if x is None else (x.double() if torch.is_tensor(x) else [v.double() for v in x])
        )

    ref = eagle3_fused_fc_reference(
        packed.double(), w.double(), bias=f64(bias), num_taps=k, norm=norm, eps=1e-5,
        norm_weight=f64(kw.get("norm_weight")), norm_weights=f64(kw.get("norm_weights")),
    )  # fmt: skip
    tol = case["tol"]
    ratio = ((got.double() - ref).abs() / (tol + tol * ref.abs())).max().item()
    return ratio <= 1.0, ratio, None


def main():
    cases = json.load(sys.stdin)
    for case in cases:
        try:
            ok, ratio, why = run(case)
        except Exception:
            ok, ratio, why = False, None, traceback.format_exc()[-2000:]
        print(json.dumps({"id": case["id"], "ok": ok, "ratio": ratio, "why": why}), flush=True)


if __name__ == "__main__":
    main()
