#!/usr/bin/env bash
# Rewrite constraints.txt from a fresh virtualenv with kraftlog's test, spark and kind extras.
# Run it after changing a dependency in pyproject.toml (or to move to newer versions on
# purpose), then run scripts/test.sh: a new ruff or mypy can bring new findings.
# Usage: scripts/refresh_constraints.sh        (PYTHON=python3.11 to pick the interpreter)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --upgrade pip
"$tmp/venv/bin/python" -m pip install -q -e "$root[test,spark,kind]" 2>&1 \
  | { grep -v "is ignored: it is neither a file nor a directory" || true; }
pip_version=$("$tmp/venv/bin/python" -m pip --version | cut -d' ' -f2)
{
  cat <<'HEADER'
# Exact versions of every Python package kraftlog and its `test`, `spark` and `kind` extras install
# (`pip freeze` of a fresh virtualenv, kraftlog itself left out), plus pip. Made by
# scripts/refresh_constraints.sh; do not edit by hand. scripts/bootstrap.sh and
# docker/Dockerfile install with `pip install -c constraints.txt`, so every checkout, CI
# and the image run the same grpcio, ruff, mypy, pytest... pyproject.toml keeps the ranges
# kraftlog works with; this file picks one point inside them.
HEADER
  echo "pip==$pip_version"
  # --exclude-editable leaves kraftlog out; in a git checkout pip still adds a comment for it.
  "$tmp/venv/bin/python" -m pip freeze --exclude-editable | grep -v '^# Editable'
} > "$root/constraints.txt"
echo "==> wrote $root/constraints.txt ($(grep -vc '^#' "$root/constraints.txt") pins)"
