"""PD disaggregation: the decode server takes requests only from prefill servers that serve
its plan (layout/served_plan.py).

SGLang 0.5.23 checks nothing of the kind: the decode side fetches each prefill server's
parallel info from the prefill's bootstrap server (`GET /route`, once per bootstrap address)
and checks page size and KV dtype only. Two hooks close that gap:

- prefill: the bootstrap server (in the prefill's main process) also answers
  `GET /sglang_eagle3/plan` with this server's plan;
- decode: when a request's receiver is set up for a prefill server (after SGLang fetched that
  server's parallel info, before any KV moves), the decode scheduler fetches the prefill's plan
  once per bootstrap address and compares it with its own. A prefill with another plan, or one
  that answers no plan (no plugin), gets every request refused: the receiver is aborted (SGLang
  tells the prefill ranks) and the client gets the error naming both plans.
"""

from __future__ import annotations

import functools
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from sglang.srt.plugins.hook_registry import HookType

from sglang_eagle3 import __version__, env_names
from sglang_eagle3.checkpoint.draft_identity import draft_weights_sha256
from sglang_eagle3.checkpoint.target_config import read_target
from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.plan import resolve_plan
from sglang_eagle3.layout.served_plan import ROUTE, ServedPlan, plan_mismatch, read_peer_plan
from sglang_eagle3.log import get_logger

logger = get_logger()

BOOTSTRAP_ROUTES = "sglang.srt.disaggregation.common.conn.CommonKVBootstrapServer._setup_routes"
INIT_RECEIVER = "sglang.srt.disaggregation.decode.DecodePreallocQueue._init_receiver"
DECODE_QUEUE = "sglang.srt.disaggregation.decode.DecodePreallocQueue.__init__"
PEER_TIMEOUT_S = 10.0
ABORT_RESENDS, ABORT_RESEND_S = 40, 0.5  # 20 s: a prefill registers a room within it
# bootstrap address -> (the PrefillServerInfo checked against, the refusal or None)
_PEERS: dict[str, tuple[Any, WiringError | None]] = {}


def served_plan(server_args: Any, env: dict[str, str]) -> ServedPlan:
    """This server's plan, from the same functions its schedulers apply (hooks/plan.py)."""
    algo = str(getattr(server_args, "speculative_algorithm", None) or "").upper() or None
    draft = getattr(server_args, "speculative_draft_model_path", None)
    plan = None
    if algo == "EAGLE3":
        target = read_target(server_args.model_path)
        plan, _ = resolve_plan(env_layout=env.get(env_names.LAYOUT), draft_dir=draft,
                               num_layers=target.num_layers, hidden_size=target.hidden_size,
                               family=target.family)  # fmt: skip
    drafter = None
    if draft:  # a hub id cannot be hashed here: its name stands in, and says so
        drafter = draft_weights_sha256(draft) if Path(draft).is_dir() else f"unhashed:{draft}"
    return ServedPlan(
        role=str(getattr(server_args, "disaggregation_mode", "null")),
        taps=plan.taps if plan else None,
        capture_indices=plan.capture_indices if plan else (),
        fc_block_order=plan.fc_block_order if plan else (),
        drafter=drafter,
        algorithm=algo,
        num_steps=getattr(server_args, "speculative_num_steps", None) if algo else None,
        topk=getattr(server_args, "speculative_eagle_topk", None) if algo else None,
        num_draft_tokens=getattr(server_args, "speculative_num_draft_tokens", None)
        if algo
        else None,
        sglang_eagle3=__version__,
    )


@functools.cache
def own_plan() -> ServedPlan:
    """This process's plan, computed once (the drafter's digest reads its weights)."""
    from sglang.srt.runtime_context import get_server_args

    return served_plan(get_server_args(), dict(os.environ))


def add_plan_route(result, server, *args, **kwargs) -> None:
    """AFTER the prefill bootstrap server sets up its routes: add GET ROUTE beside /route."""
    from aiohttp import web

    try:
        body, status = own_plan().to_json(), 200
    except WiringError as err:  # no answer a decode server could mistake for a plan
        body, status = {"error": str(err)}, 500

    async def plan(request):
        return web.json_response(body, status=status)

    server.app.router.add_get(ROUTE, plan)
    logger.info("PD prefill: serving GET %s on the bootstrap server: %s", ROUTE,
                own_plan().describe() if status == 200 else body["error"])  # fmt: skip


def fetch_peer_plan(addr: str) -> tuple[ServedPlan | None, str]:
    """(the plan the prefill at bootstrap ``addr`` publishes, or None, and what it said)."""
    url = f"http://{addr}{ROUTE}"
    try:
        with urllib.request.urlopen(url, timeout=PEER_TIMEOUT_S) as answer:
            data = json.load(answer)
    except urllib.error.HTTPError as err:
        return None, f"GET {ROUTE} on its bootstrap server answered HTTP {err.code}"
    except (OSError, ValueError) as err:
        return None, f"GET {ROUTE} on its bootstrap server failed: {err}"
    return read_peer_plan(data, peer=f"prefill bootstrap {addr}"), "a plan"


def peer_refusal(addr: str, info: Any) -> WiringError | None:
    """None when the prefill at ``addr`` serves this server's plan; checked once per
    bootstrap address and parallel info (SGLang refetches that after a prefill failed)."""
    cached = _PEERS.get(addr)
    if cached is not None and cached[0] is info:
        return cached[1]
    mine = own_plan()
    if mine.algorithm is None:  # no speculation: the prefill's drafter context is not used
        return None
    try:
        peer, said = fetch_peer_plan(addr)
        err = plan_mismatch(mine, peer, peer_name=addr, why_none=said)
    except WiringError as bad:
        err = WiringError(f"prefill server {addr} publishes an unreadable plan: {bad}",
                          path=f"{mine.role} server")  # fmt: skip
    if err is None:
        logger.info("PD plan check: prefill server %s serves this server's plan %s", addr,
                    mine.fingerprint)  # fmt: skip
    else:
        logger.error("PD plan check: refusing every request from prefill %s: %s", addr, err)
    _PEERS[addr] = (info, err)
    return err


def check_prefill_peer(original, queue, decode_req, prefill_dp_rank, *args, **kwargs):
    """AROUND DecodePreallocQueue._init_receiver: set the receiver up (it learns the prefill
    ranks), then refuse it before any KV moves when its prefill serves another plan."""
    from sglang.srt.disaggregation.decode import _bootstrap_addr

    result = original(queue, decode_req, prefill_dp_rank, *args, **kwargs)
    addr = _bootstrap_addr(decode_req.req)
    err = peer_refusal(addr, queue.kv_manager.prefill_info_table.get(addr))
    if err is not None:
        receiver = decode_req.kv_receiver
        receiver.abort()  # SGLang's own abort: fails the room and tells the prefill ranks
        receiver.kv_mgr.record_failure(receiver.bootstrap_room, f"sglang_eagle3: {err}")
        _tell_prefill_until_it_knows(receiver)
    return result


def _tell_prefill_until_it_knows(receiver) -> None:
    # The router sends the request to both servers at once, and a prefill ignores the abort of
    # a room it has not registered yet (mooncake/conn.py _handle_legacy_abort_notification); it
    # would then wait for this decode until its bootstrap timeout (300 s). Repeat SGLang's own
    # notification for a while: once the prefill knows the room, it fails the request at once.
    import threading

    def resend() -> None:
        for _ in range(ABORT_RESENDS):
            time.sleep(ABORT_RESEND_S)
            try:
                receiver._send_abort_notification()
            except Exception as exc:  # best effort, as SGLang's own notification is
                logger.debug("PD plan check: abort notification failed: %s", exc)
                return

    threading.Thread(target=resend, name="sglang_eagle3-pd-abort", daemon=True).start()


def log_decode_plan(result, queue, *args, **kwargs) -> None:
    """AFTER the decode's prealloc queue is built (at start): compute and log this server's
    plan now, not at the first request (the drafter's digest reads its weights)."""
    mine = own_plan()
    logger.info("PD decode: serving %s; each prefill server's plan is checked before its "
                "first request is taken", mine.describe())  # fmt: skip


HOOKS = [
    (BOOTSTRAP_ROUTES, add_plan_route, HookType.AFTER),
    (INIT_RECEIVER, check_prefill_peer, HookType.AROUND),
    (DECODE_QUEUE, log_decode_plan, HookType.AFTER),
]
