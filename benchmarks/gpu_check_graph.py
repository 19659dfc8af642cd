"""benchmarks/gpu_check.py's step 2: ``install_fused_fc`` on a stand-in of SGLang's fc block,
captured in a CUDA graph and replayed, against eager and against the stock block.

Imported by gpu_check.py once it has put the repository and benchmarks/ on ``sys.path``.
"""

from __future__ import annotations

import math
import os
import traceback

import bench_eagle3_fused_fc as bench  # the tolerances
import torch
from gpu_check_timing import BF16, DRY_SCALE, EPS, SHAPES
from torch import nn

from sglang_eagle3.ops import eagle3_fused_fc_cases as fc_cases
from sglang_eagle3.ops import eagle3_fused_fc_dispatch as dispatch
from sglang_eagle3.ops.eagle3_fused_fc import NORMS
from sglang_eagle3.ops.eagle3_fused_fc_patch import install_fused_fc
from sglang_eagle3.ops.rms_norm import rms_norm

GRAPH_T = (1, 64, 256)  # at H = 7168, forced: the split-K GEMV (T = 1), then normcat + cuBLAS
_ratio = fc_cases.error_ratio


def _check(cid: str, fn) -> dict:
    """One check: ``fn`` returns its error ratio; an exception fails it."""
    try:
        ratio = fn()
    except Exception:
        return dict(id=cid, ok=False, ratio=None, why=traceback.format_exc(limit=4)[-1500:])
    finite = ratio < math.inf
    why = None if ratio <= 1 else "above tolerance" if finite else "output not finite (unwritten?)"
    return dict(id=cid, ok=ratio <= 1, ratio=round(ratio, 4) if finite else None, why=why)


class _RMSNorm(nn.Module):
    """What install_fused_fc reads of SGLang's RMSNorm, and its forward_native (default flags)."""

    def __init__(self, width: int, dev: torch.device):
        super().__init__()
        self.weight = nn.Parameter((torch.rand(width) + 0.5).to(dev, BF16))
        self.variance_epsilon = EPS

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, width]
        return rms_norm(x, self.weight, self.variance_epsilon, cast_before_weight=False)


class _FcBlock(nn.Module):
    """SGLang 0.5.23 LlamaModel's fc attributes and its forward's fc block (llama_eagle3.py
    L237-247), as tests/test_eagle3_fused_fc_patch.py's DraftModel (that module needs pytest)."""

    def __init__(self, norm: str, h: int, k: int, dev: torch.device):
        super().__init__()
        self.num_aux_hidden_states = k
        self.fc = nn.Linear(k * h, h, bias=norm == "none", device=dev, dtype=BF16)
        self.input_norm = _RMSNorm(k * h, dev) if norm in ("before_fc", "both") else None
        per_tap = norm in ("per_tap", "both")
        self.fc_norm = nn.ModuleList(_RMSNorm(h, dev) for _ in range(k)) if per_tap else None

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # [T, K*H] -> [T, H]
        if self.input_norm is not None:
            hidden_states = self.input_norm(hidden_states)
        if self.fc_norm is not None:
            chunks = hidden_states.chunk(self.num_aux_hidden_states, dim=-1)
            hidden_states = torch.cat([n(c) for n, c in zip(self.fc_norm, chunks)], dim=-1)  # noqa: B905
        return self.fc(hidden_states)


def _replay(fn, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:  # x1, x2: [T, K*H]
    """``fn`` captured in a CUDA graph on x1's buffer, replayed after x2 is copied in."""
    static, side = x1.clone(), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture: compiles, caches tap weights
        for _ in range(2):
            fn(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(static)
    static.copy_(x2)
    graph.replay()
    torch.cuda.synchronize()
    return out.clone()


def _graph_case(
    cid: str,
    model: nn.Module,  # patched _FcBlock
    x1: torch.Tensor,  # [T, K*H]: what the graph is captured on
    x2: torch.Tensor,  # [T, K*H]: what it is replayed on
    stock: torch.Tensor,  # [T, H]: the unpatched block on x2
    dry: bool,
) -> dict:
    """The patched block on x2 (eager) against the stock block, and on a GPU its graph (captured
    on x1, replayed on x2) against eager."""
    got, tol = {}, bench.TOL[True]

    def patched() -> float:
        got["eager"] = model(x2)
        return _ratio(got["eager"], stock, tol)

    def replayed() -> float:
        got["graph"] = _replay(model, x1, x2)
        return _ratio(got["graph"], got["eager"], tol)

    rec = _check(cid, patched)
    rec["patched_vs_stock_ratio"] = rec.pop("ratio")
    if dry or "eager" not in got:
        return rec
    g = _check(cid, replayed)
    bitwise = "graph" in got and torch.equal(got["graph"], got["eager"])
    return dict(rec, ok=rec["ok"] and g["ok"], why=rec["why"] or g["why"],
                graph_vs_eager_ratio=g["ratio"], graph_bitwise_equal=bitwise)  # fmt: skip


def graph_check(dev: torch.device, dry: bool) -> dict:
    """Per norm and T, with the kernel forced (env switch "1") and with the dispatch's choice."""
    name, h, k = SHAPES[0]
    h = h // DRY_SCALE if dry else h
    modes = {"dispatch default": None} if dry else {"fused forced": "1", "dispatch default": None}
    cases, saved = [], os.environ.pop(dispatch.ENV_SWITCH, None)
    try:
        for norm in NORMS:
            torch.manual_seed(0)
            model = _FcBlock(norm, h, k, dev)
            xs = {t: [torch.randn(t, k * h, device=dev).to(BF16) for _ in "ab"] for t in GRAPH_T}
            stock = {t: model(x[1]) for t, x in xs.items()}  # before the patch: SGLang's modules
            install_fused_fc(model)
            for mode, switch in modes.items():
                os.environ.pop(dispatch.ENV_SWITCH, None)
                os.environ.update({dispatch.ENV_SWITCH: switch} if switch else {})
                for t, (x1, x2) in xs.items():
                    rec = _graph_case(f"{norm}-T{t}-{mode}", model, x1, x2, stock[t], dry)
                    path = dispatch.fused_path(t, h, k, norm, dev)
                    cases.append(dict(rec, fused_path=path is not None, path=path))
    finally:
        os.environ.pop(dispatch.ENV_SWITCH, None)
        os.environ.update({dispatch.ENV_SWITCH: saved} if saved is not None else {})
    what = "each case captured in a CUDA graph on one input and replayed on another"
    if dry:
        what = "no CUDA graph was captured or replayed (dry run on CPU): the patched block ran "
        what += "eagerly (on CPU it takes SGLang's modules, not the kernel) against the stock one"
    return dict(captured=not dry, what=what, shape=dict(name=name, H=h, K=k),
                passed=all(c["ok"] for c in cases), cases=cases)  # fmt: skip
