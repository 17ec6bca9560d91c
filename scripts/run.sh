#!/usr/bin/env bash
# The README's "run" command: install kraftlog into .venv and start the local cluster.
#
# Today the local cluster is the controller quorum: three `kraftlog controller`
# processes on 127.0.0.1:19091-19093 with their data under .kraftlog/dev
# (formatted once; the cluster id is kept in .kraftlog/dev/cluster-id, so a
# restart keeps the metadata). It waits for the quorum to elect a leader,
# prints the quorum and how to talk to it, and runs until Ctrl-C (or for
# KRAFTLOG_RUN_SECONDS seconds), then stops the processes (SIGTERM: the leader
# resigns gracefully). Brokers join this script when `kraftlog broker` exists.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/bootstrap.sh
kraftlog="$root/.venv/bin/kraftlog"
py="$root/.venv/bin/python"
base="$root/.kraftlog/dev"
mkdir -p "$base"
if [ ! -s "$base/cluster-id" ]; then
  "$kraftlog" storage random-uuid > "$base/cluster-id"
fi
cluster_id=$(cat "$base/cluster-id")
echo "==> cluster id $cluster_id"
voters="1@127.0.0.1:19091,2@127.0.0.1:19092,3@127.0.0.1:19093"
pids=()
stop_all() {
  if [ ${#pids[@]} -gt 0 ]; then
    echo "==> stopping the controllers (${pids[*]})"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
}
trap stop_all EXIT INT TERM
for id in 1 2 3; do
  dir="$base/controller-$id"
  "$kraftlog" storage format --cluster-id "$cluster_id" --node-id "$id" --data-dir "$dir"
  cat > "$base/controller-$id.properties" <<EOF
node.id=$id
process.roles=controller
controller.quorum.voters=$voters
listeners=CONTROLLER://127.0.0.1:1909$id
metadata.log.dir=$dir
EOF
  "$kraftlog" controller --config "$base/controller-$id.properties" \
    >> "$base/controller-$id.log" 2>&1 &
  pids+=($!)
done
echo "==> controllers started (logs: $base/controller-*.log)"
"$py" - <<'EOF'
import asyncio, sys, time
import grpc
from kraftlog.raft import transport

async def main() -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for port in (19091, 19092, 19093):
            try:
                view = await transport.describe_quorum(f"127.0.0.1:{port}", timeout_s=1.0)
            except grpc.aio.AioRpcError:
                continue
            if view.error.code == 0 and view.leader_id >= 0:
                print(f"==> quorum up: leader {view.leader_id}, epoch {view.leader_epoch}, "
                      f"high watermark {view.high_watermark}")
                for r in view.current_voters:
                    print(f"    voter {r.replica_id}: log end offset {r.log_end_offset}")
                return
        await asyncio.sleep(0.2)
    sys.exit("the quorum elected no leader within 30 s; see .kraftlog/dev/controller-*.log")

asyncio.run(main())
EOF
cat <<EOF
==> the controller quorum is running: controller.quorum.voters=$voters
    ControllerService and RaftService on each address (gRPC, plaintext); e.g.
    grpcurl -plaintext -d '{}' 127.0.0.1:19091 kraftlog.v1.ControllerService/DescribeCluster
    Ctrl-C stops it; the data stays in $base.
EOF
if [ -n "${KRAFTLOG_RUN_SECONDS:-}" ]; then
  sleep "$KRAFTLOG_RUN_SECONDS"
else
  wait "${pids[@]}"
fi
