"""Three ``kraftlog controller`` and three ``kraftlog broker`` processes on loopback.

The scenario: brokers follow the metadata log as raft observers, register and are
unfenced (their BrokerService health turns SERVING); a topic with replication factor
3 and min.insync.replicas=2 is created through ControllerService; records produced
with acks=all to the partition leader are read back with a consumer Fetch; the
leader broker is killed with SIGKILL, the controller fences it after its short
session timeout and elects a new leader from the ISR, and every acknowledged record
is still readable from the new leader. The killed broker restarts, recovers its log
and rejoins the ISR through the leader's AlterPartition. A SIGTERM'd broker then shuts down cleanly
(controlled shutdown, exit 0). Every wait is bounded.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time

import grpc
from quorum_cluster import BROKERS, SESSION, TOPIC, Brokers, Cluster, wait_for

from kraftlog.storage import record_batch as rb
from kraftlog.v1 import broker_pb2, common_pb2


def partition_state(brokers: Brokers, broker: int) -> tuple[int, int, tuple[int, ...]] | None:
    """(leader, leader epoch, ISR) of ``events-0`` in ``broker``'s metadata image."""
    try:
        answer = brokers.stub(broker).Metadata(broker_pb2.MetadataRequest(topics=[TOPIC]),
                                               timeout=2)
    except grpc.RpcError:
        return None
    topic = answer.topics[0]
    if topic.error.code != common_pb2.NONE or not topic.partitions:
        return None
    p = topic.partitions[0]
    return p.leader_id, p.leader_epoch, tuple(sorted(p.isr_nodes))


def produce(brokers: Brokers, broker: int, values: list[bytes]) -> broker_pb2.ProduceResponse:
    batch = rb.build_batch([rb.RecordInput(value=v, timestamp_ms=None) for v in values],
                           now_ms=int(time.time() * 1000))
    return brokers.stub(broker).Produce(broker_pb2.ProduceRequest(
        acks=-1, timeout_ms=5000, topic_data=[broker_pb2.ProduceRequest.TopicProduceData(
            name=TOPIC, partition_data=[broker_pb2.ProduceRequest.PartitionProduceData(
                index=0, records=batch)])]), timeout=10)


def consume(brokers: Brokers, broker: int) -> list[bytes] | None:
    """Every committed record value of ``events-0`` read from ``broker``, None on an error."""
    values: list[bytes] = []
    offset = 0
    while True:
        try:
            answer = brokers.stub(broker).Fetch(broker_pb2.FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                topics=[broker_pb2.FetchRequest.FetchTopic(topic=TOPIC, partitions=[
                    broker_pb2.FetchRequest.FetchPartition(
                        partition=0, current_leader_epoch=-1, fetch_offset=offset,
                        last_fetched_epoch=-1, log_start_offset=-1,
                        partition_max_bytes=1 << 20)])]), timeout=5)
        except grpc.RpcError:
            return None
        data = answer.responses[0].partitions[0]
        if data.error.code != common_pb2.NONE:
            return None
        if not data.records:
            return values
        for decoded in rb.decode_batches(data.records):
            for record in decoded.records:
                if record.offset >= offset:
                    values.append(record.value or b"")
                    offset = record.offset + 1


def test_brokers_replicate_and_survive_a_leader_kill(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path / "controllers", extra=SESSION)
    brokers = Brokers(tmp_path, cluster)
    started = time.monotonic()
    try:
        for node in cluster.ports:
            cluster.start(node)
        for broker in BROKERS:
            brokers.start(broker)

        def all_serving() -> bool | None:
            return True if all(brokers.serving(b) for b in BROKERS) else None

        def logs() -> str:
            return cluster.logs() + "\n" + brokers.logs()

        try:
            wait_for(all_serving, timeout_s=15, what="brokers registered and unfenced")
            wait_for(lambda: cluster.create_topic(TOPIC, min_insync_replicas=2), timeout_s=5, what="topic created")

            def full_isr_everywhere() -> tuple[int, int, tuple[int, ...]] | None:
                states = {partition_state(brokers, b) for b in BROKERS}
                state = states.pop() if len(states) == 1 else None
                return state if state is not None and state[2] == BROKERS else None

            leader, epoch, _isr = wait_for(full_isr_everywhere, timeout_s=10,
                                           what="events-0 led with ISR 4,5,6 on every broker")
            acked: list[bytes] = []
            for i in range(5):
                values = [f"record-{i}-{j}".encode() for j in range(10)]
                answer = produce(brokers, leader, values)
                part = answer.responses[0].partition_responses[0]
                assert part.error.code == common_pb2.NONE, part
                assert part.base_offset == len(acked)
                acked += values
            assert consume(brokers, leader) == acked
            # A follower refuses the produce and names the leader (KIP-951).
            follower = next(b for b in BROKERS if b != leader)
            refused = produce(brokers, follower, [b"x"]).responses[0].partition_responses[0]
            assert refused.error.code == common_pb2.NOT_LEADER_OR_FOLLOWER, refused
            assert refused.current_leader.leader_id == leader
            assert refused.current_leader.endpoint.port == brokers.ports[leader]

            brokers.kill(leader)
            survivors = [b for b in BROKERS if b != leader]

            def new_leader() -> int | None:
                state = partition_state(brokers, survivors[0])
                if state is None or state[0] in (leader, -1) or state[1] <= epoch:
                    return None
                return state[0]

            elected = wait_for(new_leader, timeout_s=10, what="a new leader from the ISR")
            assert elected in survivors
            wait_for(lambda: consume(brokers, elected) == acked or None, timeout_s=10,
                     what="acknowledged records readable from the new leader")
            more = [b"after-failover"]
            part = produce(brokers, elected, more).responses[0].partition_responses[0]
            assert part.error.code == common_pb2.NONE, part
            assert part.base_offset == len(acked)

            # The killed broker restarts, recovers its log, follows the new leader and
            # rejoins the ISR (the leader's AlterPartition expansion).
            brokers.start(leader)

            def isr_restored() -> bool | None:
                state = partition_state(brokers, elected)
                return True if state is not None and state[2] == BROKERS else None

            wait_for(isr_restored, timeout_s=10, what="the restarted broker back in the ISR")
            dirs = brokers.stub(elected).DescribeLogDirs(broker_pb2.DescribeLogDirsRequest(),
                                                         timeout=5)
            [replica] = dirs.results[0].topics[0].partitions
            assert replica.is_leader and replica.log_end_offset == len(acked) + 1
            assert replica.replica_state == broker_pb2.REPLICA_STATE_ONLINE_REPLICA

            # Controlled shutdown of a follower: exit 0 within its bound.
            follower = next(b for b in survivors if b != elected)
            proc = brokers.procs.pop(follower)
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{logs()}") from None
        assert time.monotonic() - started < 60
    finally:
        brokers.kill_all()
        cluster.kill_all()
