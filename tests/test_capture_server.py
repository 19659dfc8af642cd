"""Real SGLang 0.5.23 servers on 127.0.0.1 (CPU harness) with the plugin on and off.

One plain server is the baseline; EAGLE-3 servers use seeded random-weight flat drafts
(random weights propose poor tokens but exercise startup, capture and verification).
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from sglang_checks import capture_vs_hf, nearest_hf_indices

import sglang_eagle3
from sglang_eagle3.layout.taps import Tap
from sglang_eagle3.testing.tiny.random_draft import write_random_flat_draft

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

FP32 = ["--dtype", "float32"]
EAGLE = ["--attention-backend", "intel_amx", "--speculative-algorithm", "EAGLE3",
         "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "4"]  # fmt: skip
PROMPTS = [
    "def main(", "import os\n", "class Foo:", "for i in range(", "return self.",
    "if __name__ ==", "    def __init__(self", "# Copyright", "try:\n    ", "print(",
]  # fmt: skip
HARNESS_ONLY = {"SGLANG_PLUGINS": "sglang_eagle3_cpu_harness"}  # stock SGLang + CPU harness


def greedy(srv, text: str, n: int = 12) -> dict:
    return srv.post("/generate", {"text": text, "sampling_params": {"max_new_tokens": n,
                                                                    "temperature": 0}})  # fmt: skip


def scheduler_pids(srv) -> list[int]:
    out = []
    for pid in srv.pids():
        try:
            if "scheduler" in " ".join(psutil.Process(pid).cmdline()):
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(scope="module")
def seed_draft(tiny_target, tmp_path_factory):
    # The seed's fix: output-of-layer ids starting with -1 (embed); crashes stock 0.5.23.
    return write_random_flat_draft(
        tmp_path_factory.mktemp("draft") / "seed", tiny_target,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [-1, 2, 5]},
        extra_config={"norm_before_residual": True},  # speculators' training default
    )  # fmt: skip


@pytest.fixture(scope="module")
def plain(plain_tiny_server):
    return plain_tiny_server


@pytest.fixture(scope="module")
def plain_outputs(plain):
    return {p: greedy(plain, p)["output_ids"] for p in PROMPTS}


def test_plain_server_serves_and_plugin_loads_in_every_process(plain):
    out = greedy(plain, "def main(", 16)
    assert len(out["output_ids"]) == 16
    sched = scheduler_pids(plain)
    assert sched, "no scheduler process found"
    log = plain.log()
    loaded = {int(m) for m in re.findall(r"plugin loaded in process \S+ \(pid (\d+)\)", log)}
    assert plain.proc.pid in loaded, "plugin not loaded in the launcher process"
    assert set(sched) <= loaded, f"plugin not loaded in scheduler {sched}; loaded in {loaded}"
    assert len(loaded) >= 3, "launcher, scheduler and detokenizer each load the plugin"
    assert "hooks NOT in place" not in log
    assert log.count("hooks verified in place") == len(loaded)
    # The route on a server with no declared layout: there, and it declares nothing.
    route = plain.get("/sglang_eagle3/capture")
    assert route["capture_only"] is False and route["layout"] is None, route
    assert route["capture_order"] is None and route["family"] == "deepseek_v2", route


@pytest.fixture(scope="module")
def eagle_seed(module_server_factory, tiny_target, seed_draft):
    return module_server_factory(
        tiny_target, FP32 + EAGLE + ["--speculative-draft-model-path", str(seed_draft)],
        name="eagle-seed",
    )  # fmt: skip


CAPTURE_LAYOUT = "layer:5,embed,layer:2"  # not ascending: SGLang fills embed, layer:2, layer:5


@pytest.fixture(scope="module")
def capture_only(module_server_factory, tiny_target):
    """SGLang's capture-only mode, started by the launcher."""
    return module_server_factory(
        tiny_target,
        ["--cpu", *FP32, "--attention-backend", "torch_native",
         "--enable-return-aux-hidden-states", "--hidden-state-layout", CAPTURE_LAYOUT],
        name="capture-only", module="sglang_eagle3.launch",
    )  # fmt: skip


def test_seed_style_ids_capture_declared_taps_and_stay_lossless(
    eagle_seed, seed_draft, plain_outputs, figures
):
    srv = eagle_seed
    # The capture hook runs where the target model is built: the scheduler process.
    line = re.search(r"pid=(\d+)\] INFO DeepseekV3ForCausalLM: capturing taps (.*)", srv.log())
    assert line, srv.log()[-3000:]
    assert int(line.group(1)) in scheduler_pids(srv)
    assert line.group(2).startswith("embed, layer:2, layer:5 (SGLang capture indices [0, 3, 6]")
    assert "output-of-layer" in line.group(2)
    honoured = re.search(r"pid=(\d+)\] INFO drafter: norm_before_residual honoured", srv.log())
    assert honoured and int(honoured.group(1)) in scheduler_pids(srv)

    spec = {p: greedy(srv, p) for p in PROMPTS}
    same = sum(spec[p]["output_ids"] == plain_outputs[p] for p in PROMPTS)
    figures.record(
        "seed-style ids: prompts with speculative == plain greedy", f"{same} of {len(PROMPTS)}"
    )
    for p in PROMPTS:
        assert spec[p]["output_ids"] == plain_outputs[p], f"speculative output differs for {p!r}"
    assert all(spec[p]["meta_info"]["spec_verify_ct"] > 0 for p in PROMPTS)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda p: greedy(srv, p, 8), PROMPTS[:8]))
    same = sum(
        r["output_ids"] == plain_outputs[p][:8] for r, p in zip(results, PROMPTS[:8], strict=True)
    )
    figures.record("seed-style ids: concurrent requests equal to plain greedy", f"{same} of 8")
    assert [r["output_ids"] for r in results] == [plain_outputs[p][:8] for p in PROMPTS[:8]]


def test_stock_sglang_crashes_on_seed_style_ids(server_factory, tiny_target, seed_draft):
    srv = server_factory(
        tiny_target, FP32 + EAGLE + ["--speculative-draft-model-path", str(seed_draft)],
        name="eagle-seed-stock", wait=False, env=HARNESS_ONLY,
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="server exited"):
        srv.wait_ready(timeout=240)
    log = srv.log()
    # What the reference recorded for stock 0.5.23: the -1 never matches a loop index.
    assert "RuntimeError: captured 2 of 3 aux hidden states" in log
    assert "capturing taps" not in log


def test_capture_only_mode_returns_the_declared_taps_exactly(capture_only, tiny_target, figures):
    """SGLang's capture-only mode, started by the launcher, over HTTP against HF
    output_hidden_states (fp32); the server's own route says the same order."""
    srv = capture_only
    log = srv.log()
    # --skip-server-warmup posts /freeze_gc at once: the plugin waits for the port first
    assert '"POST /freeze_gc HTTP/1.1" 200' in log and "freeze_gc failed" not in log
    said = "capture only: taps layer:5, embed, layer:2 returned in ascending capture order "
    assert said + "embed, layer:2, layer:5" in log  # the launcher's wiring table
    assert "--speculative-algorithm: unset -> EAGLE3" in log  # the launcher added it
    assert "capturing taps layer:5, embed, layer:2 (SGLang capture indices [0, 3, 6]" in log
    route = srv.get("/sglang_eagle3/capture")
    assert route == {
        "sglang_eagle3": sglang_eagle3.__version__, "sglang": sglang_eagle3.SGLANG_VERSION,
        "capture_only": True, "layout": ["layer:5", "embed", "layer:2"],
        "capture_order": ["embed", "layer:2", "layer:5"], "num_layers": 8, "hidden_size": 128,
        "family": "deepseek_v2", "source": "$SGLANG_EAGLE3_LAYOUT",
        "capture_dir": None,  # files mode is off: hidden states come back as JSON
        "disaggregation_mode": "null",  # not a PD server
    }, route  # fmt: skip
    # Which HF hidden state each returned column block is: the route's capture_order.
    nearest = nearest_hf_indices(srv, tiny_target)
    assert [hf for hf, _ in nearest] == [Tap.parse(t).hf_index for t in route["capture_order"]]
    assert max(d for _, d in nearest) < 1e-4, nearest
    diff, shifted_diff = capture_vs_hf(srv, tiny_target, (0, 3, 6))  # embed, layer:2, layer:5
    figures.record("max |diff| capture-only taps vs HF hidden_states[0, 3, 6], fp32", diff)
    figures.record("max |diff| against the taps shifted by one (for contrast)", shifted_diff)
    assert diff < 1e-4, diff
    # Shifted by one tap (what input-to-layer / output-of-layer confusion gives) is far off.
    assert shifted_diff > 1e-2


# Bodies that SGLang 0.5.23's main process lets through and its scheduler dies on (the first
# three: issue "Hardening, round 2"), and neighbours that it already refuses itself.
BAD_BODIES = {
    "hidden states as a list for one prompt": {"input_ids": [1, 2, 3],
                                               "return_hidden_states": [True]},
    "a list of two for one text": {"text": "hi", "return_hidden_states": [True, False]},
    "an id past the vocabulary": {"input_ids": [5000, 3]},
    "a negative id": {"input_ids": [-1, 5]},
    "a batch with an id past the vocabulary": {"input_ids": [[1, 2], [5000]]},
    "a batch with an empty prompt": {"input_ids": [[]]},
    "an empty prompt": {"input_ids": []},
    "a float id": {"input_ids": [1.5, 2]},
    "hidden states as a word": {"input_ids": [1, 2], "return_hidden_states": "yes"},
}  # fmt: skip


# named statically too: a shared server stops after the last test whose fixtures name it
@pytest.mark.usefixtures("capture_only", "eagle_seed")
@pytest.mark.parametrize("server", ["capture_only", "eagle_seed"])
def test_bad_generate_bodies_get_400_and_the_server_keeps_serving(request, server, figures):
    srv = request.getfixturevalue(server)
    params = {"max_new_tokens": 2, "temperature": 0}
    good = srv.post("/generate", {"input_ids": [1, 2, 3], "sampling_params": params})
    for what, body in BAD_BODIES.items():
        with pytest.raises(urllib.error.HTTPError) as err:
            srv.post("/generate", {**body, "sampling_params": params}, timeout=60)
        assert err.value.code == 400, f"{what}: {err.value.code}"
        assert srv.proc.poll() is None, f"{what}: the server died"
        with urllib.request.urlopen(srv.url + "/health", timeout=30) as health:
            assert health.status == 200, what
        again = srv.post("/generate", {"input_ids": [1, 2, 3], "sampling_params": params})
        assert again["output_ids"] == good["output_ids"], what
    figures.record(f"{server}: bad /generate bodies answered 400, server up after each",
                   f"{len(BAD_BODIES)} of {len(BAD_BODIES)}")  # fmt: skip
    log = srv.log()
    assert "Scheduler hit an exception" not in log and "SIGQUIT" not in log
    assert log.count("(sglang_eagle3)") >= 6  # ours: the first six bodies above
