"""Graph proxies on CPU: what CUDA graphs and torch.compile do to this project's code on a GPU,
checked where no GPU is.

- SGLang's CPU graph runner (`--enable-torch-compile`: the target's decode forward compiled by
  inductor and replayed) serves capture-only mode with a non-ascending layout that includes
  `embed`, and every captured row equals HF's hidden states, decode steps included.
- The drafter's hooked first layer (`eagle3_layer_forward`, norm_before_residual) and the
  patched fc block (`install_fused_fc`, CPU fallback) compile with `fullgraph=True` (a graph
  break raises) and equal eager.
- The reference `sgl_kernel` defines the ops the graph runner registers fakes for only when it
  does; each one it does not implement raises NotImplementedError when called.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_checks import PROMPT, captured_and_hf, taps_diff

from sglang_eagle3.launch.cpu_env import SHIM_DIR, harness_env

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

LAYOUT = "layer:5,embed,layer:2"  # not ascending, embed included: fills embed, layer:2, layer:5
HF_INDICES = (0, 3, 6)
# One graph (bs 1): inductor takes about 2 min per batch size here. Every decode step logs
# "cpu graph: True|False" (decode-log-interval 1).
COMPILED = ["--cpu", "--dtype", "float32", "--attention-backend", "intel_amx",
            "--enable-return-aux-hidden-states", "--hidden-state-layout", LAYOUT,
            "--enable-torch-compile", "--cuda-graph-bs-decode", "1",
            "--decode-log-interval", "1"]  # fmt: skip
GRAPH_OPS = SHIM_DIR / "sgl_kernel" / "graph_ops.py"


@pytest.fixture(scope="module")
def compiled_capture(module_server_factory, tiny_target):
    srv = module_server_factory(tiny_target, COMPILED, name="capture-compiled", wait=False,
                                module="sglang_eagle3.launch")  # fmt: skip
    return srv.wait_ready(timeout=600)  # the compile alone takes 2 min on 2 cores


def test_compiled_decode_captures_what_hf_gives(compiled_capture, tiny_target, figures):
    srv = compiled_capture
    got, hs, start = captured_and_hf(srv, tiny_target, max_new_tokens=6)
    prefill = len(PROMPT) - start
    decode_steps = len(got) - prefill
    log = srv.log()
    # SGLang's own lines: the graph was compiled, and each decode step replayed it
    assert re.search(r"Capture target decode CPU graph end\. bs=\[1\]", log), log[-3000:]
    assert "52 sgl_kernel ops defined for the CPU graph runner" in log
    decode_lines = re.findall(r"Decode batch.*?cpu graph: (True|False)", log)
    assert len(decode_lines) >= decode_steps >= 4, (decode_steps, decode_lines)
    assert set(decode_lines) == {"True"}, decode_lines
    diff = taps_diff(got, hs, start, HF_INDICES)
    decode_diff = taps_diff(got[prefill:], hs, start + prefill, HF_INDICES)
    shifted = taps_diff(got, hs, start, tuple(i + 1 for i in HF_INDICES))
    figures.record("max |diff| compiled (CPU graph) capture vs HF hidden_states[0, 3, 6]", diff)
    figures.record("the same over the compiled decode steps only", decode_diff)
    assert diff < 1e-4 and decode_diff < 1e-4, (diff, decode_diff)  # test_capture_server's
    assert shifted > 1e-2, shifted  # a tap one layer off is far away


# --- in one SGLang child process: the shim's graph ops, and fullgraph compiles -------------

PROBE = r"""
import json, types
import torch
import torch.nn.functional as F
from torch import nn

torch.set_grad_enabled(False)  # SGLang runs models under no_grad / inference mode
out = {}

# 1. The reference sgl_kernel as SGLang's CPU graph runner meets it
import sgl_kernel
from sgl_kernel import graph_ops
import sglang.srt.model_executor.cpu_graph_runner as cgr
from sglang_eagle3.testing.cpu_harness.graph_runner import install_graph_runner_ops

out["defined_before"] = [n for n in graph_ops.STUB_SCHEMAS if hasattr(torch.ops.sgl_kernel, n)]
install_graph_runner_ops()
cgr.register_fake_ops(1)  # SGLang's own registration, through the harness's hook
out["sglang_faked"] = sorted(cgr._CPU_COMPILE_FAKE_OPS)
has = torch._C._dispatch_has_kernel_for_dispatch_key
out["without_fake"] = [n for n in out["sglang_faked"] if not has(f"sgl_kernel::{n}", "Meta")]


def value(arg):
    kind = arg.type.kind()
    if kind == "OptionalType":
        return None
    if str(arg.type) == "ScalarType":
        return torch.float32
    return {"TensorType": lambda: torch.ones(2, 2), "IntType": lambda: 1,
            "FloatType": lambda: 1.0, "BoolType": lambda: False, "ListType": lambda: [1],
            "StringType": lambda: "silu"}[kind]()


calls = {}
for name in graph_ops.STUB_SCHEMAS:
    op = getattr(torch.ops.sgl_kernel, name).default
    try:
        op(*[value(a) for a in op._schema.arguments])
        calls[name] = "returned"
    except NotImplementedError as error:
        calls[name] = "raised" if graph_ops.STUB_MESSAGE in str(error) else str(error)
    except Exception as error:
        calls[name] = f"{type(error).__name__}: {error}"
out["stub_calls"] = calls

# 2. fullgraph compiles of the drafter code this project puts in SGLang's forward
from sglang.srt.layers.activation import SiluAndMul
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.models.llama_eagle3 import LlamaDecoderLayer, LlamaModel
from sglang_eagle3.hooks.drafter import eagle3_layer_forward
from sglang_eagle3.ops.eagle3_fused_fc_patch import install_fused_fc

H, HEADS, T, K, EPS = 32, 4, 5, 3, 1e-5


class Attention(nn.Module):
    # Stand-in for LlamaAttention: SGLang's needs tensor-parallel groups and a RadixAttention
    # backend with a KV pool. Same call signature, same 2H input on the first layer.
    def __init__(self):
        super().__init__()
        self.qkv_proj = nn.Linear(2 * H, 3 * H, bias=False)
        self.o_proj = nn.Linear(H, H, bias=False)

    def forward(self, positions, hidden_states, forward_batch):
        q, k, v = self.qkv_proj(hidden_states).view(T, 3, HEADS, H // HEADS).unbind(1)
        o = F.scaled_dot_product_attention(*(x.transpose(0, 1) for x in (q, k, v)), is_causal=True)
        return self.o_proj(o.transpose(0, 1).reshape(T, H))


class Mlp(nn.Module):  # LlamaMLP's structure with SGLang's SiluAndMul; plain linears (no TP)
    def __init__(self):
        super().__init__()
        self.gate_up_proj = nn.Linear(H, 4 * H, bias=False)
        self.act_fn = SiluAndMul()
        self.down_proj = nn.Linear(2 * H, H, bias=False)

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


def randomize(module):
    for p in module.parameters():
        p.copy_(torch.rand_like(p) + 0.5 if p.dim() == 1 else torch.randn_like(p) * 0.2)
    return module


def stock_forward(*args):
    raise AssertionError("norm_before_residual did not take the hooked path")


def compare(fn, *args):
    eager = fn(*args)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(fn, fullgraph=True)(*args)  # a graph break raises
    except Exception as error:
        return {"error": f"{type(error).__name__}: {str(error)[:2000]}"}
    pairs = zip(eager if isinstance(eager, tuple) else (eager,),
                compiled if isinstance(compiled, tuple) else (compiled,))
    return {"max_diff": max((a - b).abs().max().item() for a, b in pairs)}


torch.manual_seed(0)
layer = LlamaDecoderLayer.__new__(LlamaDecoderLayer)  # SGLang's class; its own __init__ needs TP
nn.Module.__init__(layer)
layer.is_input_layer = True
layer.hidden_norm, layer.input_layernorm, layer.post_attention_layernorm = (
    RMSNorm(H, eps=EPS) for _ in range(3))
layer.self_attn, layer.mlp = Attention(), Mlp()
layer.sglang_eagle3_norm_before_residual = True  # what eagle3_load_weights sets
randomize(layer)
batch = types.SimpleNamespace()
out["layer"] = compare(
    lambda p, e, h: eagle3_layer_forward(stock_forward, layer, p, e, h, batch, None),
    torch.arange(T), torch.randn(T, H), torch.randn(T, H) * 3)

model = LlamaModel.__new__(LlamaModel)  # as tests/scripts/eagle3_fused_fc_patch_sglang.py
nn.Module.__init__(model)
model.num_aux_hidden_states = K
model.fc = nn.Linear(K * H, H, bias=True)
model.input_norm = RMSNorm(K * H, eps=EPS)
model.fc_norm = nn.ModuleList(RMSNorm(H, eps=EPS) for _ in range(K))
randomize(model)
install_fused_fc(model)
out["fc"] = compare(lambda packed: model.fc(packed), torch.randn(T, K * H) * 2)
print("PROBE " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe() -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE], env=harness_env(), capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("PROBE "))


def _graph_ops():
    """graph_ops.py loaded on its own: importing the shim package would register its ops here."""
    spec = importlib.util.spec_from_file_location("graph_ops_alone", GRAPH_OPS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_graph_runner_ops_are_defined_when_it_asks_and_fail_loudly(probe, figures):
    graph_ops = _graph_ops()
    assert probe["defined_before"] == []  # an eager process keeps the reference as it was
    assert probe["sglang_faked"] == list(graph_ops.SGLANG_FAKED)  # exactly SGLang's list
    assert probe["without_fake"] == []
    assert probe["stub_calls"] == {name: "raised" for name in graph_ops.STUB_SCHEMAS}
    figures.record("sgl_kernel ops defined for SGLang's CPU graph runner (raise when called)",
                   len(graph_ops.STUB_SCHEMAS))  # fmt: skip


def _sglang_fake_params() -> dict[str, tuple[list[str], bool]]:
    """op -> (parameter names of SGLang 0.5.23's fake for it, whether it ends in *args), for
    the fakes that name their parameters (read from the source, SGLang not imported)."""
    spec = importlib.util.find_spec("sglang")
    root = Path(next(iter(spec.submodule_search_locations)))  # type: ignore[union-attr]
    tree = ast.parse((root / "srt/model_executor/cpu_graph_runner.py").read_text("utf-8"))
    fn = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "register_fake_ops"
    )
    out = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.FunctionDef) and node.decorator_list:
            name = node.decorator_list[0].args[0]  # type: ignore[attr-defined]
            if isinstance(name, ast.Constant):
                out[name.value] = ([a.arg for a in node.args.args], node.args.vararg is not None)
    return out


def test_stub_schemas_take_the_arguments_sglangs_fakes_take():
    """A fake is called with the op's schema-bound arguments while tracing: same order."""
    import torch

    stubs = _graph_ops().STUB_SCHEMAS
    fakes = _sglang_fake_params()
    assert len(fakes) >= 25
    for name, (params, varargs) in fakes.items():
        if name in stubs:
            schema = torch._C.parse_schema(name + stubs[name])
            names = [a.name for a in schema.arguments]
            assert (names[: len(params)] if varargs else names) == params, name


@pytest.mark.parametrize(
    "part,label",
    [
        ("layer", "eagle3_layer_forward (norm_before_residual) fullgraph vs eager, fp32"),
        ("fc", "install_fused_fc fc block (CPU fallback) fullgraph vs eager, fp32"),
    ],
)
def test_drafter_layer_and_fc_block_compile_fullgraph_and_equal_eager(probe, figures, part, label):
    result = probe[part]
    assert "error" not in result, result.get("error")
    figures.record(label, result["max_diff"])
    assert result["max_diff"] < 1e-5
