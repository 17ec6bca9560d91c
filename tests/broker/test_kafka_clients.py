"""Kafka clients nobody here wrote, against a ``kraftlog dev`` cluster's Kafka listeners.

One cluster for the module (1 controller, 3 brokers, admin service; topics RF 3, min ISR 2):

* kcat (Debian package, librdkafka 2.0) lists the brokers and topics (``kcat -L``) and
  produces / consumes through them;
* confluent-kafka (PyPI, librdkafka 2.16) produces with ``acks=all`` and
  ``enable.idempotence=true``, then a consumer reads every partition from the beginning:
  every value exactly once, and the committed offsets read back; its AdminClient creates
  and deletes a topic through a broker (forwarded to the controller, KIP-590);
* requests at named versions with our own codecs check what each version means.

scripts/test.sh installs kcat (as root) and the test extra pins confluent-kafka; without
them these tests fail, not skip, in CI (``CI`` set), so a missing install step shows.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kraftlog.error_codes import ErrorCode
from kraftlog.protocol import api_keys, headers, wire
from kraftlog.protocol.generated import (
    api_versions,
    create_topics,
    fetch,
    find_coordinator,
    init_producer_id,
    metadata,
    produce,
)
from kraftlog.storage import record_batch
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
    del producer

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


# -- the same cluster, spoken to request by request with our codecs ------------------------------

class RawClient:
    """One connection to a Kafka listener; requests at the versions a test names."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation_id = 0

    def call(self, request: Any, version: int) -> Any:
        api = api_keys.SERVED[type(request).API_KEY]
        self.correlation_id += 1
        w = wire.Writer()
        headers.write_request_header(w, headers.RequestHeader(
            api_key=api.key, api_version=version, correlation_id=self.correlation_id,
            client_id="raw"), flexible=api.flexible(version))
        request.write(w, version)
        self.sock.sendall(b"".join(headers.frame(w.parts())))
        size = int.from_bytes(self._read(4), "big")
        r = wire.Reader(self._read(size))
        flexible = headers.response_header_flexible(api.key, body_flexible=api.flexible(version))
        assert headers.read_response_header(r, flexible=flexible) == self.correlation_id
        response = api.response.read(r, version)
        r.expect_end("response")
        return response

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def raw(cluster: DevCluster) -> Iterator[RawClient]:
    client = RawClient(kafka_bootstrap(cluster).split(",")[0])
    try:
        yield client
    finally:
        client.close()


def _leaders(raw: RawClient, topic: str) -> dict[int, int]:
    answer = raw.call(metadata.MetadataRequest(topics=[metadata.MetadataRequestTopic(name=topic)]), 12)
    return {p.partition_index: p.leader_id for p in answer.topics[0].partitions}


def test_metadata_topic_lists_mean_what_each_version_says(raw: RawClient) -> None:
    every_v0 = raw.call(metadata.MetadataRequest(topics=[]), 0)
    assert {"kcat-topic", "idempotent"} <= {t.name for t in every_v0.topics}
    none_v1 = raw.call(metadata.MetadataRequest(topics=[]), 1)
    assert none_v1.topics == [] and len(none_v1.brokers) == 3
    every_v1 = raw.call(metadata.MetadataRequest(topics=None), 1)
    topic_id = next(t.topic_id for t in raw.call(metadata.MetadataRequest(topics=None), 12).topics
                    if t.name == "idempotent")
    by_id = raw.call(metadata.MetadataRequest(
        topics=[metadata.MetadataRequestTopic(topic_id=topic_id, name=None)]), 12)
    assert [(t.name, t.error_code) for t in by_id.topics] == [("idempotent", 0)]
    assert {t.name for t in every_v1.topics} == {t.name for t in every_v0.topics}
    unknown = raw.call(metadata.MetadataRequest(
        topics=[metadata.MetadataRequestTopic(name="no-such-topic")]), 9)
    assert unknown.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_refusals_carry_kafkas_error_codes(cluster: DevCluster, raw: RawClient) -> None:
    batch = record_batch.build_batch([record_batch.RecordInput(key=None, value=b"x")], now_ms=0)
    leaders = _leaders(raw, "kcat-topic")
    follower_partition = next(p for p, leader in leaders.items() if leader != 101)
    request = produce.ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
        produce.TopicProduceData(name="kcat-topic", partition_data=[
            produce.PartitionProduceData(index=follower_partition, records=batch)])])
    answer = raw.call(request, 10)
    [part] = answer.responses[0].partition_responses
    # Broker 101 does not lead it: NOT_LEADER_OR_FOLLOWER with the leader and its endpoint.
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert part.current_leader.leader_id == leaders[follower_partition]
    assert [(n.node_id, n.port) for n in answer.node_endpoints] == [
        (leaders[follower_partition], cluster.base_port + 21 + leaders[follower_partition] - 101)]
    request.acks = 2
    refused = raw.call(request, 9).responses[0].partition_responses[0]
    assert refused.error_code == ErrorCode.INVALID_REQUIRED_ACKS


def test_fetch_sessions_are_refused_as_kafka_refuses_them_and_topic_ids_work(
        raw: RawClient) -> None:
    leaders = _leaders(raw, "kcat-topic")
    led = next(p for p, leader in leaders.items() if leader == 101)
    topic_id = next(t.topic_id for t in raw.call(metadata.MetadataRequest(topics=None), 12).topics
                    if t.name == "kcat-topic")
    batch = record_batch.build_batch([record_batch.RecordInput(key=None, value=b"by-id")], now_ms=1)
    written = raw.call(produce.ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
        produce.TopicProduceData(name="kcat-topic", partition_data=[
            produce.PartitionProduceData(index=led, records=batch)])]), 9)
    appended = written.responses[0].partition_responses[0]
    assert appended.error_code == 0 and appended.base_offset >= 0
    full = raw.call(fetch.FetchRequest(max_wait_ms=0, min_bytes=0, session_epoch=0, topics=[
        fetch.FetchTopic(topic_id=topic_id, partitions=[fetch.FetchPartition(
            partition=led, fetch_offset=appended.base_offset, partition_max_bytes=1 << 20)])]), 16)
    assert full.error_code == 0 and full.session_id == 0, "no session is created"
    [topic] = full.responses
    assert topic.topic_id == topic_id
    [part] = topic.partitions
    assert part.error_code == 0 and part.high_watermark == appended.base_offset + 1
    [fetched] = record_batch.decode_batches(part.records)
    assert (fetched.base_offset, [r.value for r in fetched.records]) == (
        appended.base_offset, [b"by-id"])
    incremental = raw.call(fetch.FetchRequest(session_id=12345, session_epoch=1), 16)
    assert incremental.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_transactions_are_refused_not_half_served(raw: RawClient) -> None:
    versions = raw.call(api_versions.ApiVersionsRequest(), 3)
    assert {k.api_key for k in versions.api_keys} == set(api_keys.SERVED)
    assert 24 not in {k.api_key for k in versions.api_keys}, "no AddPartitionsToTxn"
    txn = raw.call(init_producer_id.InitProducerIdRequest(transactional_id="tx",
                                                          transaction_timeout_ms=1000), 4)
    assert txn.error_code == ErrorCode.INVALID_REQUEST
    coordinator = raw.call(find_coordinator.FindCoordinatorRequest(
        key_type=1, coordinator_keys=["tx"]), 4)
    assert coordinator.coordinators[0].error_code == ErrorCode.INVALID_REQUEST
    plain = raw.call(init_producer_id.InitProducerIdRequest(transactional_id=None), 4)
    assert plain.error_code == 0 and plain.producer_id >= 0 and plain.producer_epoch == 0


def test_confluent_kafka_admin_creates_and_deletes_topics_through_a_broker(
        cluster: DevCluster, raw: RawClient) -> None:
    _require("confluent-kafka", confluent_kafka is not None)
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap(cluster)})
    created = admin.create_topics([NewTopic("made-by-admin", num_partitions=2,
                                            replication_factor=3)], operation_timeout=10)
    assert created["made-by-admin"].result(timeout=30) is None
    again = admin.create_topics([NewTopic("made-by-admin", num_partitions=2,
                                          replication_factor=3)], operation_timeout=10)
    with pytest.raises(confluent_kafka.KafkaException, match=r"TOPIC_ALREADY_EXISTS|already exists"):
        again["made-by-admin"].result(timeout=30)
    # Kafka's AdminClient: brokers learn of a created topic some time after CreateTopics
    # succeeds (it commits on the controller); the describe reads a broker's metadata.
    deadline = time.monotonic() + 10
    while (done := cluster.cli("topics", "describe", "--topic", "made-by-admin", "--output",
                               "json")).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.dumps(json.loads(done.stdout)).count("made-by-admin") >= 1
    deleted = admin.delete_topics(["made-by-admin"], operation_timeout=10)
    assert deleted["made-by-admin"].result(timeout=30) is None
    del admin  # librdkafka's handle goes now, not when the cluster is already down
    # Named twice in one request: refused, as Kafka refuses it, and nothing is created.
    twice = raw.call(create_topics.CreateTopicsRequest(timeout_ms=5000, topics=[
        create_topics.CreatableTopic(name="twice", num_partitions=1, replication_factor=1)] * 2), 7)
    assert [(t.name, t.error_code) for t in twice.topics] == [("twice", ErrorCode.INVALID_REQUEST)]


def test_mutated_client_requests_get_answers_or_a_closed_connection_never_a_crash(
        cluster: DevCluster) -> None:
    """Real clients' requests (the golden frames) with random bytes flipped, each on its own
    connection: the broker answers or closes that connection; no handler fails, no process
    exits, and the listener serves afterwards."""
    golden = json.loads((pathlib.Path(__file__).parents[1] / "protocol" /
                         "golden_requests.json").read_text())
    rng = random.Random(21)
    address = kafka_bootstrap(cluster).split(",")[0]
    host, port = address.rsplit(":", 1)
    outcomes = {"answered": 0, "closed": 0, "silent": 0}
    for _ in range(150):
        frame = bytearray(bytes.fromhex(rng.choice(golden)["frame"]))
        for _ in range(rng.randint(1, 4)):
            frame[rng.randrange(4, len(frame))] = rng.randrange(256)  # keep the API key
        with socket.create_connection((host, int(port)), timeout=2) as sock:
            sock.sendall(len(frame).to_bytes(4, "big") + frame)
            try:
                outcomes["answered" if sock.recv(4) else "closed"] += 1
            except TimeoutError:
                outcomes["silent"] += 1  # e.g. acks=0, or a long-poll fetch still waiting
    assert outcomes["answered"] > 0 and outcomes["closed"] > 0, outcomes
    logs = cluster.logs()
    assert "kafka_request_failed" not in logs, logs
    status = cluster.status()
    assert all(node["state"] == "running" for node in status["nodes"]), status
    with RawClient(address) as client:
        assert len(client.call(metadata.MetadataRequest(topics=None), 12).brokers) == 3
