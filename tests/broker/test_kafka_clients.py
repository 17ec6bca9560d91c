"""Kafka clients nobody here wrote, against a ``kraftlog dev`` cluster's Kafka listeners.

One cluster for the module (1 controller, 3 brokers, admin service; topics RF 3, min ISR 2):

* kcat (Debian package, librdkafka 2.0) lists the brokers and topics (``kcat -L``) and
  produces / consumes through them;
* confluent-kafka (PyPI, librdkafka 2.16) produces with ``acks=all`` and
  ``enable.idempotence=true``, then a consumer reads every partition from the beginning:
  every value exactly once, and the committed offsets read back.

scripts/test.sh installs kcat (as root) and the test extra pins confluent-kafka; without
them these tests fail, not skip, in CI (``CI`` set), so a missing install step shows.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.dev_cluster import DevCluster

KCAT = shutil.which("kcat")
RECORDS = 3000

try:
    import confluent_kafka
except ImportError:  # pragma: no cover - the test extra installs it
    confluent_kafka = None


def _require(what: str, present: bool) -> None:
    if not present:
        if os.environ.get("CI"):
            pytest.fail(f"{what} is not installed (scripts/test.sh installs it)")
        pytest.skip(f"{what} is not installed (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    dev = DevCluster(tmp_path_factory.mktemp("kafka-clients"))
    try:
        up = dev.up("--controllers", "1", "--brokers", "3")
        # `kraftlog dev up` tells Kafka clients where to go.
        printed = [line.split("bootstrap.servers=", 1)[1].strip() for line in up.stdout.splitlines()
                   if "Kafka clients" in line and "bootstrap.servers=" in line]
        assert printed == [kafka_bootstrap(dev)], up.stdout
        for topic in ("kcat-topic", "idempotent"):
            done = dev.cli("topics", "create", "--topic", topic, "--partitions", "3",
                           "--replication-factor", "3")
            assert done.returncode == 0, done.stdout + done.stderr
        yield dev
    finally:
        dev.destroy()


def kafka_bootstrap(dev: DevCluster) -> str:
    return ",".join(f"127.0.0.1:{dev.base_port + 21 + i}" for i in range(3))


def kcat(dev: DevCluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert KCAT is not None
    return subprocess.run([KCAT, "-b", kafka_bootstrap(dev).split(",")[0], *args], input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)


def test_kcat_lists_the_brokers_on_their_kafka_listeners_and_the_topics(cluster: DevCluster) -> None:
    _require("kcat", KCAT is not None)
    done = kcat(cluster, "-L", "-J")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert sorted((b["id"], b["name"]) for b in listing["brokers"]) == [
        (101 + i, f"127.0.0.1:{cluster.base_port + 21 + i}") for i in range(3)]
    assert listing["controllerid"] in (101, 102, 103)
    topics = {t["topic"]: t for t in listing["topics"]}
    partitions = topics["kcat-topic"]["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert sorted(r["id"] for r in p["replicas"]) == [101, 102, 103]
        assert p["leader"] in (101, 102, 103)


def test_kcat_produces_and_consumes_every_line(cluster: DevCluster) -> None:
    _require("kcat", KCAT is not None)
    lines = [f"kcat-{i}" for i in range(200)]
    done = kcat(cluster, "-P", "-t", "kcat-topic", "-X", "acks=all", "-X",
                "enable.idempotence=true", stdin="\n".join(lines) + "\n")
    assert done.returncode == 0, done.stderr
    read = kcat(cluster, "-C", "-t", "kcat-topic", "-o", "beginning", "-e", "-q")
    assert read.returncode == 0, read.stderr
    assert sorted(read.stdout.split()) == sorted(lines)


def test_confluent_kafka_idempotent_acks_all_then_every_value_exactly_once(
        cluster: DevCluster, tmp_path: pathlib.Path) -> None:
    _require("confluent-kafka", confluent_kafka is not None)
    bootstrap = kafka_bootstrap(cluster)
    errors: list[Any] = []
    acked: list[bytes] = []

    def delivered(err: Any, message: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append(message.value())

    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": 5, "message.timeout.ms": 30000})
    values = [f"value-{i}".encode() for i in range(RECORDS)]
    for index, value in enumerate(values):
        producer.produce("idempotent", value=value, key=str(index % 17).encode(),
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors and sorted(acked) == sorted(values)

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "exactly-once-check",
        "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        topic = consumer.list_topics("idempotent", timeout=10).topics["idempotent"]
        consumer.assign([confluent_kafka.TopicPartition("idempotent", p,
                                                        confluent_kafka.OFFSET_BEGINNING)
                         for p in sorted(topic.partitions)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < RECORDS and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                assert message.error() is None, message.error()
                seen.append(message.value())
        assert sorted(seen) == sorted(values), "every value exactly once"
        # Nothing more arrives (no duplicate after the last one).
        assert all(m.error() is not None for m in consumer.consume(num_messages=10, timeout=1))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([confluent_kafka.TopicPartition("idempotent", p)
                                        for p in sorted(topic.partitions)], timeout=10)
        assert sum(tp.offset for tp in committed) == RECORDS
    finally:
        consumer.close()
