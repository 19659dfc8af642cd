"""Shared fixtures: the tiny target and real SGLang servers stopped by pid, even on failure."""

from __future__ import annotations

from pathlib import Path

import pytest


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


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


def _servers(log_dir: Path):
    """Start real SGLang servers; every one is stopped by pid at teardown, pass or fail."""
    from sglang_eagle3.launch.server_process import sglang_server

    started = []

    def start(model_path, extra=(), *, name="server", wait=True, **kw):
        srv = sglang_server(model_path, list(extra), log_dir / f"{name}.log", **kw)
        started.append(srv)
        srv.start()
        if wait:
            srv.wait_ready()
        return srv

    yield start
    for srv in started:
        pids = srv.pids()
        srv.stop()
        leftover = [p for p in pids if _alive(p)]
        if leftover:
            pytest.fail(f"processes left behind by {srv.argv[:4]}: {leftover}")


@pytest.fixture
def server_factory(tmp_path):
    yield from _servers(tmp_path)


@pytest.fixture(scope="module")
def module_server_factory(tmp_path_factory):
    yield from _servers(tmp_path_factory.mktemp("servers"))


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
