"""Make stock SGLang 0.5.23 serve DeepSeek targets and EAGLE-3 on CPUs without AMX.

For tests and demos, not speed. Runs as the `sglang_eagle3_cpu_harness` general plugin, so
SGLang itself calls it in every process (launcher, scheduler, detokenizer) before it builds
its server arguments; it does nothing unless SGLANG_EAGLE3_CPU_HARNESS=1.
"""

from __future__ import annotations

import functools
import os
import sys

from sglang_eagle3 import env_names
from sglang_eagle3.hooks.plan import pd_server
from sglang_eagle3.launch.cpu_env import HARNESS_FLAG, harness_enabled
from sglang_eagle3.log import get_logger
from sglang_eagle3.testing.cpu_harness.graph_runner import install_graph_runner_ops
from sglang_eagle3.testing.cpu_harness.tap_recorder import install_tap_recorder, record_dir

logger = get_logger()


def _route_torch_native_to_mla() -> None:
    # SGLang has no DeepSeek handler for torch_native: it falls back to the triton
    # handler, picks the MHA path and crashes. The absorbed MLA path works on CPU.
    from sglang.srt.models.deepseek_common.attention_backend_handler import (
        AttentionBackendRegistry,
    )
    from sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods import (
        AttnForwardMethod,
    )

    def handle_attention_torch_native(attn, forward_batch):
        return AttnForwardMethod.MLA

    AttentionBackendRegistry.register("torch_native", handle_attention_torch_native)


def _keep_intel_amx_backend() -> None:
    # Server-argument resolution swaps intel_amx for torch_native on CPUs without AMX,
    # and torch_native cannot verify EAGLE drafts. Only that decision reads this fact:
    # layer code probes the CPU directly, so no AMX weight packing is attempted.
    from sglang.srt.runtime_context import get_platform

    get_platform()._install(has_amx=True)


def _minimax_m2_qk_norm_on_cpu() -> None:
    # MiniMax-M2 takes its CPU q/k norm (the reference fused_qk_rmsnorm_cpu) only where it
    # probed AMX at import; otherwise it calls a CUDA-only Triton pair and dies.
    import sglang.srt.models.minimax_m2 as minimax_m2

    minimax_m2._is_amx_available = True


def _no_pynccl_on_cpu() -> None:
    # SGLang builds a PyNcclCommunicator for every parallel group unless the platform says
    # otherwise, and it dies on CPU ("Expected a cuda device"); its collectives on CPU tensors
    # already fall back to gloo, which is what tensor parallelism here needs.
    from sglang.srt.distributed import parallel_state

    original = parallel_state.init_model_parallel_group

    @functools.wraps(original)
    def init_model_parallel_group(*args, **kwargs):
        if kwargs.get("use_pynccl") is None:
            kwargs["use_pynccl"] = False
        return original(*args, **kwargs)

    parallel_state.init_model_parallel_group = init_model_parallel_group


def _expert_parallel_on_cpu() -> None:
    # Under --ep-size > 1 (a2a backend none) SGLang's StandardDispatcher marks the experts of
    # other ranks -1, and the CPU MoE (fused_moe_native.moe_forward_native, the path taken
    # without AMX weight packing) scatters by expert id and dies on -1. Each rank computes
    # only its own experts' slots here; the MoE all-reduce adds the ranks' parts. Its scatter
    # overwrites rather than adds, so kept slots run one per row and are summed per token.
    import torch
    from sglang.srt.layers.moe import fused_moe_native

    original = fused_moe_native.moe_forward_native

    @functools.wraps(original)
    def moe_forward_native(layer, x, topk_output, moe_runner_config):
        topk_weights, topk_ids, _ = topk_output
        keep = topk_ids >= 0  # [tokens, top_k]
        if bool(keep.all()):
            return original(layer, x, topk_output, moe_runner_config)
        token = torch.arange(x.shape[0], device=x.device).unsqueeze(1).expand_as(topk_ids)[keep]
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        if token.numel():
            kept = topk_output._replace(topk_weights=topk_weights[keep].unsqueeze(1),
                                        topk_ids=topk_ids[keep].unsqueeze(1))  # fmt: skip
            out.index_add_(0, token, original(layer, x[token], kept, moe_runner_config).float())
        return out.to(x.dtype)

    fused_moe_native.moe_forward_native = moe_forward_native  # unquant.py imports it per call


def _reduce_scatterv_on_gloo() -> None:
    # DP attention + EP returns the MoE output through reduce_scatterv, which needs pynccl
    # (switched off above); SGLang's own all-reduce + narrow variant runs on gloo.
    from sglang.srt.distributed import parallel_state

    group = parallel_state.GroupCoordinator
    original = group.reduce_scatterv

    @functools.wraps(original)
    def reduce_scatterv(self, input_, output=None, sizes=None):
        if self.pynccl_comm is None:
            return self._deterministic_reduce_scatterv(input_, output, sizes)
        return original(self, input_, output, sizes)

    group.reduce_scatterv = reduce_scatterv


def _pd_transfer_on_cpu() -> None:
    # The prefill's KV send takes a pinned-memory + torch.cuda.Event branch when the sender
    # supports host tensor indices (disaggregation/prefill.py:1746-1761), which mooncake's does;
    # the other branch (mem_cache/common.py kv_to_page_indices) is device-free. Nothing else on
    # the mooncake_tcp path needs a GPU.
    from sglang.srt.disaggregation.mooncake import conn

    conn.MooncakeKVSender.supports_host_tensor_indices = False


def _check_reference_kernels() -> None:
    import sgl_kernel

    if not getattr(sgl_kernel, "SGLANG_EAGLE3_REFERENCE", False):
        raise RuntimeError(
            f"{HARNESS_FLAG}=1 but `sgl_kernel` resolves to {sgl_kernel.__file__}, not the "
            "reference kernels of sglang_eagle3. Start SGLang through "
            "`python -m sglang_eagle3.launch --cpu` (or "
            "sglang_eagle3.launch.cpu_env.harness_env())."
        )


def activate() -> bool:
    """Apply the harness if enabled; return whether it was applied."""
    if not harness_enabled():
        return False
    if os.environ.get(env_names.USE_CPU_ENGINE) != "1":
        raise RuntimeError(f"{HARNESS_FLAG}=1 needs SGLANG_USE_CPU_ENGINE=1 as well.")
    _check_reference_kernels()
    _keep_intel_amx_backend()
    _route_torch_native_to_mla()
    _minimax_m2_qk_norm_on_cpu()
    _no_pynccl_on_cpu()
    _expert_parallel_on_cpu()
    _reduce_scatterv_on_gloo()
    install_graph_runner_ops()
    if pd_server(sys.argv):
        _pd_transfer_on_cpu()
    out_dir = record_dir()
    if out_dir is not None:
        install_tap_recorder(out_dir)
        logger.info(f"CPU harness: saving captured taps to {out_dir}")
    logger.info("CPU harness active (reference sgl_kernel ops; for tests and demos, not speed)")
    return True
