"""The check a target checkpoint passes before a disk update loads it
(checkpoint/target_update.py): headers and configs only, one error naming the new path."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from sglang_eagle3.checkpoint.target_update import check_target_update
from sglang_eagle3.errors import WiringError

CONFIG = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 2, "hidden_size": 8}
TENSORS = {"model.embed_tokens.weight": (16, 8), "model.layers.0.mlp.gate_proj.weight": (4, 8),
           "model.layers.1.mlp.gate_proj.weight": (4, 8), "lm_head.weight": (16, 8)}  # fmt: skip


def _checkpoint(folder, config=CONFIG, tensors=TENSORS):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file({n: torch.zeros(s) for n, s in tensors.items()}, str(folder / "model.safetensors"))
    return folder


def test_the_served_checkpoint_again_and_new_values_pass(tmp_path):
    served = _checkpoint(tmp_path / "served")
    check_target_update(served, served)
    check_target_update(served, _checkpoint(tmp_path / "new"))


@pytest.mark.parametrize(
    "config,tensors,words",
    [
        ({**CONFIG, "num_hidden_layers": 3}, TENSORS, "with 3 layers of width 8, the server "
         "serves DeepseekV3ForCausalLM with 2 layers"),
        ({**CONFIG, "architectures": ["LlamaForCausalLM"]}, TENSORS, "it holds LlamaForCausalLM"),
        (CONFIG, {k: v for k, v in TENSORS.items() if "layers.1" not in k},
         "1 served tensors missing: layers.1.mlp.gate_proj.weight"),
        (CONFIG, {**TENSORS, "model.layers.0.mlp.up_proj.weight": (4, 8)},
         "1 tensors the served target does not have: layers.0.mlp.up_proj.weight"),
        (CONFIG, {**TENSORS, "lm_head.weight": (17, 8)},
         "1 wrong shapes: lm_head.weight [17, 8] (served [16, 8])"),
    ],
    ids=["depth", "architecture", "missing", "unknown", "shape"],
)  # fmt: skip
def test_another_checkpoint_is_refused_naming_it(tmp_path, config, tensors, words):
    served = _checkpoint(tmp_path / "served")
    new = _checkpoint(tmp_path / "new", config, tensors)
    with pytest.raises(WiringError, match="update refused") as err:
        check_target_update(served, new)
    assert words in str(err.value) and str(new) in str(err.value)
    assert "the weights served before keep serving" in str(err.value)


def test_no_directory_no_config_and_a_truncated_file_are_refused(tmp_path):
    served = _checkpoint(tmp_path / "served")
    with pytest.raises(WiringError, match="no such directory"):
        check_target_update(served, tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(WiringError, match="not a checkpoint of the served .*no readable config"):
        check_target_update(served, empty)
    cut = _checkpoint(tmp_path / "cut")
    weights = cut / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-16])
    with pytest.raises(WiringError, match="data is truncated"):
        check_target_update(served, cut)
