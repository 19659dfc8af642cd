"""The capture's servers: launched here through the launcher (``--model-path``), or running
(``--server URL``), each checked to capture this run's taps into files this machine reads."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3.capture.store import STATE_DIR, Store
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import Tap, format_taps

CAPTURE_FLAGS = ["--enable-return-aux-hidden-states", "--disable-radix-cache"]


@dataclass
class Source:
    """Where samples are captured: a server's URL and the folder its files land in."""

    client: object  # doctor.server_capture.ServerClient
    folder: Path


def stored_taps(fc: tuple[Tap, ...], num_layers: int) -> tuple[Tap, ...]:
    """fc taps, then the verifier (the last layer's output, pre-norm): each file's taps."""
    v = Tap.layer_output(num_layers - 1)
    if v in fc:
        raise WiringError(f"{v} is the verifier tap, stored last; the fc taps "
                          f"{format_taps(fc)} name it too", path="--hidden-state-layout",
                          fix=f"drop {v} from the fc taps")  # fmt: skip
    return (*fc, v)


def launch_target(rest: list[str]):
    """The launched target: (TargetInfo, launcher args without --model-path, cpu)."""
    from sglang_eagle3.checkpoint.target_config import read_target
    from sglang_eagle3.launch.argv import argv_get
    from sglang_eagle3.launch.sglang_argv import drop_options

    model = argv_get(rest, "--model-path")
    if not model:
        raise WiringError("give --model-path TARGET (launched here) or --server URL",
                          path="command line", fix="add --model-path DIR")  # fmt: skip
    if argv_get(rest, "--hidden-state-layout") is not None:
        raise WiringError("give the taps once, with the capture's own --hidden-state-layout",
                          path="command line", fix="drop the second one")  # fmt: skip
    if argv_get(rest, "--host") is not None:
        raise WiringError("--host: the capture server is driven from this process, on loopback",
                          path="command line", fix="drop --host (or start the server yourself "
                          "and pass --server URL)")  # fmt: skip
    port = _port(argv_get(rest, "--port"))
    args = drop_options(list(rest), lambda name: name in ("--model-path", "--port"))
    return read_target(model, refuse_draft=True), args, "--cpu" in args, port


def _port(value: str | None) -> int | None:
    """The capture server's --port: a free TCP port on loopback, checked before anything."""
    import socket

    if value is None:
        return None
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise WiringError(f"--port {value!r} is not a TCP port (1-65535)", path="command line",
                          fix="e.g. --port 30000, or drop it for a free one")  # fmt: skip
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", int(value)))
        except OSError as err:
            raise WiringError(f"--port {value} is taken on 127.0.0.1 ({err.strerror})",
                              path="command line", fix="give a free port, or drop --port for "
                              "a free one") from None  # fmt: skip
    return int(value)


def check_launch(target, args: list[str], stored: tuple[Tap, ...]) -> list[str]:
    """The launcher's own refusals of this capture server (family, taps, its flags and
    SGLang's), all of them, run here before any server starts."""
    from sglang_eagle3.launch.cli import build_parser as launcher_parser
    from sglang_eagle3.launch.cli import checked_plan, sglang_flags

    extra = [*args, *(f for f in CAPTURE_FLAGS if f not in args)]
    largs, sglang = launcher_parser().parse_known_args(extra)
    layout = ",".join(str(t) for t in stored[:-1])  # the server adds the verifier itself
    largs.hidden_state_layout = [layout]
    checked_plan(largs, sglang_flags(largs, ["--model-path", target.path, *sglang]))
    return [*extra, "--hidden-state-layout", layout]


def check_server(url: str, stored: tuple[Tap, ...] | None, timeout: float) -> tuple[Source, dict]:
    from sglang_eagle3.doctor.server_capture import ServerClient, server_capture_state

    client = ServerClient(url, timeout=timeout)
    state = server_capture_state(client)
    want = [str(t) for t in stored[:-1]] if stored else None
    if want and state["layout"] != want:
        raise WiringError(f"{url} captures {', '.join(state['layout'])}; this run's fc taps are "
                          f"{', '.join(want)}", path="--server",
                          fix="restart the server with --hidden-state-layout "
                          f"{','.join(want)}, or change this run's taps")  # fmt: skip
    folder = state.get("capture_dir")
    if not folder or not Path(folder).is_dir():
        why = "returns hidden states as JSON" if not folder else f"writes to {folder}, absent here"
        raise WiringError(f"{url} {why}: the capture needs its files on this file system",
                          path="--server", fix="start it through sglang_eagle3's launcher with "
                          "--capture-dir DIR (a folder this machine reads)")  # fmt: skip
    return Source(client, Path(folder)), state


def tokenizer_of(url: str) -> str:
    """The tokenizer a running server loaded (its --tokenizer-path or --model-path)."""
    from sglang_eagle3.doctor.server_capture import ServerClient

    path = ServerClient(url, timeout=30).get("/model_info").get("tokenizer_path")
    if not isinstance(path, str) or not path:
        raise WiringError(f"{url} does not say which tokenizer it loaded", path="--server",
                          fix="pass --tokenizer DIR (the target's tokenizer files)")  # fmt: skip
    return path


@contextlib.contextmanager
def servers(urls: list[str], launch, stored: tuple[Tap, ...], store: Store, log_dir: Path | None,
            timeout: float) -> Iterator[list[Source]]:  # fmt: skip
    """The running servers (``urls``), or one launched for the run (``launch``: target,
    launcher args, cpu) whose files land in the run's incoming folder; stopped on exit."""
    if urls:
        yield [check_server(u, stored, timeout)[0] for u in urls]
        return
    from sglang_eagle3.launch.server_process import sglang_server, signals_interrupt

    target, args, cpu, port = launch
    log_dir = log_dir or store.out / STATE_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    srv = sglang_server(target.path, [*args, "--capture-dir", str(store.incoming)],
                        log_dir / "capture-server.log", cpu=cpu,
                        module="sglang_eagle3.launch", port=port)  # fmt: skip
    with signals_interrupt():
        try:
            srv.start()
            srv.wait_ready(timeout=timeout)
            yield [check_server(srv.url, stored, timeout)[0]]
        finally:
            srv.stop()
