"""The folders follow the data flow, and the pure layers stay pure (read from the source).

checkpoint and data -> layout -> SGLang hooks -> server -> benchmark: a folder imports only
from folders earlier in the flow (or its own), the pure modules import neither torch nor
sglang (not even inside a function), and only hooks/ imports sglang at module level.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "sglang_eagle3"

# Lower ranks come earlier in the flow. Root modules: the shared base (errors, log, names).
RANK = {
    "": 0,
    "layout": 1,
    "checkpoint": 2,
    "data": 3,
    "kernels": 2,
    "ops": 3,
    "hooks": 4,
    "launch": 5,
    "doctor": 6,  # proves the wiring through the launcher's own capture server (--engine sglang)
    "bench": 7,
    "tune": 8,  # predicts settings from the doctor's evidence and launched servers
    "capture": 9,  # training data through launched servers (launch, hooks, data, doctor)
    "testing": 10,
}
# `python -m` names kept working; layout/__main__ dispatches `stamp` to capture/stamp.py
ENTRY_SHIMS = {"sglang_eagle3.demo", "sglang_eagle3.tiny", "sglang_eagle3.layout.__main__"}
HEAVY = ("torch", "sglang", "triton", "transformers", "numpy", "safetensors.torch", "sgl_kernel")
# Pure logic: layouts, family rules, flag resolution, config schemas, table rendering.
PURE_FOLDERS = ("", "layout", "checkpoint", "launch")
# ... except these, which read tensors or start processes.
NOT_PURE = {
    "sglang_eagle3.checkpoint.draft_weights",
    "sglang_eagle3.checkpoint.hf_target",
    "sglang_eagle3.launch.__main__",
    "sglang_eagle3.launch.cli",
    "sglang_eagle3.launch.server_process",
}
PURE_MODULES = {
    "sglang_eagle3.hooks.plan",
    "sglang_eagle3.hooks.accept_watch",
    "sglang_eagle3.tune.grid",
    "sglang_eagle3.tune.cost",
    "sglang_eagle3.tune.report",
    "sglang_eagle3.tune.adaptive",
    "sglang_eagle3.tune.mix",
    "sglang_eagle3.tune.rounds",
    # the fused fc's launch settings and wins-file reader: gpu_check JSON is checked without torch
    "sglang_eagle3.ops.eagle3_fused_fc_configs",
    "sglang_eagle3.ops.eagle3_fused_fc_wins",
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PKG.rglob("*.py"):
        if "shim" in path.parts:  # the reference sgl_kernel: its own top-level package
            continue
        if "trained" in path.parts:  # shipped checkpoints (speculators' config.py), not code
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    for path in (ROOT / "kernels").glob("*.py"):
        found[f"sglang_eagle3.kernels.{path.stem}"] = path
    return found


MODULES = _modules()


def _imports(path: Path, *, top_level_only: bool = False) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else ast.walk(tree)
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, node.lineno))
            out += [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}:{node.lineno}: relative import; write it absolute")
    return out


def _internal(name: str) -> str | None:
    """The project module an import name refers to (longest known prefix)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in MODULES:
            return candidate
    return None


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in RANK) else ""


def _is_pure(module: str) -> bool:
    if module in ENTRY_SHIMS or module in NOT_PURE:
        return False
    return module in PURE_MODULES or _folder(module) in PURE_FOLDERS


def test_every_module_belongs_to_a_ranked_folder():
    strays = [m for m in MODULES if m not in ENTRY_SHIMS and _folder(m) not in RANK]
    assert not strays


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m not in ENTRY_SHIMS))
def test_no_import_from_later_in_the_flow(module):
    folder = _folder(module)
    bad = set()
    for name, line in _imports(MODULES[module]):
        target = _internal(name)
        if target is None or target == module:
            continue
        other = _folder(target)
        if other != folder and RANK[other] >= RANK[folder]:
            bad.add(f"line {line}: {target} ({other or 'root'} is not before {folder})")
    assert not bad, f"{module} imports against the flow: {sorted(bad)}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _is_pure(m)))
def test_pure_modules_import_no_heavy_library(module):
    bad = set()
    for name, line in _imports(MODULES[module]):
        if any(name == h or name.startswith(h + ".") for h in HEAVY):
            bad.add(f"line {line}: {name}")
        target = _internal(name)
        if target and target != module and not _is_pure(target):
            bad.add(f"line {line}: {target} (not pure)")
    assert not bad, f"{module} is pure logic but imports {sorted(bad)}"


def test_only_hooks_import_sglang_at_module_level():
    bad = []
    for module, path in MODULES.items():
        if _folder(module) == "hooks":
            continue
        for name, line in _imports(path, top_level_only=True):
            if name == "sglang" or name.startswith("sglang."):
                bad.append(f"{module}:{line}: {name}")
    assert not bad


def test_the_flow_check_can_fail():
    """The rank table really orders folders (a check that cannot fail proves nothing)."""
    assert RANK["layout"] < RANK["checkpoint"] < RANK["hooks"] < RANK["launch"] < RANK["bench"]
    assert _folder("sglang_eagle3.layout.taps") == "layout" and _folder("sglang_eagle3.log") == ""
    assert _internal("sglang_eagle3.checkpoint.draft_readers.read_draft") == (
        "sglang_eagle3.checkpoint.draft_readers"
    )
