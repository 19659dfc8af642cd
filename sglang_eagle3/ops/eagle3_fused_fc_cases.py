"""The shape matrix eagle3_fused_fc is checked over: the tests' Triton-interpreter cases, and
the same cases gpu_check.py runs on a GPU (one table, so the two cannot drift)."""

from __future__ import annotations

from sglang_eagle3.ops.eagle3_fused_fc import NORMS

TOL = {"bf16": (2e-2, 4e-2), "fp16": (2e-2, 4e-2), "fp32": (1e-5, 1e-5)}  # (no norm, with norm)


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
