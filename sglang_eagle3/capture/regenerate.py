"""``--regenerate``: every assistant turn replaced by the target's own reply, as SpecForge and
speculators recommend (a drafter learns what its target says, not what a data set's author
wrote).

Turn by turn, the conversation before a turn, rendered with the generation prompt, goes to a
capture server as an ordinary generate (no capture rid); the reply replaces the turn, and later
turns see it. A sample's new conversation is saved (``OUT/.capture/regenerated/{i}.json``, by
rename) before it is captured, so a resumed run captures the same text whatever the sampling.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from sglang_eagle3.capture.inputs import Line
from sglang_eagle3.errors import WiringError

DEFAULT_PARAMS = {"temperature": 0, "max_new_tokens": 512}
_TOKENIZER = threading.Lock()  # a Rust tokenizer is not safe to share between threads


def parse_params(text: str | None) -> dict | None:
    """The sampling parameters of --regenerate-params (None: no regeneration)."""
    if text is None:
        return None
    try:
        params = json.loads(text)
    except json.JSONDecodeError:
        params = None
    fix = 'e.g. \'{"temperature": 0.7, "max_new_tokens": 512}\''
    if not isinstance(params, dict):
        raise WiringError(f"--regenerate-params {text!r} is not a JSON object of SGLang sampling "
                          "parameters", path="command line", fix=fix)  # fmt: skip
    for key, ok, rule in _RULES:
        if key in params and not ok(params[key]):
            raise WiringError(f"--regenerate-params: {key} {params[key]!r} must be {rule}",
                              path="command line", fix=fix)  # fmt: skip
    return {**DEFAULT_PARAMS, **params}


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


# what SGLang's SamplingParams.verify refuses, checked before any server starts
_RULES = (
    ("max_new_tokens", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
     "an int >= 1"),
    ("temperature", lambda v: _number(v) and v >= 0, "a number >= 0"),
    ("top_p", lambda v: _number(v) and 0 < v <= 1, "a number in (0, 1]"),
    ("min_p", lambda v: _number(v) and 0 <= v <= 1, "a number in [0, 1]"),
    ("top_k", lambda v: isinstance(v, int) and not isinstance(v, bool) and (v == -1 or v >= 1),
     "-1 or an int >= 1"),
)  # fmt: skip


def saved(folder: Path, sid: int) -> Line | None:
    path = folder / f"{sid}.json"
    if not path.is_file():
        return None
    raw = json.loads(path.read_text(encoding="utf-8"))
    return Line(raw["line"], tuple(raw["messages"]), None)


def _one(client, tok, line: Line, params: dict) -> Line:
    msgs = list(line.messages)
    for i, m in enumerate(msgs):
        if m["role"] != "assistant" or i == 0:  # an opening reply answers nothing
            continue
        with _TOKENIZER:
            prompt = tok.apply_chat_template(msgs[:i], tokenize=True, add_generation_prompt=True,
                                             return_dict=False)  # fmt: skip
        out = client.post("/generate", {"input_ids": list(prompt), "sampling_params": params})
        msgs[i] = {"role": "assistant", "content": str(out.get("text", ""))}
    return Line(line.number, tuple(msgs), None)


def _save(folder: Path, sid: int, line: Line) -> None:
    tmp = folder / f".{sid}.json.tmp"
    tmp.write_text(json.dumps({"line": line.number, "messages": list(line.messages)}))
    os.replace(tmp, folder / f"{sid}.json")


def regenerate_all(clients: list, tok, lines: Iterator[tuple[int, Line]], folder: Path,
                   params: dict, concurrency: int, bar) -> int:  # fmt: skip
    """Regenerate every conversation of ``lines`` not saved yet; how many were."""
    folder.mkdir(parents=True, exist_ok=True)
    workers, done = concurrency * len(clients), 0
    with ThreadPoolExecutor(workers) as pool:
        running: dict = {}
        for sid, line in lines:
            if line.messages is None or (folder / f"{sid}.json").is_file():
                continue
            client = clients[sid % len(clients)]
            running[pool.submit(_one, client, tok, line, params)] = sid
            while len(running) >= workers:
                done += _collect(running, folder, bar)
        while running:
            done += _collect(running, folder, bar)
    return done


def _collect(running: dict, folder: Path, bar) -> int:
    finished, _ = wait(running, return_when=FIRST_COMPLETED)
    for f in finished:
        sid = running.pop(f)
        _save(folder, sid, f.result())  # a failure ends the run; --resume continues it
        bar.update(1)
    return len(finished)
