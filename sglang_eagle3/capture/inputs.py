"""The capture's input: one JSON sample a line, read and checked before anything starts, then
tokenized as the target's trainer sees it.

``{"messages": [{"role": ..., "content": ...}, ...]}`` renders through the target's chat
template, with the loss mask on the assistant turns; ``{"text": ...}`` is tokenized with the
tokenizer's special tokens, loss mask all ones; ``{"input_ids": [...]}`` is taken as it is
(already tokenized), with its ``"loss_mask"`` of 0s and 1s or all ones. An assistant turn's
tokens are those whose characters fall between the render of the turns before it (with the
generation prompt) and the render through it, so a template whose prompt and reply merge into
one token still masks right.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3.errors import WiringError

# The roles SGLang 0.5.23's chat API takes: "user" and _GenericMessageRole
# (srt/entrypoints/openai/protocol.py:748; tests/test_capture.py checks the two agree).
CHAT_ROLES = ("system", "user", "assistant", "tool", "function", "developer", "latest_reminder",
              "root")  # fmt: skip
FORMAT_FIX = ('one JSON object a line: {"messages": [{"role": "user", "content": "..."}, '
              '{"role": "assistant", "content": "..."}]}, {"text": "..."} or {"input_ids": '
              '[1, 2, ...], "loss_mask": [0, 1, ...] (optional)}')  # fmt: skip
KINDS = ("messages", "text", "input_ids")


@dataclass(frozen=True)
class Line:
    number: int  # 1-based line in the file
    messages: tuple[dict, ...] | None
    text: str | None
    ids: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # (input ids, loss mask)


def _check(obj, where: str) -> Line | str:
    """The line's sample, or what is wrong with it."""
    if not isinstance(obj, dict) or sum(k in obj for k in KINDS) != 1:
        return 'expected an object with "messages", "text" or "input_ids" (one of them)'
    if "input_ids" in obj:
        return _pretokenized(obj["input_ids"], obj.get("loss_mask"))
    if "text" in obj:
        if not isinstance(obj["text"], str) or not obj["text"]:
            return '"text" must be a non-empty string'
        return Line(0, None, obj["text"])
    msgs = obj["messages"]
    if not isinstance(msgs, list) or not msgs:
        return '"messages" must be a non-empty list'
    for j, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            return f'messages[{j}] must be an object with a string "role"'
        if m["role"] not in CHAT_ROLES:
            return (f"messages[{j}].role {m['role']!r} is not one SGLang's chat API takes "
                    f"({', '.join(CHAT_ROLES)})")  # fmt: skip
        if not isinstance(m.get("content"), str):
            return f"messages[{j}].content must be a string"
    if not any(m["role"] == "assistant" for m in msgs):
        return "no assistant turn: nothing to train on (the loss mask would be all zeros)"
    return Line(0, tuple({"role": m["role"], "content": m["content"]} for m in msgs), None)


def _pretokenized(ids, mask) -> Line | str:
    def ints(v) -> bool:
        return isinstance(v, list) and all(type(x) is int for x in v)

    if not ints(ids) or not ids or min(ids) < 0:
        return '"input_ids" must be a non-empty list of token ids (non-negative integers)'
    if mask is None:
        mask = [1] * len(ids)
    if not ints(mask) or len(mask) != len(ids) or not set(mask) <= {0, 1}:
        return f'"loss_mask" must be a list of {len(ids)} 0s and 1s, one per input id'
    if not any(mask):
        return "the loss mask is all zeros: nothing to train on"
    return Line(0, None, None, (tuple(ids), tuple(mask)))


def read_lines(path: Path) -> Iterator[Line]:
    """Every sample of a JSONL file, in order (blank lines skipped); the first bad line is a
    WiringError naming its number."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as err:
        raise WiringError(f"cannot read --data: {err.strerror}", path=str(path),
                          fix="give an existing JSONL file") from None  # fmt: skip
    with handle:
        number = 0
        try:
            for number, raw in enumerate(handle, 1):  # noqa: B007  (the error names it)
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except json.JSONDecodeError as err:
                    got = f"not JSON ({err.msg} at column {err.colno})"
                else:
                    got = _check(obj, f"{path}:{number}")
                if isinstance(got, str):
                    raise WiringError(f"line {number}: {got}", path=str(path), fix=FORMAT_FIX)
                yield Line(number, got.messages, got.text, got.ids)
        except UnicodeDecodeError:
            raise WiringError(f"line {number + 1} is not UTF-8", path=str(path),
                              fix="save the file as UTF-8") from None  # fmt: skip


def tokenize(tok, line: Line, path: Path) -> tuple[list[int], list[int]]:
    """(input_ids, loss_mask) of one sample, as the trainer sees it."""
    if line.ids is not None:
        if max(line.ids[0]) >= len(tok):
            raise WiringError(f"line {line.number}: input id {max(line.ids[0])} is outside the "
                              f"target's vocabulary of {len(tok)}", path=str(path),
                              fix="tokenize with the target's tokenizer")  # fmt: skip
        return list(line.ids[0]), list(line.ids[1])
    if line.text is not None:
        ids = tok(line.text, add_special_tokens=True)["input_ids"]
        return list(ids), [1] * len(ids)
    msgs = list(line.messages)
    full = tok.apply_chat_template(msgs, tokenize=False)
    spans = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        before = tok.apply_chat_template(msgs[:i], tokenize=False,
                                         add_generation_prompt=True) if i else ""  # fmt: skip
        through = tok.apply_chat_template(msgs[: i + 1], tokenize=False)
        if not (full.startswith(through) and through.startswith(before)):
            raise WiringError(
                f"line {line.number}: the target's chat template does not render this "
                "conversation's turns as prefixes of each other, so the assistant turns "
                "cannot be located",
                path=str(path),
                fix='give this sample as {"text": ...} with the rendered conversation',
            )
        spans.append((len(before), len(through)))
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(s < e_ and e > s_ for s_, e_ in spans)) for s, e in enc["offset_mapping"]]
    return list(enc["input_ids"]), mask


def load_tokenizer(path: str):
    """The target's tokenizer (a fast one: the loss mask needs character offsets)."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise WiringError(f"cannot load the target's tokenizer: {err}", path=path,
                          fix="pass --tokenizer DIR (its tokenizer files)") from None  # fmt: skip
    if not getattr(tok, "is_fast", False):
        raise WiringError("the target's tokenizer is not a fast tokenizer: the loss mask needs "
                          "character offsets", path=path,
                          fix="pass --tokenizer DIR holding a tokenizer.json")  # fmt: skip
    return tok
