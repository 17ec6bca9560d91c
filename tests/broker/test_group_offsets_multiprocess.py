"""Committed offsets on 3 controllers + 3 brokers: commit, fetch back, kill the coordinator.

1. A consumer with ``group.id`` commits; the first FindCoordinator creates
   ``__consumer_offsets`` (3 partitions here, replication factor 3, compacted) and the
   commit lands once the group's partition has a leader that loaded it.
2. The committed offsets come back (``committed``), a new consumer of the group starts
   from them, and a broker that does not lead the group's partition answers
   NOT_COORDINATOR naming the coordinator.
3. The coordinator is SIGKILLed: the new leader of that ``__consumer_offsets``
   partition loads it from its replica and serves the same offsets (nothing lost);
   commits continue there.
4. ``kraftlog consume --group`` commits after printing: a second run resumes after
   what the first printed.

Every wait is bounded; all children are killed in ``finally``.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

import grpc
import pytest

from kraftlog import client
from kraftlog.broker import group_offsets as go
from kraftlog.error_codes import ErrorCode
from kraftlog.v1 import broker_pb2, common_pb2
from tests.quorum_cluster import BROKERS, Brokers, Topic, running_cluster

TOPIC = "events"
GROUP = "billing"
OFFSETS_PARTITIONS = 3


def cli(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kraftlog", *args], capture_output=True,
                          text=True, timeout=timeout_s, check=False)


def coordinator_of(brokers: Brokers, group: str) -> int | None:
    """The node id FindCoordinator names (asked of every live broker until one answers)."""
    for broker in brokers.procs:
        try:
            answer = brokers.stub(broker).FindCoordinator(broker_pb2.FindCoordinatorRequest(
                key_type=broker_pb2.COORDINATOR_KEY_TYPE_GROUP, coordinator_keys=[group]),
                timeout=2)
        except grpc.RpcError:
            continue
        found = answer.coordinators[0]
        if found.error.code == common_pb2.NONE and found.node_id in brokers.procs:
            return int(found.node_id)
    return None


def test_committed_offsets_survive_the_coordinator_kill(tmp_path: pathlib.Path) -> None:
    started = time.monotonic()
    with running_cluster(
            tmp_path, topics=[Topic(name=TOPIC, partitions=2, min_insync_replicas=2)],
            broker_config={"offsets.topic.num.partitions": OFFSETS_PARTITIONS,
                           "offsets.topic.replication.factor": 3}) as running:
        brokers = running.brokers
        bootstrap = running.bootstrap
        producer = client.Producer(client.ProducerConfig(bootstrap_servers=bootstrap,
                                                         request_timeout_ms=5000))
        try:
            for i in range(20):
                producer.send(TOPIC, f"v{i}".encode(), partition=i % 2)
            producer.flush(15000)
        finally:
            producer.close(timeout_ms=5000)
        tp0 = client.TopicPartition(topic=TOPIC, partition=0)
        tp1 = client.TopicPartition(topic=TOPIC, partition=1)
        config = client.ConsumerConfig(bootstrap_servers=bootstrap, group_id=GROUP,
                                       enable_auto_commit=False, retry_backoff_ms=50,
                                       default_api_timeout_ms=20000,
                                       auto_offset_reset=client.OffsetReset.EARLIEST)

        # 1. The first commit creates __consumer_offsets and waits for its leader.
        with client.Consumer(config) as consumer:
            consumer.assign([tp0, tp1])
            consumer.commit({tp0: 4, tp1: client.OffsetAndMetadata(offset=7, metadata="m")})
            assert consumer.committed([tp0, tp1]) == {
                tp0: client.OffsetAndMetadata(offset=4),
                tp1: client.OffsetAndMetadata(offset=7, metadata="m")}
            with pytest.raises(client.KafkaApiError, match="OFFSET_METADATA_TOO_LARGE"):
                consumer.commit({tp0: client.OffsetAndMetadata(offset=5,
                                                               metadata="x" * 5000)})
        # 2. A new member of the group starts where the group committed.
        with client.Consumer(config) as consumer:
            consumer.assign([tp0, tp1])
            assert consumer.position(tp0) == 4 and consumer.position(tp1) == 7
            records = []
            deadline = time.monotonic() + 10
            while len(records) < 9 and time.monotonic() < deadline:
                records += consumer.poll(timeout_ms=500)
            assert sorted((r.partition, r.offset) for r in records) == (
                [(0, o) for o in range(4, 10)] + [(1, o) for o in range(7, 10)])
            consumer.commit()
            assert consumer.committed([tp0, tp1]) == {
                tp0: client.OffsetAndMetadata(offset=10),
                tp1: client.OffsetAndMetadata(offset=10)}
        with client.Consumer(config) as consumer:  # commit latency, RF 3, acks=all
            consumer.assign([tp0, tp1])
            consumer.commit({tp0: 10})
            latencies = []
            for _ in range(30):
                begin = time.perf_counter()
                consumer.commit({tp0: 10, tp1: 10})
                latencies.append(time.perf_counter() - begin)
            latencies.sort()
        coordinator = coordinator_of(brokers, GROUP)
        assert coordinator is not None
        follower = next(b for b in BROKERS if b != coordinator)
        answer = brokers.stub(follower).OffsetFetch(
            broker_pb2.OffsetFetchRequest(group_id=GROUP), timeout=5)
        assert ErrorCode(answer.error.code) is ErrorCode.NOT_COORDINATOR
        assert answer.coordinator.leader_id == coordinator

        # 3. Kill the coordinator: the new leader of the partition loads the same offsets.
        brokers.kill(coordinator)
        killed_at = time.monotonic()
        survivors = tuple(f"127.0.0.1:{brokers.ports[b]}" for b in BROKERS
                          if b != coordinator)
        after = client.ConsumerConfig(bootstrap_servers=survivors, group_id=GROUP,
                                      enable_auto_commit=False, retry_backoff_ms=50,
                                      default_api_timeout_ms=20000)
        with client.Consumer(after) as consumer:
            consumer.assign([tp0, tp1])
            assert consumer.committed([tp0, tp1]) == {
                tp0: client.OffsetAndMetadata(offset=10),
                tp1: client.OffsetAndMetadata(offset=10)}
            failover_s = time.monotonic() - killed_at
            new_coordinator = coordinator_of(brokers, GROUP)
            assert new_coordinator not in (None, coordinator)
            consumer.commit({tp0: 11})
            assert consumer.committed([tp0])[tp0] == client.OffsetAndMetadata(offset=11)
        loaded = (tmp_path / f"broker-{new_coordinator}.log").read_text()
        partition = go.partition_for(GROUP, OFFSETS_PARTITIONS)
        assert (f"partition=__consumer_offsets-{partition} event=group_offsets_loaded"
                in loaded)

        # 4. The console consumer commits after printing; a second run resumes there.
        first = cli("consume", "--bootstrap-server", ",".join(survivors), "--topic", TOPIC,
                    "--group", "cli-group", "--from-beginning", "--max-messages", "15",
                    "--timeout-ms", "10000")
        assert first.returncode == 0, first.stderr
        assert len(first.stdout.splitlines()) == 15
        second = cli("consume", "--bootstrap-server", ",".join(survivors), "--topic", TOPIC,
                     "--group", "cli-group", "--from-beginning", "--timeout-ms", "2000")
        assert second.returncode == 0, second.stderr
        assert "Processed a total of 5 messages" in second.stderr
        assert sorted(first.stdout.splitlines() + second.stdout.splitlines()) == sorted(
            f"v{i}" for i in range(20))
        bad = cli("consume", "--bootstrap-server", ",".join(survivors), "--topic", TOPIC,
                  "--group", "")
        assert bad.returncode != 0 and "--group must not be empty" in bad.stderr
        assert "Traceback" not in bad.stderr
        print(f"commit (2 partitions, RF 3, acks=all) p50 {latencies[15] * 1000:.1f} ms, "
              f"max {latencies[-1] * 1000:.1f} ms; coordinator failover (kill -> offsets "
              f"served by the new leader): {failover_s:.2f}s; "
              f"test wall time {time.monotonic() - started:.1f}s")
        assert time.monotonic() - started < 90
