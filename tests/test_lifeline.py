"""A server a CLI started stops when the CLI is killed, SIGKILL included (hooks/lifeline.py), on
a real CPU server: capture in launch mode. Every CLI starts its servers through the same
ServerProcess.start. (SGLang's own children already die with its main process: PDEATHSIG.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive (zombies count as gone) after up to ``seconds``."""
    import psutil

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return left


def test_a_capture_servers_stop_when_the_capture_cli_is_killed(tiny_target, tmp_path):
    import psutil

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": f"def f{i}(x):\n    return x\n" * 40}) + "\n"
                            for i in range(400)), encoding="utf-8")  # fmt: skip
    out = tmp_path / "out"
    cli = subprocess.Popen(
        [sys.executable, "-m", "sglang_eagle3.capture", "--data", str(data), "--out", str(out),
         "--hidden-state-layout", "embed,layer:2", "--model-path", str(tiny_target), "--cpu",
         "--concurrency", "1", "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ,
                                                                "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not list((out / "hidden_states").glob("hs_*")):  # its server is serving
            assert cli.poll() is None, cli.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no sample captured in 240 s"
            time.sleep(0.2)
        server = [c.pid for c in psutil.Process(cli.pid).children(recursive=True)]
        assert len(server) >= 3, server  # SGLang's main process, a scheduler, the detokenizer
        cli.send_signal(signal.SIGKILL)
        cli.wait(30)
        assert _gone_within(server, 20) == []
    finally:
        if cli.poll() is None:
            cli.kill()
