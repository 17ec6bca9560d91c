#!/usr/bin/env bash
# Make (or refresh) the project's virtualenv in .venv and install kraftlog into it.
# Usage: scripts/bootstrap.sh [EXTRAS]   e.g. scripts/bootstrap.sh test
# Idempotent: reinstalls only when pyproject.toml changed since the last install.
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
stamp="$venv/.kraftlog-installed${extras:+-$extras}"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  echo "==> installing kraftlog${extras:+[$extras]} into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -q -e "$root${extras:+[$extras]}" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  touch "$stamp"
fi
