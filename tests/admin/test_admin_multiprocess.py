"""``kraftlog admin`` in front of 3 controllers and 3 brokers, driven by the CLI as an operator
would (``python -m kraftlog topics|cluster ...`` subprocesses): create, describe (with the
health filters), alter, list and delete topics; bad input exits 1 with one line naming the
Kafka error; and a SIGKILL of the active controller does not fail the next write (the admin
service follows the new leader within the call's deadline). The same tools through a
broker's own port (``--bootstrap-server``, KIP-590): create, describe, list and delete."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from kraftlog.admin import admin_client as ac
from kraftlog.error_codes import ErrorCode
from tests.quorum_cluster import BROKERS, free_ports, running_cluster, wait_for

ADMIN_SERVICE = "kraftlog.v1.AdminService"


def _env(admin: str, bootstrap: str | None) -> dict[str, str]:
    """$KRAFTLOG_ADMIN=admin, or (bootstrap given) $KRAFTLOG_BOOTSTRAP_SERVER=bootstrap alone."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("KRAFTLOG_ADMIN", "KRAFTLOG_BOOTSTRAP_SERVER")}
    if bootstrap is None:
        return {**env, "KRAFTLOG_ADMIN": admin}
    return {**env, "KRAFTLOG_BOOTSTRAP_SERVER": bootstrap}


def cli(admin: str, *args: str, bootstrap: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kraftlog", *args], capture_output=True,
                          text=True, timeout=60, check=False, env=_env(admin, bootstrap))


def cli_batch(admin: str, commands: list[tuple[str, ...]], bootstrap: str | None = None,
              ) -> list[subprocess.CompletedProcess[str]]:
    """Run ``commands`` concurrently (independent invocations), in order of the answers."""
    env = _env(admin, bootstrap)
    procs = [subprocess.Popen([sys.executable, "-m", "kraftlog", *c], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for c in commands]
    done = []
    try:
        for proc, command in zip(procs, commands, strict=True):
            out, err = proc.communicate(timeout=60)
            done.append(subprocess.CompletedProcess(list(command), proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    return done


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr}"
    return done.stdout


def fails(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 1, f"exit {done.returncode}: {done.stdout} {done.stderr}"
    err = done.stderr.strip()
    assert err.startswith("kraftlog: error: ") and "\n" not in err, err
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in err, err


def describe(admin: str, *flags: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(ok(cli(admin, "topics", "describe", "--output", "json",
                                                *flags)))
    return payload


def admin_serving(address: str) -> bool | None:
    try:
        with grpc.insecure_channel(address) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=ADMIN_SERVICE), timeout=1.0)
    except grpc.RpcError:
        return None
    return True if answer.status == health_pb2.HealthCheckResponse.SERVING else None


def reflected_services(address: str) -> list[str]:
    """The service names the admin lists through gRPC server reflection."""
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5.0)
        return [s.name for a in answers for s in a.list_services_response.service]


def describe_now(admin: str, health: ac.HealthFilter) -> list[str]:
    """Topics with partitions passing ``health``, via the client library (cheap to poll)."""
    async def call() -> list[str]:
        async with ac.AdminClient(admin, timeout_ms=5000) as client:
            answer = await client.describe_topics(health_filter=health)
            return [t.name for t in answer.topics]
    return asyncio.run(call())


async def quorum_now(admin: str) -> tuple[int, list[Any]]:
    """The raft leader (DescribeQuorum) and the leader history (QuorumHistory) via the admin."""
    async with ac.AdminClient(admin, timeout_ms=10_000) as client:
        quorum = await client.describe_quorum()
        history = await client.quorum_history()
        return quorum.leader_id, list(history.changes)


async def reassign_to_dead_broker(admin: str, dead: int) -> None:
    async with ac.AdminClient(admin, timeout_ms=10_000) as client:
        await client.create_topics([ac.NewTopic(name="moving", num_partitions=1,
                                                replication_factor=2)])
        (topic,) = (await client.describe_topics(["moving"])).topics
        replicas = list(topic.partitions[0].replicas)
        assert dead not in replicas
        await client.alter_partition_reassignments({("moving", 0): [replicas[0], dead]})
        progress = await client.list_partition_reassignments({"moving": []})
        (moving,) = progress.topics
        (partition,) = moving.partitions
        assert list(partition.adding_replicas) == [dead]
        assert list(partition.removing_replicas) == [replicas[1]]
        (adding,) = partition.progress
        assert adding.replica_id == dead and not adding.in_sync
        assert adding.error.code == ErrorCode.BROKER_NOT_AVAILABLE
        assert adding.bytes_behind == -1 and adding.leader_size_bytes >= 0
        with_all = await client.list_partition_reassignments()
        assert [t.name for t in with_all.topics] == ["moving"]
        await client.cancel_partition_reassignments({"moving": [0]})
        assert (await client.list_partition_reassignments()).topics == []
        try:
            await client.cancel_partition_reassignments({"moving": [0]})
        except ac.ReassignmentError as exc:
            assert exc.error_name == "NO_REASSIGNMENT_IN_PROGRESS"
        else:
            raise AssertionError("a second cancel found a reassignment to cancel")
        await client.delete_topics(["moving"])


def test_topics_cli_through_the_admin_service(tmp_path: pathlib.Path) -> None:
    admin = f"127.0.0.1:{free_ports(1)[0]}"
    admin_proc: subprocess.Popen[bytes] | None = None
    admin_log = tmp_path / "admin.log"
    started = time.monotonic()
    phases: list[str] = []

    def phase(name: str) -> None:
        phases.append(f"{name}@{time.monotonic() - started:.1f}s")

    try:
        with running_cluster(tmp_path) as running:
            cluster, brokers = running.controllers, running.brokers
            bootstrap = ",".join(f"127.0.0.1:{p}" for p in cluster.ports.values())
            with admin_log.open("ab") as log:
                admin_proc = subprocess.Popen(
                    [sys.executable, "-m", "kraftlog", "admin", "--bootstrap-controller",
                     bootstrap, "--listen", admin, "--override", "retry.backoff.ms=50"],
                    stdout=log, stderr=log, start_new_session=True)
            wait_for(lambda: admin_serving(admin), timeout_s=15, what="admin health SERVING")
            phase("cluster-ready")
            assert ADMIN_SERVICE in reflected_services(admin)

            out = ok(cli(admin, "topics", "create", "--topic", "orders", "--partitions", "3",
                         "--replication-factor", "3", "--config", "min.insync.replicas=2"))
            assert "Created topic orders" in out
            closed = f"127.0.0.1:{free_ports(1)[0]}"
            # Independent invocations run side by side (each is a fresh interpreter).
            (cluster_done, described, *bad) = cli_batch(admin, [
                ("cluster", "describe", "--output", "json"),
                ("topics", "describe", "--topic", "orders", "--output", "json"),
                ("topics", "create", "--topic", "orders"),
                ("topics", "create", "--topic", "wide", "--replication-factor", "4"),
                ("topics", "create", "--topic", "bad", "--config", "retention.ms"),
                ("topics", "describe", "--topic", "nope"),
                ("topics", "list", "--admin", closed)])
            cluster_info = json.loads(ok(cluster_done))
            assert sorted(b["id"] for b in cluster_info["brokers"]) == list(BROKERS)
            assert cluster_info["controllerId"] in cluster.ports
            (orders,) = json.loads(ok(described))["topics"]
            assert orders["partitionCount"] == 3 and orders["replicationFactor"] == 3
            assert orders["minInsyncReplicas"] == 2
            assert orders["configs"] == {"min.insync.replicas": "2"}
            for p in orders["partitions"]:
                assert sorted(p["replicas"]) == list(BROKERS) and p["leader"] in BROKERS
            # Bad input: one line naming the Kafka error, exit 1.
            fails(bad[0], "TOPIC_ALREADY_EXISTS")
            fails(bad[1], "INVALID_REPLICATION_FACTOR", "topic 'wide'")
            fails(bad[2], "--config 'retention.ms' is not key=value")
            fails(bad[3], "UNKNOWN_TOPIC_OR_PARTITION", "nope")
            fails(bad[4], f"cannot reach the admin service at {closed}")

            phase("admin-cli")
            # KIP-590: each broker serves the AdminService on its own port and forwards
            # controller writes to the active controller, so the tools take a broker list.
            at = {b: f"127.0.0.1:{p}" for b, p in brokers.ports.items()}
            controller_at = f"127.0.0.1:{next(iter(cluster.ports.values()))}"
            assert ADMIN_SERVICE in reflected_services(at[BROKERS[0]])
            out = ok(cli(admin, "topics", "create", "--topic", "via-broker", "--partitions", "2",
                         "--replication-factor", "2", "--bootstrap-server",
                         f"{closed},{at[BROKERS[0]]}"))   # the closed one is passed over
            assert "Created topic via-broker" in out
            (via_described, via_cluster, via_reassign, via_controller) = cli_batch(admin, [
                ("topics", "describe", "--topic", "via-broker", "--output", "json",
                 "--bootstrap-server", at[BROKERS[1]]),
                ("cluster", "describe", "--output", "json", "--bootstrap-server", at[BROKERS[2]]),
                ("reassign", "list", "--output", "json", "--bootstrap-server", at[BROKERS[0]]),
                ("topics", "list", "--bootstrap-server", controller_at)])
            (via,) = json.loads(ok(via_described))["topics"]
            assert via["partitionCount"] == 2 and via["replicationFactor"] == 2
            assert sorted(b["id"] for b in json.loads(ok(via_cluster))["brokers"]) == list(BROKERS)
            assert json.loads(ok(via_reassign)) == {"reassignments": []}
            fails(via_controller, f"no AdminService at {controller_at}")
            # $KRAFTLOG_BOOTSTRAP_SERVER alone (no $KRAFTLOG_ADMIN) is the default address.
            assert "Deleted topic via-broker." in ok(cli(
                admin, "topics", "delete", "--topic", "via-broker", bootstrap=at[BROKERS[2]]))
            phase("bootstrap-server")   # (the last listing below shows via-broker gone)

            out = ok(cli(admin, "topics", "alter", "--topic", "orders", "--partitions", "4",
                         "--config", "retention.ms=60000"))
            assert "partitions increased to 4" in out
            table = ok(cli(admin, "topics", "describe", "--topic", "orders"))
            header, columns, *rows = table.splitlines()
            assert header.startswith("Topic: orders  TopicId: ") and "PartitionCount: 4" in header
            assert "retention.ms=60000" in header and columns.split()[:2] == ["PARTITION",
                                                                              "LEADER"]
            assert [r.split()[0] for r in rows] == ["0", "1", "2", "3"]

            phase("create-describe-alter")
            # Kill the active controller; the next write must still succeed.
            view = wait_for(cluster.leader_view, timeout_s=10, what="a quorum leader")
            killed = view.leader_id
            cluster.kill(killed)
            kill_at = time.monotonic()
            ok(cli(admin, "topics", "create", "--topic", "after-failover", "--partitions", "2",
                   "--replication-factor", "2", "--timeout-ms", "20000"))
            failover_s = time.monotonic() - kill_at
            assert describe_now(admin, ac.HealthFilter.ALL) == ["after-failover", "orders"]
            leader, history = asyncio.run(quorum_now(admin))
            assert leader != killed and history[-1].leader_id == leader
            assert killed in [c.leader_id for c in history[:-1]]

            phase("failover")
            # A dead broker: its partitions become under-replicated and, at ISR 2 with
            # min.insync.replicas=2, at min ISR; none is unavailable (leaders move).
            brokers.kill(BROKERS[-1])
            wait_for(lambda: True if "orders" in describe_now(
                admin, ac.HealthFilter.UNDER_REPLICATED) else None, timeout_s=15,
                what="orders under-replicated after a broker kill")
            wait_for(lambda: True if describe_now(admin, ac.HealthFilter.UNAVAILABLE) == []
                     else None, timeout_s=10, what="leaders moved off the dead broker")
            assert "orders" not in describe_now(admin, ac.HealthFilter.UNDER_MIN_ISR)
            at_min = describe(admin, "--at-min-isr-partitions", "--topic", "orders")["topics"]
            assert at_min and all(len(p["isr"]) == 2 for p in at_min[0]["partitions"])

            # A reassignment onto the dead broker stalls: its progress names the broker as
            # unavailable, and it can be cancelled.
            phase("broker-kill-filters")
            asyncio.run(reassign_to_dead_broker(admin, BROKERS[-1]))
            phase("reassignment")

            out = ok(cli(admin, "topics", "delete", "--topic", "orders"))
            assert "Deleted topic orders." in out
            listed, deleted_again = cli_batch(admin, [
                ("topics", "list", "--output", "json"),
                ("topics", "delete", "--topic", "orders")])
            assert [t["name"] for t in json.loads(ok(listed))["topics"]] == ["after-failover"]
            fails(deleted_again, "UNKNOWN_TOPIC_OR_PARTITION")
            phase("delete")
            print(f"failover write took {failover_s:.2f}s; phases: {' '.join(phases)}")
    except AssertionError as exc:
        admin_tail = admin_log.read_text()[-3000:] if admin_log.exists() else ""
        raise AssertionError(f"{exc}\n--- admin\n{admin_tail}") from None
    finally:
        if admin_proc is not None:
            admin_proc.kill()
            admin_proc.wait(timeout=10)
