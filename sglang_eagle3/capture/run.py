"""One capture run: every check first (servers, input, disk), then the remaining samples on the
servers, then the index and the manifest."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3 import env_names
from sglang_eagle3.capture.inputs import load_tokenizer, read_lines, tokenize
from sglang_eagle3.capture.store import HS_RE, STATE_DIR, Store, file_sha256
from sglang_eagle3.data.arrow import HS_DIR
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import Tap, format_taps

CAPTURE_FLAGS = ["--enable-return-aux-hidden-states", "--disable-radix-cache"]
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
FILE_OVERHEAD = 4096  # a file's header and manifest, generously
GIB = 1 << 30


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


def _launch_target(rest: list[str]):
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
    args = drop_options(list(rest), lambda name: name == "--model-path")
    return read_target(model, refuse_draft=True), args, "--cpu" in args


def _check_launch(target, args: list[str], stored: tuple[Tap, ...]) -> list[str]:
    """The launcher's own refusals of this capture server (family, taps, flags), run here."""
    from sglang_eagle3.launch.cli import build_parser as launcher_parser
    from sglang_eagle3.launch.plan import LaunchOptions, plan_launch
    from sglang_eagle3.launch.sglang_argv import canonical_argv

    extra = [*args, *(f for f in CAPTURE_FLAGS if f not in args)]
    _, sglang = launcher_parser().parse_known_args(extra)
    layout = ",".join(str(t) for t in stored[:-1])  # the server adds the verifier itself
    plan_launch(["--model-path", target.path, *canonical_argv(sglang)], LaunchOptions(layout))
    return [*extra, "--hidden-state-layout", layout]


def _check_server(url: str, stored: tuple[Tap, ...] | None, timeout: float) -> tuple[Source, dict]:
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
                          path="--server", fix=f"start it with {env_names.CAPTURE_DIR}=DIR (a "
                          "folder this machine reads) in its environment")  # fmt: skip
    return Source(client, Path(folder)), state


def _index(args, tok) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """(input ids, loss masks, line numbers) of the samples this run captures."""
    ids, masks, lines, total = [], [], [], 0
    for line in read_lines(args.data):
        if args.max_samples and len(ids) >= args.max_samples:
            break
        i, m = tokenize(tok, line, args.data)
        if args.max_tokens and total + len(i) > args.max_tokens:
            break
        ids.append(i), masks.append(m), lines.append(line.number)
        total += len(i)
    if not ids:
        raise WiringError("no sample to capture (an empty file, or --max-tokens below the first "
                          "sample's length)", path=str(args.data),
                          fix="give samples, or raise --max-tokens")  # fmt: skip
    return ids, masks, lines


def _check_disk(out: Path, todo_tokens: int, todo: int, width: int, keep: float) -> None:
    need = todo_tokens * (width + 8) + todo * FILE_OVERHEAD
    probe = out if out.exists() else next(p for p in out.parents if p.exists())
    free = shutil.disk_usage(probe).free - keep * GIB
    if need > free:
        raise WiringError(
            f"the capture needs about {need / GIB:.2f} GiB ({todo_tokens} tokens x {width + 8} "
            f"bytes), and {probe}'s disk has {max(free, 0) / GIB:.2f} GiB free beyond "
            f"--keep-free {keep:g} GiB", path=str(out),
            fix="free space, give --out on a larger disk, or lower --max-tokens",
        )  # fmt: skip


def _dtype_bytes(args: list[str], cfg: dict) -> int:
    from sglang_eagle3.launch.argv import argv_get

    name = argv_get(args, "--dtype") or "auto"
    if name == "auto":
        name = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return DTYPE_BYTES.get(name.removeprefix("torch."), 2)


@contextlib.contextmanager
def _servers(args, rest, stored, target, launch_args, cpu, store) -> Iterator[list[Source]]:
    if args.server:
        yield [_check_server(u, stored, args.request_timeout)[0] for u in args.server]
        return
    from sglang_eagle3.launch.server_process import sglang_server, signals_interrupt

    log_dir = args.log_dir or args.out / STATE_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    srv = sglang_server(target.path, launch_args, log_dir / "capture-server.log", cpu=cpu,
                        env={env_names.CAPTURE_DIR: str(store.incoming)},
                        module="sglang_eagle3.launch")  # fmt: skip
    with signals_interrupt():
        try:
            srv.start()
            srv.wait_ready(timeout=args.request_timeout)
            yield [_check_server(srv.url, stored, args.request_timeout)[0]]
        finally:
            srv.stop()


def _one(src: Source, store: Store, sid: int, ids: list[int], width: tuple[int, int]) -> int:
    """Capture sample ``sid`` on one server; the bytes its file holds."""
    from sglang_eagle3.checkpoint.safetensors_header import read_header

    out = src.client.post("/generate", {
        "input_ids": ids, "rid": store.rid(sid), "return_hidden_states": True,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0},
    })  # fmt: skip
    rec = (out.get("meta_info") or {}).get("hidden_states")
    if not (isinstance(rec, list) and len(rec) == 1 and isinstance(rec[0], dict)):
        raise WiringError(f"{src.client.url} answered sample {sid} with hidden-state rows, not "
                          "a file", path="--server", fix=f"start it with {env_names.CAPTURE_DIR}"
                          "=DIR through sglang_eagle3's launcher")  # fmt: skip
    if "error" in rec[0]:
        raise WiringError(f"sample {sid}: {rec[0]['error']}", path=src.client.url,
                          fix="see the server's log")  # fmt: skip
    dst = store.adopt(src.folder / rec[0]["file"], sid)
    shape = read_header(dst).entries["hidden_states"].shape
    if shape != (len(ids), *width):
        raise WiringError(f"sample {sid}: the server wrote hidden_states {list(shape)}, expected "
                          f"{[len(ids), *width]}", path=str(dst),
                          fix="capture again into a new --out")  # fmt: skip
    return dst.stat().st_size


def _capture_all(sources, store, ids, todo, width, args) -> int:
    """Every sample in ``todo``, ``concurrency`` in flight per server; bytes written."""
    from tqdm import tqdm

    bar = tqdm(total=sum(len(ids[s]) for s in todo), unit="tok", unit_scale=True,
               desc="capture", file=sys.stderr, disable=args.no_progress)  # fmt: skip
    written, queue = 0, list(reversed(todo))
    workers = args.concurrency * len(sources)
    with bar, ThreadPoolExecutor(workers) as pool:
        running: dict = {}
        while queue or running:
            while queue and len(running) < workers:
                sid = queue.pop()
                src = sources[sid % len(sources)]
                running[pool.submit(_one, src, store, sid, ids[sid], width)] = sid
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                sid = running.pop(f)
                written += f.result()  # a failure ends the run; --resume continues it
                bar.update(len(ids[sid]))
                bar.set_postfix_str(f"{written / (1 << 20):.1f} MiB written")
    return written


def _manifest(store: Store, ids: list[list[int]]):
    """The set's manifest: the first file's (written by the server), with the set's counts."""
    from safetensors import safe_open

    from sglang_eagle3.data.manifest import MANIFEST_KEY, DataManifest

    with safe_open(str(store.path(0)), "pt") as f:
        meta = json.loads((f.metadata() or {})["sglang_eagle3"])[MANIFEST_KEY]
    meta.update(samples=len(ids), tokens=sum(map(len, ids)))
    return DataManifest.load(meta, path=str(store.path(0)))


def capture(args: argparse.Namespace, rest: list[str], fc: tuple[Tap, ...]) -> dict:
    """Run the capture; what it did (``--json`` prints it)."""
    from sglang_eagle3.checkpoint.target_config import read_target_config

    # the cheap refusals first: no server asked, no tokenizer loaded
    if args.out.exists() and any(args.out.iterdir()) and not args.resume:
        Store.refuse_used(args.out)
    if not args.data.is_file():
        raise WiringError("--data is not a file", path=str(args.data), fix="give a JSONL file")
    for _ in read_lines(args.data):  # every line checked before anything starts
        pass
    if args.server:
        if rest:
            raise WiringError(f"launcher arguments {' '.join(rest)} with --server: the servers "
                              "already run", path="command line",
                              fix="drop them, or drop --server to launch one")  # fmt: skip
        state = _check_server(args.server[0], None, args.request_timeout)[1]
        n, hidden = state["num_layers"], state["hidden_size"]
        model = args.tokenizer or args.server[0].rstrip("/")
        target = launch_args = cpu = None
    else:
        target, launch_args, cpu = _launch_target(rest)
        n, hidden, model = target.num_layers, target.hidden_size, target.path
    stored = stored_taps(fc, n)
    if target is not None:
        launch_args = _check_launch(target, launch_args, stored)
    else:
        for url in args.server:  # every server, before anything is written
            _check_server(url, stored, args.request_timeout)
        if not args.tokenizer:
            from sglang_eagle3.doctor.server_capture import ServerClient

            model = ServerClient(model, timeout=30).get("/model_info").get("tokenizer_path")
    ids, masks, _ = _index(args, load_tokenizer(args.tokenizer or str(model)))
    run = {"data": str(args.data.resolve()), "data_sha256": file_sha256(args.data),
           "stored_taps": [str(t) for t in stored], "samples": len(ids),
           "tokens": sum(map(len, ids))}  # fmt: skip
    have = set()
    if args.resume and (args.out / HS_DIR).is_dir():
        have = {int(m.group(1)) for p in (args.out / HS_DIR).iterdir()
                if (m := HS_RE.fullmatch(p.name))}  # fmt: skip
    cfg = read_target_config(target.path, ints=())[0] if target else {}
    width = len(stored) * hidden * _dtype_bytes(launch_args or [], cfg)
    todo_guess = [s for s in range(len(ids)) if s not in have]
    _check_disk(args.out, sum(len(ids[s]) for s in todo_guess), len(todo_guess), width,
                args.keep_free)  # fmt: skip
    store = Store(args.out, run, resume=args.resume)
    with _servers(args, rest, stored, target, launch_args, cpu, store) as sources:
        have = store.done(src.folder for src in sources)
        todo = [s for s in range(len(ids)) if s not in have]
        start = time.monotonic()
        written = _capture_all(sources, store, ids, todo, (len(stored), hidden), args)
        seconds = time.monotonic() - start
    manifest = _manifest(store, ids)
    store.finish(ids, masks, manifest)
    tokens = sum(len(ids[s]) for s in todo)
    raw = len(stored) * hidden * DTYPE_BYTES.get(manifest.dtype, 2)
    return {
        "out": str(args.out), "taps": [str(t) for t in stored], "dtype": manifest.dtype,
        "samples": len(ids), "captured": len(todo), "already_in": len(ids) - len(todo),
        "tokens": manifest.tokens, "captured_tokens": tokens, "bytes": written,
        "seconds": round(seconds, 3), "tok_s": round(tokens / seconds, 1) if seconds else None,
        "bytes_per_token": round(written / tokens, 1) if tokens else None,
        "raw_bytes_per_token": raw,  # taps x hidden x dtype bytes
    }  # fmt: skip


def summary_line(s: dict) -> str:
    return (f"captured {s['captured']} samples ({s['already_in']} already in), "
            f"{s['captured_tokens']} tokens at {s['tok_s']} tok/s, {s['bytes']} bytes "
            f"({s['bytes_per_token']} a token; raw taps {s['raw_bytes_per_token']}); taps "
            f"{', '.join(s['taps'])} (fc, then the verifier; layer:K = output of decoder layer "
            f"K); data in {s['out']}")  # fmt: skip
