"""Request guards: a bad `/generate` body gets 400, it never takes the server down.

SGLang 0.5.23 validates each request in its main process (TokenizerManager
`_validate_one_request`), where a ValueError becomes HTTP 400. Some bodies pass that check
and fail in the scheduler instead, whose exception ends the whole server (SIGQUIT to the
launcher):
- `return_hidden_states` as a list for one prompt (schedule_batch.py:193 raises there);
- `input_ids` outside the vocabulary (the embedding's IndexError), or not integers;
- an empty prompt inside a batch (`"input_ids": [[]]`: a reshape error in the model).

A BEFORE hook on that one method checks them once per request (never per token), in the
main process only: what the schedulers receive has passed it.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.plugins.hook_registry import HookType

VALIDATE = "sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request"


def check_request(obj: Any, input_ids: list | None, vocab_size: int) -> None:
    """Raise ValueError (SGLang answers 400) for one prompt's request the scheduler would
    crash on; `input_ids` are its tokens, given or tokenized."""
    hidden = getattr(obj, "return_hidden_states", False)
    if not (isinstance(hidden, bool) or hidden == "last"):
        raise ValueError(
            f'return_hidden_states must be true, false or "last" for one prompt, got '
            f"{hidden!r}; a list gives one value per prompt of a batch (sglang_eagle3)"
        )
    if input_ids is None:  # input_embeds: no ids to check
        return
    if len(input_ids) == 0:  # a batch's empty prompt reaches the scheduler and ends it
        raise ValueError("a prompt needs at least one token: input_ids is empty (sglang_eagle3)")
    bad = next((t for t in input_ids if type(t) is not int or not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ValueError(
            f"input_ids must be token ids in [0, {vocab_size}) (this model's vocabulary), got "
            f"{bad!r}; tokenize with the served model's tokenizer (sglang_eagle3)"
        )


def guard_request(self: Any, obj: Any, input_ids: list | None, *args: Any, **kwargs: Any) -> None:
    """BEFORE TokenizerManager._validate_one_request(obj, input_ids)."""
    check_request(obj, input_ids, int(self.model_config.vocab_size))


HOOKS = [
    (VALIDATE, guard_request, HookType.BEFORE),
]
