"""KIP-73 replication throttles across processes: three controllers and two brokers on loopback.

A topic with one replica on broker 4 holds ~4 MiB; it is reassigned (ControllerService
AlterPartitionReassignments) to add a replica on broker 5, with the throttles the
reassignment tool sets (IncrementalAlterConfigs): ``leader.replication.throttled.replicas``
= ``0:4`` and ``follower.replication.throttled.replicas`` = ``0:5`` on the TOPIC, and
``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` on the
BROKER resources. Checked:

- the throttled copy takes about size / rate (bounded, with tolerance), not an instant;
- the same copy of a topic without throttled replicas runs at full speed, although the
  broker rates stay set (only listed replicas are throttled);
- a copy crawling under a very low rate finishes at full speed once the throttle configs
  are deleted.

The brokers sample the rate over ``replication.quota.window.num=2`` windows of 1 s (Kafka's
default 11 would let the first 10 s worth of bytes through unthrottled) and fetch at most
``replica.fetch.max.bytes=131072`` per partition, so the rate is kept to within a fetch.
Every wait is bounded; every child is killed in ``finally``.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable
from typing import Any

import grpc

from kraftlog.storage import record_batch as rb
from kraftlog.v1 import broker_pb2, common_pb2, controller_pb2, controller_pb2_grpc
from tests.quorum_cluster import Brokers, Cluster, Topic, running_cluster, wait_for

LEADER, FOLLOWER = 4, 5
MIB = 1024 * 1024
SIZE = 4 * MIB
RATE = 1 * MIB  # bytes/s, on each side
CRAWL_RATE = 64 * 1024  # bytes/s: the 4 MiB would take a minute
CRAWL_S = 2.0
FETCH_MAX_BYTES = 131072
BATCH_RECORDS, RECORD_BYTES = 16, 4096  # 64 KiB batches
BROKER_CONFIG = {"replication.quota.window.num": 2, "replication.quota.window.size.seconds": 1,
                 "replica.fetch.max.bytes": FETCH_MAX_BYTES}


def controller_call(cluster: Cluster, method: str, request: Any) -> Any:
    """``method`` on whichever controller answers without NOT_CONTROLLER; None if none does."""
    for node in cluster.procs:
        try:
            with grpc.insecure_channel(f"127.0.0.1:{cluster.ports[node]}") as channel:
                stub = controller_pb2_grpc.ControllerServiceStub(channel)
                answer = getattr(stub, method)(request, timeout=5)
        except grpc.RpcError:
            continue
        if answer.error.code == common_pb2.NONE:
            return answer
    return None


def alter_configs(cluster: Cluster, changes: list[tuple[int, str, str, str | None]]) -> None:
    """(resource type, resource name, config, value or None to delete), all in one request."""
    resources: dict[tuple[int, str], Any] = {}
    for kind, name, key, value in changes:
        resource = resources.get((kind, name))
        if resource is None:
            resource = resources[(kind, name)] = (
                controller_pb2.IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=kind, resource_name=name))  # type: ignore[arg-type]
        resource.configs.append(controller_pb2.IncrementalAlterConfigsRequest.AlterableConfig(
            name=key, value=value or "",
            config_operation=(controller_pb2.CONFIG_OPERATION_SET if value is not None
                              else controller_pb2.CONFIG_OPERATION_DELETE)))
    request = controller_pb2.IncrementalAlterConfigsRequest(resources=list(resources.values()))
    answer = wait_for(lambda: controller_call(cluster, "IncrementalAlterConfigs", request),
                      timeout_s=10, what="IncrementalAlterConfigs")
    for result in answer.responses:
        assert result.error.code == common_pb2.NONE, answer


def throttle(topic: str, *, rate: int | None) -> list[tuple[int, str, str, str | None]]:
    """What ``kafka-reassign-partitions --throttle`` sets to add broker 5 to ``topic``-0
    (``rate`` None: delete them all, as ``--verify`` does once the move is done)."""
    topic_type, broker_type = common_pb2.CONFIG_RESOURCE_TYPE_TOPIC, common_pb2.CONFIG_RESOURCE_TYPE_BROKER
    value = None if rate is None else str(rate)
    return [(topic_type, topic, "leader.replication.throttled.replicas",
             None if rate is None else f"0:{LEADER}"),
            (topic_type, topic, "follower.replication.throttled.replicas",
             None if rate is None else f"0:{FOLLOWER}"),
            (broker_type, str(LEADER), "leader.replication.throttled.rate", value),
            (broker_type, str(FOLLOWER), "follower.replication.throttled.rate", value)]


def produce(brokers: Brokers, topic: str) -> int:
    """~SIZE bytes to ``topic``-0 on the leader; returns the record count."""
    stub = brokers.stub(LEADER)
    count = 0
    for _ in range(SIZE // (BATCH_RECORDS * RECORD_BYTES)):
        batch = rb.build_batch([rb.RecordInput(value=os.urandom(RECORD_BYTES), timestamp_ms=None)
                                for _ in range(BATCH_RECORDS)], now_ms=int(time.time() * 1000))
        answer = stub.Produce(broker_pb2.ProduceRequest(
            acks=-1, timeout_ms=5000, topic_data=[broker_pb2.ProduceRequest.TopicProduceData(
                name=topic, partition_data=[broker_pb2.ProduceRequest.PartitionProduceData(
                    index=0, records=batch)])]), timeout=10)
        part = answer.responses[0].partition_responses[0]
        assert part.error.code == common_pb2.NONE, part
        count += BATCH_RECORDS
    return count


def log_end(brokers: Brokers, broker: int, topic: str) -> int:
    """``topic``-0's log end offset on ``broker`` (-1 while it hosts no replica)."""
    try:
        dirs = brokers.stub(broker).DescribeLogDirs(broker_pb2.DescribeLogDirsRequest(), timeout=2)
    except grpc.RpcError:
        return -1
    for result in dirs.results:
        for t in result.topics:
            if t.name == topic:
                return max((p.log_end_offset for p in t.partitions if p.partition_index == 0),
                           default=-1)
    return -1


def reassign(cluster: Cluster, topic: str) -> float:
    """Add broker 5 to ``topic``-0; returns when the controller accepted it (monotonic)."""
    request = controller_pb2.AlterPartitionReassignmentsRequest(
        timeout_ms=5000, allow_replication_factor_change=True,
        topics=[controller_pb2.AlterPartitionReassignmentsRequest.ReassignableTopic(
            name=topic, partitions=[
                controller_pb2.AlterPartitionReassignmentsRequest.ReassignablePartition(
                    partition_index=0,
                    replicas=common_pb2.ReplicaList(replicas=[LEADER, FOLLOWER]))])])
    started = time.monotonic()
    answer = wait_for(lambda: controller_call(cluster, "AlterPartitionReassignments", request),
                      timeout_s=10, what="AlterPartitionReassignments")
    assert answer.responses[0].partitions[0].error.code == common_pb2.NONE, answer
    return started


def reassignment_done(cluster: Cluster, topic: str) -> Callable[[], bool | None]:
    def probe() -> bool | None:
        answer = controller_call(cluster, "ListPartitionReassignments",
                                 controller_pb2.ListPartitionReassignmentsRequest(timeout_ms=2000))
        if answer is None:
            return None
        return None if any(t.name == topic for t in answer.topics) else True
    return probe


def copied(brokers: Brokers, topic: str, records: int) -> Callable[[], bool | None]:
    return lambda: True if log_end(brokers, FOLLOWER, topic) >= records else None


def test_reassignment_copy_is_throttled_to_the_configured_rate(tmp_path: pathlib.Path) -> None:
    started = time.monotonic()
    with running_cluster(
            tmp_path, broker_ids=(LEADER, FOLLOWER), broker_config=BROKER_CONFIG,
            topics=[Topic(name=topic, assignments=[[LEADER]]) for topic in ("slow", "fast", "stuck")],
            ) as running:
        cluster, brokers = running.controllers, running.brokers
        wait_for(lambda: True if log_end(brokers, LEADER, "stuck") == 0 else None,
                 timeout_s=10, what="broker 4 hosting the topics")
        ready_s = time.monotonic() - started
        records = {topic: produce(brokers, topic) for topic in ("slow", "fast", "stuck")}
        produced_s = time.monotonic() - started

        # 1. Throttled at 1 MiB/s on both sides: ~size/rate, minus about one window.
        alter_configs(cluster, throttle("slow", rate=RATE))
        t0 = reassign(cluster, "slow")
        wait_for(copied(brokers, "slow", records["slow"]), timeout_s=30,
                 what="slow-0 copied to broker 5")
        slow_s = time.monotonic() - t0
        wait_for(reassignment_done(cluster, "slow"), timeout_s=10,
                 what="slow-0 reassignment complete")

        # 2. Rates still set, but fast-0 lists no throttled replica: full speed.
        t0 = reassign(cluster, "fast")
        wait_for(copied(brokers, "fast", records["fast"]), timeout_s=30,
                 what="fast-0 copied to broker 5")
        fast_s = time.monotonic() - t0

        # 3. A crawl at 64 KiB/s (a minute's copy), then the throttle is removed.
        alter_configs(cluster, throttle("stuck", rate=CRAWL_RATE))
        reassign(cluster, "stuck")
        first = wait_for(lambda: n if (n := log_end(brokers, FOLLOWER, "stuck")) > 0 else None,
                         timeout_s=10, what="stuck-0 copy started on broker 5")
        time.sleep(CRAWL_S)
        crawled = log_end(brokers, FOLLOWER, "stuck") - first
        t1 = time.monotonic()
        alter_configs(cluster, throttle("stuck", rate=None))
        wait_for(copied(brokers, "stuck", records["stuck"]), timeout_s=30,
                 what="stuck-0 copied to broker 5 after the throttle was removed")
        unthrottled_s = time.monotonic() - t1
        wait_for(reassignment_done(cluster, "stuck"), timeout_s=10,
                 what="stuck-0 reassignment complete")

        ideal_s = SIZE / RATE
        print(f"cluster ready {ready_s:.1f}s, produced {produced_s:.1f}s; "
              f"throttled copy {slow_s:.2f}s (size/rate {ideal_s:.1f}s), unthrottled {fast_s:.2f}s, "
              f"crawl {crawled}/{records['stuck']} records in {CRAWL_S} s, then {unthrottled_s:.2f}s")
        # The window of two 1 s samples lets about one second's worth through at once;
        # the rest flows at the rate (Kafka's Rate): ~3 s for 4 MiB at 1 MiB/s.
        assert slow_s >= ideal_s - 1.0 - 0.5, slow_s
        assert slow_s <= 4 * ideal_s, slow_s  # bounded (a loaded 2-core box)
        assert fast_s < 0.6 * slow_s, (fast_s, slow_s)
        # CRAWL_S at the crawl rate, plus one window's credit and a fetch on each side.
        per_record = SIZE // records["stuck"]
        assert crawled * per_record <= CRAWL_RATE * (CRAWL_S + 1) + 2 * FETCH_MAX_BYTES, crawled
        # Still throttled, the rest would take about a minute.
        assert unthrottled_s < 10.0, unthrottled_s
        assert time.monotonic() - started < 60
