"""KafkaApis in-process: Kafka messages through the same DataPlane and partition as the gRPC
servicer (one data plane, two front doors), on real logs, no sockets.

Broker 1 leads ``t-0`` with replicas (1, 2) (tests.broker.test_process_server's harness);
acks=all answers only once broker 2's follower fetch (over the gRPC servicer) passed the
records, whichever front door produced them.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from typing import Any

import pytest

from kraftlog import config as kconfig
from kraftlog import errors
from kraftlog.broker import kafka_apis
from kraftlog.error_codes import ErrorCode
from kraftlog.protocol.generated import fetch, list_offsets, metadata, produce
from kraftlog.server import broker_server as process
from kraftlog.storage import record_batch as rb
from tests.broker.harness import TOPIC_ID, TP, batch
from tests.broker.test_process_server import Broker, fetch_request, run


def apis_for(broker: Broker) -> kafka_apis.KafkaApis:
    return kafka_apis.KafkaApis(broker.data, broker_id=1, cluster_id="c",
                                image=lambda: broker.image, ready=lambda: broker.ready,
                                monotonic_s=time.monotonic)


def produce_v9(values: list[bytes], *, acks: int) -> produce.ProduceRequest:
    return produce.ProduceRequest(acks=acks, timeout_ms=30_000, topic_data=[
        produce.TopicProduceData(name=TP.topic, partition_data=[
            produce.PartitionProduceData(index=0, records=batch(*values))])])


def test_acks_all_through_the_kafka_door_waits_for_the_follower_of_the_grpc_door(
        tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1, 2), min_isr=2)
    apis = apis_for(broker)

    async def body() -> tuple[Any, Any]:
        broker.data.start()
        try:
            pending = asyncio.ensure_future(apis.handle("KAFKA", 0, 9, produce_v9([b"a", b"b"], acks=-1)))
            await asyncio.sleep(0.05)
            assert not pending.done(), "acks=all waits for the ISR"
            await broker.servicer.Fetch(fetch_request(0, replica_id=2), None)
            await broker.servicer.Fetch(fetch_request(2, replica_id=2), None)  # acknowledges
            answer = await pending
            read = await apis.handle("KAFKA", 1, 4, fetch.FetchRequest(
                max_wait_ms=0, min_bytes=0, topics=[fetch.FetchTopic(topic=TP.topic, partitions=[
                    fetch.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]))
            return answer, read
        finally:
            await broker.data.stop()

    answer, read = run(body())
    part = answer.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (ErrorCode.NONE, 0)
    [topic] = read.responses
    [data] = topic.partitions
    assert (topic.topic, data.error_code, data.high_watermark) == (TP.topic, 0, 2)
    assert [r.value for b in rb.decode_batches(data.records) for r in b.records] == [b"a", b"b"]


def test_a_broker_not_ready_sends_kafka_consumers_to_the_leader(tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    broker.ready = False
    answer = run(apis_for(broker).handle("KAFKA", 1, 16, fetch.FetchRequest(topics=[
        fetch.FetchTopic(topic_id=TOPIC_ID, partitions=[fetch.FetchPartition(partition=0)])])))
    [topic] = answer.responses
    [data] = topic.partitions
    assert topic.topic_id == TOPIC_ID
    assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert data.current_leader.leader_id == 1


def test_acks_0_gets_no_answer_and_a_failed_acks_0_closes_the_connection(
        tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    apis = apis_for(broker)
    assert run(apis.handle("KAFKA", 0, 9, produce_v9([b"x"], acks=0))) is kafka_apis.NO_RESPONSE
    bad = produce_v9([b"x"], acks=0)
    bad.topic_data[0].partition_data[0].records = b"\x00" * 70  # not a record batch
    assert run(apis.handle("KAFKA", 0, 9, bad)) is kafka_apis.CLOSE_CONNECTION
    assert broker.partition.log_end_offset == 1


def test_list_offsets_and_metadata_answer_from_the_partition_and_the_image(
        tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    apis = apis_for(broker)
    run(apis.handle("KAFKA", 0, 9, produce_v9([b"x", b"y", b"z"], acks=1)))
    offsets = run(apis.handle("KAFKA", 2, 6, list_offsets.ListOffsetsRequest(replica_id=-1, topics=[
        list_offsets.ListOffsetsTopic(name=TP.topic, partitions=[
            list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-1),
            list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-2)])])))
    [latest, twice] = offsets.topics[0].partitions
    assert (latest.error_code, latest.offset, latest.leader_epoch) == (0, 3, 0)
    assert twice.error_code == ErrorCode.INVALID_REQUEST, "a partition named twice"
    listing = run(apis.handle("PLAINTEXT", 3, 12, metadata.MetadataRequest(topics=None)))
    assert sorted((b.node_id, b.port) for b in listing.brokers) == [(1, 9001), (2, 9002), (3, 9003)]
    assert listing.controller_id == 1, "this broker forwards admin requests (KIP-590)"
    [topic] = listing.topics
    assert (topic.name, topic.topic_id, [p.leader_id for p in topic.partitions]) == (
        TP.topic, TOPIC_ID, [1])
    # A listener no broker registered: no broker to offer.
    assert run(apis.handle("KAFKA", 3, 12, metadata.MetadataRequest(topics=[]))).brokers == []


@pytest.mark.parametrize(("listeners", "extra", "error"), [
    ("KAFKA://127.0.0.1:9092", {}, "no gRPC broker listener"),
    ("PLAINTEXT://127.0.0.1:9091,KAFKA://127.0.0.1:9092",
     {"inter.broker.listener.name": "KAFKA"}, "brokers replicate over a gRPC one"),
])
def test_a_broker_needs_a_grpc_listener_to_replicate_over(
        tmp_path: pathlib.Path, listeners: str, extra: dict[str, str], error: str) -> None:
    props = {"node.id": "7", "process.roles": "broker", "log.dirs": str(tmp_path),
             "controller.quorum.voters": "1@127.0.0.1:9093", "listeners": listeners, **extra}
    raw, sources = kconfig.parse_properties("".join(f"{k}={v}\n" for k, v in props.items()))
    cfg = process.BROKER_CONFIG.parse(raw, sources=sources)
    with pytest.raises(errors.ConfigError, match=error):
        asyncio.run(process.serve(cfg))
