"""`python -m sglang_eagle3.launch.fork_server <sglang.launch_server args>`: the CPU harness's
quick start (`SGLANG_EAGLE3_CPU_FORK=1`, which the test suite sets; see cpu_env.server_module).

SGLang's own `sglang.launch_server`, except that its scheduler and detokenizer are forked
from the launcher instead of spawned, so they skip re-importing SGLang, torch and
transformers: a server on the tiny target is up in 29 s instead of 55 on 2 cores (measured
2026-12-02), with a third of the CPU. Never for serving: a forked child inherits the
launcher's plugin instead of loading it, and the parent's OpenMP pool does not survive a fork.
"""

from __future__ import annotations

import multiprocessing
import runpy
import sys


def main() -> None:
    set_start_method = multiprocessing.set_start_method

    def fork_instead(method: str | None = None, force: bool = False) -> None:
        # SGLang forces "spawn" in engine._set_envs_and_config, after its imports
        set_start_method("fork", force=True)

    multiprocessing.set_start_method = fork_instead
    sys.argv[0] = "sglang.launch_server"
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
