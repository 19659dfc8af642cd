"""Environment of the CPU test harness: what turns it on, for this process and its children.

Pure logic (no torch, no sglang): the launcher and the tests build the child environment here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from sglang_eagle3 import env_names
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.argv import argv_has, argv_int

HARNESS_FLAG = env_names.CPU_HARNESS
# Directory holding the reference `sgl_kernel` package (plain PyTorch ops, tests/demos only).
SHIM_DIR = Path(__file__).resolve().parents[1] / "testing" / "cpu_harness" / "shim"


def harness_enabled(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get(HARNESS_FLAG, "0") == "1"


def harness_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return a copy of `base` (default: os.environ) that runs SGLang on the CPU harness.

    SGLang imports `sgl_kernel` at module import time, in every process it spawns and
    before any plugin runs, so the reference kernels must be importable through
    PYTHONPATH: an environment variable is the one thing every child process inherits.
    """
    env = dict(os.environ if base is None else base)
    env[HARNESS_FLAG] = "1"
    env[env_names.USE_CPU_ENGINE] = "1"
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(SHIM_DIR) not in parts:
        parts.insert(0, str(SHIM_DIR))
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


STOCK_SERVER = "sglang.launch_server"
FORK_SERVER = "sglang_eagle3.launch.fork_server"


def server_module(env: Mapping[str, str]) -> str:
    """The module that runs SGLang's server in `env`: stock, or on the CPU harness at one
    OpenMP thread with `SGLANG_EAGLE3_CPU_FORK=1` (the test suite), launch/fork_server.py,
    whose scheduler and detokenizer are forked instead of spawned (half the start time)."""
    quick = env.get(env_names.CPU_FORK) == "1" and env.get("OMP_NUM_THREADS") == "1"
    return FORK_SERVER if quick and harness_enabled(env) else STOCK_SERVER


def cpu_ranks(argv: list[str]) -> int:
    """SGLang's CPU ranks for `argv` (canonical flags): tp x pp, times dp unless DP attention
    runs inside the TP ranks."""
    tp, pp = argv_int(argv, "--tp-size") or 1, argv_int(argv, "--pp-size") or 1
    dp = 1 if argv_has(argv, "--enable-dp-attention") else argv_int(argv, "--dp-size") or 1
    return tp * pp * dp


def rank_binding(env: Mapping[str, str], ranks: int, cores: list[int]) -> dict[str, str]:
    """`env` with SGLANG_CPU_OMP_THREADS_BIND for `ranks` CPU ranks, when it is not set: this
    process's `cores` split into `ranks` runs, e.g. "0|1". Without it SGLang 0.5.23 accepts one
    rank per NUMA node only and dies 40 s into the start (numa_utils.py:463)."""
    out = dict(env)
    if ranks <= 1 or env.get(env_names.CPU_OMP_THREADS_BIND):
        return out
    if len(cores) < ranks:
        raise WiringError(
            f"{ranks} CPU ranks need a core each, and this process may use {len(cores)}",
            path="--tp-size",
            fix=f"lower --tp-size (or --dp-size), or set {env_names.CPU_OMP_THREADS_BIND} "
            "yourself (one core set per rank, e.g. 0-3|4-7)",
        )
    cores, per = sorted(cores), len(cores) // ranks
    runs = [cores[i * per : (i + 1) * per] for i in range(ranks)]
    out[env_names.CPU_OMP_THREADS_BIND] = "|".join(
        f"{r[0]}-{r[-1]}" if r[-1] - r[0] == len(r) - 1 and len(r) > 1 else ",".join(map(str, r))
        for r in runs
    )
    return out
