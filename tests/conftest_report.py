"""What a run reports beyond pass and fail (a pytest plugin, loaded by conftest.py):

- ``figures``: numbers the README quotes, printed in a "figures measured" section;
- with ``--durations`` (every full run of scripts/test.sh): seconds per test file.

Both travel in test reports (``user_properties`` and durations), so they add up the same
in one process and under pytest-xdist, where the tests run in worker processes.
"""

from __future__ import annotations

import pytest

_FIGURE = "sglang_eagle3_figure"
_FIGURES = pytest.StashKey[dict]()
_FILE_SECONDS = pytest.StashKey[dict]()


class Figures:
    """`figures.record(name, value)`: a number the README quotes, printed by this run in the
    "figures measured" section at the end (no -s needed). `record_max` keeps one entry per
    name: the largest value over every call in the run, and the test that gave it."""

    def __init__(self, node):
        self._node = node

    def record(self, name: str, value, fmt: str | None = None, *, keep_max: bool = False):
        entry = {"name": name, "value": value, "fmt": fmt, "test": self._node.nodeid,
                 "max": keep_max}  # fmt: skip
        self._node.user_properties.append((_FIGURE, entry))
        print(f"figure: {name} = {_format(value, fmt)}")

    def record_max(self, name: str, value: float, fmt: str | None = None) -> None:
        self.record(name, value, fmt, keep_max=True)


def _format(value, fmt: str | None) -> str:
    if fmt is not None:
        return format(value, fmt)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


@pytest.fixture
def figures(request) -> Figures:
    return Figures(request.node)


def pytest_configure(config):
    config.stash[_FIGURES] = {}
    config.stash[_FILE_SECONDS] = {}


def pytest_runtest_logreport(report):
    config = _CONFIG[0]
    if config is None:
        return
    path = report.nodeid.split("::")[0]
    seconds = config.stash[_FILE_SECONDS]
    seconds[path] = seconds.get(path, 0.0) + report.duration
    if report.when != "teardown":  # the teardown report carries every property of the test
        return
    found = config.stash[_FIGURES]
    for i, (key, entry) in enumerate(report.user_properties):
        if key != _FIGURE:
            continue
        name = entry["name"] if entry["max"] else (report.nodeid, i)
        old = found.get(name)
        if old is None or (entry["max"] and entry["value"] > old["value"]):
            found[name] = entry


_CONFIG: list = [None]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG[0] = session.config


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    seconds = config.stash.get(_FILE_SECONDS, {})
    if config.option.durations is not None and seconds:
        terminalreporter.write_sep("=", "seconds per test file, slowest first")
        for path, secs in sorted(seconds.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{secs:8.1f} s  {path}")
        total = sum(seconds.values())
        terminalreporter.write_line(f"{total:8.1f} s  in all {len(seconds)} files (test time)")
    found = list(config.stash.get(_FIGURES, {}).values())
    if found:
        terminalreporter.write_sep("=", f"figures measured ({len(found)})")
        for f in found:
            terminalreporter.write_line(f"{f['name']} = {_format(f['value'], f['fmt'])}")
            terminalreporter.write_line(f"    [{f['test']}]")
