"""Prefill-decode disaggregation with EAGLE-3 on real SGLang 0.5.23: both servers through the
launcher with the plugin, KV over mooncake's TCP transfer (mooncake-transfer-engine-non-cuda),
requests through SGLang's own router (sglang-router) in PD mode.

Lossless against plain TP=1 and the accept length of unified TP=1 serving, on the same
prompts; then the plan check (hooks/pd_plan.py): a prefill server with another layout, another
drafter or no plugin gets its first request refused, with the error naming both plans.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from sglang_eagle3 import env_names
from sglang_eagle3.launch.server_process import free_port
from sglang_eagle3.testing.demo import prompts, spec_flags, tokenize

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

FP32 = ["--cpu", "--dtype", "float32", "--attention-backend", "intel_amx"]
SPEC = spec_flags(3, 2, 6)  # a small tree (the demo's before it served the tuner's pick)
MOONCAKE = ["--disaggregation-transfer-backend", "mooncake_tcp"]
MAX_NEW = 32
UNEVEN_NEW = [32, 9, 20, 32, 5, 14, 27]  # 7 requests at once, of different lengths
NO_PLUGIN = {env_names.PLUGINS: "sglang_eagle3_cpu_harness"}  # SGLang with the harness only


def _post(url: str, body: dict, timeout: float = 180.0) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


class Router:
    """`python -m sglang_router.launch_router --pd-disaggregation` on loopback."""

    def __init__(self, prefill, bootstrap: int, decode, log):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation",
                "--prefill", prefill.url, str(bootstrap), "--decode", decode.url,
                "--host", "127.0.0.1", "--port", str(self.port),
                "--prometheus-port", str(free_port())]  # fmt: skip
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120.0) -> Router:
        """Until both workers are listed healthy (its /health answers before that)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the router exited: {self.log.name}"
            try:
                with urllib.request.urlopen(self.url + "/workers", timeout=5) as answer:
                    workers = json.loads(answer.read()).get("workers", [])
                if len(workers) == 2 and all(w.get("is_healthy") for w in workers):
                    return self
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"router not ready in {timeout}s: {self.log.name}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        self.log.close()


@pytest.fixture(scope="module")
def deployment(module_server_factory, tmp_path_factory):
    """Plain and unified EAGLE-3 TP=1 (the references), and a PD pair behind a router."""
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    drafter, tmp = tiny_drafter(), tmp_path_factory.mktemp("pd")
    target, draft = drafter.target_dir, ["--speculative-draft-model-path", str(drafter.draft_dir)]

    def serve(name, extra, env=None):
        return module_server_factory(target, [*FP32, *extra, "--draft-cache-dir",
                                              str(tmp / f"drafts-{name}")], name=name,
                                     cpu=False, module="sglang_eagle3.launch", env=env,
                                     wait=False)  # fmt: skip

    bootstrap = free_port()
    servers = {
        "plain": serve("plain", []),
        "unified": serve("unified", [*SPEC, *draft]),
        "prefill": serve(
            "prefill",
            [
                *SPEC,
                *draft,
                "--disaggregation-mode",
                "prefill",
                *MOONCAKE,
                "--disaggregation-bootstrap-port",
                str(bootstrap),
            ],
        ),  # fmt: skip
        "decode": serve("decode", [*SPEC, *draft, "--disaggregation-mode", "decode", *MOONCAKE]),
    }
    for srv in servers.values():
        srv.wait_ready()
    router = Router(servers["prefill"], bootstrap, servers["decode"], tmp / "router.log")
    try:
        yield {**servers, "router": router.wait_ready(), "drafter": drafter, "tmp": tmp,
               "serve": serve, "draft": draft, "ids": tokenize(target, prompts(6))}  # fmt: skip
    finally:
        router.stop()


def _run(url: str, prompt_ids: list[list[int]], rounds: bool = True):
    """(outputs one at a time, 8 at once, the uneven round's; accept length of the first).
    ``rounds=False``: the one-at-a-time outputs alone (the references' concurrent rounds
    are asserted on nothing), the other two empty."""
    from sglang_eagle3.bench.metrics import spec_stats

    def one(ids, n=MAX_NEW):
        status, out = _post(url, {"input_ids": ids, "sampling_params": {
            "max_new_tokens": n, "temperature": 0, "ignore_eos": True}})  # fmt: skip
        assert status == 200, out
        return out

    seq = [one(ids) for ids in prompt_ids]
    metas = [o["meta_info"] for o in seq]
    accept = spec_stats(metas).accept_length if "spec_verify_ct" in metas[0] else None
    if not rounds:
        return [[o["output_ids"] for o in seq], [], []], accept
    uneven = [prompt_ids[i % len(prompt_ids)] for i in range(len(UNEVEN_NEW))]
    with ThreadPoolExecutor(8) as pool:
        conc = list(pool.map(one, prompt_ids))
        odd = list(pool.map(one, uneven, UNEVEN_NEW))
    return [[o["output_ids"] for o in outs] for outs in (seq, conc, odd)], accept


def test_pd_through_the_router_is_lossless(deployment, figures):
    ids = deployment["ids"]
    (want, _, _), _ = _run(deployment["plain"].url, ids, rounds=False)
    _, unified = _run(deployment["unified"].url, ids, rounds=False)
    (seq, conc, odd), accept = _run(deployment["router"].url, ids)
    figures.record(
        "PD (mooncake TCP, router): prompts equal to plain TP=1 greedy",
        f"{sum(a == b for a, b in zip(seq, want, strict=True))} of {len(want)}",
    )
    figures.record(f"PD: accept length (unified TP=1: {unified:.4f})", accept, ".4f")
    assert seq == want
    assert conc == want
    assert odd == [want[i % len(want)][:n] for i, n in enumerate(UNEVEN_NEW)]
    assert abs(accept - unified) <= 0.02 * unified, (accept, unified)
    decode_log = deployment["decode"].log()
    assert "PD plan check: prefill server" in decode_log and "serves this server's plan" in \
        decode_log  # fmt: skip
    assert "serving GET /sglang_eagle3/plan" in deployment["prefill"].log()


def _perturbed_drafter(draft_dir, out):
    """A copy of the drafter with other weights (the user's files untouched)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(draft_dir, out)
    path = next(out.glob("*.safetensors"))
    tensors = load_file(str(path))
    name = sorted(n for n in tensors if n.endswith("weight") and tensors[n].dim() == 2)[0]
    tensors[name] = tensors[name] * 1.01
    save_file(tensors, str(path))
    return out


MISMATCH = {
    "layout": ("serves another plan (taps, capture_indices differ)",
               ["--hidden-state-layout", "embed,layer:1,layer:4", "--override-draft-layout"]),
    "drafter": ("serves another plan (drafter differ)", None),
    "no_plugin": ("publishes no sglang-eagle3 plan (GET /sglang_eagle3/plan on its bootstrap "
                  "server answered HTTP 404)", []),
}  # fmt: skip


def test_pd_refuses_a_prefill_server_with_another_plan(deployment, figures):
    """Each bad prefill behind its own router with the good decode server: the first request
    is refused (no token served), and the answer and the decode's log name both plans."""
    tmp, serve = deployment["tmp"], deployment["serve"]
    started = {}
    for case, (_, extra) in MISMATCH.items():
        draft = deployment["draft"]
        if extra is None:  # another drafter: same layout and settings, other weights
            other = _perturbed_drafter(deployment["drafter"].draft_dir, tmp / "other-draft")
            draft, extra = ["--speculative-draft-model-path", str(other)], []
        bootstrap = free_port()
        started[case] = bootstrap, serve(
            f"prefill-{case}", [*SPEC, *draft, *extra, "--disaggregation-mode", "prefill",
                                *MOONCAKE, "--disaggregation-bootstrap-port", str(bootstrap)],
            env=NO_PLUGIN if case == "no_plugin" else None)  # fmt: skip
    refused = 0
    for case, (bootstrap, prefill) in started.items():
        prefill.wait_ready()
        router = Router(prefill, bootstrap, deployment["decode"], tmp / f"router-{case}.log")
        try:
            router.wait_ready()
            status, out = _post(router.url, {"input_ids": deployment["ids"][0],
                                             "sampling_params": {"max_new_tokens": 8}},
                                timeout=60)  # fmt: skip
        finally:
            router.stop()
        message = json.dumps(out)
        assert status >= 400 and "output_ids" not in out, (case, status, out)
        assert MISMATCH[case][0] in message, (case, message)
        assert "this decode server serves taps embed, layer:2, layer:5" in message, message
        refused += 1
    figures.record(
        "PD: mismatched prefill servers refused at their first request",
        f"{refused} of {len(MISMATCH)} (another layout, another drafter, no plugin)",
    )
    log = deployment["decode"].log()
    assert log.count("PD plan check: refusing every request from prefill") == len(MISMATCH)


def test_doctor_pointed_at_a_pd_deployment_says_what_to_point_it_at(deployment, capsys):
    from sglang_eagle3.doctor.cli import main

    draft = str(deployment["drafter"].draft_dir)
    said = {}
    for name in ("router", "decode", "prefill"):
        assert main(["--draft", draft, "--server", deployment[name].url]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("sglang_eagle3.doctor: "), err
        said[name] = err[0]
    workers = f"{deployment['prefill'].url}, {deployment['decode'].url}"
    assert "it is SGLang's router (workers " in said["router"]
    assert all(u in said["router"] for u in workers.split(", ")), said["router"]
    for role in ("decode", "prefill"):
        assert f"is the {role} server of a PD deployment" in said[role], said[role]
        assert "--enable-return-aux-hidden-states" in said[role]  # the command to start
