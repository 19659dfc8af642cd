"""A server our CLIs start stops when the CLI dies, SIGKILL included.

SIGKILL cannot be caught, and it is what the OOM killer and a CI timeout send. SGLang's children
(schedulers, detokenizer) already die with SGLang's main process (`kill_itself_when_parent_died`:
PR_SET_PDEATHSIG), but the main process of a server that tune, capture, the doctor or the bench
started lives on in its own session, with its children, holding memory (and, on GPUs, the
device). With $SGLANG_EAGLE3_PARENT_PID naming its parent (ServerProcess.start sets it), it
watches that parent from a daemon thread and kills itself once re-parented. A thread, not
PR_SET_PDEATHSIG: that fires when the *thread* that started the child exits, and the CLIs start
servers from worker threads too. A launcher a user starts has no such variable: it keeps
running when the shell that started it exits.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from sglang_eagle3 import env_names

POLL_S = 0.5
_STARTED: set[int] = set()  # pids that already watch (register() can run twice)


def watch_parent(parent: int) -> None:
    """Kill this process once its parent is no longer ``parent``."""
    if os.getpid() in _STARTED:
        return
    _STARTED.add(os.getpid())

    def run() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        # SIGKILL: nothing to drain for a parent that is gone; the children follow (PDEATHSIG)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=run, name="sglang_eagle3-lifeline", daemon=True).start()


def install(is_main_process: bool) -> None:
    """At plugin load: SGLang's main process of a server one of our CLIs started."""
    if is_main_process and os.environ.get(env_names.PARENT_PID) == str(os.getppid()):
        watch_parent(os.getppid())
