#!/usr/bin/env bash
# The README's test command: installs what it needs, then runs every check CI runs.
#   generated-code staleness, ruff, mypy --strict, pytest (unit, property, simulation,
#   multi-process, end-to-end, Spark: installs the test and spark extras; Spark needs Java 17)
# Extra arguments go to pytest, e.g. scripts/test.sh -k storage
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/bootstrap.sh test,spark
py="$root/.venv/bin/python"
echo "==> ruff"
"$py" -m ruff check services tests bench scripts
echo "==> mypy --strict"
"$py" -m mypy
echo "==> pytest"
"$py" -m pytest "$@"
