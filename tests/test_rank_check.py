"""Ranks that would capture different taps stop the server: the plugin's agreement check over a
real two-process gloo group (torch.distributed on loopback), as SGLang's world group is."""

from __future__ import annotations

import multiprocessing as mp
import socket

import pytest

from sglang_eagle3.hooks.rank_check import MAX_SHOWN, STOCK, disagreement
from sglang_eagle3.layout.capture_plan import plan_from_layout
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import parse_taps


def _statement(layout: str | None) -> str:
    from sglang_eagle3.hooks.rank_check import plan_statement

    if layout is None:
        return plan_statement(None, "DeepseekV3ForCausalLM")
    plan = plan_from_layout(HiddenStateLayout(parse_taps(layout), 8, 64), "test")
    return plan_statement(plan, "DeepseekV3ForCausalLM")


def _rank(rank: int, port: int, statements: list[str], out) -> None:
    import torch.distributed as dist

    from sglang_eagle3.hooks.rank_check import check_ranks_agree

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=len(statements))  # fmt: skip
    try:
        out.put((rank, "ok", check_ranks_agree(statements[rank], dist.group.WORLD)))
    except Exception as err:  # the WiringError must reach every rank
        out.put((rank, type(err).__name__, str(err)))
    finally:
        dist.destroy_process_group()


def _gather(statements: list[str]) -> dict[int, tuple[str, object]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, statements, out)) for r in
             range(len(statements))]  # fmt: skip
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in procs:
            rank, kind, value = out.get(timeout=120)
            results[rank] = (kind, value)
    finally:  # a rank stuck in the collective must not outlive the test
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join()
    return results


@pytest.mark.slow
def test_ranks_with_the_same_plan_agree():
    same = _statement("layer:5,embed,layer:2")
    assert _gather([same, same]) == {0: ("ok", 2), 1: ("ok", 2)}


@pytest.mark.slow
def test_ranks_that_disagree_all_refuse():
    results = _gather([_statement("embed,layer:2,layer:5"), _statement(None)])
    for rank in (0, 1):
        kind, message = results[rank]
        assert kind == "WiringError", results
        assert "rank 0: DeepseekV3ForCausalLM: embed, layer:2, layer:5" in message
        assert f"rank 1: DeepseekV3ForCausalLM: {STOCK}" in message
        assert "Fix: give every node the same" in message


def test_disagreement_is_bounded_and_none_when_all_agree():
    assert disagreement(["a"] * 64) is None
    err = disagreement(["a"] * 63 + ["b"])
    assert err is not None
    assert f"... and {64 - MAX_SHOWN} more ranks" in err.message
    assert len(str(err)) < 1000  # one readable line, not 64 quotes
