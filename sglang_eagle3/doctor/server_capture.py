"""The doctor's evidence from a live SGLang target in capture-only mode (``--server URL``).

For a target that does not fit the doctor's machine (Kimi-K2.5 on its GPU nodes, the doctor
on a CPU box): the server is started through the launcher with
``--enable-return-aux-hidden-states --hidden-state-layout TAPS``, the plugin captures exactly
those taps, and ``GET /sglang_eagle3/capture`` says which, in the column order of
``meta_info.hidden_states``. Each prompt is one greedy ``/generate`` with
``return_hidden_states``: the prefill's rows, then one row per decode step. Only the draft's
weights are needed here. Standard library HTTP (urllib), one request at a time.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

import torch

from sglang_eagle3.doctor.evaluate import progress_bar
from sglang_eagle3.doctor.target_capture import (
    CapturedData,
    captured_info,
    make_sample,
    scored_tokens,
)
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import Tap, format_taps, parse_taps

CAPTURE_ROUTE = "/sglang_eagle3/capture"


def server_command(taps: Sequence[Tap] | None = None, model: str = "TARGET") -> str:
    """The exact command that starts a target the doctor can read."""
    layout = ",".join(str(t) for t in taps) if taps else "TAPS"
    return (
        f"python -m sglang_eagle3.launch --model-path {model} --enable-return-aux-hidden-states "
        f"--hidden-state-layout {layout} --disable-radix-cache"
    )


class ServerClient:
    def __init__(self, url: str, *, timeout: float) -> None:
        if not url.startswith(("http://", "https://")):
            raise WiringError(
                f"--server {url!r} is not an http(s) URL", fix="e.g. http://host:30000"
            )
        self.url, self.timeout, self.bytes_in = url.rstrip("/"), timeout, 0

    def request(self, path: str, payload: dict | None = None) -> bytes:
        """The raw body of GET ``path`` (no payload) or POST ``payload`` as JSON."""
        data = None if payload is None else json.dumps(payload).encode()
        method = "GET" if data is None else "POST"
        headers = {"Content-Type": "application/json"}
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as err:
            raise ServerHTTPError(err.code, path, _gist(err.read())) from None
        except (urllib.error.URLError, OSError, TimeoutError) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, TimeoutError):  # socket.timeout is one: it is up, but slow
                raise WiringError(
                    f"the server at {self.url} did not answer {path} within --request-timeout "
                    f"{self.timeout:g} s",
                    path="--server",
                    fix="raise --request-timeout (a long prompt on a busy target takes longer)",
                ) from None
            raise WiringError(
                f"cannot reach the server at {self.url} ({reason})",
                path="--server",
                fix=f"start the target with: {server_command()}",
            ) from None
        self.bytes_in += len(body)
        return body

    def get(self, path: str) -> dict:
        return self._object(path, self.request(path))

    def post(self, path: str, payload: dict) -> dict:
        return self._object(path, self.request(path, payload))

    def _object(self, path: str, body: bytes) -> dict:
        """The JSON object ``body``; anything else is the wrong server, said in one line."""
        try:
            out = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            out = None
        if not isinstance(out, dict):
            raise WiringError(
                f"{self.url}{path} answered {_gist(body)}, not the JSON object an SGLang server "
                "gives",
                path="--server",
                fix=f"point --server at an SGLang started with: {server_command()}",
            )
        return out


def _gist(body: bytes) -> str:
    """A server's answer, short: an HTML page is named, not pasted."""
    text = body[:2000].decode(errors="replace").strip()
    if text[:100].lower().lstrip().startswith(("<!doctype html", "<html")):
        return "an HTML page"
    return repr(text[:200]) if text else "an empty body"


class ServerHTTPError(WiringError):
    def __init__(self, code: int, path: str, body: str) -> None:
        fix = (f"point --server at an SGLang started with: {server_command()}" if code == 404
               else "the server's log says why")  # fmt: skip
        super().__init__(f"the server answered {path} with HTTP {code}: {body}", path="--server",
                         fix=fix)  # fmt: skip
        self.code = code


def server_capture_state(client: ServerClient) -> dict:
    """The plugin's statement of what the server captures; refuses a server that cannot
    give the doctor named taps."""
    try:
        state = client.get(CAPTURE_ROUTE)
    except ServerHTTPError as err:
        if err.code != 404:
            raise
        router = _router_workers(client)
        what = (f"SGLang's router (workers {', '.join(router)}), which serves no taps"
                if router is not None
                else "not an SGLang started through sglang_eagle3's launcher (or its plugin "
                "is not loaded), so its taps are unknown")  # fmt: skip
        raise WiringError(
            f"{client.url} has no {CAPTURE_ROUTE}: it is {what}",
            path="--server",
            fix=f"start the target with: {server_command()}",
        ) from None
    mode = state.get("disaggregation_mode")
    if mode in ("prefill", "decode"):
        raise WiringError(
            f"{client.url} is the {mode} server of a PD deployment: it serves EAGLE-3, and the "
            "doctor needs a server in capture mode (one node, not disaggregated)",
            path="--server",
            fix=f"start the target on one node with: {server_command()} and point --server at "
            "it (a PD deployment's plans are checked by its decode servers: README, Scale-out)",
        )
    if not state.get("capture_only") or not state.get("capture_order"):
        raise WiringError(
            f"{client.url} is not in capture mode (no --enable-return-aux-hidden-states "
            "with a declared --hidden-state-layout)",
            path="--server",
            fix=f"restart it with: {server_command()}",
        )
    _check_state(state, f"{client.url}{CAPTURE_ROUTE}")
    return state


def _router_workers(client: ServerClient) -> list[str] | None:
    """The worker URLs when ``client`` is SGLang's router (it answers GET /workers)."""
    try:
        workers = client.get("/workers").get("workers")
    except WiringError:
        return None
    if not isinstance(workers, list):
        return None
    return [str(w.get("url")) for w in workers if isinstance(w, dict)]


# The fields the doctor reads from the route (hooks/capture_route.py capture_report).
STATE_FIELDS = {"num_layers": int, "hidden_size": int, "capture_order": list}


def _check_state(state: dict, where: str) -> None:
    for name, kind in STATE_FIELDS.items():
        value = state.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise WiringError(
                f"{where} says {name} is {value!r}, not the {kind.__name__} sglang_eagle3's "
                "plugin writes",
                path="--server",
                fix="check that the server runs an unmodified sglang_eagle3 with its plugin "
                "loaded (`pip show sglang-eagle3` where it runs)",
            )
    if state["num_layers"] < 1 or state["hidden_size"] < 1:
        raise WiringError(
            f"{where} says the target has {state['num_layers']} layers of width "
            f"{state['hidden_size']}",
            path="--server",
            fix="check that the server runs an unmodified sglang_eagle3",
        )
    if not all(isinstance(t, str) for t in state["capture_order"]):
        raise WiringError(
            f"{where} says capture_order is {state['capture_order']!r}, not a list of tap names",
            path="--server",
            fix="check that the server runs an unmodified sglang_eagle3",
        )


def capture_from_server(
    client: ServerClient,
    state: dict,
    prompts: Sequence[str],
    taps: Sequence[Tap],
    *,
    max_new_tokens: int,
    max_tokens: int,
    time_limit: float,
    progress: bool | None = None,
) -> CapturedData:
    """Greedy continuations and their taps from the server, ``taps`` in the given order."""
    n, hidden = int(state["num_layers"]), int(state["hidden_size"])
    order = parse_taps(state["capture_order"], path=f"{client.url}{CAPTURE_ROUTE}")
    missing = [t for t in taps if t not in order]
    if missing:
        raise WiringError(
            f"the server captures {format_taps(order)}; the candidates also need "
            f"{format_taps(missing)}",
            path="--server",
            fix="restart it with: " + server_command(taps, state.get("model_path") or "TARGET"),
        )
    cols = [order.index(t) for t in taps]
    flush = not client.get("/server_info").get("disable_radix_cache", False)
    samples, rows_seen, start = [], 0, time.monotonic()
    bytes_before, notes = client.bytes_in, []
    bar = progress_bar(max_tokens, progress)
    try:
        for i, text in enumerate(prompts):
            if scored_tokens(samples) >= max_tokens:
                break
            if time.monotonic() - start > time_limit:
                notes.append(f"stopped after {i} of {len(prompts)} prompts: --server-time-limit "
                             f"{time_limit:g} s")  # fmt: skip
                break
            if flush:  # a cached prefix returns no rows for it; the draft needs every row
                client.request("/flush_cache", {})
            ids = client.post("/tokenize", {"prompt": text, "add_special_tokens": True})["tokens"]
            # top-1 logprobs over the prompt: the target's greedy token at each prompt position
            out = client.post("/generate", {
                "input_ids": ids, "return_hidden_states": True, "return_logprob": True,
                "logprob_start_len": 0, "top_logprobs_num": 1,
                "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
            })  # fmt: skip
            where = f"{client.url}, prompt {i}"
            rows = _rows(out, len(ids), len(order), hidden, where=where)
            rows_seen += rows.shape[0]
            truth = _prompt_greedy(out, len(ids), where) + out["output_ids"]
            samples.append(make_sample(i, f"prompt {i}", len(ids), ids + out["output_ids"],
                                       rows[:, cols], truth))  # fmt: skip
            bar.update(int(samples[-1].loss_mask.sum()))
    finally:
        bar.close()
    seconds = time.monotonic() - start
    info = captured_info(client.url, "server (SGLang capture mode)", samples, taps, n)
    moved = client.bytes_in - bytes_before
    source = {
        "kind": "server",
        "engine": f"SGLang {state.get('sglang')} at {client.url} (capture mode, "
        f"sglang_eagle3 {state.get('sglang_eagle3')})",
        "server_taps": [str(t) for t in order],
        "prompts": len(samples),
        "scored_tokens": scored_tokens(samples),
        "tokens_with_taps": rows_seen,
        "seconds": round(seconds, 2),
        "seconds_per_1000_tokens": round(1000 * seconds / rows_seen, 2) if rows_seen else None,
        "bytes_per_token": round(moved / rows_seen) if rows_seen else None,
        "notes": notes,
    }
    return CapturedData(info, samples, source)


def _rows(out: dict, prompt_len: int, num_taps: int, hidden: int, *, where: str) -> torch.Tensor:
    """meta_info.hidden_states -> [tokens, num_taps, hidden], row u = token u."""
    meta = out.get("meta_info", {})
    chunks = meta.get("hidden_states")
    if not chunks:
        raise WiringError(
            "the response has no hidden states",
            path=where,
            fix="start the server in capture mode: " + server_command(),
        )
    if meta.get("cached_tokens", 0):
        raise WiringError(
            f"{meta['cached_tokens']} prompt tokens came from the radix cache, without rows",
            path=where,
            fix="restart the server with --disable-radix-cache",
        )
    width = num_taps * hidden
    got = len(chunks[0][0]) if chunks[0] and isinstance(chunks[0][0], list) else None
    if got != width:
        raise WiringError(
            f"rows are {got} wide; {num_taps} taps x {hidden} (the server's statement) is {width}",
            path=where,
        )
    first = torch.tensor(chunks[0], dtype=torch.float32).reshape(-1, width)
    rest = [torch.tensor(c, dtype=torch.float32).reshape(-1, width) for c in chunks[1:]]
    rows = torch.cat([first, *rest]) if rest else first
    if first.shape[0] != prompt_len:
        got = f"{first.shape[0]} prefill rows for a {prompt_len}-token prompt"
        raise WiringError(got, path=where)
    return rows.reshape(rows.shape[0], num_taps, hidden)


def _prompt_greedy(out: dict, prompt_len: int, where: str) -> list[int]:
    """The target's greedy token after each prompt token but the last (whose greedy token is
    the first output): ``input_top_logprobs[u + 1]`` is the top guess for token u + 1."""
    top = out.get("meta_info", {}).get("input_top_logprobs")
    if not isinstance(top, list) or len(top) != prompt_len:
        raise WiringError(
            f"no top-1 logprob for each of the {prompt_len} prompt tokens in the response",
            path=where,
            fix="use an SGLang that honours return_logprob with logprob_start_len 0",
        )
    return [int(top[u + 1][0][1]) for u in range(prompt_len - 1)]
