"""Idempotent produce across a leader kill, with real ``kraftlog controller`` / ``kraftlog broker`` processes.

InitProducerId hands out producer ids from blocks the active controller allocates
(AllocateProducerIds); batches carrying (producer id, epoch, sequence) are
produced with acks=all; the partition leader is killed with SIGKILL; the very same
batches sent again to the new leader are answered with their original offsets and
the log holds one copy of each; a SIGTERM'd broker leaves a producer state snapshot.
Every wait is bounded; all children are killed.
"""

from __future__ import annotations

import pathlib
import signal
import time

from kraftlog.broker import producer_snapshot
from kraftlog.storage import record_batch as rb
from kraftlog.v1 import broker_pb2, common_pb2
from tests.quorum_cluster import (
    BROKERS,
    TOPIC,
    Brokers,
    Topic,
    consume_records,
    partition_state,
    running_cluster,
    wait_for,
)


def init_producer_id(brokers: Brokers, broker: int, **fields: object) -> broker_pb2.InitProducerIdResponse:
    request = broker_pb2.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)
    for name, value in fields.items():
        setattr(request, name, value)
    answer: broker_pb2.InitProducerIdResponse = brokers.stub(broker).InitProducerId(request, timeout=10)
    return answer


def produce(brokers: Brokers, broker: int, batch: bytes) -> broker_pb2.ProduceResponse.PartitionProduceResponse:
    answer = brokers.stub(broker).Produce(broker_pb2.ProduceRequest(
        acks=-1, timeout_ms=5000, topic_data=[broker_pb2.ProduceRequest.TopicProduceData(
            name=TOPIC, partition_data=[broker_pb2.ProduceRequest.PartitionProduceData(
                index=0, records=batch)])]), timeout=10)
    part: broker_pb2.ProduceResponse.PartitionProduceResponse = answer.responses[0].partition_responses[0]
    return part


def test_a_resent_batch_after_a_leader_kill_is_written_once(tmp_path: pathlib.Path) -> None:
    with running_cluster(tmp_path, topics=[Topic(name=TOPIC, min_insync_replicas=2)]) as running:
        brokers = running.brokers

        def full_isr() -> tuple[int, int, tuple[int, ...]] | None:
            states = {partition_state(brokers, b) for b in BROKERS}
            state = states.pop() if len(states) == 1 else None
            return state if state is not None and state[2] == BROKERS else None

        leader, epoch, _isr = wait_for(full_isr, timeout_s=15, what="events-0 with ISR 4,5,6")

        # InitProducerId: distinct ids, epoch 0; transactions and half-set ids are refused.
        first = init_producer_id(brokers, BROKERS[0])
        assert first.error.code == common_pb2.NONE, first
        assert first.producer_id >= 0 and first.producer_epoch == 0
        second = init_producer_id(brokers, BROKERS[1])
        assert second.error.code == common_pb2.NONE and second.producer_id != first.producer_id
        assert init_producer_id(brokers, BROKERS[0]).producer_id == first.producer_id + 1
        refused = init_producer_id(brokers, BROKERS[0], transactional_id="txn")
        assert refused.error.code == common_pb2.INVALID_REQUEST and refused.producer_id == -1
        half = init_producer_id(brokers, BROKERS[0], producer_id=first.producer_id)
        assert half.error.code == common_pb2.INVALID_REQUEST

        pid = first.producer_id
        now_ms = int(time.time() * 1000)

        def batch(seq: int, *values: bytes) -> bytes:
            return rb.build_batch([rb.RecordInput(value=v) for v in values], now_ms=now_ms,
                                  producer_id=pid, producer_epoch=0, base_sequence=seq)

        batches = [batch(0, b"a0", b"a1", b"a2"), batch(3, b"b0", b"b1")]
        for data, offset in zip(batches, (0, 3), strict=True):
            part = produce(brokers, leader, data)
            assert part.error.code == common_pb2.NONE and part.base_offset == offset, part
        assert [v for _o, v in consume_records(brokers, leader) or []] == [b"a0", b"a1", b"a2", b"b0", b"b1"]

        brokers.kill(leader)
        survivors = [b for b in BROKERS if b != leader]

        def new_leader() -> int | None:
            states = {partition_state(brokers, b) for b in survivors}
            state = states.pop() if len(states) == 1 else None
            return state[0] if state is not None and state[0] in survivors and state[1] > epoch else None

        leader2 = wait_for(new_leader, timeout_s=15, what="a new leader among the survivors")
        # The producer never saw its answers: it resends the very same bytes to the new leader.
        for data, offset in zip(batches, (0, 3), strict=True):
            part = wait_for(lambda data=data: (lambda p: p if p.error.code == common_pb2.NONE else None)(
                produce(brokers, leader2, data)), timeout_s=10, what="the resent batch answered")
            assert part.base_offset == offset, part
        nxt = produce(brokers, leader2, batch(5, b"c0"))
        assert nxt.error.code == common_pb2.NONE and nxt.base_offset == 5, nxt
        gap = produce(brokers, leader2, batch(9, b"x"))
        assert gap.error.code == common_pb2.OUT_OF_ORDER_SEQUENCE_NUMBER, gap
        assert consume_records(brokers, leader2) == [
            (0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"b0"), (4, b"b1"), (5, b"c0")]

        # A clean shutdown leaves a producer state snapshot at the log end for the restart.
        proc = brokers.procs.pop(leader2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        partition_dir = tmp_path / f"broker-{leader2}" / f"{TOPIC}-0"
        assert producer_snapshot.list_offsets(str(partition_dir)) == [6]
        entries = producer_snapshot.decode("snapshot", (partition_dir / producer_snapshot.file_name(6))
                                           .read_bytes())
        assert [(e.producer_id, e.producer_epoch, e.last_sequence) for e in entries] == [(pid, 0, 5)]
