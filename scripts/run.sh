#!/usr/bin/env bash
# The README's "run" command: install kraftlog into .venv and run the main job.
#
# Until the controller and broker processes exist (issues 3-6), the main job is
# what exists: format the data directories of a three-controller dev cluster
# under .kraftlog/dev (idempotent: the cluster id is kept in .kraftlog/dev/cluster-id),
# show them, and run the storage benchmark,
# which writes and reads a Kafka-format log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/bootstrap.sh
kraftlog="$root/.venv/bin/kraftlog"
base="$root/.kraftlog/dev"
mkdir -p "$base"
if [ ! -s "$base/cluster-id" ]; then
  "$kraftlog" storage random-uuid > "$base/cluster-id"
fi
cluster_id=$(cat "$base/cluster-id")
echo "==> cluster id $cluster_id"
voters="1@127.0.0.1:19091,2@127.0.0.1:19092,3@127.0.0.1:19093"
for id in 1 2 3; do
  "$kraftlog" storage format --cluster-id "$cluster_id" --node-id "$id" \
    --data-dir "$base/controller-$id"
done
echo "==> controller.quorum.voters=$voters (used once 'kraftlog controller' exists)"
"$kraftlog" storage info --data-dir "$base/controller-1"
echo "==> storage benchmark (bench/storage.py): Kafka-format log append/read vs raw file I/O"
"$root/.venv/bin/python" bench/storage.py --mib 128 --rounds 3
