"""Real SGLang servers for tests (a pytest plugin, loaded by conftest.py).

Every server is started on loopback, at one torch thread unless the test says otherwise,
and stopped by pid at teardown, pass or fail: a process left behind fails the test.

A server that several tests share is stopped right after the last test that uses it, not at
the end of its scope, so it never holds memory (or, before ``--sleep-on-idle``, a spinning
core) through the tests that come after it:

- ``module_server_factory``: servers shared within one test module;
- ``shared_servers(request)``: inside a session fixture listed in ``SESSION_SERVERS``,
  servers shared by the whole run, started at the first test that asks for them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from sglang_eagle3 import env_names

# Session fixtures that start servers through shared_servers(); conftest marks their users.
SESSION_SERVERS = {"plain_tiny_server"}
_pools: dict[tuple[str, ...], _Servers] = {}
_last_user: dict[tuple[str, ...], str] = {}


class _Servers:
    """Starts servers into one log folder; ``stop_all`` stops every one by pid."""

    def __init__(self, log_dir: Path):
        self.log_dir, self.started = log_dir, []

    def __call__(
        self, model_path, extra=(), *, name="server", wait=True, env=None, spawn=False,
        graceful=False, **kw,
    ):  # fmt: skip
        from sglang_eagle3.launch.server_process import sglang_server

        # Tiny matrices gain nothing from a second OpenMP thread, and on 2 cores it fights
        # the test process and the server's other processes for the same core.
        env = {"OMP_NUM_THREADS": "1", **(env or {})}
        if spawn:  # a test of what only a spawned child shows: the plugin loading in it
            env[env_names.CPU_FORK] = "0"
        srv = sglang_server(model_path, list(extra), self.log_dir / f"{name}.log", env=env, **kw)
        # SIGKILL at teardown: SGLang's graceful SIGTERM path costs 10 s a server; `graceful`
        # keeps it where a test relies on it (and checks it leaves nothing behind)
        srv.graceful = graceful
        self.started.append(srv)
        srv.start()
        if wait:
            srv.wait_ready()
        return srv

    def stop_all(self) -> list[str]:
        """Stop every server; returns what each left behind (empty when all went)."""
        left = []
        for srv in self.started:
            pids = srv.pids()
            srv.stop() if srv.graceful else srv.kill()
            leftover = [p for p in pids if alive(p)]
            if leftover:
                left.append(f"processes left behind by {srv.argv[:4]}: {leftover}")
        self.started.clear()
        return left


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _finish(pool: _Servers) -> None:
    left = pool.stop_all()
    if left:
        pytest.fail("; ".join(left))


def _pool(key: tuple[str, ...], log_dir: Path) -> _Servers:
    pool = _pools[key] = _Servers(log_dir)
    return pool


def shared_servers(request, tmp_path_factory) -> _Servers:
    """The server pool of the session fixture ``request`` belongs to."""
    name = request.fixturename
    if name not in SESSION_SERVERS:
        raise RuntimeError(f"{name} starts shared servers: list it in SESSION_SERVERS")
    return _pool((name,), tmp_path_factory.mktemp(name))


@pytest.fixture
def server_factory(tmp_path):
    pool = _Servers(tmp_path)
    yield pool
    _finish(pool)


@pytest.fixture(scope="module")
def module_server_factory(request, tmp_path_factory):
    pool = _pool(
        ("module_server_factory", request.module.__name__), tmp_path_factory.mktemp("servers")
    )
    yield pool
    _finish(pool)


# Session fixtures whose users in different files must share one worker under xdist.
SHARED_ACROSS_FILES = {*SESSION_SERVERS, "demo_run", "doctor_report"}


def file_groups(tests_dir: Path) -> dict[str, str]:
    """test file name -> its group's label: files that name the same shared fixture share
    one (a file naming none is its own group). Read from the source, because xdist's
    controller schedules with node ids alone, before any fixture runs."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for path in sorted(tests_dir.glob("test_*.py")):
        words = set(re.findall(r"\w+", path.read_text(encoding="utf-8")))
        for name in sorted(words & SHARED_ACROSS_FILES):
            a, b = sorted((root(path.name), root(name)))
            parent[b] = a
    return {p.name: root(p.name) for p in tests_dir.glob("test_*.py")}


def pytest_xdist_make_scheduler(config, log):
    """``-n 2`` (scripts/test.sh): one unit of work per group of file_groups, so a module's
    servers start once and a shared session fixture runs once, in one worker; the units go
    out in the collection's order (slowest files first, below)."""
    from xdist.scheduler import LoadScopeScheduling

    groups = file_groups(Path(config.rootpath) / "tests")

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            name = nodeid.split("::")[0].rsplit("/", 1)[-1]
            return groups.get(name, name)

    config.option.loadscopereorder = False
    return FileGroups(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """In an xdist worker, files with the most `slow` tests first (each file's tests keep
    their order), so the long units start first and two workers finish together. Every
    worker sorts alike: xdist checks that their collections are equal."""
    if not hasattr(config, "workerinput"):
        return
    slow: dict[str, int] = {}
    for item in items:
        slow[item.path.name] = slow.get(item.path.name, 0) + ("slow" in item.keywords)
    order = {name: i for i, name in enumerate(dict.fromkeys(i.path.name for i in items))}
    items.sort(key=lambda i: (-slow[i.path.name], order[i.path.name]))


def pytest_configure(config):
    """CPU servers started by tests (and by the doctor and bench they run) fork SGLang's
    children: half the start time (launch/fork_server.py). Each xdist worker's servers (and
    its children's) take their own slice of ports."""
    os.environ.setdefault(env_names.CPU_FORK, "1")
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        index = int(worker["workerid"].removeprefix("gw"))
        os.environ[env_names.PORT_SLICE] = f"{index}/{worker['workercount']}"


def pytest_collection_finish(session):
    """Which test is the last user of each shared pool, in the order the tests will run."""
    for item in session.items:
        names = set(getattr(item, "fixturenames", ()))
        if "module_server_factory" in names:
            _last_user[("module_server_factory", item.module.__name__)] = item.nodeid
        for name in names & SESSION_SERVERS:
            _last_user[(name,)] = item.nodeid


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        for key, last in _last_user.items():
            if last == item.nodeid and key in _pools:
                left = _pools[key].stop_all()
                if left:
                    raise RuntimeError("; ".join(left))


# --- servers shared by the whole run ---------------------------------------------------------


@pytest.fixture(scope="session")
def plain_tiny_server(request, tmp_path_factory, tiny_target):
    """Plain decoding on the untrained tiny target, through the launcher (fp32, intel_amx: the
    backend the EAGLE-3 servers verify with): the greedy baseline of the lossless tests."""
    pool = shared_servers(request, tmp_path_factory)
    yield pool(tiny_target, ["--cpu", "--dtype", "float32", "--attention-backend", "intel_amx"],
               name="plain-tiny", cpu=False, module="sglang_eagle3.launch",
               spawn=True, graceful=True)  # fmt: skip
    # spawned: test_capture_server checks the plugin in every process; graceful: the
    # launcher's server stopped by SIGTERM leaves nothing behind (stop_all checks)
    _finish(pool)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> dict:
    """``python -m sglang_eagle3.demo --json`` as the README runs it (6 prompts, 32 tokens):
    ``{"result": its JSON, "stdout": its table}``. Its plain and declared-layout servers (the
    trained drafter, tree 3/2/6) are also the TP=1 reference of the scale-out tests."""
    import json
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("demo") / "demo.json"
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.demo", "--json", str(out), "--prompts", "6",
         "--max-new-tokens", "32"],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(
            f"the demo failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    return {"result": json.loads(out.read_text()), "stdout": proc.stdout}
