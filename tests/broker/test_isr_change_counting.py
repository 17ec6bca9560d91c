"""The broker counts each ISR change it proposed once the controller commits it, whichever
arrives first: the AlterPartition answer, or the metadata log carrying the new ISR (then the
answer is stale for the partition, but the change was still this leader's)."""

from __future__ import annotations

import asyncio
import pathlib
from types import SimpleNamespace
from typing import Any

from opentelemetry import trace

from kraftlog.broker import replica_manager as rm
from kraftlog.broker.partition import FetchIsolation, Partition
from kraftlog.server import broker_server as process
from kraftlog.v1 import common_pb2, controller_pb2
from tests.broker.harness import T0, TP, open_partition


class FakeController:
    """Answers AlterPartition by committing each proposal as asked."""

    request_timeout_ms = 1000

    def __init__(self) -> None:
        self.calls: list[Any] = []

    async def call(self, method: str, message: Any, *, deadline_s: float) -> Any:
        assert method == "AlterPartition"
        self.calls.append(message)
        answer = controller_pb2.AlterPartitionResponse(error=common_pb2.Error(code=0))
        for topic in message.topics:
            out = answer.topics.add(topic_id=topic.topic_id)
            for part in topic.partitions:
                out.partitions.add(
                    partition_index=part.partition_index, leader_id=message.broker_id,
                    leader_epoch=part.leader_epoch, partition_epoch=part.partition_epoch + 1,
                    isr=[b.broker_id for b in part.new_isr_with_epochs], error=common_pb2.Error(code=0))
        return answer


def expanding_leader(tmp_path: pathlib.Path) -> tuple[rm.ReplicaManager, Partition]:
    manager = rm.ReplicaManager(broker_id=1)
    p = open_partition(tmp_path / TP.dir_name, 1)
    p.make_leader(leader_epoch=5, partition_epoch=10, replicas=(1, 2, 3), isr=(1, 2), now_ms=T0)
    manager.add_partition(p)
    p.read_records(fetch_offset=0, max_bytes=1 << 20, isolation=FetchIsolation.LOG_END, now_ms=T0,
                   replica_id=3, current_leader_epoch=5)
    return manager, p


def alter(manager: rm.ReplicaManager, counted: list[tuple[int, int]]) -> None:
    requests = manager.take_alter_partition_requests()
    assert [r.new_isr for r in requests] == [(1, 2, 3)]
    lifecycle: Any = SimpleNamespace(broker_id=1, broker_epoch=7)
    client: Any = FakeController()
    asyncio.run(process._alter_partitions(
        client, manager, lifecycle, requests, trace.get_tracer("test"),
        on_isr_change=lambda *, old_size, new_size: counted.append((old_size, new_size))))


def test_an_expansion_applied_by_the_answer_is_counted(tmp_path: pathlib.Path) -> None:
    manager, p = expanding_leader(tmp_path)
    counted: list[tuple[int, int]] = []
    alter(manager, counted)
    assert counted == [(2, 3)]
    assert p.isr == frozenset({1, 2, 3}) and p.partition_epoch == 11


def test_an_expansion_the_metadata_applied_first_is_still_counted_once(tmp_path: pathlib.Path) -> None:
    manager, p = expanding_leader(tmp_path)
    counted: list[tuple[int, int]] = []
    real_take = manager.take_alter_partition_requests

    def take_then_metadata_arrives() -> list[Any]:
        requests = real_take()
        # The controller committed it and the metadata log got here before the answer.
        p.make_leader(leader_epoch=5, partition_epoch=11, replicas=(1, 2, 3), isr=(1, 2, 3), now_ms=T0)
        return requests

    manager.take_alter_partition_requests = take_then_metadata_arrives  # type: ignore[method-assign]
    alter(manager, counted)
    assert counted == [(2, 3)]
    assert p.isr == frozenset({1, 2, 3}) and p.partition_epoch == 11
