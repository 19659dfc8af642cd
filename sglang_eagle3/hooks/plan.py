"""Which taps this server process must capture, and whether a layout was declared at all.

Pure (no torch, no sglang), so it can run at plugin registration, before SGLang parses its
arguments. Order of truth: the launcher's explicit layout (environment), then the draft
checkpoint (explicit layout key, speculators ids, output-of-layer ids with -1). Ids that do
not say their convention keep stock behaviour, so existing deployments do not change.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from sglang_eagle3 import env_names
from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.checkpoint.target_config import read_target
from sglang_eagle3.errors import AmbiguousIdsError, WiringError
from sglang_eagle3.layout.capture_plan import CapturePlan, plan_from_layout
from sglang_eagle3.layout.conventions import DEEPSEEK
from sglang_eagle3.layout.families import Family
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import parse_taps

ENV_SOURCE = f"${env_names.LAYOUT}"
MODEL_FLAGS = ("--model-path", "--model")
DRAFT_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model")


def resolve_plan(
    *,
    env_layout: str | None,
    draft_dir: str | None,
    num_layers: int,
    hidden_size: int,
    family: Family | None = DEEPSEEK,
) -> tuple[CapturePlan | None, str]:
    """The capture plan for one server, or (None, why) to keep stock SGLang behaviour.
    ``family``: the target's row (None: not in the table), which says whether its loop
    reaches the last layer's output and whose stock rule the draft's notes explain."""
    final_layer = bool(family and family.final_layer)
    if env_layout:
        taps = parse_taps(env_layout, path=env_names.LAYOUT)
        layout = HiddenStateLayout(taps, num_layers, hidden_size)
        return plan_from_layout(layout, ENV_SOURCE, final_layer=final_layer), ENV_SOURCE
    if not draft_dir or not Path(draft_dir).is_dir():
        return None, "no local draft directory to read a layout from"
    try:
        spec = read_draft(
            draft_dir, num_layers=num_layers, target_hidden_size=hidden_size, family=family
        )
    except AmbiguousIdsError as err:
        return None, f"ids without a convention: {err}"
    if spec.layout is None:
        return None, f"{spec.config_path}: {spec.layout_source}"
    source = f"{spec.layout_source} in {spec.config_path}"
    return plan_from_layout(spec.layout, source, final_layer=final_layer), source


def _flag_value(argv: Sequence[str], names: tuple[str, ...]) -> str | None:
    """The last value given to any of ``names`` (SGLang's parser keeps the last one)."""
    value = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    return value


def declared_layout(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str | None:
    """Where this server's declared layout comes from, or None when nothing declares one.

    Read at plugin registration from the environment and the command line (spawned SGLang
    processes inherit both). A draft whose config cannot be read counts as declared: the
    server must not start on hooks that are not in place when we cannot tell.
    """
    env = os.environ if env is None else env
    if env.get(env_names.LAYOUT):
        return ENV_SOURCE
    model, draft = _flag_value(argv, MODEL_FLAGS), _flag_value(argv, DRAFT_FLAGS)
    if not draft or not Path(draft).is_dir() or not model or not Path(model).is_dir():
        return None
    try:
        target = read_target(model)
        plan, source = resolve_plan(
            env_layout=None,
            draft_dir=draft,
            num_layers=target.num_layers,
            hidden_size=target.hidden_size,
            family=target.family,
        )
    except WiringError as err:
        return f"{draft} (unreadable: {err})"
    return source if plan is not None else None


def pd_server(argv: Sequence[str]) -> bool:
    """Whether SGLang's --disaggregation-mode makes this a PD prefill or decode server."""
    return _flag_value(argv, ("--disaggregation-mode",)) in ("prefill", "decode")
