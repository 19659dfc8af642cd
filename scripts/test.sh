#!/usr/bin/env bash
# Set up .venv (idempotent) and run the whole test suite. `.ci/run` calls exactly this.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup_env.sh 2>&1 | grep -v "is ignored: it is neither" || exit 1
[[ -f .venv/.sglang_eagle3_stamp ]] || { echo "test.sh: environment setup failed"; exit 1; }
.venv/bin/ruff check . || exit 1
.venv/bin/ruff format --check . || exit 1
.venv/bin/python -m pytest "$@"
rc=$?
if [[ $rc -eq 5 ]]; then
  echo "test.sh: pytest collected no tests; that is a failure"
  exit 1
fi
exit $rc
