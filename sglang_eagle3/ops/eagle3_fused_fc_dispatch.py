"""When to run the fused EAGLE-3 fc, and through which kernel path.

Three fused paths compute ``fc(norm(cat(taps)))`` (math: the kernels' docstrings):

- ``gemv``    ``eagle3_fused_fc_gemv``: split-K GEMV streaming the weight once (decode, T <= 16);
- ``normcat`` ``eagle3_fused_fc_normcat``: one norm + concat pass writing the fc input, then
              cuBLAS (``torch.mm``; prefill, T >= 64);
- ``tiled``   ``eagle3_fused_fc`` (``kernels/eagle3_fused_fc_kernel.py``): the first fused kernel,
              one tiled GEMM with the norms inline; kept for the measurements that chose it.

``fused_path`` decides per shape from the measured table (``MEASURED_WINS`` / ``MEASURED_PATHS``
in ``eagle3_fused_fc_wins``, read from benchmarks/gpu_check.py's output): the path that run
measured fastest, only where it beat norm + cat + cuBLAS by ``WIN_MARGIN``; everywhere else
None, and the caller falls back to PyTorch. The tiles: ``eagle3_fused_fc_tiles``; the launches:
``eagle3_fused_fc_launch``. Triton is imported lazily so that CPU-only installs never need it.
"""

from __future__ import annotations

import functools
import os

import torch

from sglang_eagle3 import env_names
from sglang_eagle3.ops import eagle3_fused_fc_wins as fc_wins
from sglang_eagle3.ops.eagle3_fused_fc_configs import DECODE_MAX_T, t_bucket

ENV_SWITCH = env_names.FUSED_FC  # "0": never fused; "1": fused for every shape on sm_90+


@functools.cache
def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def default_path(tokens: int) -> str:
    """The path for a shape nothing was measured at: the GEMV at decode sizes, else normcat."""
    return "gemv" if tokens <= DECODE_MAX_T else "normcat"


def choose_path(tokens: int, hidden: int, taps: int, norm: str) -> str:
    """The measured path of this shape (``MEASURED_PATHS``), else ``default_path``."""
    key = (norm, t_bucket(tokens), hidden, taps)
    return fc_wins.MEASURED_PATHS.get(key, default_path(tokens))


def fused_path(
    tokens: int, hidden: int, taps: int, norm: str, device: torch.device | str
) -> str | None:
    """The fused path that should replace norm + cat + linear for this shape, or None.

    Only CUDA devices of compute capability >= 9.0 (the kernels were written and AOT-checked for
    sm_90 / sm_100 / sm_120), and only where one was measured faster (``MEASURED_WINS``; that
    run's fastest path, ``MEASURED_PATHS``): a shape measured slower, or not measured, falls
    back (None). The env switch forces a choice: "0" never, "1" every shape (its measured path,
    else ``default_path``). CPU tensors always take the PyTorch fallback.
    """
    device = torch.device(device)
    switch = os.environ.get(ENV_SWITCH, "")
    if switch == "0" or device.type != "cuda" or not _triton_available():
        return None
    if torch.cuda.get_device_capability(device) < (9, 0):
        return None
    key = (norm, t_bucket(tokens), hidden, taps)
    if switch != "1" and key not in fc_wins.MEASURED_WINS:
        return None
    return choose_path(tokens, hidden, taps, norm)


def use_fused(tokens: int, hidden: int, taps: int, norm: str, device: torch.device | str) -> bool:
    """True when a fused path should replace norm + cat + linear for this shape (``fused_path``)."""
    return fused_path(tokens, hidden, taps, norm, device) is not None
