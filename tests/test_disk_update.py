"""`POST /update_weights_from_disk` on a real CPU EAGLE-3 server (hooks/disk_update.py): a bad
update is refused with nothing written and the server keeps serving the same greedy tokens; a
good one loads the target only, keeps the drafter, and says so.

Server S serves a copy of the trained tiny target with the trained drafter; server P serves a
perturbed copy of the target (plain: EAGLE-3 is lossless, so S after its update must give P's
greedy tokens). Every checkpoint is a copy in the test's folder.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

import pytest

from sglang_eagle3.testing.demo import prompts, tokenize

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

FLAGS = ["--cpu", "--dtype", "float32", "--attention-backend", "intel_amx"]
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]  # fmt: skip


def _copy(src, out, change=None):
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, out)
    if change is not None:
        path = out / "model.safetensors"
        tensors = load_file(str(path))
        change(tensors)
        save_file(tensors, str(path), metadata={"format": "pt"})
    return out


def _perturb(tensors) -> None:
    for name in sorted(tensors):
        if name.endswith("mlp.down_proj.weight") or name.endswith("o_proj.weight"):
            tensors[name] = tensors[name] * 1.25


@pytest.fixture(scope="module")
def setup(module_server_factory, tmp_path_factory):
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    drafter, tmp = tiny_drafter(), tmp_path_factory.mktemp("disk")
    served = _copy(drafter.target_dir, tmp / "served")
    newer = _copy(drafter.target_dir, tmp / "newer", _perturb)
    truncated = _copy(drafter.target_dir, tmp / "truncated")
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4096])

    def serve(name, target, extra):
        return module_server_factory(target, [*FLAGS, *extra, "--draft-cache-dir",
                                              str(tmp / f"drafts-{name}")], name=name,
                                     cpu=False, module="sglang_eagle3.launch",
                                     wait=False)  # fmt: skip

    eagle = serve("eagle3", served, [*SPEC, "--speculative-draft-model-path",
                                     str(drafter.draft_dir)])  # fmt: skip
    plain_newer = serve("plain-newer", newer, [])
    eagle.wait_ready(), plain_newer.wait_ready()
    ids = tokenize(served, prompts(4))
    return {"eagle": eagle, "plain_newer": plain_newer, "served": served, "newer": newer,
            "truncated": truncated, "draft": drafter.draft_dir, "missing": tmp / "nope",
            "ids": ids, "before": _greedy(eagle, ids)}  # fmt: skip


def _greedy(srv, ids) -> list[list[int]]:
    params = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
    return [srv.post("/generate", {"input_ids": i, "sampling_params": params})["output_ids"]
            for i in ids]  # fmt: skip


def _update(srv, path) -> tuple[int, dict]:
    req = urllib.request.Request(srv.url + "/update_weights_from_disk",
                                 data=json.dumps({"model_path": str(path)}).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=300) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


BAD = {  # update -> words of its refusal
    # another model: the drafter's own directory
    "draft": "update refused: it is not a checkpoint of the served DeepseekV3ForCausalLM",
    "missing": "no such directory (SGLang would try the name as a Hugging Face hub id)",
    "truncated": "update refused: data is truncated",
}


def test_a_bad_disk_update_is_refused_and_nothing_changes(setup, figures):
    srv = setup["eagle"]
    for case, words in BAD.items():
        status, answer = _update(srv, setup[case])
        assert status == 400 and answer["success"] is False, (case, status, answer)
        assert words in answer["message"] and str(setup[case]) in answer["message"], answer
        with urllib.request.urlopen(srv.url + "/health", timeout=60) as health:
            assert health.status == 200, case
        assert _greedy(srv, setup["ids"]) == setup["before"], case
    figures.record(
        "disk update: bad updates refused, greedy tokens unchanged",
        f"{len(BAD)} of {len(BAD)} (another model, missing path, truncated file)",
    )


def test_a_target_update_keeps_the_drafter_and_says_so(setup):
    srv = setup["eagle"]
    status, answer = _update(srv, setup["served"])  # the target's own directory
    assert status == 200 and answer["success"] is True, answer
    # the drafter SGLang serves: the launcher's flat copy of it
    assert "; drafter kept (" in answer["message"] and "its own weights unchanged" in \
        answer["message"]  # fmt: skip
    assert _greedy(srv, setup["ids"]) == setup["before"]
    status, answer = _update(srv, setup["newer"])  # a new target checkpoint (an RL step)
    assert status == 200 and f"Target weights from {setup['newer']}" in answer["message"]
    now = _greedy(srv, setup["ids"])
    assert now == _greedy(setup["plain_newer"], setup["ids"])
    assert now != setup["before"]  # the perturbed target really answers otherwise
