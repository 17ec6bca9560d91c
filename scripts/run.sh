#!/usr/bin/env bash
# The README's "run" command: install kraftlog into .venv and start the local cluster.
#
# The local cluster: three `kraftlog controller` processes on 127.0.0.1:19091-19093
# and three `kraftlog broker` processes (node ids 101-103) on 127.0.0.1:19101-19103,
# with their data under .kraftlog/dev (formatted once; the cluster id is kept in
# .kraftlog/dev/cluster-id, so a restart keeps the data). It waits for the quorum
# to elect a leader and for the brokers to be ready, prints how to talk to them,
# and runs until Ctrl-C (or for KRAFTLOG_RUN_SECONDS seconds), then stops the
# processes (SIGTERM: brokers shut down in a controlled way, the raft leader resigns).
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
    echo "==> stopping the cluster (${pids[*]})"
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
for id in 101 102 103; do
  dir="$base/broker-$id"
  "$kraftlog" storage format --cluster-id "$cluster_id" --node-id "$id" --data-dir "$dir"
  cat > "$base/broker-$id.properties" <<EOF
node.id=$id
process.roles=broker
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:19${id}
log.dirs=$dir
default.replication.factor=3
min.insync.replicas=2
EOF
  "$kraftlog" broker --config "$base/broker-$id.properties" >> "$base/broker-$id.log" 2>&1 &
  pids+=($!)
done
echo "==> brokers started (logs: $base/broker-*.log)"
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

async def brokers_ready() -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    deadline = time.monotonic() + 60
    pending = {101: 19101, 102: 19102, 103: 19103}
    while pending and time.monotonic() < deadline:
        for broker, port in list(pending.items()):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                try:
                    answer = await health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service="kraftlog.v1.BrokerService"),
                        timeout=1.0)
                except grpc.aio.AioRpcError:
                    continue
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    print(f"==> broker {broker} ready on 127.0.0.1:{port}")
                    del pending[broker]
        await asyncio.sleep(0.3)
    if pending:
        sys.exit(f"brokers {sorted(pending)} not ready within 60 s; see .kraftlog/dev/broker-*.log")

asyncio.run(main())
asyncio.run(brokers_ready())
EOF
cat <<EOF
==> the cluster is running: controller.quorum.voters=$voters
    brokers: 127.0.0.1:19101-19103 (BrokerService); controllers: ControllerService,
    RaftService (gRPC, plaintext, with reflection). For example:
    $kraftlog quorum describe --bootstrap-controller 127.0.0.1:19091 --replication
    grpcurl -plaintext -d '{}' 127.0.0.1:19091 kraftlog.v1.ControllerService/DescribeCluster
    Ctrl-C stops it; the data stays in $base.
EOF
if [ -n "${KRAFTLOG_RUN_SECONDS:-}" ]; then
  sleep "$KRAFTLOG_RUN_SECONDS"
else
  wait "${pids[@]}"
fi
