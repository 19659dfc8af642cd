"""The wheel the Docker image installs, and the build context it comes from (.dockerignore).

The wheel is built from the Docker build context (not the source tree, not the editable
install) and installed into a plain directory (`slow`: a pip build); it carries the package,
registers the plugins SGLang's real loader finds (marked `sglang`), and SGLANG_PLUGINS can
leave them out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PKG_VERSION = PYPROJECT["project"]["version"]
GROUP = "sglang.srt.plugins"
EXPECTED_EPS = {
    "sglang_eagle3": "sglang_eagle3.hooks.plugin:register",
    "sglang_eagle3_cpu_harness": "sglang_eagle3.testing.cpu_harness.activate:activate",
}


# --- build context and isolated interpreters --------------------------------------------------


def _docker_ignored(patterns: list[str]):
    """Docker's .dockerignore matching: patterns match the whole path from the context root
    (a bare name only at the root), ** spans directories, a matched directory excludes
    everything below it, and a later !pattern re-includes."""

    def compile_one(pat: str) -> re.Pattern:
        pat, out, i = pat.strip("/"), "", 0
        while i < len(pat):
            if pat.startswith("**/", i):
                out, i = out + "(?:.*/)?", i + 3
            elif pat.startswith("**", i):
                out, i = out + ".*", i + 2
            elif pat[i] == "*":
                out, i = out + "[^/]*", i + 1
            elif pat[i] == "?":
                out, i = out + "[^/]", i + 1
            elif pat[i] == "[":
                j = pat.index("]", i)
                cls = pat[i + 1 : j]
                out += "[" + ("^" + cls[1:] if cls[:1] in "!^" and cls else cls) + "]"
                i = j + 1
            else:
                out, i = out + re.escape(pat[i]), i + 1
        return re.compile(out + "(?:/.*)?")

    rules = [(p.startswith("!"), compile_one(p.lstrip("!"))) for p in patterns]

    def ignored(rel: str) -> bool:
        result = False
        for negated, rx in rules:
            if rx.fullmatch(rel):
                result = not negated
        return result

    return ignored


def _dockerignore_patterns() -> list[str]:
    lines = (ln.strip() for ln in DOCKERIGNORE.read_text().splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


def _copy_build_context(dest: Path) -> None:
    """What `docker build .` sends: the repository less .dockerignore, symlinks kept."""
    ignored = _docker_ignored(_dockerignore_patterns())

    def skip(directory: str, names: list[str]) -> set[str]:
        rel_dir = Path(directory).relative_to(ROOT).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        return {n for n in names if ignored(prefix + n)}

    shutil.copytree(ROOT, dest, symlinks=True, ignore=skip)


def _site_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def _run_isolated(code: str, pythonpath: list[str], cwd: Path, env_extra=None, **kw):
    """This interpreter with -S: no site-packages .pth files, so the project's editable
    install (a finder hook in a .pth) is not active; only `pythonpath` is importable, and
    cwd is outside the repository so '' on sys.path cannot reach the source tree."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "PYTHON"))}
    env.update(PYTHONPATH=os.pathsep.join(pythonpath), **(env_extra or {}))
    return subprocess.Popen(
        [sys.executable, "-S", "-c", code],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _finish(proc: subprocess.Popen, timeout: float = 120) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])


def test_dockerignore_keeps_what_the_wheel_needs():
    ignored = _docker_ignored(_dockerignore_patterns())
    for needed in ("pyproject.toml", "README.md", "sglang_eagle3/hooks/plugin.py", "kernels"):
        assert not ignored(needed), f".dockerignore drops {needed}, which the build needs"
    assert not ignored("docker/entrypoint.sh")
    for dropped in (".venv/bin/python", "build/lib/x.py", "sglang_eagle3/__pycache__/a.pyc"):
        assert ignored(dropped), f".dockerignore should drop {dropped}"


# --- the wheel, installed outside the source tree ---------------------------------------------


@pytest.fixture(scope="module")
def wheel_install(tmp_path_factory) -> tuple[Path, Path]:
    """Build the wheel as the Docker builder does (from the build context, --no-deps) and
    install it with --no-deps into a plain directory. Returns (wheel, install dir)."""
    base = tmp_path_factory.mktemp("deploy")
    context = base / "context"
    _copy_build_context(context)
    # No build isolation: the venv's setuptools is the one pyproject asks for, and the test
    # then needs no index. The Docker build uses isolation; the backend is the same.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["--disable-pip-version-check", "--wheel-dir", str(base / "dist"), str(context)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (base / "dist").glob("sglang_eagle3-*.whl")
    target = base / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q"]
        + ["--disable-pip-version-check", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return wheel, target


def _source_modules() -> set[str]:
    # The package's own files, plus the top-level kernels/ installed as sglang_eagle3/kernels/.
    pkg = ROOT / "sglang_eagle3"
    found = {f"sglang_eagle3/kernels/{p.name}" for p in (ROOT / "kernels").glob("*.py")}
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        rel = Path(dirpath).relative_to(ROOT)
        found |= {(rel / f).as_posix() for f in filenames if f.endswith(".py")}
    return found


@pytest.mark.slow
def test_wheel_contents(wheel_install):
    wheel, _ = wheel_install
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        top_level = zf.read(info).decode().split()
    dist_info = f"sglang_eagle3-{PKG_VERSION}.dist-info/"
    assert top_level == ["sglang_eagle3"]
    strays = [n for n in names if not n.startswith(("sglang_eagle3/", dist_info))]
    assert not strays, (
        "files outside the package (a top-level `kernels` would shadow the PyPI package "
        f"SGLang imports): {strays}"
    )

    # Exactly the source tree's modules: none lost (namespace dirs, package-dir kernels), and
    # none stale (an old build/lib).
    modules = {n for n in names if n.endswith(".py")}
    assert modules == _source_modules()
    shim = "sglang_eagle3/testing/cpu_harness/shim/sgl_kernel/"
    assert {f"{shim}{m}.py" for m in ("__init__", "attention", "cache_ops", "spec_ops")} <= modules
    kernels = {Path(p).name for p in (ROOT / "kernels").glob("*.py")}
    assert {n.removeprefix("sglang_eagle3/kernels/") for n in modules if "/kernels/" in n} == (
        kernels
    )


ENTRY_POINTS_PROBE = """
import importlib.metadata as md, json, subprocess, sys
out = {"eps": {}, "finders": [getattr(f, "__name__", type(f).__name__) for f in sys.meta_path]}
for ep in md.entry_points(group="sglang.srt.plugins"):
    fn = ep.load()
    out["eps"][ep.name] = {
        "value": ep.value,
        "dist": str(ep.dist.locate_file("")),
        "file": sys.modules[ep.module].__file__,
        "callable": callable(fn),
    }
scripts = {ep.name: ep.value for ep in md.entry_points(group="console_scripts")}
out["script"] = scripts.get("sglang-eagle3-launch")
import sglang_eagle3.launch.cli
out["launch_file"] = sglang_eagle3.launch.cli.__file__
print(json.dumps(out))
"""


def _declared_dependencies(wheel: Path, dest: Path) -> Path:
    """A directory holding only the wheel's declared (non-extra) dependencies, and theirs,
    linked from this environment: what a bare `pip install sglang-eagle3` brings."""
    import importlib.metadata as md

    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    todo = [line.split(":", 1)[1] for line in text.splitlines() if line.startswith("Requires-Dist")]
    seen: set[str] = set()
    dest.mkdir()
    while todo:
        req = todo.pop()
        if "extra ==" in req:
            continue
        name = re.match(r"\s*([A-Za-z0-9_.-]+)", req)[1].lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        dist = md.distribution(name)
        todo += dist.requires or []
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            src = Path(dist.locate_file(top))
            if src.exists() and not (dest / top).exists():
                (dest / top).symlink_to(src)
    return dest


@pytest.mark.slow
def test_installed_wheel_registers_entry_points(wheel_install, tmp_path):
    wheel, target = wheel_install
    # Only the wheel and its declared dependencies (pydantic) are importable.
    deps = _declared_dependencies(wheel, tmp_path / "deps")
    assert (deps / "pydantic").exists()
    out = _finish(_run_isolated(ENTRY_POINTS_PROBE, [str(target), str(deps)], tmp_path))
    assert not any("editable" in f.lower() for f in out["finders"]), out["finders"]
    assert {n: e["value"] for n, e in out["eps"].items()} == EXPECTED_EPS
    for name, ep in out["eps"].items():
        assert Path(ep["dist"]) == target, f"{name} read from {ep['dist']}, not the wheel"
        assert Path(ep["file"]).is_relative_to(target), ep["file"]
        assert ep["callable"]
    assert out["script"] == "sglang_eagle3.launch.cli:main"
    assert Path(out["launch_file"]).is_relative_to(target)


# --- SGLang's own loader and SGLANG_PLUGINS ----------------------------------------------------

LOADER_PROBE = """
import json, os, sys
from sglang.srt.plugins import load_plugins_by_group

def load():
    plugins = load_plugins_by_group("sglang.srt.plugins")
    mod = sys.modules.get("sglang_eagle3.hooks.plugin")
    return {
        "loaded": {n: [f"{f.__module__}:{f.__qualname__}", d] for n, (f, d) in plugins.items()},
        "plugin_module": getattr(mod, "__file__", None),
        "register_ran": "sglang_eagle3.hooks.capture" in sys.modules,
    }

results = {os.environ["SGLANG_PLUGINS"]: load()}  # as started: nothing of ours imported yet
os.environ["SGLANG_PLUGINS"] = "sglang_eagle3"  # SGLang reads it at each call
results["sglang_eagle3"] = load()
del os.environ["SGLANG_PLUGINS"]
results[""] = load()
print(json.dumps(results))
"""


@pytest.mark.sglang
@pytest.mark.slow
def test_sglang_plugins_selects_or_excludes_the_plugin(wheel_install, tmp_path):
    _, target = wheel_install
    path = [str(target), *_site_dirs()]  # the wheel first, then SGLang and its dependencies
    cases = {  # SGLANG_PLUGINS -> which of this package's plugins SGLang's loader loads
        "some_other_plugin": set(),
        "sglang_eagle3": {"sglang_eagle3"},
        "": set(EXPECTED_EPS),  # unset: every installed plugin
    }
    # One process (importing SGLang, and with it torch, is the slow part); it starts with
    # the excluding value so "not even imported" is checked in a process that never loaded us.
    env = {"SGLANG_PLUGINS": "some_other_plugin"}
    results = _finish(_run_isolated(LOADER_PROBE, path, tmp_path, env), timeout=300)
    for value, want in cases.items():
        got = results[value]
        ours = set(got["loaded"]) & set(EXPECTED_EPS)  # other installed plugins do not matter
        assert ours == want, f"SGLANG_PLUGINS={value!r}: {got['loaded']}"
        # load_plugins_by_group only imports; SGLang calls the functions later.
        assert not got["register_ran"]
        if "sglang_eagle3" in want:
            func, dist = got["loaded"]["sglang_eagle3"]
            assert (func, dist) == ("sglang_eagle3.hooks.plugin:register", "sglang-eagle3")
            assert Path(got["plugin_module"]).is_relative_to(target)
        else:
            assert got["plugin_module"] is None, "an excluded plugin must not even be imported"
