"""No traceback at a quick start: `/freeze_gc` waits until the HTTP server listens.

With `--skip-server-warmup` (a CPU harness default) SGLang 0.5.23 posts `/freeze_gc` from its
warm-up thread at once, often before uvicorn has bound the port; the ConnectionError is logged
with four chained tracebacks ("post-warmup freeze_gc failed") and the GC stays unfrozen. An
AROUND hook on that function waits for the port first (main process only).
"""

from __future__ import annotations

import socket
import time
from typing import Any
from urllib.parse import urlsplit

from sglang.srt.plugins.hook_registry import HookType

FREEZE_GC = "sglang.srt.entrypoints.http_server._freeze_gc_after_server_warmup"
WAIT_S = 60.0


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    """True once `host:port` accepts a connection, False after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def freeze_gc_when_listening(original: Any, server_args: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND _freeze_gc_after_server_warmup(server_args)."""
    url = urlsplit(server_args.url())  # SGLang's own loopback address for its requests
    if url.hostname and url.port:
        wait_for_port(url.hostname, url.port, WAIT_S)  # late, never fails: freeze anyway
    return original(server_args, *args, **kwargs)


HOOKS = [
    (FREEZE_GC, freeze_gc_when_listening, HookType.AROUND),
]
