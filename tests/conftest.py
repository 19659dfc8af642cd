"""Shared fixtures (the tiny targets; real SGLang servers in conftest_servers.py, shared
computations in conftest_shared.py, the README's figures in conftest_report.py) and the guards
that keep the test tiers honest.

Tiers: `bash scripts/test.sh` runs everything; `bash scripts/test.sh --fast` runs
`-m "not sglang and not slow"`: pure logic and small torch tests, no SGLang, no training.
Markers follow what a test does, and are enforced here, not remembered:

- `sglang`: imports or starts SGLang, in this process or a child. Tests that use
  `server_factory` / `module_server_factory` get it (and `slow`) automatically. A test without
  it that imports sglang in this process fails, and so does one whose child processes import
  it (they inherit a PYTHONPATH whose first entry is a `sglang` that refuses to import).
  A test module importing sglang at import time is a collection error.
- `slow`: starts servers, trains models, builds wheels or takes many seconds. A test without
  it that asks for a trained tiny model (`trained_tiny_target`, `tiny_drafter()`) fails: on a
  fresh machine that trains for minutes. A test asking for `tiny_drafter()` is `sglang` too:
  on a fresh machine its training data is captured through a real SGLang server.
- `gpu`: needs CUDA; skipped without it. No other test may skip: scripts/setup_env.sh installs
  everything the tests import, so any other skip (an importorskip, a skipif) is a failure.

Timeouts: the ini default (pyproject) covers fast and short tests; `slow` tests without their
own `@pytest.mark.timeout` get SLOW_TIMEOUT_S, enough for a first-use training under load.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

pytest.register_assert_rewrite("conftest_servers", "conftest_shared", "conftest_report")
from conftest_servers import SESSION_SERVERS  # noqa: E402

# shared servers, shared computations, and what a run reports (figures, seconds per file)
pytest_plugins = ["conftest_servers", "conftest_shared", "conftest_report"]
SLOW_TIMEOUT_S = 1800
GPU_SKIP = "needs a CUDA GPU (none here)"
# Fixtures that start SGLang (the demo's servers too): their users are `sglang` and `slow`.
SERVER_FIXTURES = {"server_factory", "module_server_factory", "demo_run", *SESSION_SERVERS}
_BLOCKED_SGLANG = """raise ImportError(
    "sglang imported by a child process of a test not marked `sglang` (the block comes from "
    "tests/conftest.py); mark the test @pytest.mark.sglang"
)
"""
_state: dict = {"item": None, "stub_dir": None, "sglang_at_start": False, "ran_sglang": False}


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _sglang_loaded() -> bool:
    return "sglang" in sys.modules


def pytest_configure(config):
    _state["sglang_at_start"] = _sglang_loaded()
    stub = Path(tempfile.mkdtemp(prefix="no-sglang-"))
    (stub / "sglang").mkdir()
    (stub / "sglang" / "__init__.py").write_text(_BLOCKED_SGLANG)
    _state["stub_dir"] = stub


def pytest_unconfigure(config):
    if _state["stub_dir"] is not None:
        shutil.rmtree(_state["stub_dir"], ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    before = _sglang_loaded()
    report = yield
    if isinstance(collector, pytest.Module) and not before and _sglang_loaded():
        report.outcome = "failed"
        report.longrepr = (
            f"{collector.nodeid} imports sglang at import time; import it inside the tests "
            "that need it (marked `sglang`), so the fast tier can collect this file"
        )
    return report


def pytest_collection_modifyitems(config, items):
    skip_gpu = None if _has_cuda() else pytest.mark.skip(reason=GPU_SKIP)
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & SERVER_FIXTURES:
            item.add_marker(pytest.mark.sglang)
            item.add_marker(pytest.mark.slow)
        if "trained_tiny_target" in names:
            item.add_marker(pytest.mark.slow)
        if "slow" in item.keywords and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
        if skip_gpu is not None and "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and GPU_SKIP not in str(report.longrepr):
        report.outcome = "failed"
        report.longrepr = f"skipped, but only GPU tests may skip: {report.longrepr}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Around setup, call and teardown: children of a test not marked `sglang` cannot import
    it, and the test itself may not build a trained tiny model unless it is `slow`."""
    _guard_trained_builds()
    _state["item"] = item
    _state["ran_sglang"] |= "sglang" in item.keywords
    saved = os.environ.get("PYTHONPATH")
    if "sglang" not in item.keywords:
        parts = [str(_state["stub_dir"]), *([saved] if saved else [])]
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    try:
        return (yield)
    finally:
        _state["item"] = None
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _check_sglang_import(item, phase: str, before: bool) -> None:
    if not before and _sglang_loaded() and "sglang" not in item.keywords:
        pytest.fail(
            f"{item.nodeid} imported sglang in this process during {phase} but is not marked "
            "`sglang`; mark it @pytest.mark.sglang",
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    before = _sglang_loaded()
    result = yield
    _check_sglang_import(item, "setup", before)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    before = _sglang_loaded()
    result = yield
    _check_sglang_import(item, "the test", before)
    return result


def _guard_trained_builds() -> None:
    """Wrap tiny_target_dir (tiny_drafter calls it too) once: a trained recipe requested by a
    test not marked `slow` fails at once, cached or not, so the fast tier never trains."""
    from sglang_eagle3.testing.tiny import cache

    if getattr(cache.tiny_target_dir, "_tier_guard", False):
        return
    real = cache.tiny_target_dir

    def guarded(train_steps=cache.DEFAULT_TRAIN_STEPS, **kw):
        recipe = kw.get("recipe")
        steps = recipe.train.steps if recipe is not None else train_steps
        item = _state["item"]
        if steps and item is not None and "slow" not in item.keywords:
            raise RuntimeError(
                f"{item.nodeid} asks for a trained tiny target ({steps} steps: minutes on a "
                "fresh machine) but is not marked `slow`; mark it, or use `tiny_target`"
            )
        return real(train_steps, **kw)

    guarded._tier_guard = True
    cache.tiny_target_dir = guarded

    from sglang_eagle3.testing.tiny import drafter

    real_drafter = drafter.tiny_drafter

    def drafter_guarded(*args, **kw):
        item = _state["item"]
        if item is not None and "sglang" not in item.keywords:
            raise RuntimeError(
                f"{item.nodeid} asks for tiny_drafter() but is not marked `sglang`: on a fresh "
                "machine its data is captured through a real SGLang server; mark it"
            )
        return real_drafter(*args, **kw)

    drafter.tiny_drafter = drafter_guarded


def pytest_sessionfinish(session, exitstatus):
    """The backstop for imports the per-phase checks cannot see (teardown, plugins): a run of
    tests none of which is marked `sglang` must end without sglang imported."""
    if _sglang_loaded() and not _state["sglang_at_start"] and not _state["ran_sglang"]:
        if session.testscollected:
            print("\nsglang was imported although no test marked `sglang` ran", file=sys.stderr)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _state["sglang_at_start"]:
        terminalreporter.write_line(
            "warning: sglang was imported before the tests started; the check that tests not "
            "marked `sglang` do not import it could not run"
        )


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_target() -> Path:
    """The tiny DeepSeek-V3 target (8 layers, MLA + MoE, yarn rope), untrained: built in
    seconds and cached. Wiring, capture and losslessness do not need trained weights."""
    from sglang_eagle3.testing.tiny.cache import tiny_target_dir

    return tiny_target_dir(train_steps=0)


@pytest.fixture(scope="session")
def trained_tiny_target() -> Path:
    """The same target trained briefly on stdlib sources (minutes on first use, cached)."""
    from sglang_eagle3.testing.tiny.cache import tiny_target_dir

    return tiny_target_dir()
