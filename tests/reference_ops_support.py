"""Helpers shared by the tests of the CPU harness's reference `sgl_kernel`
(tests/test_reference_ops_*.py): importing the shim in this process, child environments,
the SDPA reference and KV-cache scenarios, and the hand-made draft trees.

The shim is imported in the test process with its directory put on sys.path for one test
module at a time; SGLANG_USE_CPU_ENGINE=1 and real SGLang are only ever used in subprocesses.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from sglang_eagle3.testing.cpu_harness import SHIM_DIR

F = torch.nn.functional
STUB_MESSAGE = "is not implemented by the sglang-eagle3 CPU reference harness"


def reference_sgl_kernel():
    """Yield the reference sgl_kernel module, imported from the shim directory, then forget it
    (the body of each test module's module-scoped `sk` fixture)."""
    if any(name.split(".")[0] == "sgl_kernel" for name in sys.modules):
        pytest.skip("an sgl_kernel is already imported in this process")
    saved_path = list(sys.path)
    sys.path.insert(0, str(SHIM_DIR))
    try:
        try:
            module = importlib.import_module("sgl_kernel")
        except ImportError as error:
            pytest.skip(f"reference sgl_kernel refused to import: {error}")
        assert module.SGLANG_EAGLE3_REFERENCE is True
        yield module
    finally:
        sys.path[:] = saved_path
        for name in [n for n in sys.modules if n.split(".")[0] == "sgl_kernel"]:
            del sys.modules[name]


def _env(cpu_engine: bool, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(SHIM_DIR), env.get("PYTHONPATH", "")] if p)
    if cpu_engine:
        env["SGLANG_USE_CPU_ENGINE"] = "1"
    env.update(extra)
    return env


def _run(script: str, env: dict[str, str], cwd: Path | None = None, timeout: int = 300):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --------------------------------------------------------------------------------------------
# Attention: scenario builders and the SDPA reference


def _sdpa(q, k, v, visible, scale):
    """q [Q, H, D], k [K, Hkv, D], v [K, Hkv, Dv], visible [Q, K] -> [Q, H, Dv], in float64."""
    out = F.scaled_dot_product_attention(
        q.double().transpose(0, 1),
        k.double().transpose(0, 1),
        v.double().transpose(0, 1),
        attn_mask=visible,
        scale=scale,
        enable_gqa=True,
    )
    return out.transpose(0, 1)


class Cache:
    """A KV pool and slot table: request b lives in row rows[b] and owns seq_lens[b] slots."""

    def __init__(self, seq_lens, heads_kv, dqk, dv, *, mla=False, dtype=torch.float32, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.gen = gen
        num_slots = sum(seq_lens) + 7
        self.k = torch.randn(num_slots, heads_kv, dqk, generator=gen).to(dtype)
        # MLA: the value buffer is the first dv columns of the key buffer (a view).
        self.v = (
            self.k[..., :dv]
            if mla
            else torch.randn(num_slots, heads_kv, dv, generator=gen).to(dtype)
        )
        self.rows = torch.tensor([len(seq_lens) - 1 - b for b in range(len(seq_lens))])
        self.req_to_token = torch.zeros(len(seq_lens) + 1, max(seq_lens) + 4, dtype=torch.int32)
        slots = torch.randperm(num_slots, generator=gen)
        self.slots = []
        for b, length in enumerate(seq_lens):
            mine, slots = slots[:length], slots[length:]
            self.req_to_token[self.rows[b], :length] = mine.int()
            self.slots.append(mine)
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int64)


# Hand-made topk=2 draft trees (see test_build_tree_hand_computed): request 0 is
# 0 -> {1, 2}, 1 -> 3; request 1 is 0 -> 1, 1 -> {2, 3}.
TREE_PARENT_LIST = [[-1, 0, 1], [-1, 0, 1]]
TREE_SELECTED = [[0, 1, 3], [0, 2, 3]]
TREE_QLEN_MASK = [
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]],
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]],
]
