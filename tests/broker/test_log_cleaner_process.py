"""Real ``kraftlog broker`` processes compact a ``cleanup.policy=compact`` topic.

Three controllers and three brokers on loopback; a topic created with
``cleanup.policy=compact`` gets 30 rounds of overwrites of 20 keys (small
segments, so most of them roll); within a few cleaner passes every replica's
partition directory shrinks, a consumer Fetch from the beginning sees each key's
latest value at its original offset, and each broker's ``cleaner-offset-checkpoint``
names the partition. Every wait is bounded; every child is killed in ``finally``.
"""

from __future__ import annotations

import pathlib
import time

import grpc

from kraftlog.ids import TopicPartition
from kraftlog.storage import checkpoint
from kraftlog.storage import record_batch as rb
from kraftlog.v1 import broker_pb2, common_pb2
from tests.quorum_cluster import BROKERS, Brokers, Topic, running_cluster, wait_for

TOPIC = "compacted"
TP = TopicPartition(topic=TOPIC, partition=0)
KEYS = 20
ROUNDS = 30


def leader_of(brokers: Brokers) -> int | None:
    for broker in BROKERS:
        try:
            answer = brokers.stub(broker).Metadata(broker_pb2.MetadataRequest(topics=[TOPIC]), timeout=2)
        except grpc.RpcError:
            continue
        topic = answer.topics[0]
        # The leader's own image: its reconciler has then made it the leader (publishers
        # run in order on each metadata update), so a produce there is not refused.
        if (topic.error.code == common_pb2.NONE and topic.partitions
                and len(topic.partitions[0].isr_nodes) == 3 and topic.partitions[0].leader_id == broker):
            return broker
    return None


def produce(brokers: Brokers, leader: int, round_: int) -> None:
    batch = rb.build_batch([rb.RecordInput(key=b"key-%02d" % k, value=b"value-%02d-%02d-" % (k, round_) + b"x" * 60)
                            for k in range(KEYS)], now_ms=int(time.time() * 1000))
    answer = brokers.stub(leader).Produce(broker_pb2.ProduceRequest(
        acks=-1, timeout_ms=5000, topic_data=[broker_pb2.ProduceRequest.TopicProduceData(
            name=TOPIC, partition_data=[broker_pb2.ProduceRequest.PartitionProduceData(index=0, records=batch)])]),
        timeout=10)
    part = answer.responses[0].partition_responses[0]
    assert part.error.code == common_pb2.NONE, part


def consume(brokers: Brokers, broker: int) -> list[tuple[int, bytes, bytes]]:
    out: list[tuple[int, bytes, bytes]] = []
    offset = 0
    for _ in range(1000):
        answer = brokers.stub(broker).Fetch(broker_pb2.FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
            topics=[broker_pb2.FetchRequest.FetchTopic(topic=TOPIC, partitions=[
                broker_pb2.FetchRequest.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                    log_start_offset=-1, partition_max_bytes=1 << 20)])]), timeout=5)
        data = answer.responses[0].partitions[0]
        assert data.error.code == common_pb2.NONE, data
        if not data.records:
            return out
        batches = rb.decode_batches(data.records)
        out.extend((r.offset, r.key or b"", r.value or b"") for b in batches for r in b.records if r.offset >= offset)
        offset = batches[-1].next_offset
    raise AssertionError("fetch did not reach the end")


def partition_bytes(root: pathlib.Path, broker: int) -> int:
    directory = root / f"broker-{broker}" / TP.dir_name
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def test_brokers_compact_a_compacted_topic_on_every_replica(tmp_path: pathlib.Path) -> None:
    with running_cluster(
            tmp_path, topics=[Topic(name=TOPIC, configs={"cleanup.policy": "compact",
                                                         "min.cleanable.dirty.ratio": "0.1"})],
            broker_config={"log.segment.bytes": 8192, "log.cleaner.backoff.ms": 100,
                           "replica.high.watermark.checkpoint.interval.ms": 200},
            topic_timeout_s=5) as running:
        brokers = running.brokers
        leader = wait_for(lambda: leader_of(brokers), timeout_s=10, what="compacted-0 led with a full ISR")
        for round_ in range(ROUNDS):
            produce(brokers, leader, round_)
        written = KEYS * ROUNDS * 80

        def compacted_everywhere() -> list[tuple[int, bytes, bytes]] | None:
            sizes = [partition_bytes(tmp_path, b) for b in BROKERS]
            if not all(size < written / 3 for size in sizes):
                return None
            # Below the cleaned end one record per key; the active segment (8 KiB, about
            # 4 batches of 20) is never cleaned.
            seen = consume(brokers, leader)
            return seen if len(seen) <= KEYS * 5 else None

        seen = wait_for(compacted_everywhere, timeout_s=20, what="every replica compacted")
        latest = {key: (offset, value) for offset, key, value in seen}
        assert len(latest) == KEYS
        assert all(value.startswith(b"value-%s-%02d-" % (key[4:], ROUNDS - 1)) for key, (_o, value) in
                   latest.items())
        assert all(offset >= (ROUNDS - 2) * KEYS for _key, (offset, _v) in latest.items())
        for broker in BROKERS:
            cp = checkpoint.OffsetCheckpointFile(tmp_path / f"broker-{broker}"
                                                 / checkpoint.CLEANER_OFFSET_CHECKPOINT).read()
            assert cp.get(TP, 0) > 0
