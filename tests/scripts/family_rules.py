"""Run SGLang 0.5.23's own `set_eagle3_layers_to_capture` of every family on a stand-in model.

Prints one JSON object: {family: {case: stored capture indices, or "error: ..."}}. The model
object is a stand-in (config, pp_group, a decoder stack that records what it is given), the
function is SGLang's real code. Run under the CPU harness environment.
"""

from __future__ import annotations

import importlib
import json
import sys
from types import SimpleNamespace

from sglang_eagle3.layout.families import FAMILIES

N = 8
CASES = {"none": None, "minus_one": [-1, 2, 5], "first_is_1": [1, 3, 5], "zero": [0, 3, 6],
         "max_is_n": [1, 4, 8]}  # fmt: skip


class Stack:
    """A decoder stack: keeps the list SGLang writes, and what its own setter is given."""

    def __init__(self) -> None:
        self.layers = [SimpleNamespace() for _ in range(N)]
        self.layers_to_capture: list[int] = []

    def set_eagle3_layers_to_capture(self, ids) -> None:  # the inner model's setter
        self.layers_to_capture = list(ids)


def _stand_in(family):
    config = SimpleNamespace(num_hidden_layers=N, hidden_size=16)
    config.text_config = config
    model = SimpleNamespace(config=config, pp_group=SimpleNamespace(is_last_rank=True))
    stack = Stack()
    holder = model
    parts = family.stack.split(".")
    for name in parts[:-1]:
        inner = SimpleNamespace(config=config, pp_group=model.pp_group)
        setattr(holder, name, inner)
        holder = inner
    setattr(holder, parts[-1], stack)
    return model, stack


def main() -> None:
    from sglang.srt.runtime_context import get_parallel

    # some families read the pipeline group from SGLang's runtime context, not the model
    get_parallel().override_permanently(pp_group=SimpleNamespace(is_last_rank=True))
    out: dict[str, dict[str, object]] = {}
    for family in FAMILIES:
        if family.delegate:  # wrappers hand the call to their language model's row
            continue
        module, cls_name = family.module, family.sglang_class.rsplit(".", 1)[1]
        try:
            cls = getattr(importlib.import_module(module), cls_name)
        except Exception as err:  # noqa: BLE001 - report, the test decides
            out[family.name] = {"import": f"error: {type(err).__name__}: {err}"}
            continue
        row = {}
        for case, ids in CASES.items():
            model, stack = _stand_in(family)
            try:
                cls.set_eagle3_layers_to_capture(model, None if ids is None else list(ids))
                row[case] = list(stack.layers_to_capture)
            except Exception as err:  # noqa: BLE001
                row[case] = f"error: {type(err).__name__}: {err}"
        out[family.name] = row
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
