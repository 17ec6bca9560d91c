"""End to end: every ``kraftlog`` operator command once against a dev cluster, and each
bad-input case, checking exit codes and messages (never a traceback).

One ``kraftlog dev`` cluster (3 controllers, 3 brokers, admin). The commands run as
subprocesses, exactly as an operator types them.
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Iterator

import pytest

from tests.dev_cluster import DevCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    dev = DevCluster(tmp_path_factory.mktemp("tour") / "dev")
    try:
        dev.up()
        yield dev
    finally:
        dev.destroy()


def ok(cluster: DevCluster, *args: str, stdin: str | None = None) -> str:
    done = cluster.cli(*args, stdin=stdin)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stdout


def fails(cluster: DevCluster, *args: str, message: str, code: int = 1,
          stdin: str | None = None) -> None:
    done = cluster.cli(*args, stdin=stdin)
    assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
    assert message in done.stderr, (args, message, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr


def test_topics_cluster_and_quorum(cluster: DevCluster) -> None:
    assert "ClusterId:" in ok(cluster, "cluster", "describe")
    brokers = json.loads(ok(cluster, "cluster", "describe", "--output", "json"))["brokers"]
    assert sorted(b["id"] for b in brokers) == [101, 102, 103]
    ok(cluster, "topics", "create", "--topic", "tour", "--partitions", "3",
       "--replication-factor", "3", "--config", "min.insync.replicas=2")
    fails(cluster, "topics", "create", "--topic", "tour", "--partitions", "1",
          message="TOPIC_ALREADY_EXISTS")
    fails(cluster, "topics", "create", "--topic", "wide", "--replication-factor", "4",
          message="INVALID_REPLICATION_FACTOR")
    fails(cluster, "topics", "create", "--topic", "dup", "--replica-assignment", "101:101",
          message="names a broker twice")
    fails(cluster, "topics", "create", "--topic", "ghost", "--replica-assignment", "101:999",
          message="999")
    fails(cluster, "topics", "create", "--topic", "bad", "--config", "novalue",
          message="novalue")
    assert "tour" in ok(cluster, "topics", "list")
    described = json.loads(ok(cluster, "topics", "describe", "--topic", "tour",
                              "--output", "json"))
    assert len(described["topics"][0]["partitions"]) == 3
    ok(cluster, "topics", "describe", "--under-replicated-partitions")
    fails(cluster, "topics", "describe", "--topic", "nope", message="UNKNOWN_TOPIC_OR_PARTITION")
    ok(cluster, "topics", "alter", "--topic", "tour", "--partitions", "4", "--config",
       "retention.ms=86400000")
    fails(cluster, "topics", "alter", "--topic", "tour", "--partitions", "2",
          message="INVALID_PARTITIONS")
    assert json.loads(ok(cluster, "topics", "describe", "--topic", "tour", "--output",
                         "json"))["topics"][0]["partitionCount"] == 4
    controller = cluster.controller(1)
    assert "LeaderId" in ok(cluster, "quorum", "describe", "--bootstrap-controller",
                            controller, "--status")
    assert "NodeId" in ok(cluster, "quorum", "describe", "--bootstrap-controller",
                          controller, "--replication")
    fails(cluster, "topics", "list", "--admin", "127.0.0.1:1", "--timeout-ms", "2000",
          message="127.0.0.1:1")
    ok(cluster, "topics", "create", "--topic", "doomed", "--partitions", "1",
       "--replication-factor", "1")
    ok(cluster, "topics", "delete", "--topic", "doomed")
    fails(cluster, "topics", "delete", "--topic", "doomed", message="UNKNOWN_TOPIC_OR_PARTITION")


def test_produce_and_consume(cluster: DevCluster) -> None:
    broker = cluster.broker(101)
    ok(cluster, "topics", "create", "--topic", "pc", "--partitions", "2",
       "--replication-factor", "2", "--if-not-exists")
    lines = "".join(f"k{i}:v{i}\n" for i in range(20))
    ok(cluster, "produce", "--bootstrap-server", broker, "--topic", "pc", "--key-separator",
       ":", "--header", "source=tour", "--acks", "all", stdin=lines)
    out = ok(cluster, "consume", "--bootstrap-server", broker, "--topic", "pc",
             "--from-beginning", "--max-messages", "20", "--timeout-ms", "10000",
             "--output", "json")
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(r["value"] for r in records) == sorted(f"v{i}" for i in range(20))
    fails(cluster, "consume", "--bootstrap-server", broker, "--topic", "nope",
          "--max-messages", "1", "--timeout-ms", "3000", message="nope")
    fails(cluster, "produce", "--bootstrap-server", broker, "--topic", "pc", "--header",
          "novalue", stdin="x\n", message="novalue")
    fails(cluster, "produce", "--bootstrap-server", broker, "--topic", "pc", "--acks", "2",
          stdin="x\n", message="acks")
    fails(cluster, "produce", "--bootstrap-server", "127.0.0.1:1", "--topic", "pc",
          "--producer-property", "max.block.ms=2000", stdin="x\n", message="127.0.0.1:1")


def test_reassign_and_leader_election(cluster: DevCluster, tmp_path: pathlib.Path) -> None:
    ok(cluster, "topics", "create", "--topic", "mv", "--partitions", "4",
       "--replication-factor", "2")
    ok(cluster, "produce", "--bootstrap-server", cluster.broker(101), "--topic", "mv",
       stdin="".join(f"r{i}\n" for i in range(200)))
    generated = json.loads(ok(cluster, "reassign", "generate", "--topics", "mv",
                              "--broker-list", "102,103", "--output", "json"))
    assert {b for p in generated["proposed"]["partitions"] for b in p["replicas"]} <= {102, 103}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(generated["proposed"]))
    assert "Throttle set to" in ok(cluster, "reassign", "execute", "--reassignment-json-file",
                                   str(plan), "--throttle", "10000000")
    ok(cluster, "reassign", "list")
    deadline = time.monotonic() + 60
    while True:
        done = cluster.cli("reassign", "verify", "--reassignment-json-file", str(plan))
        if done.returncode == 0:
            assert "Throttles removed" in done.stdout
            break
        assert done.returncode == 3, (done.stdout, done.stderr)  # still in progress
        assert time.monotonic() < deadline, done.stdout
        time.sleep(1)
    assert "No reassignment" in ok(cluster, "reassign", "cancel", "--reassignment-json-file",
                                   str(plan))
    bad = tmp_path / "bad.json"
    for content, message in (
            ("{not json", "not valid JSON"),
            ('{"version":1,"partitions":[{"topic":"mv","partition":0,"replicas":[101,101]}]}',
             "duplicate broker"),
            ('{"version":1,"partitions":[{"topic":"mv","partition":0,"replicas":[101,999]}]}',
             "[999] do not exist"),
            ('{"version":1,"partitions":[{"topic":"nope","partition":0,"replicas":[101]}]}',
             "UNKNOWN_TOPIC_OR_PARTITION")):
        bad.write_text(content)
        fails(cluster, "reassign", "execute", "--reassignment-json-file", str(bad),
              message=message)
    fails(cluster, "reassign", "verify", "--reassignment-json-file", str(tmp_path / "none"),
          message="cannot read plan")
    fails(cluster, "reassign", "generate", "--topics", "mv", "--broker-list", "102",
          message="replication factor 2 but only 1 broker")
    fails(cluster, "reassign", "generate", "--topics", "mv", "--broker-list", "102,999",
          message="[999] do not exist")
    out = ok(cluster, "leader-election", "--type", "preferred", "--all-topic-partitions")
    assert "leader election (PREFERRED)" in out or "no election needed" in out
    ok(cluster, "leader-election", "--type", "unclean", "--topic", "mv")
    fails(cluster, "leader-election", "--type", "preferred", "--topic", "nope",
          message="UNKNOWN_TOPIC_OR_PARTITION")
    fails(cluster, "leader-election", "--type", "sideways", "--all-topic-partitions",
          message="invalid choice", code=2)
