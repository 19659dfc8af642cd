"""SGLang's adaptive speculative mode on the demo's trained tiny drafter, through the launcher:
the steps it ran per decode batch size (hooks/adaptive_steps.py, read over HTTP) stay within
each batch-size slot's candidates, a ``[0]`` slot drafts nothing, and greedy output equals plain
decoding's.

The plain outputs are the demo's own (``demo_run``: the same target, prompts, 32 greedy tokens,
``ignore_eos``), so this file starts one server only.
"""

from __future__ import annotations

import bisect
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(2400)]  # demo: 1800 s

FP32 = ["--dtype", "float32", "--attention-backend", "intel_amx"]
STATE_KEY = "sglang_eagle3_adaptive_steps"
# The ramp round: the demo's 6 prompts at once, each shorter than the last, so the batch walks
# down from 6 to 1 and the server switches steps both ways between slots
RAMP_NEW = [32, 28, 24, 20, 16, 12]


def served_config() -> dict:
    """The tuner's adaptive config (tune/report.py) for the tiny drafter's chain acceptance
    (its profile at 1-4 steps) on a machine where each verified token costs as much as a
    decode step's share of a request (compute-bound): one step alone, a switching slot, then
    [0] from 4 requests. The tiny models on 2 CPU cores never make plain win (bench_live), so
    the costs are given, the config is the tuner's own."""
    from sglang_eagle3.tune.cost import CostModel
    from sglang_eagle3.tune.grid import Setting
    from sglang_eagle3.tune.report import adaptive_config

    model = CostModel(p0=0.010, p1=0.0005, v1=0.001, t0=0.001, d0=0.001, d1=0.001, z0=5e-4,
                      z1=2e-4)  # fmt: skip
    drafts = {1: 0.742, 2: 1.028, 3: 1.125, 4: 1.267}
    cfg = adaptive_config(model, {Setting(s, 1, s + 1): 1 + a for s, a in drafts.items()}, (1, 4))
    assert [e["candidate_steps"] for e in cfg.values()] == [[1], [0, 1], [0]], cfg
    return cfg


def _slots(cfg: dict) -> dict[int, list[int]]:
    # SGLang reads only the integer keys; the others are knobs shared by every slot
    return {int(k): sorted(set(v["candidate_steps"])) for k, v in cfg.items() if k.isdigit()}


def _zero_slots(slots: dict[int, list[int]]) -> list[int]:
    return [k for k in sorted(slots) if slots[k] == [0]]


def _slot_of(batch_size: int, keys: list[int]) -> int:
    """The slot SGLang routes ``batch_size`` to with graphs off (adaptive_spec_params.py,
    ``_find_closest_bs``): the largest key <= batch size, else the smallest key."""
    return keys[max(0, bisect.bisect_right(keys, batch_size) - 1)]


def _table(srv) -> dict[int, dict[int, int]]:
    state = srv.get("/get_server_info")["internal_states"][0]
    return {int(b): {int(s): n for s, n in row.items()} for b, row in state[STATE_KEY].items()}


@pytest.fixture(scope="module")
def demo_plain(demo_run) -> dict:
    result = demo_run["result"]
    rows = {r["name"]: r for r in result["rows"]}
    assert result["max_new_tokens"] == max(RAMP_NEW)
    return {"prompt_ids": result["prompt_ids"], "want": rows["plain"]["output_ids"]}


@pytest.fixture(scope="module")
def adaptive_server(module_server_factory, tmp_path_factory):
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    cfg = served_config()
    slots = _slots(cfg)
    steps = max(s for c in slots.values() for s in c)  # SGLang wants one of the candidates
    tmp = tmp_path_factory.mktemp("adaptive")
    (tmp / "adaptive.json").write_text(json.dumps(cfg))
    drafter = tiny_drafter()
    flags = ["--cpu", *FP32, "--speculative-algorithm", "EAGLE3",
             "--speculative-draft-model-path", str(drafter.draft_dir),
             "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", str(steps + 1),
             "--speculative-adaptive", "--speculative-adaptive-config", str(tmp / "adaptive.json"),
             # every [0] slot must be reachable: a batch as large as its key
             "--max-running-requests", str(max(8, *_zero_slots(slots))),
             "--draft-cache-dir", str(tmp / "drafts")]  # fmt: skip
    return module_server_factory(
        drafter.target_dir, flags, name="adaptive", cpu=False, module="sglang_eagle3.launch"
    )


def _generate(srv, ids: list[int], n: int) -> dict:
    params = {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}
    return srv.post("/generate", {"input_ids": ids, "sampling_params": params})


# demo_plain first: the demo's servers then run before this file's server starts
def test_adaptive_steps_per_batch_size_and_lossless(demo_plain, adaptive_server, figures):
    srv, prompts, want = adaptive_server, demo_plain["prompt_ids"], demo_plain["want"]
    slots = _slots(served_config())
    keys, zero_slots = sorted(slots), _zero_slots(slots)
    assert zero_slots, "served_config() has no [0] slot: nothing to check it drafts nothing"

    alone = _generate(srv, prompts[0], max(RAMP_NEW))
    meta = alone["meta_info"]
    # Under an all-[0] config SGLang reports no verify count (it divides by the static draft
    # tokens - 1): then each decode batch gave one token, the prefill the first
    verifies = meta.get("spec_verify_ct", meta["completion_tokens"] - 1)
    table = _table(srv)
    assert list(table) == [1], table
    assert sum(table[1].values()) == verifies, "one count per decode batch run"

    with ThreadPoolExecutor(max(len(prompts), *zero_slots)) as pool:
        ramp = list(pool.map(_generate, [srv] * len(prompts), prompts, RAMP_NEW))
        # a batch as large as each [0] slot's key, prompts reused (the radix cache keeps them)
        rounds = {}
        for k in zero_slots:
            ids = [prompts[i % len(prompts)] for i in range(k)]
            rounds[k] = list(pool.map(_generate, [srv] * k, ids, [max(RAMP_NEW)] * k))

    table = _table(srv)
    figures.record("adaptive: decode batches per batch size and steps", table)
    for bs, ran in table.items():
        slot = _slot_of(bs, keys)
        assert set(ran) <= set(slots[slot]), f"batch size {bs}: ran {ran}, slot {slot} {slots}"
    for k in zero_slots:
        ran = {bs: row for bs, row in table.items() if _slot_of(bs, keys) == k}
        assert ran, f"no decode batch ran in the [0] slot at batch size {k}: {table}"
        assert all(set(row) == {0} for row in ran.values()), (k, ran)

    assert alone["output_ids"] == want[0]
    assert [o["output_ids"] for o in ramp] == [w[:n] for w, n in zip(want, RAMP_NEW, strict=True)]
    for k, outs in rounds.items():
        assert [o["output_ids"] for o in outs] == [want[i % len(want)] for i in range(k)], k
