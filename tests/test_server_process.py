"""How tests, the demo and the doctor start SGLang servers (pure parts: ports, CPU flags)."""

from __future__ import annotations

import pytest

from sglang_eagle3 import env_names
from sglang_eagle3.launch import server_process as sp


def test_port_slices_split_the_range_with_room_for_sglangs_own_ports():
    low, high = 19668, 31668
    a, b = sp._slice(low, high, "0/2"), sp._slice(low, high, "1/2")
    assert low <= a[0] < a[1] < b[0] < b[1] <= high
    assert b[0] - a[1] >= 400  # SGLang's extra ports sit above the HTTP port
    for spec in ("", "x", "2/2", "-1/2", "1/0"):
        assert sp._slice(low, high, spec) == (low, high), spec


def test_free_port_stays_in_this_workers_slice(monkeypatch):
    monkeypatch.setenv(env_names.PORT_SLICE, "1/2")
    high = sp._ephemeral_low() - 1100
    low, top = sp._slice(max(1024, high - 12000), high, "1/2")
    assert all(low <= sp.free_port() <= top for _ in range(20))


@pytest.mark.parametrize("given", [[], ["--max-running-requests", "2"]])
def test_cpu_defaults_sleep_when_idle_and_keep_what_is_given(given):
    argv = sp.with_cpu_defaults(given)
    assert "--sleep-on-idle" in argv  # an idle scheduler would spin a whole core
    assert argv.count("--max-running-requests") == 1
    assert argv[argv.index("--max-running-requests") + 1] == (given[1] if given else "8")


@pytest.mark.parametrize(
    "env,module",
    [
        ({env_names.CPU_FORK: "1", "OMP_NUM_THREADS": "1"}, "sglang_eagle3.launch.fork_server"),
        ({env_names.CPU_FORK: "1", "OMP_NUM_THREADS": "2"}, "sglang.launch_server"),
        ({env_names.CPU_FORK: "0", "OMP_NUM_THREADS": "1"}, "sglang.launch_server"),
        ({"OMP_NUM_THREADS": "1"}, "sglang.launch_server"),
    ],
)
def test_only_the_one_thread_cpu_harness_forks_sglangs_children(env, module, tmp_path):
    """Forking is the test suite's quick start: never without the harness and the opt-in, nor
    with an OpenMP pool a fork would not carry over."""
    from sglang_eagle3.launch.cpu_env import server_module

    assert server_module({env_names.CPU_HARNESS: "1", **env}) == module
    assert server_module(env) == "sglang.launch_server"  # no harness: stock, always
    if env_names.CPU_FORK in env:  # the CPU servers tests start go through it
        assert sp.sglang_server("/m", [], tmp_path / "log", env=env).argv[1:3] == ["-m", module]


@pytest.mark.parametrize(
    "argv,ranks",
    [
        ([], 1),
        (["--tp-size", "2"], 2),
        (["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"], 2),  # DP inside TP
        (["--tp-size", "2", "--dp-size", "2"], 4),
        (["--tp-size", "2", "--pp-size", "2"], 4),
    ],
)
def test_cpu_ranks_count_what_sglang_binds(argv, ranks):
    from sglang_eagle3.launch.cpu_env import cpu_ranks

    assert cpu_ranks(argv) == ranks


def test_rank_binding_gives_each_rank_its_own_cores_or_refuses():
    from sglang_eagle3.errors import WiringError
    from sglang_eagle3.launch.cpu_env import rank_binding

    bind = env_names.CPU_OMP_THREADS_BIND
    assert rank_binding({}, 2, [0, 1])[bind] == "0|1"
    assert rank_binding({}, 2, [7, 4, 5, 6, 0, 1, 2, 3])[bind] == "0-3|4-7"
    assert rank_binding({}, 2, [0, 2, 4, 6])[bind] == "0,2|4,6"  # not contiguous: listed
    assert bind not in rank_binding({}, 1, [0, 1])  # one rank: SGLang's own default works
    assert rank_binding({bind: "1|0"}, 2, [0, 1])[bind] == "1|0"  # the user's choice stays
    with pytest.raises(WiringError, match=r"4 CPU ranks need a core each.*lower --tp-size"):
        rank_binding({}, 4, [0, 1])
