"""The shape matrices eagle3_fused_fc is checked over, and the one runner that checks a case.

The tests' Triton-interpreter cases and the same cases benchmarks/gpu_check.py runs on a GPU
come from here (one table, so the two cannot drift):

- ``interp_cases``: the ``tiled`` path (tests/scripts/eagle3_fused_fc_interp.py runs them);
- ``gemv_cases`` / ``normcat_cases``: the ``gemv`` and ``normcat`` paths, every norm mode, odd
  shapes (T not a multiple of the token tile, H not a multiple of 128 nor of the K tile, N not a
  multiple of the N tile), split-K with uneven and empty chunks;
- ``run_case``: one case on a device against an fp64 reference (its error ratio);
  ``python -m sglang_eagle3.ops.eagle3_fused_fc_cases < cases.json`` runs a list of them (under
  TRITON_INTERPRET=1 on CPU) and prints one JSON line per case: id, ok, ratio, why.
"""

from __future__ import annotations

import json
import math
import sys
import traceback

import torch

from sglang_eagle3.ops import eagle3_fused_fc_configs as fc_configs
from sglang_eagle3.ops.eagle3_fused_fc import NORMS, eagle3_fused_fc, eagle3_fused_fc_reference

TOL = {"bf16": (2e-2, 4e-2), "fp16": (2e-2, 4e-2), "fp32": (1e-5, 1e-5)}  # (no norm, with norm)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def case(i, norm, layout, dtype, t, h, k=3, **extra):
    tol = TOL[dtype][norm != "none"]
    case = dict(norm=norm, layout=layout, dtype=dtype, T=t, H=h, K=k, N=(40, 72)[i % 2],
                bias=i % 2 == 0, strided_out=i % 5 == 0, split=(0, 1, 0, 2)[(i // 2) % 4],
                prescale=(i // 2) % 4 == 2,
                bm=min(64, max(16, 1 << (t - 1).bit_length())), bn=64, bk=32, seed=1000 + i,
                tol=tol)  # fmt: skip
    case.update(extra)
    shape = (
        "prescale" if case["prescale"] else f"split{case['split']}" if case["split"] else "inline"
    )
    case["id"] = "{norm}-{layout}-{dtype}-T{T}-H{H}-K{K}-bias{bias}-".format(**case) + shape
    return case


def interp_cases() -> list[dict]:
    """Every norm x layout x dtype x T, then K = 1, 2, 5, fp16 and uneven k tiles."""
    cases, i = [], 0
    for norm in NORMS:
        for layout in ("packed", "taps", "slices"):
            for dtype in ("bf16", "fp32"):
                for t in (1, 7, 64, 300):
                    cases.append(case(i, norm, layout, dtype, t, (32, 48, 96)[i % 3]))
                    i += 1
    # beyond the 4 pointer slots (packed view / one copy), K=1 and 2, fp16, uneven k tiles
    cases += [
        case(i + 1, "per_tap", "slices", "bf16", 7, 48, k=5),
        case(i + 2, "both", "scattered", "bf16", 7, 32, k=5),
        case(i + 3, "before_fc", "taps", "bf16", 9, 40, k=2, bk=16),
        case(i + 4, "per_tap", "packed", "fp32", 5, 96, k=1, split=3),
        case(i + 5, "per_tap", "taps", "fp16", 7, 48),
        case(i + 6, "both", "packed", "fp16", 64, 96, split=1),
        case(i + 7, "both", "taps", "bf16", 300, 96, split=0, prescale=True),
        case(i + 8, "per_tap", "scattered", "fp32", 7, 32, k=5, split=0, prescale=True),
    ]
    return cases


def path_case(i, path, norm, layout, dtype, t, h, config=None, k=3, n=None, **extra) -> dict:
    """One ``gemv`` / ``normcat`` case; ``config``: the tiles' fields, None for the dispatch's."""
    c = dict(path=path, norm=norm, layout=layout, dtype=dtype, T=t, H=h, K=k,
             N=n or (40, 72)[i % 2], bias=i % 2 == 0, strided_out=i % 3 == 0, seed=2000 + i,
             config=config, tol=TOL[dtype][norm != "none"])  # fmt: skip
    c.update(extra)
    if path == "gemv" and config is not None:
        tiles = "{block_n}x{block_k}-C{split_chunks}-{dot}".format(
            **config, dot="dot" if config.get("use_dot", True) else "fma"
        )
    else:
        tiles = (
            "default"
            if config is None
            else "bh{}-bm{}".format(config["block_h"], config.get("block_m", 1))
        )
    c["id"] = f"{norm}-{path}-{layout}-{dtype}-T{t}-H{h}-K{k}-N{c['N']}-bias{c['bias']}-{tiles}"
    return c


def _gemv(bn, bk, split, dot=True):
    return dict(block_n=bn, block_k=bk, split_chunks=split, num_warps=4, num_stages=2, use_dot=dot)


def gemv_cases() -> list[dict]:
    """Per norm: split-K over taps x 3 uneven chunks (bf16, packed), the FMA variant at T = 1
    split and unsplit (fp32, strided taps), one launch with the dot (fp32 slices, T = 19: not a
    multiple of the token tile), then two token tiles (T = 70), an empty chunk (C = 4 over 40
    columns in 16-column steps), K = 1, 2, 4 (every pointer slot), 5 (packed copy), fp16."""
    cases, i = [], 0
    for norm in NORMS:
        for layout, dtype, t, h, cfg in (
            ("packed", "bf16", 5, 40, _gemv(64, 16, 3)),
            ("taps", "fp32", 1, 72, _gemv(64, 32, 2, dot=False)),
            ("taps", "bf16", 1, 100, _gemv(32, 64, 0, dot=False)),
            ("slices", "fp32", 19, 100, _gemv(64, 32, 0)),
        ):
            cases.append(path_case(i, "gemv", norm, layout, dtype, t, h, cfg))
            i += 1
    cases += [
        path_case(i, "gemv", "both", "packed", "bf16", 70, 40, _gemv(64, 32, 1)),
        path_case(i + 1, "gemv", "per_tap", "packed", "fp32", 3, 40, _gemv(32, 16, 4), n=40),
        path_case(i + 2, "gemv", "before_fc", "taps", "bf16", 7, 48, _gemv(32, 16, 2), k=1),
        path_case(i + 3, "gemv", "both", "taps", "fp16", 9, 40, _gemv(32, 32, 1), k=2),
        path_case(i + 4, "gemv", "per_tap", "scattered", "bf16", 4, 40, _gemv(64, 16, 2), k=4),
        path_case(i + 5, "gemv", "both", "scattered", "fp32", 2, 32, _gemv(64, 16, 1), k=5),
        path_case(i + 6, "gemv", "none", "slices", "bf16", 16, 48, None),  # the dispatch's tiles
    ]
    return cases


def normcat_cases() -> list[dict]:
    """Per norm: packed bf16 (3 row steps of 16 over H = 40), strided taps fp32 (T = 1),
    slices bf16 (a masked second step, 4-row programs over 7 rows); then K = 1, 5 (packed
    copy), fp16 and the dispatch's block (None: 16 rows per program in the interpreter)."""
    cases, i = [], 0
    for norm in NORMS:
        for layout, dtype, t, h, bh, bm in (
            ("packed", "bf16", 4, 40, 16, 1),
            ("taps", "fp32", 1, 72, 32, 1),
            ("slices", "bf16", 7, 100, 64, 4),  # a partial second row block
        ):
            cfg = dict(block_h=bh, block_m=bm)
            cases.append(path_case(i, "normcat", norm, layout, dtype, t, h, cfg))
            i += 1
    cases += [
        path_case(i, "normcat", "per_tap", "taps", "bf16", 3, 40, dict(block_h=16), k=1),
        path_case(i + 1, "normcat", "both", "scattered", "bf16", 2, 32, dict(block_h=32), k=5),
        path_case(i + 2, "normcat", "before_fc", "taps", "fp16", 21, 48, None),  # 16-row blocks
    ]
    return cases


def case_config(case: dict):
    """The tile override a case names: FusedFcConfig (tiled: bm/bn/bk/split/prescale; split None
    for pick_config's), GemvConfig or NormCatConfig from ``config`` (None: the dispatch's)."""
    path = case.get("path", "tiled")
    if path == "tiled":
        if case.get("split") is None:
            return None
        tiles = (case["bm"], case["bn"], case["bk"], case["split"])
        return fc_configs.FusedFcConfig(*tiles, prescale=case["prescale"])
    if case.get("config") is None:
        return None
    kind = {"gemv": fc_configs.GemvConfig, "normcat": fc_configs.NormCatConfig}[path]
    return kind(**case["config"])


def error_ratio(got: torch.Tensor, ref: torch.Tensor, tol: float) -> float:
    """Worst |got - ref| / (tol + tol |ref|): <= 1 passes; inf where got is not finite."""
    got, ref = got.double(), ref.double()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got - ref).abs() / (tol + tol * ref.abs())).max().item()


def make_layout(case: dict, gen: torch.Generator, dtype: torch.dtype):
    """K taps [T, H] laid out as the case says, and the packed [T, K*H] they hold."""
    t, h, k, dev = case["T"], case["H"], case["K"], gen.device
    scale = torch.rand(k, generator=gen, device=dev) * 4 + 0.25  # taps of different magnitudes
    if case["layout"] == "taps":  # column slices of wider buffers: row stride > H
        bufs = [torch.randn(t, h + 8, generator=gen, device=dev) * s for s in scale]
        taps = [b.to(dtype)[:, 3 : 3 + h] for b in bufs]
        return taps, torch.cat(taps, -1)
    packed = torch.randn(t, k * h, generator=gen, device=dev) * scale.repeat_interleave(h)
    packed = packed.to(dtype)
    views = [packed[:, i * h : (i + 1) * h] for i in range(k)]
    layouts = {"slices": views, "scattered": [v.clone() for v in views], "packed": packed}
    return layouts[case["layout"]], packed


def run_case(case: dict, dev: torch.device) -> float:
    """One case on ``dev``: the fused path's error ratio against the fp64 reference. Raises
    when the result is not the given (NaN-poisoned) ``out``."""
    gen = torch.Generator(device=dev).manual_seed(case["seed"])
    dtype, norm, t, h, k, n = DTYPES[case["dtype"]], *(case[f] for f in "norm T H K N".split())
    inputs, packed = make_layout(case, gen, dtype)

    def rand(*shape: int, normal: bool = False) -> torch.Tensor:
        draw = torch.randn if normal else torch.rand
        return draw(*shape, generator=gen, device=dev)

    w = (rand(n, k * h, normal=True) / (k * h) ** 0.5).to(dtype)
    win, wtap = (rand(k * h) + 0.5).to(dtype), (rand(k, h) + 0.5).to(dtype)
    bias = rand(n, normal=True).to(dtype) if case["bias"] else None
    out = torch.full((t, n + 5 * case["strided_out"]), math.nan, device=dev, dtype=dtype)
    out = out[:, :n]  # NaN-poisoned: an output the kernel never writes fails
    taps_w = wtap if case["seed"] % 2 else list(wtap.unbind(0))  # both forms of fc_norm weights
    kw = dict(norm=norm, eps=1e-5, num_taps=k, norm_weight=win, norm_weights=taps_w)
    got = eagle3_fused_fc(
        inputs, w, bias=bias, out=out, backend="triton", config=case_config(case),
        path=case.get("path", "tiled"), **kw,
    )  # fmt: skip
    if got.data_ptr() != out.data_ptr():
        raise RuntimeError("the result is not the given out tensor")
    kw.update(norm_weight=win.double(), norm_weights=wtap.double())
    b64 = bias.double() if bias is not None else None
    ref = eagle3_fused_fc_reference(packed.double(), w.double(), bias=b64, **kw)
    return error_ratio(got, ref, case["tol"])


def check(case: dict, dev: torch.device) -> dict:
    """``run_case`` as a record: id, ok, ratio (None when not finite or not run), why."""
    try:
        ratio = run_case(case, dev)
    except Exception:
        return dict(id=case["id"], ok=False, ratio=None, why=traceback.format_exc(limit=4)[-1500:])
    finite = ratio < math.inf
    why = None if ratio <= 1 else "above tolerance" if finite else "output not finite (unwritten?)"
    return dict(id=case["id"], ok=ratio <= 1, ratio=round(ratio, 4) if finite else None, why=why)


def main() -> int:
    """Cases (a JSON list) on stdin -> one JSON ``check`` record per line, on CUDA if there is
    one, else on CPU (which needs TRITON_INTERPRET=1 from the start)."""
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cpu" and not fc_configs.interpreting():
        print("on CPU the kernels need TRITON_INTERPRET=1 set before start", file=sys.stderr)
        return 2
    torch.set_grad_enabled(False)
    for c in json.load(sys.stdin):
        print(json.dumps(check(c, dev)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
