"""One capture run: every check first (servers, input, disk), then the remaining samples on the
servers, then the index and the manifest."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from sglang_eagle3.capture.inputs import Line, load_tokenizer, read_lines, tokenize
from sglang_eagle3.capture.regenerate import parse_params, regenerate_all, saved
from sglang_eagle3.capture.servers import (
    Source,
    check_launch,
    check_server,
    launch_target,
    servers,
    stored_taps,
    tokenizer_of,
)
from sglang_eagle3.capture.store import HS_RE, Store, file_sha256
from sglang_eagle3.data.arrow import HS_DIR
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import Tap

DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
FILE_OVERHEAD = 4096  # a file's header and manifest, generously
GIB = 1 << 30


def _selected(args) -> Iterator[tuple[int, Line]]:
    """(sample id, line) of the samples --max-samples keeps, in file order."""
    for sid, line in enumerate(read_lines(args.data)):
        if args.max_samples and sid >= args.max_samples:
            return
        yield sid, line


def _index(args, tok, regenerated: Path | None = None) -> tuple[list, list]:
    """(input ids, loss masks) of the samples this run captures (regenerated where saved), as
    int32 and uint8 arrays: the index is all a run holds per sample (5 bytes a token)."""
    import numpy as np

    ids, masks, total = [], [], 0
    for sid, line in _selected(args):
        line = (saved(regenerated, sid) if regenerated else None) or line
        i, m = tokenize(tok, line, args.data)
        if args.max_tokens and total + len(i) > args.max_tokens:
            break
        ids.append(np.asarray(i, dtype=np.int32)), masks.append(np.asarray(m, dtype=np.uint8))
        total += len(i)
    if not ids:
        raise WiringError("no sample to capture (an empty file, or --max-tokens below the first "
                          "sample's length)", path=str(args.data),
                          fix="give samples, or raise --max-tokens")  # fmt: skip
    return ids, masks


def _check_out(out: Path) -> None:
    """--out must be a directory this process can write, or be creatable as one."""
    if out.exists() and not out.is_dir():
        raise WiringError("--out is a file, not a directory", path=str(out),
                          fix="give a new directory for the data set")  # fmt: skip
    probe = out if out.exists() else next(p for p in out.parents if p.exists())
    if not probe.is_dir():
        raise WiringError(f"{probe} is not a directory", path=str(out), fix="give another --out")
    try:  # a real write: root passes every os.access test, even on /proc
        fd, name = tempfile.mkstemp(dir=probe, prefix=".sglang_eagle3-probe-")
    except OSError as err:
        raise WiringError(f"cannot write in {probe}: {err.strerror}", path=str(out),
                          fix="give --out on a writable file system") from None  # fmt: skip
    os.close(fd)
    os.unlink(name)


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


def _one(src: Source, store: Store, sid: int, ids, width: tuple[int, int]) -> tuple[int, str]:
    """Capture sample ``sid`` (``ids``: [seq] int32) on one server: (the bytes its file holds,
    what its manifest says of the target, software and dtype)."""
    from sglang_eagle3.checkpoint.safetensors_header import read_header

    out = src.client.post("/generate", {
        "input_ids": ids.tolist(), "rid": store.rid(sid), "return_hidden_states": True,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0},
    })  # fmt: skip
    rec = (out.get("meta_info") or {}).get("hidden_states")
    if not (isinstance(rec, list) and len(rec) == 1 and isinstance(rec[0], dict)):
        raise WiringError(f"{src.client.url} answered sample {sid} with hidden-state rows, not "
                          "a file", path="--server", fix="start it through sglang_eagle3's "
                          "launcher with --capture-dir DIR")  # fmt: skip
    if "error" in rec[0]:
        raise WiringError(f"sample {sid}: {rec[0]['error']}", path=src.client.url,
                          fix="see the server's log")  # fmt: skip
    dst = store.adopt(src.folder / rec[0]["file"], sid)
    shape = read_header(dst).entries["hidden_states"].shape
    if shape != (len(ids), *width):
        raise WiringError(f"sample {sid}: the server wrote hidden_states {list(shape)}, expected "
                          f"{[len(ids), *width]}", path=str(dst),
                          fix="capture again into a new --out")  # fmt: skip
    return dst.stat().st_size, _identity(dst)


def _file_manifest(path: Path) -> dict:
    """The manifest a server wrote into one file's safetensors metadata ({} when none)."""
    from safetensors import safe_open

    from sglang_eagle3.data.manifest import MANIFEST_KEY

    with safe_open(str(path), "pt") as f:
        return json.loads((f.metadata() or {}).get("sglang_eagle3", "{}")).get(MANIFEST_KEY, {})


def _identity(path: Path) -> str:
    """A file's manifest without its own token count: the same for every file of one set."""
    meta = _file_manifest(path)
    return json.dumps({k: v for k, v in meta.items() if k != "tokens"}, sort_keys=True)


def _same_set(want: tuple[str, str] | None, got: str, where: str) -> tuple[str, str]:
    """Refuse a file whose target, software or dtype differ from the set's first file's."""
    if want is None or want[0] == got:
        return want or (got, where)
    a, b = json.loads(want[0]), json.loads(got)
    diff = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
    raise WiringError(f"{where} wrote a sample of another set than {want[1]}: "
                      + "; ".join(f"{k} {x!r} there, {y!r} here" for k, (x, y) in diff.items()),
                      path="--server", fix="capture one set from servers of one target, dtype "
                      "and version (a new --out for the other)")  # fmt: skip


def _todo(count: int, have: set[int]):
    """The sample ids still to capture, in order, as one int64 array (8 bytes a sample: a
    list of ints would hold 40)."""
    import numpy as np

    done = np.zeros(count, dtype=bool)
    done[[s for s in have if s < count]] = True
    return np.flatnonzero(~done)


def _capture_all(sources, store, ids, todo, width, args) -> tuple[int, list[int]]:
    """Every sample in ``todo``, ``concurrency`` in flight per server: (bytes written, samples
    each server captured)."""
    from tqdm import tqdm

    bar = tqdm(total=sum(len(ids[s]) for s in todo), unit="tok", unit_scale=True,
               desc="capture", file=sys.stderr, disable=args.no_progress)  # fmt: skip
    written, per_server = 0, [0] * len(sources)
    pending, left = iter(todo), len(todo)
    first = store.path(0)  # a resumed set's files are compared with the ones already in
    want = (_identity(first), str(first)) if first.is_file() else None
    workers = args.concurrency * len(sources)
    with bar, ThreadPoolExecutor(workers) as pool:
        running: dict = {}
        while left or running:
            while left and len(running) < workers:
                sid, left = int(next(pending)), left - 1
                src = sources[sid % len(sources)]
                running[pool.submit(_one, src, store, sid, ids[sid], width)] = sid
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                sid = running.pop(f)
                size, identity = f.result()  # a failure ends the run; --resume continues it
                k = sid % len(sources)
                want = _same_set(want, identity, f"{sources[k].client.url} (sample {sid})")
                written, per_server[k] = written + size, per_server[k] + 1
                bar.update(len(ids[sid]))
                bar.set_postfix_str(f"{written / (1 << 20):.1f} MiB written")
    return written, per_server


def _manifest(store: Store, ids: list[list[int]]):
    """The set's manifest: the first file's (written by the server), with the set's counts."""
    from sglang_eagle3.data.manifest import DataManifest

    meta = _file_manifest(store.path(0))
    meta.update(samples=len(ids), tokens=sum(map(len, ids)))
    return DataManifest.load(meta, path=str(store.path(0)))


def capture(args: argparse.Namespace, rest: list[str], fc: tuple[Tap, ...]) -> dict:
    """Run the capture; what it did (``--json`` prints it)."""
    from sglang_eagle3.checkpoint.target_config import read_target_config

    params = parse_params(args.regenerate_params) if args.regenerate else None
    # the cheap refusals first: no server asked, no tokenizer loaded
    _check_out(args.out)
    if Store.used(args.out) and not args.resume:
        Store.refuse_used(args.out)
    if not args.data.is_file():
        raise WiringError("--data is not a file", path=str(args.data), fix="give a JSONL file")
    chats = sum(1 for line in read_lines(args.data) if line.messages)  # every line checked
    if params and not chats:
        raise WiringError("--regenerate replaces assistant turns, but no line holds "
                          '"messages"', path=str(args.data),
                          fix="drop --regenerate, or give conversations")  # fmt: skip
    launch = None
    if args.server:
        if rest:
            raise WiringError(f"launcher arguments {' '.join(rest)} with --server: the servers "
                              "already run", path="command line",
                              fix="drop them, or drop --server to launch one")  # fmt: skip
        twice = sorted({u for u in args.server if args.server.count(u) > 1})
        if twice:
            raise WiringError(f"--server {twice[0]} is given twice", path="command line",
                              fix="name each server once")  # fmt: skip
        state = check_server(args.server[0], None, args.request_timeout)[1]
        n, hidden = state["num_layers"], state["hidden_size"]
        stored = stored_taps(fc, n)
        for url in args.server:  # every server, before anything is written
            check_server(url, stored, args.request_timeout)
        model, cfg = args.tokenizer or tokenizer_of(args.server[0]), {}
    else:
        target, launch_args, cpu, port = launch_target(rest)
        n, hidden, model = target.num_layers, target.hidden_size, target.path
        stored = stored_taps(fc, n)
        launch = (target, check_launch(target, launch_args, stored), cpu, port)
        cfg = read_target_config(target.path, ints=())[0]
    tok = load_tokenizer(args.tokenizer or str(model))
    width = len(stored) * hidden * _dtype_bytes(launch[1] if launch else [], cfg)
    ids, masks = _index(args, tok)
    extra = 0
    if params:  # each reply may be as long as max_new_tokens
        turns = sum(sum(m["role"] == "assistant" for m in line.messages or ())
                    for _, line in _selected(args))  # fmt: skip
        extra = turns * params["max_new_tokens"]
    have = _files_in(args.out) if args.resume else set()
    todo = _todo(len(ids), have)
    _check_disk(args.out, sum(len(ids[s]) for s in todo) + extra, len(todo), width,
                args.keep_free)  # fmt: skip
    run = {"data": str(args.data.resolve()), "data_sha256": file_sha256(args.data),
           "stored_taps": [str(t) for t in stored], "max_samples": args.max_samples,
           "max_tokens": args.max_tokens, "regenerate": params}  # fmt: skip
    store = Store(args.out, run, resume=args.resume)
    if args.resume and not len(_todo(len(ids), store.done())):  # every sample in: no server
        if params:
            ids, masks = _index(args, tok, store.regenerated)
        todo, written, per_server, urls, seconds = [], 0, [], [], 0.0
    else:
        with servers(args.server, launch, stored, store, args.log_dir,
                     args.request_timeout) as sources:  # fmt: skip
            if params:
                _regenerate(args, sources, tok, store, params)
                ids, masks = _index(args, tok, store.regenerated)
            have = store.done(src.folder for src in sources)
            todo = _todo(len(ids), have)
            start = time.monotonic()
            written, per_server = _capture_all(sources, store, ids, todo,
                                               (len(stored), hidden), args)  # fmt: skip
            urls = [src.client.url for src in sources]
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
        "regenerated": params is not None,
        "per_server": [{"url": u, "samples": k} for u, k in zip(urls, per_server, strict=True)],
    }  # fmt: skip


def _files_in(out: Path) -> set[int]:
    folder = out / HS_DIR
    if not folder.is_dir():
        return set()
    return {int(m.group(1)) for p in folder.iterdir() if (m := HS_RE.fullmatch(p.name))}


def _regenerate(args, sources, tok, store: Store, params: dict) -> None:
    from tqdm import tqdm

    total = sum(1 for _, line in _selected(args) if line.messages)
    with tqdm(total=total, desc="regenerate", unit="sample", file=sys.stderr,
              disable=args.no_progress) as bar:  # fmt: skip
        regenerate_all([s.client for s in sources], tok, _selected(args), store.regenerated,
                       params, args.concurrency, bar)  # fmt: skip


def summary_line(s: dict) -> str:
    if not s["captured"]:
        return (f"nothing to capture: all {s['already_in']} samples were already in {s['out']} "
                f"(no server started); index and manifest written; taps {', '.join(s['taps'])} "
                "(fc, then the verifier; layer:K = output of decoder layer K)")  # fmt: skip
    split = s["per_server"]
    on = f" on {len(split)} servers ({', '.join(str(x['samples']) for x in split)})"
    return (f"captured {s['captured']} samples{on if len(split) > 1 else ''} "
            f"({s['already_in']} already in), "
            f"{s['captured_tokens']} tokens at {s['tok_s']} tok/s, {s['bytes']} bytes "
            f"({s['bytes_per_token']} a token; raw taps {s['raw_bytes_per_token']}); taps "
            f"{', '.join(s['taps'])} (fc, then the verifier; layer:K = output of decoder layer "
            f"K); data in {s['out']}")  # fmt: skip
