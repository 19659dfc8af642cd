"""``--engine sglang``: the doctor starts the target in real SGLang itself, through the
launcher in capture mode on 127.0.0.1, reads it as ``--server`` would, and stops it.

The same plugin and capture path a served drafter gets, so the taps are SGLang's own, not a
re-implementation's. On a CPU-only machine it runs on the CPU harness (slow to start: about
a minute for the tiny target), which is why ``--engine auto`` picks it only with a GPU.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import Tap

START_TIMEOUT = 900.0  # seconds: a large target loads for minutes


@contextlib.contextmanager
def local_capture_server(target: str, taps: Sequence[Tap], *, device: str) -> Iterator[str]:
    """Yields the URL of a capture-mode SGLang on ``target`` capturing ``taps``."""
    from sglang_eagle3.launch.server_process import sglang_server, signals_interrupt

    layout = ",".join(str(t) for t in taps)
    extra = ["--enable-return-aux-hidden-states", "--hidden-state-layout", layout,
             "--disable-radix-cache"]  # fmt: skip
    cpu = device == "cpu"
    if cpu:  # fp32 and the reference attention: the numbers the HF engine gives
        extra = ["--cpu", "--dtype", "float32", "--attention-backend", "torch_native", *extra]
    with tempfile.TemporaryDirectory(prefix="sglang_eagle3_doctor_") as tmp:
        log = Path(tmp) / "server.log"
        srv = sglang_server(target, extra, log, cpu=cpu, module="sglang_eagle3.launch")
        # SIGTERM, like Ctrl-C, goes through the finally: the server (in its own session)
        # would otherwise outlive the doctor
        with signals_interrupt():
            try:
                srv.start()
                try:
                    srv.wait_ready(timeout=START_TIMEOUT)
                except (RuntimeError, TimeoutError):
                    tail = [ln for ln in srv.log().splitlines() if ln.strip()][-1:] or ["(empty)"]
                    raise WiringError(
                        f"the SGLang capture server the doctor started did not come up: {tail[0]}",
                        path=str(target),
                        fix="run the same target with --engine hf, or start the server "
                        "yourself and pass --server URL",
                    ) from None
                yield srv.url
            finally:
                srv.stop()
