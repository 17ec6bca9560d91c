"""DeleteRecords on the leader (Kafka's deleteRecordsOnLeader / DelayedDeleteRecords): the
log start offset moves, whole segments below it go, the answer waits until every live
follower's log start offset followed (learnt from Fetch answers), and a new leader starts
there too."""

from __future__ import annotations

import asyncio
import pathlib

from kraftlog.broker import data_plane, server
from kraftlog.broker import replica_manager as rm_mod
from kraftlog.error_codes import ErrorCode
from kraftlog.metadata import records as r
from kraftlog.storage.log_config import LogConfig
from kraftlog.v1 import broker_pb2
from tests.broker.harness import TP, Cluster, Metadata, batch, values_of

SMALL_SEGMENTS = LogConfig(segment_bytes=200, segment_index_bytes=64 * 1024)


def cluster_with_records(tmp_path: pathlib.Path, count: int = 10) -> Cluster:
    cluster = Cluster(tmp_path, min_isr=1)
    for broker_id in cluster.broker_ids:
        cluster.partitions[broker_id].log.reconfigure(SMALL_SEGMENTS)
    for i in range(count):
        cluster.leader_manager.append_records({TP: batch(f"r{i}".encode())}, required_acks=1,
                                              timeout_ms=1000, now_ms=cluster.now_ms)
    for broker_id in (2, 3):
        cluster.catch_up(broker_id)
        cluster.fetch(broker_id)  # reports its end: the high watermark reaches it
    assert cluster.leader_partition.high_watermark == count
    return cluster


def delete(cluster: Cluster, offset: int, *, timeout_ms: int = 30_000,
           broker_id: int | None = None) -> rm_mod.DeleteRecordsOutcome:
    manager = cluster.managers[cluster.leader if broker_id is None else broker_id]
    return manager.delete_records({TP: offset}, timeout_ms=timeout_ms, now_ms=cluster.now_ms)


def completed(cluster: Cluster) -> dict[int, rm_mod.CompletedDeleteRecords]:
    return {c.op_id: c for c in cluster.leader_manager.take_completed().delete_records}


def test_the_answer_waits_until_every_replica_moved_its_log_start(tmp_path: pathlib.Path) -> None:
    cluster = cluster_with_records(tmp_path)
    segments_before = len(cluster.leader_partition.log.segments)
    outcome = delete(cluster, 6)
    assert outcome.delayed_op_id is not None and cluster.leader_manager.waiting_delete_records == 1
    leader = cluster.leader_partition
    assert leader.log_start_offset == 6
    assert len(leader.log.segments) < segments_before, "whole segments below it are deleted"
    assert values_of(leader)[0] == b"r6"
    # Each follower learns the new log start offset from a Fetch answer and reports its own
    # in the next Fetch; only then is the low watermark there.
    cluster.fetch(2)
    cluster.fetch(2)
    assert completed(cluster) == {}
    cluster.fetch(3)
    cluster.fetch(3)
    done = completed(cluster)
    assert list(done) == [outcome.delayed_op_id]
    response = done[outcome.delayed_op_id].responses[TP]
    assert (response.error, response.low_watermark) == (ErrorCode.NONE, 6)
    assert cluster.partitions[2].log_start_offset == cluster.partitions[3].log_start_offset == 6
    # A new leader serves from there: its log starts at 6 as well.
    cluster.elect(2)
    assert cluster.leader_partition.log_start_offset == 6
    assert values_of(cluster.leader_partition)[0] == b"r6"


def test_minus_one_means_the_high_watermark_and_past_it_is_out_of_range(
        tmp_path: pathlib.Path) -> None:
    cluster = cluster_with_records(tmp_path, count=4)
    cluster.leader_manager.append_records({TP: batch(b"uncommitted")}, required_acks=1,
                                          timeout_ms=1000, now_ms=cluster.now_ms)
    assert cluster.leader_partition.high_watermark == 4
    refused = delete(cluster, 5)
    assert refused.delayed_op_id is None
    assert refused.responses[TP].error is ErrorCode.OFFSET_OUT_OF_RANGE
    assert "high watermark 4" in refused.responses[TP].error_message
    assert cluster.leader_partition.log_start_offset == 0
    not_leader = delete(cluster, 1, broker_id=2)
    assert not_leader.responses[TP].error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    outcome = delete(cluster, -1)
    assert cluster.leader_partition.log_start_offset == 4
    for broker_id in (2, 3):
        cluster.fetch(broker_id)
        cluster.fetch(broker_id)
    done = completed(cluster)
    assert outcome.delayed_op_id is not None
    assert done[outcome.delayed_op_id].responses[TP].low_watermark >= 4


def test_a_follower_that_does_not_follow_times_the_request_out(tmp_path: pathlib.Path) -> None:
    cluster = cluster_with_records(tmp_path)
    outcome = delete(cluster, 3, timeout_ms=500)
    cluster.fetch(2)
    cluster.fetch(2)
    cluster.tick(499)
    assert completed(cluster) == {}
    cluster.tick(1)
    response = completed(cluster)[outcome.delayed_op_id or 0].responses[TP]
    assert response.error is ErrorCode.REQUEST_TIMED_OUT
    assert cluster.leader_partition.log_start_offset == 3, "the leader's records went all the same"


def test_losing_leadership_answers_a_waiting_request_not_leader(tmp_path: pathlib.Path) -> None:
    cluster = cluster_with_records(tmp_path)
    old_leader = cluster.leader_manager
    outcome = delete(cluster, 2)
    cluster.elect(2)
    [done] = old_leader.take_completed().delete_records
    assert done.op_id == outcome.delayed_op_id
    assert done.responses[TP].error is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_the_data_plane_checkpoints_before_it_answers(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path, broker_ids=(1,), min_isr=1)
    for i in range(3):
        cluster.leader_manager.append_records({TP: batch(f"r{i}".encode())}, required_acks=1,
                                              timeout_ms=1000, now_ms=cluster.now_ms)
    data = data_plane.DataPlane(cluster.leader_manager, now_ms=lambda: cluster.now_ms)
    seen: list[int] = []

    async def checkpoint() -> None:
        seen.append(cluster.leader_partition.log_start_offset)

    data.on_log_start_offsets_moved = checkpoint
    answer = asyncio.run(data.delete_records({TP: 2}, timeout_ms=1000))
    assert (answer[TP].error, answer[TP].low_watermark) == (ErrorCode.NONE, 2)
    assert seen == [2]
    refused = asyncio.run(data.delete_records({TP: 7}, timeout_ms=1000))
    assert refused[TP].error is ErrorCode.OFFSET_OUT_OF_RANGE and seen == [2], "nothing moved"


def test_the_rpc_checks_its_input_and_answers_an_error_per_partition(
        tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path, broker_ids=(1,), min_isr=1)
    for i in range(3):
        cluster.leader_manager.append_records({TP: batch(f"r{i}".encode())}, required_acks=1,
                                              timeout_ms=1000, now_ms=cluster.now_ms)
    data = data_plane.DataPlane(cluster.leader_manager, now_ms=lambda: cluster.now_ms)
    metadata = Metadata()
    metadata.commit(r.ConfigRecord(resource_type=r.ConfigResourceType.TOPIC,
                                   resource_name="kept", name="cleanup.policy", value="compact"))
    servicer = server.BrokerServicer(data, broker_id=1, cluster_id="c",
                                     image=lambda: metadata.image,
                                     controller_id=lambda: 3, listener_name="PLAINTEXT")
    Part = broker_pb2.DeleteRecordsRequest.DeleteRecordsPartition
    request = broker_pb2.DeleteRecordsRequest(timeout_ms=1000, topics=[
        broker_pb2.DeleteRecordsRequest.DeleteRecordsTopic(name="t", partitions=[
            Part(partition_index=0, offset=-1), Part(partition_index=-1, offset=0)]),
        broker_pb2.DeleteRecordsRequest.DeleteRecordsTopic(name="u", partitions=[
            Part(partition_index=0, offset=-2), Part(partition_index=1, offset=0),
            Part(partition_index=1, offset=0)]),
        broker_pb2.DeleteRecordsRequest.DeleteRecordsTopic(name="__consumer_offsets", partitions=[
            Part(partition_index=0, offset=0)]),
        broker_pb2.DeleteRecordsRequest.DeleteRecordsTopic(name="gone", partitions=[
            Part(partition_index=0, offset=0)]),
        broker_pb2.DeleteRecordsRequest.DeleteRecordsTopic(name="kept", partitions=[
            Part(partition_index=0, offset=0)])])
    answer = asyncio.run(servicer.DeleteRecords(request, None))
    found = {(t.name, p.partition_index): (ErrorCode(p.error.code), p.low_watermark)
             for t in answer.topics for p in t.partitions}
    assert found == {
        ("t", 0): (ErrorCode.NONE, 3),
        ("t", -1): (ErrorCode.INVALID_REQUEST, -1),
        ("u", 0): (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
        ("u", 1): (ErrorCode.INVALID_REQUEST, -1),
        ("__consumer_offsets", 0): (ErrorCode.INVALID_TOPIC_EXCEPTION, -1),
        ("gone", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("kept", 0): (ErrorCode.POLICY_VIOLATION, -1)}
    assert cluster.leader_partition.log_start_offset == 3
