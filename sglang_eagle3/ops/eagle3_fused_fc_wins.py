"""The measured table of the fused EAGLE-3 fc: benchmarks/gpu_check.py's JSON, read and checked.

``WINS_FILE`` (``eagle3_fused_fc_wins.json``, the checked-in copy of a GPU run) is read once at
import into ``MEASURED_WINS`` (shapes where a fused path was correct and >= ``WIN_MARGIN``
faster than norm + cat + cuBLAS), ``MEASURED_PATHS`` (the path that won each) and
``TUNED_GEMV`` (the GEMV tiles that run tuned). The dispatch (``eagle3_fused_fc_dispatch``) and
the tile choice (``eagle3_fused_fc_tiles``) read them here, so a test or gpu_check.py patches
them in one place. No torch.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import NamedTuple

from sglang_eagle3.ops.eagle3_fused_fc_configs import T_BUCKETS, GemvConfig

# the norm modes of eagle3_fused_fc (its NORMS), here because the wins file is read here
NORM_NAMES = ("none", "before_fc", "per_tap", "both")
WIN_MARGIN = 1.03  # a win: the fused kernel beat norm + cat + cuBLAS by >= 3 %
# The fused paths (eagle3_fused_fc_dispatch); a win without a "path" is the tiled kernel's (the
# first gpu_check runs timed only that one).
PATHS = ("gemv", "normcat", "tiled")
LEGACY_PATH = "tiled"
GEMV_TUNED_T = (1, 4, 16)  # the T buckets whose GEMV tiles gpu_check.py tunes
GPU_CHECK_FORMAT = "sglang_eagle3.gpu_check/1"  # benchmarks/gpu_check.py's JSON
# The checked-in copy of a GPU run of benchmarks/gpu_check.py (benchmarks/README.md).
WINS_FILE = Path(__file__).with_name("eagle3_fused_fc_wins.json")
Win = tuple[str, int, int, int]  # (norm, T bucket, H, K)
GemvKey = tuple[int, int, int]  # (H, K, T bucket)


def is_win(fused_us: float, unfused_us: float) -> bool:
    return fused_us * WIN_MARGIN <= unfused_us


def row_is_win(row: object) -> bool:
    """A gpu_check timing row that makes its shape a win: correct and fused >= 3 % faster."""
    if not isinstance(row, dict) or row.get("ok") is not True:
        return False
    us = (row.get("fused_us"), row.get("unfused_us"))
    return all(isinstance(v, (int, float)) and v > 0 for v in us) and is_win(*us)


class Measured(NamedTuple):
    """What one benchmarks/gpu_check.py result lets the dispatch do."""

    wins: frozenset[Win]  # shapes where a fused path was correct and >= 3 % faster
    paths: dict[Win, str]  # each win's path (the fastest measured there)
    gemv_tiles: dict[GemvKey, tuple[int, GemvConfig]]  # (N tuned for, tiles)


def parse_gpu_check(data: object, source: str = "gpu_check JSON") -> Measured:
    """The wins, their paths and the tuned GEMV tiles of a benchmarks/gpu_check.py result;
    ValueError naming ``source`` when it is not one, or when a win is not backed by its own
    measurements. Tiles are read only from a GPU run whose checks all passed."""

    def bad(why: str) -> ValueError:
        return ValueError(f"{source}: {why}")

    if not isinstance(data, dict):
        raise bad("not a JSON object")
    if data.get("format") != GPU_CHECK_FORMAT:
        raise bad(f"format {data.get('format')!r}, expected {GPU_CHECK_FORMAT!r}")
    wins = data.get("wins")
    if not isinstance(wins, list):
        raise bad("'wins' must be a list")
    measured = data.get("dry_run") is False and data.get("passed") is True
    if wins and not measured:
        raise bad("wins need a GPU run (dry_run: false) whose checks all passed (passed: true)")
    key_fields = ("norm", "T", "H", "K")
    timing = data.get("timing")
    rows = timing.get("rows") if isinstance(timing, dict) else None
    rows = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    out, paths = set(), {}
    for w in wins:
        key = tuple(w.get(f) for f in key_fields) if isinstance(w, dict) else None
        if key is None or key[0] not in NORM_NAMES or key[1] not in T_BUCKETS:
            raise bad(f"win {w!r}: needs norm in {NORM_NAMES} and T in {T_BUCKETS}")
        if not all(type(v) is int and v > 0 for v in key[1:]):
            raise bad(f"win {w!r}: T, H and K must be positive integers")
        path = w.get("path")
        if path is not None and path not in PATHS:
            raise bad(f"win {w!r}: path must be one of {PATHS}")
        backing = [r for r in rows if row_is_win(r) and tuple(r.get(f) for f in key_fields) == key]
        if path is not None:  # a row that names its path must name the same one
            backing = [r for r in backing if r.get("path", path) == path]
        if not backing:
            raise bad(f"win {w!r}: no timing row shows it (correct, fused >= 3 % faster)")
        out.add(key)
        paths[key] = path or backing[0].get("path") or LEGACY_PATH
        if paths[key] not in PATHS:
            raise bad(f"win {w!r}: its timing row's path {paths[key]!r} is not one of {PATHS}")
    tiles = _gemv_tiles(data.get("gemv_tuning"), bad) if measured else {}
    return Measured(frozenset(out), paths, tiles)


def _gemv_tiles(tuning: object, bad) -> dict[GemvKey, tuple[int, GemvConfig]]:
    """``gemv_tuning.tuned`` of a gpu_check result: (H, K, T bucket) -> (N, GemvConfig)."""
    if tuning is None:
        return {}
    tuned = tuning.get("tuned") if isinstance(tuning, dict) else None
    if not isinstance(tuned, list):
        raise bad("'gemv_tuning' must be an object with a 'tuned' list")
    names = {f.name for f in fields(GemvConfig)}
    out = {}
    for entry in tuned:
        dims = tuple(entry.get(f) for f in ("H", "K", "T", "N")) if isinstance(entry, dict) else ()
        cfg = entry.get("config") if isinstance(entry, dict) else None
        if len(dims) != 4 or not all(type(v) is int and v > 0 for v in dims):
            raise bad(f"gemv tiles {entry!r}: H, K, T and N must be positive integers")
        if dims[2] not in T_BUCKETS or not isinstance(cfg, dict) or set(cfg) != names:
            raise bad(f"gemv tiles {entry!r}: needs T in {T_BUCKETS} and config fields {names}")
        try:
            config = GemvConfig(**cfg)
        except (TypeError, ValueError) as e:
            raise bad(f"gemv tiles {entry!r}: {e}") from e
        if not config.use_dot and dims[2] != 1:
            raise bad(f"gemv tiles {entry!r}: the FMA variant (use_dot false) is for T = 1 only")
        out[dims[:3]] = (dims[3], config)
    return out


def wins_from_gpu_check(data: object, source: str = "gpu_check JSON") -> frozenset[Win]:
    """The ``MEASURED_WINS`` entries of a benchmarks/gpu_check.py result (``parse_gpu_check``)."""
    return parse_gpu_check(data, source).wins


def load_measured(path: Path | str) -> Measured:
    """``parse_gpu_check`` of a JSON file; ValueError naming the file if it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable gpu_check JSON file ({e})") from e
    return parse_gpu_check(data, source=str(path))


def load_measured_wins(path: Path | str) -> frozenset[Win]:
    """``wins_from_gpu_check`` of a JSON file; ValueError naming the file if it is not one."""
    return load_measured(path).wins


# (norm, T bucket, H, K) where benchmarks/gpu_check.py measured a fused path faster than
# norm + cat + cuBLAS on an sm_90+ GPU, read from WINS_FILE (an H200 run, 2026-12-04: three
# small-T shapes without a norm, all the tiled kernel's; every other shape takes the PyTorch
# path), the path that won each, and the GEMV tiles it tuned (none in that run).
_MEASURED = load_measured(WINS_FILE) if WINS_FILE.is_file() else Measured(frozenset(), {}, {})
MEASURED_WINS: frozenset[Win] = _MEASURED.wins
MEASURED_PATHS: dict[Win, str] = _MEASURED.paths
TUNED_GEMV: dict[GemvKey, tuple[int, GemvConfig]] = _MEASURED.gemv_tiles
