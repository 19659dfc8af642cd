"""Let SGLang's CPU graph runner (`--device cpu --enable-torch-compile`) start on the harness.

`CPUGraphRunner.__init__` registers fakes for 55 `sgl_kernel` ops
(sglang/srt/model_executor/cpu_graph_runner.py L171, called at L690) and fails on the first
one that is not a defined torch op. The reference `sgl_kernel` defines the ones it lacks right
before that registration (`define_graph_runner_ops`: their kernels raise NotImplementedError),
so a process that never starts the graph runner keeps the reference exactly as it was.

The module is patched when SGLang first imports it (the scheduler does, through its model
runner), not imported here: a stock launcher with only the harness would pay 3 s for it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

from sglang_eagle3.log import get_logger

logger = get_logger()
GRAPH_RUNNER = "sglang.srt.model_executor.cpu_graph_runner"
_MARK = "_sglang_eagle3_harness"


def _patch(module: ModuleType) -> None:
    original = module.register_fake_ops
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def register_fake_ops(tp_size: int) -> None:
        import sgl_kernel

        defined = sgl_kernel.define_graph_runner_ops()
        logger.info(
            f"CPU harness: {len(defined)} sgl_kernel ops defined for the CPU graph runner's "
            "fakes (not implemented here: they raise if a compiled graph calls them)"
        )
        return original(tp_size)

    setattr(register_fake_ops, _MARK, True)
    module.register_fake_ops = register_fake_ops


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds the graph runner module like the path finder would, and patches it once run."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != GRAPH_RUNNER:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module  # type: ignore[union-attr]

        def exec_module(module: ModuleType) -> None:
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[union-attr,method-assign]
        return spec


def install_graph_runner_ops() -> None:
    """Patch SGLang's CPU graph runner now if it is imported, else when it is."""
    module = sys.modules.get(GRAPH_RUNNER)
    if module is not None:
        _patch(module)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
