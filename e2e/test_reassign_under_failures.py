"""End to end: move partitions under a throttle while the cluster loses its active
controller and a partition leader, and lose no acknowledged record.

On a ``kraftlog dev`` cluster (3 controllers, 4 brokers, admin service): a topic of 6
partitions with replication factor 3 and min.insync.replicas 2; a producer sends
continuously with acks=all; half the partitions are reassigned to another broker
set with a replication throttle; while they move, the active controller and the
leader of a moving partition are SIGKILLed (and later restarted); ``reassign verify
--watch`` completes and removes the throttles; then every acknowledged record is
read back exactly once, at its acknowledged offset, in order per partition.
"""

from __future__ import annotations

import json
import pathlib
import threading
import time
from collections.abc import Iterator

import pytest

from kraftlog import client
from kraftlog.ids import TopicPartition
from tests.dev_cluster import DevCluster

TOPIC = "e2e"
PARTITIONS = 6
MOVING = (0, 1, 2)
PRELOAD_RECORDS = 2500  # per moving partition: ~2.5 MB
VALUE_BYTES = 1000
PRODUCE_SECONDS_MAX = 240


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[DevCluster]:
    dev = DevCluster(tmp_path / "dev")
    try:
        dev.up("--brokers", "4")
        yield dev
    finally:
        dev.destroy()


class ContinuousProducer:
    """Sends ``<n>``-numbered records with acks=all until stopped; remembers the acked ones."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = client.Producer(client.ProducerConfig(
            bootstrap_servers=tuple(bootstrap.split(",")), acks=client.Acks.ALL,
            linger_ms=5, delivery_timeout_ms=60_000))
        self.acked: dict[int, dict[int, bytes]] = {}  # partition -> offset -> value
        self.sent_order: dict[int, list[bytes]] = {}
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="e2e-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        n = 0
        deadline = time.monotonic() + PRODUCE_SECONDS_MAX
        while not self._stop.is_set() and time.monotonic() < deadline:
            value = b"live-%08d" % n
            future = self.producer.send(TOPIC, value, key=b"k%d" % (n % 64))
            future.add_done_callback(lambda f, v=value: self._done(f, v))
            n += 1
            time.sleep(0.002)

    def _done(self, future: client.RecordFuture, value: bytes) -> None:
        error = future.exception()
        with self._lock:
            if error is not None:
                self.failures.append(f"{type(error).__name__}: {error}")
                return
            meta = future.result()
            self.acked.setdefault(meta.partition, {})[meta.offset] = value

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.producer.flush(timeout_ms=90_000)
        self.producer.close()


def consume_all(bootstrap: str) -> dict[int, list[tuple[int, bytes]]]:
    consumer = client.Consumer(client.ConsumerConfig(
        bootstrap_servers=tuple(bootstrap.split(",")),
        auto_offset_reset=client.OffsetReset.EARLIEST))
    try:
        partitions = [TopicPartition(topic=TOPIC, partition=p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(partitions)
        ends = consumer.end_offsets(partitions)
        records: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, "consuming back took over 120 s"
            for record in consumer.poll(max_records=5000, timeout_ms=1000):
                records[record.partition].append((record.offset, record.value or b""))
        return records
    finally:
        consumer.close()


def leader_of(cluster: DevCluster, partition: int) -> int:
    described = cluster.cli_json("topics", "describe", "--topic", TOPIC)
    for part in described["topics"][0]["partitions"]:
        if part["partition"] == partition:
            return int(part["leader"])
    raise AssertionError(f"no partition {partition} in {described}")


def test_reassign_with_throttle_while_controller_and_leader_die(
        cluster: DevCluster, tmp_path: pathlib.Path) -> None:
    bootstrap = ",".join(cluster.broker(b) for b in (101, 102, 103, 104))
    created = cluster.cli("topics", "create", "--topic", TOPIC, "--partitions",
                          str(PARTITIONS), "--replication-factor", "3", "--config",
                          "min.insync.replicas=2")
    assert created.returncode == 0, created.stderr
    # Data to copy, so the moves take a while under the throttle: more than one replica
    # fetch (replica.fetch.max.bytes, 1 MiB) per moving partition, since a quota only
    # holds back the fetches after the one that exceeded it (KIP-73).
    with client.Producer(client.ProducerConfig(bootstrap_servers=tuple(bootstrap.split(",")),
                                               acks=client.Acks.ALL)) as preload:
        for partition in MOVING:
            for i in range(PRELOAD_RECORDS):
                preload.send(TOPIC, b"pre-%06d-" % i + b"x" * VALUE_BYTES, partition=partition)
        preload.flush(120_000)

    producer = ContinuousProducer(bootstrap)
    producer.start()
    try:
        # Move half the partitions: each gets a replica set that differs from today's.
        current = cluster.cli_json("topics", "describe", "--topic", TOPIC)
        replicas = {p["partition"]: p["replicas"] for p in current["topics"][0]["partitions"]}
        plan = {"version": 1, "partitions": []}
        for partition in MOVING:
            spare = next(b for b in (101, 102, 103, 104) if b not in replicas[partition])
            target = [spare, *replicas[partition][1:]]  # the leader's replica leaves
            plan["partitions"].append({"topic": TOPIC, "partition": partition,
                                       "replicas": target})
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(json.dumps(plan))
        execute = cluster.cli("reassign", "execute", "--reassignment-json-file", str(plan_file),
                              "--throttle", "100000")
        assert execute.returncode == 0, execute.stdout + execute.stderr
        assert "Throttle set to 100000 B/s" in execute.stdout
        listed = cluster.cli_json("reassign", "list")
        assert listed["reassignments"], "the moves finished before the faults; nothing to test"

        killed_controller = cluster.dev("kill", "active-controller")
        assert killed_controller.returncode == 0, killed_controller.stderr
        victim = leader_of(cluster, MOVING[0])
        killed_broker = cluster.dev("kill", f"broker-{victim}")
        assert killed_broker.returncode == 0, killed_broker.stderr
        time.sleep(3)
        cluster.up()  # restarts the killed nodes, waits until everything serves again

        verify = cluster.cli("reassign", "verify", "--reassignment-json-file", str(plan_file),
                             "--watch", "--interval-s", "1", "--watch-timeout-s", "180",
                             timeout_s=240)
        assert verify.returncode == 0, verify.stdout + verify.stderr + cluster.logs()
        assert "Throttles removed" in verify.stdout
        final = cluster.cli_json("topics", "describe", "--topic", TOPIC)
        for part in final["topics"][0]["partitions"]:
            if part["partition"] in MOVING:
                wanted = plan["partitions"][MOVING.index(part["partition"])]["replicas"]
                assert part["replicas"] == wanted, final
        configs = final["topics"][0].get("configs", {})
        assert not any("throttled" in name for name in configs), configs
        time.sleep(2)  # produce a little more on the new replica sets
    finally:
        producer.stop()

    acked_count = sum(len(v) for v in producer.acked.values())
    assert acked_count > 500, (acked_count, producer.failures[:5])
    records = consume_all(bootstrap)
    for partition, acked in producer.acked.items():
        got = dict(records[partition])
        for offset, value in acked.items():
            assert got.get(offset) == value, (partition, offset, value, got.get(offset))
        live = [v for _, v in records[partition] if v.startswith(b"live-")]
        assert len(live) == len(set(live)), f"partition {partition} has duplicates"
        acked_in_offset_order = [acked[o] for o in sorted(acked)]
        assert acked_in_offset_order == sorted(acked_in_offset_order), \
            f"partition {partition}: acknowledged records out of order"
