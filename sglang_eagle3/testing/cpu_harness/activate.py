"""Make stock SGLang 0.5.23 serve DeepSeek targets and EAGLE-3 on CPUs without AMX.

For tests and demos, not speed. Runs as the `sglang_eagle3_cpu_harness` general plugin, so
SGLang itself calls it in every process (launcher, scheduler, detokenizer) before it builds
its server arguments; it does nothing unless SGLANG_EAGLE3_CPU_HARNESS=1.
"""

from __future__ import annotations

import os

from sglang_eagle3 import env_names
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
    import functools

    from sglang.srt.distributed import parallel_state

    original = parallel_state.init_model_parallel_group

    @functools.wraps(original)
    def init_model_parallel_group(*args, **kwargs):
        if kwargs.get("use_pynccl") is None:
            kwargs["use_pynccl"] = False
        return original(*args, **kwargs)

    parallel_state.init_model_parallel_group = init_model_parallel_group


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
    install_graph_runner_ops()
    out_dir = record_dir()
    if out_dir is not None:
        install_tap_recorder(out_dir)
        logger.info(f"CPU harness: saving captured taps to {out_dir}")
    logger.info("CPU harness active (reference sgl_kernel ops; for tests and demos, not speed)")
    return True
