#!/usr/bin/env bash
# Make (or refresh) the project's virtualenv in .venv and install kraftlog into it.
# Usage: scripts/bootstrap.sh [EXTRAS]   e.g. scripts/bootstrap.sh test
# Idempotent: reinstalls only when pyproject.toml or constraints.txt changed since the last
# install. Every package version comes from constraints.txt (pip -c), so a fresh checkout
# installs what CI runs; scripts/refresh_constraints.sh rewrites it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
extras=${1:-}
venv="$root/.venv"
py=${PYTHON:-python3}
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "kraftlog needs Python 3.11 or newer; '$py' is $("$py" --version 2>&1)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "==> creating virtualenv $venv"
  "$py" -m venv "$venv" || {
    echo "==> python venv module missing; installing python3-venv" >&2
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    "$py" -m venv "$venv"
  }
fi
constraints="$root/constraints.txt"
stamp="$venv/.kraftlog-installed${extras:+-$extras}"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ] || [ "$constraints" -nt "$stamp" ]; then
  echo "==> installing kraftlog${extras:+[$extras]} into $venv (versions from constraints.txt)"
  "$venv/bin/python" -m pip install -q --upgrade pip -c "$constraints" >/dev/null
  "$venv/bin/python" -m pip install -q -c "$constraints" -e "$root${extras:+[$extras]}" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  touch "$stamp"
fi
