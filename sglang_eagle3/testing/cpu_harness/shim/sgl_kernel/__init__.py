"""Reference `sgl_kernel` for running SGLang's CPU engine in tests and demos: not for speed.

SGLang 0.5.23's CPU engine (SGLANG_USE_CPU_ENGINE=1) needs the CPU build of sgl_kernel,
which is not published. This package stands in for it with plain PyTorch implementations of
the ops a tiny DeepSeek-V3 (MLA + MoE) target with an EAGLE-3 Llama drafter calls on the
`intel_amx` attention backend. Each op is registered as `torch.ops.sgl_kernel.<name>` and
exported here under the same name. Any other name looked up on this module is a stub that
raises NotImplementedError when called (SGLang imports some names it never calls), so a test
can never pass on a silent no-op. SGLang's CPU graph runner (`--enable-torch-compile`) needs
52 more names defined as torch ops to attach its fakes to: `define_graph_runner_ops`
(graph_ops.py) defines them, with kernels that raise, only when the runner starts.

It must never shadow a real sgl_kernel: it lives in a directory that only the test/demo
environment puts on PYTHONPATH, and it refuses to import when another importable
`sgl_kernel` is on sys.path.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SGLANG_EAGLE3_REFERENCE = True

_SHIM_DIR = Path(__file__).resolve().parent.parent
_HARNESS = "the sglang-eagle3 CPU reference harness"


def _other_sgl_kernel_spec() -> importlib.machinery.ModuleSpec | None:
    """Spec of an `sgl_kernel` package found on sys.path outside this shim's directory."""

    def resolved(entry: str) -> Path:
        return Path(entry or os.getcwd()).resolve()

    other_paths = [entry for entry in sys.path if resolved(entry) != _SHIM_DIR]
    spec = importlib.machinery.PathFinder.find_spec("sgl_kernel", other_paths)
    # A bare directory named sgl_kernel (namespace portion) is not a kernel package.
    return spec if spec is not None and spec.loader is not None else None


def _imports(spec: importlib.machinery.ModuleSpec) -> bool:
    """Whether the other sgl_kernel imports. It is tried under its own name, with this module
    set aside, and every trace of it is removed afterwards."""
    ours = {name: mod for name, mod in sys.modules.items() if name.split(".")[0] == "sgl_kernel"}
    for name in ours:
        del sys.modules[name]
    try:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sgl_kernel"] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return True
    except Exception:  # a CUDA build fails here on a machine without CUDA: not usable
        return False
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == "sgl_kernel"]:
            del sys.modules[name]
        sys.modules.update(ours)


_other = _other_sgl_kernel_spec()
if _other is not None and _imports(_other):
    raise ImportError(
        f"a real sgl_kernel is importable from {_other.origin}; {_HARNESS} in {_SHIM_DIR} "
        "must not shadow it. Remove the harness directory from PYTHONPATH to use the real kernel."
    )

import torch  # noqa: E402  (the shadowing check above must run before anything else)

from . import attention, cache_ops, norm_ops, spec_ops  # noqa: E402
from .graph_ops import define_graph_runner_ops  # noqa: E402

_MARKER_OP = "sglang_eagle3_reference_marker"


def _register() -> torch.library.Library | None:
    """Define every op in a fresh `sgl_kernel` torch library, with CPU kernels.

    Returns None when this reference is already registered in this process (the package was
    imported again after being dropped from sys.modules; the first registration still holds).
    """
    try:
        lib = torch.library.Library("sgl_kernel", "DEF")
    except RuntimeError as error:
        if hasattr(torch.ops.sgl_kernel, _MARKER_OP):
            return None
        raise ImportError(
            f"the torch op namespace sgl_kernel is already registered (a real sgl_kernel "
            f"library is loaded in this process?); {_HARNESS} must not shadow it"
        ) from error

    def marker() -> bool:
        # Refers to `lib`, and the dispatcher holds this kernel: the ops stay registered for
        # the life of the process even if this module is dropped and imported again.
        return lib is not None

    lib.define(f"{_MARKER_OP}() -> bool")
    lib.impl(_MARKER_OP, marker, "CompositeExplicitAutograd")
    for table in (attention.OPS, cache_ops.OPS, norm_ops.OPS, spec_ops.OPS):
        for name, (schema, kernel) in table.items():
            lib.define(name + schema)
            lib.impl(name, kernel, "CPU")
    return lib


_LIBRARY = _register()

OP_NAMES: tuple[str, ...] = tuple(
    sorted([*attention.OPS, *cache_ops.OPS, *norm_ops.OPS, *spec_ops.OPS])
)

decode_attention_cpu = torch.ops.sgl_kernel.decode_attention_cpu
extend_attention_cpu = torch.ops.sgl_kernel.extend_attention_cpu
copy_all_layer_kv_cache_cpu = torch.ops.sgl_kernel.copy_all_layer_kv_cache_cpu
assign_draft_cache_locs_contiguous_cpu = torch.ops.sgl_kernel.assign_draft_cache_locs_contiguous_cpu
assign_extend_cache_locs_cpu = torch.ops.sgl_kernel.assign_extend_cache_locs_cpu
assign_req_to_token_pool_cpu = torch.ops.sgl_kernel.assign_req_to_token_pool_cpu
build_draft_decode_metadata_cpu = torch.ops.sgl_kernel.build_draft_decode_metadata_cpu
fill_bonus_tokens_cpu = torch.ops.sgl_kernel.fill_bonus_tokens_cpu
fill_accept_out_cache_loc_cpu = torch.ops.sgl_kernel.fill_accept_out_cache_loc_cpu
build_tree_kernel_efficient_cpu = torch.ops.sgl_kernel.build_tree_kernel_efficient_cpu
verify_tree_greedy_cpu = torch.ops.sgl_kernel.verify_tree_greedy_cpu
fused_qk_rmsnorm_cpu = torch.ops.sgl_kernel.fused_qk_rmsnorm_cpu

__all__ = ["OP_NAMES", "SGLANG_EAGLE3_REFERENCE", "define_graph_runner_ops", *OP_NAMES]


def _not_implemented(name: str) -> Callable[..., Any]:
    def stub(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"sgl_kernel.{name} is not implemented by {_HARNESS}")

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = f"Placeholder for sgl_kernel.{name}: raises NotImplementedError when called."
    return stub


_STUBS: dict[str, Callable[..., Any]] = {}


def __getattr__(name: str) -> Callable[..., Any]:
    """Any other public name: a stub that fails when called, not when imported.

    SGLang imports some kernels at module import time that it never calls on this path
    (e.g. `rotate_input_ids_cpu` for multi-layer EAGLE). Private and dunder names raise
    AttributeError as usual, so Python's own probing (`__path__`, `__wrapped__`, ...) works.
    """
    if name.startswith("_"):
        raise AttributeError(f"module 'sgl_kernel' has no attribute {name!r}")
    if name not in _STUBS:
        _STUBS[name] = _not_implemented(name)
    return _STUBS[name]
