"""The repo-root `kernels/` folder never shadows the PyPI `kernels` package SGLang needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3.launch.cpu_env import harness_env

ROOT = Path(__file__).resolve().parent.parent


def run_from_root(code: str, env=None) -> subprocess.CompletedProcess:
    # `python -c` puts the current directory first on sys.path, as `python -m` from the root
    # and pytest's rootdir insertion do.
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)  # fmt: skip


def test_repo_root_kernels_folder_is_not_a_package():
    assert (ROOT / "kernels").is_dir()
    assert not (ROOT / "kernels" / "__init__.py").exists()


def test_import_kernels_resolves_to_site_packages_from_the_repo_root():
    out = run_from_root(
        "import sys, kernels, sglang_eagle3.kernels.eagle3_fused_fc_kernel as k; "
        "print(sys.path[0] in ('', '.') or sys.path[0]); print(kernels.__file__); print(k.__file__)"
    )
    assert out.returncode == 0, out.stderr
    _, pypi_kernels, ours = out.stdout.split()
    assert "site-packages" in pypi_kernels and not pypi_kernels.startswith(str(ROOT / "kernels"))
    assert Path(ours).resolve() == (ROOT / "kernels" / "eagle3_fused_fc_kernel.py").resolve()


@pytest.mark.sglang
def test_sglang_imports_from_the_repo_root():
    code = (
        "import kernels, sglang.srt.models.deepseek_v2, sglang.srt.models.llama_eagle3; "
        "import sglang.srt.speculative.eagle_worker_v2; print('ok')"
    )
    out = run_from_root(code, env=harness_env())
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


def test_declared_packages_are_the_package_folders():
    """pyproject lists packages by hand (for the kernels package-dir): none may be missing."""
    import tomllib

    declared = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {"sglang_eagle3.kernels"}
    for init in (ROOT / "sglang_eagle3").rglob("__init__.py"):
        found.add(".".join(init.parent.relative_to(ROOT).parts))
    # the trained tiny models' folders: data packages, so setuptools installs them quietly
    trained = ROOT / "sglang_eagle3" / "testing" / "tiny" / "trained"
    for folder in [trained, *(p for p in trained.rglob("*") if p.is_dir())]:
        if folder.name != "__pycache__":
            found.add(".".join(folder.relative_to(ROOT).parts))
    assert declared == found
