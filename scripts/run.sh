#!/usr/bin/env bash
# The README's "run" command: install kraftlog into .venv and start the local dev cluster.
#
# `kraftlog dev up` starts three controllers (127.0.0.1:19091-19093), three brokers
# (node ids 101-103 on 127.0.0.1:19101-19103) and the admin service (127.0.0.1:19090)
# as background processes, each with its own data dir under .kraftlog/dev (formatted on
# the first start; later starts resume the same cluster), waits until the quorum has a
# leader and every broker is unfenced, and prints what to try next. Stop it with
# `.venv/bin/kraftlog dev down` (add --delete-data to start afresh). Arguments go to
# `kraftlog dev up` (e.g. --brokers 4, --base-port 29090).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/bootstrap.sh
export PATH="$root/.venv/bin:$PATH"
export KRAFTLOG_DEV_DIR="${KRAFTLOG_DEV_DIR:-$root/.kraftlog/dev}"
kraftlog dev up "$@"
echo "(the kraftlog command is $root/.venv/bin/kraftlog; the cluster's files are in $KRAFTLOG_DEV_DIR)"
