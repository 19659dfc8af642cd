"""CPU test harness for running real SGLang 0.5.23 without a GPU: for tests and demos, not speed.

`shim/` holds a package importable as `sgl_kernel` whose ops are plain PyTorch reference
implementations of the few kernels SGLang's CPU engine calls for a tiny DeepSeek-V3 target
with an EAGLE-3 drafter. It is put on PYTHONPATH only in the test/demo environment (see
`sglang_eagle3.launch.cpu_env.harness_env`) and refuses to import when a real `sgl_kernel` is
importable, so it can never shadow one.
"""

from sglang_eagle3.launch.cpu_env import SHIM_DIR

__all__ = ["SHIM_DIR"]
