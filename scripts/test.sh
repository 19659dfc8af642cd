#!/usr/bin/env bash
# Set up .venv (idempotent), lint, and run the tests. `.ci/run` calls exactly this: everything.
#   bash scripts/test.sh           ruff + every test, two workers (31 min on 2 cores, 2026-12-06)
#   bash scripts/test.sh --fast    ruff + the fast tier: tests not marked sglang or slow (pure
#                                  logic and small torch tests; starts no SGLang; two workers,
#                                  55 s)
# Other arguments pass to pytest (a later -m replaces the fast tier's).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
fast=0
args=()
for arg in "$@"; do
  if [[ $arg == --fast ]]; then fast=1; else args+=("$arg"); fi
done
bash scripts/setup_env.sh 2>&1 | grep -v "is ignored: it is neither" || exit 1
[[ -f .venv/.sglang_eagle3_stamp ]] || { echo "test.sh: environment setup failed"; exit 1; }
# One torch thread per process: two workers on two cores, and a second OpenMP thread only
# spins on a core the other worker holds (test_capture_e2e's training, 30 steps: 44 s at two
# threads beside one busy process, 21 s at one). Servers the tests start get 1 already.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
.venv/bin/ruff check . || exit 1
.venv/bin/ruff format --check . || exit 1
if [[ $fast -eq 1 ]]; then
  .venv/bin/python -m pytest -n 2 -m "not sglang and not slow" ${args[@]+"${args[@]}"}
else
  # Two workers, a test file (or a group sharing a session fixture) a unit of work
  # (tests/conftest_servers.py). Every full run prints its 25 slowest tests and seconds per
  # file (tests/conftest_report.py) above pytest's closing line: the budget is watched.
  .venv/bin/python -m pytest -n 2 --durations=25 ${args[@]+"${args[@]}"}
fi
rc=$?
if [[ $rc -eq 5 ]]; then
  echo "test.sh: pytest collected no tests; that is a failure"
  exit 1
fi
exit $rc
