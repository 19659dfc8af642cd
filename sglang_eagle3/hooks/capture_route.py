"""`GET /sglang_eagle3/capture`: the server says which taps it captures, and in which order.

SGLang 0.5.23 serves HTTP from its main process with the module-level FastAPI `app` of
`sglang.srt.entrypoints.http_server`, which `launch_server(server_args, ...)` runs after it
starts the schedulers. A BEFORE hook on that function keeps its ServerArgs and adds the route
once, before uvicorn starts. The answer comes from the plugin's own functions (hooks/plan.py
resolve_plan, layout/capture_plan.py) applied to this process's environment and server args,
which every scheduler inherits, so it states what they apply. Not served with
`--tokenizer-worker-num` > 1: uvicorn's workers re-import the module without plugins (404).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from sglang.srt.plugins.hook_registry import HookType

from sglang_eagle3 import __version__, env_names
from sglang_eagle3.checkpoint.target_config import read_target
from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.plan import resolve_plan
from sglang_eagle3.hooks.plugin import installed_sglang_version
from sglang_eagle3.layout.capture_plan import CapturePlan, check_family
from sglang_eagle3.log import get_logger

logger = get_logger()

ROUTE = "/sglang_eagle3/capture"
LAUNCH_SERVER = "sglang.srt.entrypoints.http_server.launch_server"
_STATE: dict[str, Any] = {}


def capture_order(plan: CapturePlan) -> list[str]:
    """The declared taps in SGLang's ascending fill order: the column blocks of each
    meta_info.hidden_states row (fc_block_order[j] = fill position of declared tap j)."""
    return [plan.taps[plan.fc_block_order.index(p)] for p in range(len(plan.taps))]


def capture_report(server_args: Any, env: Mapping[str, str], sglang_version: str) -> dict:
    """The route's JSON for one server, or a WiringError where its schedulers refuse to start."""
    capture_only = bool(getattr(server_args, "enable_return_aux_hidden_states", False))
    algo = str(getattr(server_args, "speculative_algorithm", None) or "").upper()
    target = read_target(server_args.model_path)
    family = target.family
    out = {
        "sglang_eagle3": __version__,
        "sglang": sglang_version,
        "capture_only": capture_only,
        "layout": None,
        "capture_order": None,
        "num_layers": target.num_layers,
        "hidden_size": target.hidden_size,
        "family": family.name if family else None,
        "source": None,
        # where capture requests' files go (hooks/capture_file.py); None: hidden states as JSON
        "capture_dir": env.get(env_names.CAPTURE_DIR) or None,
        # PD: "prefill" or "decode" (the doctor says why such a server cannot be scored)
        "disaggregation_mode": str(getattr(server_args, "disaggregation_mode", None) or "null"),
    }
    # the capture hook only acts where SGLang switches EAGLE-3 capture on: capture-only
    # mode names it with this flag, and so does EAGLE-3 speculation
    if algo != "EAGLE3":
        out["source"] = "no EAGLE-3 capture: --speculative-algorithm is not EAGLE3"
        return out
    plan, source = resolve_plan(
        env_layout=env.get(env_names.LAYOUT),
        draft_dir=getattr(server_args, "speculative_draft_model_path", None),
        num_layers=target.num_layers,
        hidden_size=target.hidden_size,
        family=family,
    )
    out["source"] = source
    if plan is None:  # stock SGLang's own taps: not declared, so not stated
        return out
    # the refusals the scheduler's hook applies (hooks/capture.py), in the same words
    check_family(family, target.architecture, path=plan.source,
                 two_batch_overlap=bool(getattr(server_args, "enable_two_batch_overlap", False)),
                 pipeline_stages=int(getattr(server_args, "pp_size", 1) or 1))  # fmt: skip
    out["layout"], out["capture_order"] = list(plan.taps), capture_order(plan)
    if out["capture_dir"] and capture_only:  # hooks/capture_file.py adds the verifier block
        out["verifier"] = f"layer:{target.num_layers - 1}"
        out["capture_order"].append(out["verifier"])
    return out


async def capture_endpoint():
    from fastapi.responses import JSONResponse

    if "report" not in _STATE:  # env and server args are fixed for the process's life
        try:
            _STATE["report"] = capture_report(
                _STATE["server_args"], os.environ, installed_sglang_version()
            )
        except WiringError as err:  # fail closed: no answer a client could mistake for one
            return JSONResponse({"error": str(err)}, status_code=500)
    return _STATE["report"]


def add_capture_route(*args, **kwargs) -> None:
    """BEFORE launch_server: keep its ServerArgs; add the route once (uvicorn not yet up)."""
    from sglang.srt.entrypoints import http_server

    _STATE["server_args"] = kwargs["server_args"] if "server_args" in kwargs else args[0]
    _STATE.pop("report", None)
    if not any(getattr(r, "path", None) == ROUTE for r in http_server.app.routes):
        http_server.app.add_api_route(ROUTE, capture_endpoint, methods=["GET"])
        logger.info("serving GET %s (the taps this server captures)", ROUTE)


HOOKS = [
    (LAUNCH_SERVER, add_capture_route, HookType.BEFORE),
]
