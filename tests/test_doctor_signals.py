"""`doctor --engine sglang` stopped by SIGTERM or Ctrl-C (SIGINT): one line, and no process it
started is left running (its SGLang server runs in a session of its own, so nothing else would
stop it). Real doctor, real server, on the tiny target."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest_servers import alive

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


@pytest.fixture(scope="module")
def drafter():
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    return tiny_drafter()


def _descendants(proc: psutil.Process) -> set[int]:
    try:
        return {c.pid for c in proc.children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _server_log(tmp: Path) -> Path | None:
    logs = list(tmp.glob("sglang_eagle3_doctor_*/server.log"))
    return logs[0] if logs else None


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    "sig,when",
    [(signal.SIGTERM, "start"), (signal.SIGINT, "start"), (signal.SIGTERM, "scoring"),
     (signal.SIGINT, "scoring")],
    ids=["SIGTERM-start", "SIGINT-start", "SIGTERM-scoring", "SIGINT-scoring"],
)  # fmt: skip
def test_a_stopped_doctor_leaves_no_server_behind(drafter, tmp_path, sig, when, figures):
    env = {**os.environ, "TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "sglang_eagle3.doctor", "--draft", str(drafter.draft_dir),
           "--target", str(drafter.target_dir), "--engine", "sglang", "--max-new-tokens", "16",
           "--no-progress"]  # fmt: skip
    # SIGINT as at a terminal: a suite started in the background (`cmd &`) hands its children
    # SIGINT ignored, and the doctor rightly keeps an ignored signal ignored
    doctor = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, preexec_fn=_default_sigint)  # fmt: skip
    me, seen, port = psutil.Process(doctor.pid), set(), None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and doctor.poll() is None:
            seen |= _descendants(me)
            log = _server_log(tmp_path)
            text = log.read_text(errors="replace") if log else ""
            if port is None and (m := re.search(r"'port': (\d+)", text)):
                port = int(m.group(1))
            # start: SGLang's scheduler is up (a child of the server); scoring: requests flow
            scoring = "POST /generate" in text
            if (when == "start" and len(seen) >= 3) or (when == "scoring" and scoring):
                break
            time.sleep(0.2)
        assert doctor.poll() is None, f"the doctor ended before {when}: {doctor.communicate()}"
        doctor.send_signal(sig)
        out, err = doctor.communicate(timeout=120)
        left = [pid for pid in seen if alive(pid)]
        figures.record(f"doctor --engine sglang, {sig.name} during {when}: processes it started",
                       f"{len(seen)}, {len(left)} left")  # fmt: skip
        assert not left, f"left running after {sig.name}: {left}"
        assert port is not None and not _listening(port), f"port {port} still answers"
        assert "Traceback" not in err, err[-3000:]
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert lines[-1] == (
            f"sglang_eagle3.doctor: stopped by {sig.name}; no process it started is left running"
        ), err[-2000:]
        assert doctor.returncode == (143 if sig == signal.SIGTERM else 130)
    finally:  # a failed check must not leave the doctor or its server running
        for pid in [doctor.pid, *seen]:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()
