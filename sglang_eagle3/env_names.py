"""Every environment variable this project reads or sets, named once (pure)."""

# Ours.
LAYOUT = "SGLANG_EAGLE3_LAYOUT"  # taps the launcher resolved, read by the plugin in every process
NORM_BEFORE_RESIDUAL = "SGLANG_EAGLE3_NORM_BEFORE_RESIDUAL"  # "0": stock residual (measurement)
FUSED_FC = "SGLANG_EAGLE3_FUSED_FC"  # "0": never the fused kernel; "1": every shape on sm_90+
# Tests only: install the fused fc block on any device (its forward then takes the PyTorch path
# wherever the kernel may not run), so CPU tests reach the code a Hopper server runs.
FUSED_FC_TEST_INSTALL = "SGLANG_EAGLE3_TEST_FUSED_FC_INSTALL"
CPU_HARNESS = "SGLANG_EAGLE3_CPU_HARNESS"  # "1": the CPU test harness (tests and demos)
CACHE = "SGLANG_EAGLE3_CACHE"  # root of the tiny-model cache
PORT_SLICE = "SGLANG_EAGLE3_PORT_SLICE"  # "i/n": servers started here take part i of n of the ports
TINY_EMBEDDED = "SGLANG_EAGLE3_TINY_EMBEDDED"  # "0": train the tiny models, never the shipped copy
CPU_FORK = "SGLANG_EAGLE3_CPU_FORK"  # "1": on the CPU harness at one thread, fork SGLang's children
ACCEPT_WATCH = "SGLANG_EAGLE3_ACCEPT_WATCH"  # JSON: expected accept length, fraction, window
CAPTURE_DIR = "SGLANG_EAGLE3_CAPTURE_DIR"  # a folder: capture requests' taps go to files there
# a pid: the SGLang server started by that process (our CLIs) stops when it dies, SIGKILL too
PARENT_PID = "SGLANG_EAGLE3_PARENT_PID"
RECORD_TAPS = "SGLANG_EAGLE3_RECORD_TAPS"  # a folder: the CPU harness saves every captured tap

# SGLang's.
PLUGINS = "SGLANG_PLUGINS"  # comma-separated plugin names SGLang loads (all when unset)
USE_CPU_ENGINE = "SGLANG_USE_CPU_ENGINE"
CPU_OMP_THREADS_BIND = "SGLANG_CPU_OMP_THREADS_BIND"  # cores per TP rank on CPU, e.g. "0|1"
