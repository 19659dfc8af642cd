"""Start, wait for and stop an SGLang server process on loopback (tests, demo, benchmarks)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sglang_eagle3 import env_names
from sglang_eagle3.launch.cpu_env import STOCK_SERVER, harness_env, server_module

# Flags that run SGLang 0.5.23 on the CPU harness (see README, "CPU harness").
CPU_DEFAULTS: tuple[tuple[str, str | None], ...] = (
    ("--device", "cpu"),
    # The one CPU backend that also verifies EAGLE drafts (with the reference kernels).
    ("--attention-backend", "intel_amx"),
    ("--cuda-graph-backend-decode", "disabled"),
    ("--cuda-graph-backend-prefill", "disabled"),
    ("--skip-server-warmup", None),
    ("--mem-fraction-static", "0.1"),
    ("--max-total-tokens", "4096"),
    ("--chunked-prefill-size", "512"),
    ("--max-running-requests", "8"),
    # An idle scheduler otherwise polls in a busy loop, a whole core of a 2-core machine.
    ("--sleep-on-idle", None),
)


def with_cpu_defaults(argv: list[str]) -> list[str]:
    """`argv` plus every CPU default flag it does not set itself."""
    out = list(argv)
    for flag, value in CPU_DEFAULTS:
        if not any(a == flag or a.startswith(flag + "=") for a in out):
            out += [flag] if value is None else [flag, value]
    return out


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _slice(low: int, high: int, spec: str) -> tuple[int, int]:
    """Part ``i`` of ``n`` of [low, high] for ``spec`` "i/n" (processes that start servers side
    by side, e.g. test workers, then never pick neighbouring ports); all of it otherwise."""
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        return low, high
    if not 0 <= i < n:
        return low, high
    width = (high - low) // n
    return low + i * width, low + (i + 1) * width - 400  # room for SGLang's own ports


def free_port() -> int:
    """A free port below the kernel's ephemeral range. SGLang binds its HTTP port only after
    loading the model (tens of seconds on CPU); meanwhile every outgoing connection takes an
    ephemeral port, and one did take an OS-picked port here ("address already in use").
    SGLang's own extra ports sit a few hundred above the HTTP port, so leave room."""
    high = _ephemeral_low() - 1100
    low = max(1024, high - 12000)
    low, high = _slice(low, high, os.environ.get(env_names.PORT_SLICE, ""))
    rng = random.SystemRandom()
    for _ in range(100):
        port = rng.randint(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded machine: any free port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Inside, SIGTERM raises KeyboardInterrupt as Ctrl-C does, so the `finally` that stops a
    server runs: Python's default SIGTERM ends the process at once, and a server started in
    its own session outlives it. Main thread only (elsewhere signals cannot be handled)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """A second Ctrl-C or SIGTERM must not cut a stop short and leave the children behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@dataclass
class ServerProcess:
    argv: list[str]
    log_path: Path
    port: int
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        # the server's plugin stops it when this process dies, SIGKILL too (hooks/lifeline.py)
        env = {**self.env, env_names.PARENT_PID: str(os.getpid())}
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_ready(self, timeout: float = 240.0) -> ServerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited with {self.proc.returncode}; log {self.log_path}:\n"
                    + self.log()[-4000:]
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"server not ready in {timeout}s; log {self.log_path}")

    def post(self, path: str, payload: dict, timeout: float = 120.0) -> dict:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def get(self, path: str, timeout: float = 30.0) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return json.loads(r.read())

    def pids(self) -> list[int]:
        """The server's pid and every descendant's."""
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            return [root.pid] + [c.pid for c in root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def _processes(self) -> list:
        """psutil handles on the server and every descendant still running."""
        import psutil

        procs = []
        for pid in self.pids():
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        return procs

    def _reap(self) -> int:
        code = self.proc.wait(timeout=10)
        self._log.close()
        return code

    def kill(self) -> int | None:
        """SIGKILL the server and every process it started, all at once; return its exit code.
        For a test's teardown: SGLang's SIGTERM path polls every 5 s, then waits for its
        children (10 s a server here)."""
        import psutil

        if self.proc is None:
            return None
        procs = self._processes()
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(procs, timeout=10)
        return self._reap()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        """Stop the server and every process it started; return the server's exit code."""
        import psutil

        if self.proc is None:
            return None
        with _signals_ignored():
            procs = self._processes()
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
            _, alive = psutil.wait_procs(procs, timeout=timeout)
            for p in alive:
                p.kill()
            psutil.wait_procs(alive, timeout=10)
            return self._reap()


def interrupted_by(stop: KeyboardInterrupt) -> tuple[str, int]:
    """(signal name, exit code) of a KeyboardInterrupt: Ctrl-C, or SIGTERM inside
    signals_interrupt(); the shell's 128 + signal number."""
    name = str(stop) or "SIGINT"
    return name, 128 + int(getattr(signal, name, signal.SIGINT))


def sglang_server(
    model_path: str | Path, extra: list[str], log_path: Path, *, cpu: bool = True,
    env: dict[str, str] | None = None, module: str = STOCK_SERVER, port: int | None = None,
) -> ServerProcess:  # fmt: skip
    """A not-yet-started server: `python -m <module> --model-path ... <extra>`.

    `env` adds to (or overrides) this process's environment; `port`: a free one if None.
    """
    port = free_port() if port is None else port
    full_env = {**os.environ, **(env or {})}
    if cpu:
        full_env = harness_env(full_env)
        module = server_module(full_env) if module == STOCK_SERVER else module
    argv = [sys.executable, "-m", module, "--model-path", str(model_path)]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    argv += with_cpu_defaults(list(extra)) if cpu else list(extra)
    return ServerProcess(argv=argv, log_path=log_path, port=port, env=full_env)
