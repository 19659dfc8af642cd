"""The servers a benchmark measures: `NAME=URL` (already running) or `NAME=launcher args`
(started here through `python -m sglang_eagle3.launch`, measured, stopped).

Launched servers run strictly one at a time: an idle SGLang scheduler still spins, and on a
2-core machine two live tiny servers dropped plain decoding from 112 to 3.1 tok/s.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class ServerSpecError(ValueError):
    """A --server or --launch value that cannot be used (raised before anything starts)."""


@dataclass(frozen=True)
class ServerSpec:
    name: str
    url: str | None = None  # --server
    model_path: str | None = None  # --launch: the launcher's --model-path ...
    launch_args: tuple[str, ...] = ()  # ... and everything else it was given

    @property
    def launched(self) -> bool:
        return self.url is None

    def describe(self) -> dict:
        if self.url:
            return {"name": self.name, "url": self.url}
        return {"name": self.name, "launch": [*self._model_flag(), *self.launch_args]}

    def _model_flag(self) -> list[str]:
        return ["--model-path", self.model_path or ""]


def _split_name(value: str, flag: str) -> tuple[str, str]:
    name, sep, rest = value.partition("=")
    if not sep or not name.strip() or not rest.strip():
        raise ServerSpecError(f"{flag} takes NAME=VALUE, got {value!r}")
    return name.strip(), rest.strip()


def parse_server(value: str) -> ServerSpec:
    name, url = _split_name(value, "--server")
    if not url.startswith(("http://", "https://")):
        raise ServerSpecError(f"--server {name}: expected an http(s) URL, got {url!r}")
    return ServerSpec(name, url=url.rstrip("/"))


def parse_launch(value: str) -> ServerSpec:
    name, args = _split_name(value, "--launch")
    try:
        argv = shlex.split(args)
    except ValueError as e:
        raise ServerSpecError(f"--launch {name}: cannot split {args!r}: {e}") from e
    model, rest, i = None, [], 0
    while i < len(argv):  # pull --model-path out: sglang_server() passes it itself
        a = argv[i]
        if a == "--model-path" and i + 1 < len(argv):
            model, i = argv[i + 1], i + 2
            continue
        if a.startswith("--model-path="):
            model = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    if not model:
        raise ServerSpecError(f"--launch {name}: the launcher args need --model-path DIR")
    if any(a in ("--port", "--host") or a.startswith(("--port=", "--host=")) for a in rest):
        raise ServerSpecError(f"--launch {name}: leave --host/--port out (a free port is used)")
    return ServerSpec(name, model_path=model, launch_args=tuple(rest))


@contextlib.contextmanager
def live_server(spec: ServerSpec, log_dir: Path, timeout: float = 600.0) -> Iterator[str]:
    """Yield the server's base URL; a launched server is stopped (with its children) on exit,
    whatever happened inside."""
    if not spec.launched:
        yield spec.url
        return
    from sglang_eagle3.launch.server_process import sglang_server, signals_interrupt

    log_dir.mkdir(parents=True, exist_ok=True)
    srv = sglang_server(
        spec.model_path, list(spec.launch_args), log_dir / f"{spec.name}.log",
        cpu="--cpu" in spec.launch_args, module="sglang_eagle3.launch",
    )  # fmt: skip
    with signals_interrupt():  # SIGTERM, like Ctrl-C, stops the server on the way out
        try:
            srv.start()
            srv.wait_ready(timeout=timeout)
            yield srv.url
        finally:
            srv.stop()
