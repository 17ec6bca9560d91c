"""A failing disk takes its whole log dir offline (Kafka's LogDirFailureChannel), nothing more.

An OSError from one replica's log, on produce, fetch, follower append or a role change,
puts every replica of that directory in OfflineReplica, where they answer
KAFKA_STORAGE_ERROR; replicas in other directories go on serving. The fault is injected by
replacing one log method with one that raises EIO, as a dying disk would.
"""

from __future__ import annotations

import errno
import pathlib
from typing import Any

import pytest

from kraftlog.broker import purgatory
from kraftlog.broker import reconciler as rc
from kraftlog.broker import replica_manager as rm
from kraftlog.broker.partition import FetchIsolation, Partition
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition
from kraftlog.metadata import image as im
from tests.broker.harness import T0, batch, open_partition

A0 = TopicPartition(topic="t", partition=0)
A1 = TopicPartition(topic="t", partition=1)
B2 = TopicPartition(topic="t", partition=2)


def eio(*_args: Any, **_kwargs: Any) -> Any:
    raise OSError(errno.EIO, "Input/output error")


def hosted(tmp_path: pathlib.Path) -> tuple[rm.ReplicaManager, dict[TopicPartition, Partition]]:
    """Broker 1 leads t-0 and t-1 in dir ``a`` and t-2 in dir ``b`` (replicas 1, 2; ISR 1)."""
    manager = rm.ReplicaManager(broker_id=1)
    parts: dict[TopicPartition, Partition] = {}
    for tp, log_dir in ((A0, "a"), (A1, "a"), (B2, "b")):
        p = open_partition(tmp_path / log_dir / tp.dir_name, 1, index=tp.partition)
        p.make_leader(leader_epoch=1, partition_epoch=1, replicas=(1, 2), isr=(1,), now_ms=T0)
        manager.add_partition(p)
        manager.transition_replica(tp, rm.ReplicaState.ONLINE_REPLICA)
        parts[tp] = p
    return manager, parts


def produce(manager: rm.ReplicaManager, *tps: TopicPartition) -> dict[TopicPartition, ErrorCode]:
    outcome = manager.append_records({tp: batch(b"v") for tp in tps}, required_acks=1, timeout_ms=0,
                                     now_ms=T0)
    return {tp: r.error for tp, r in outcome.responses.items()}


def consume(manager: rm.ReplicaManager, *tps: TopicPartition) -> dict[TopicPartition, ErrorCode]:
    params = purgatory.FetchParams(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                   isolation=FetchIsolation.HIGH_WATERMARK)
    outcome = manager.fetch_messages(params, {tp: purgatory.FetchPartitionRequest(
        fetch_offset=0, partition_max_bytes=1 << 20) for tp in tps}, now_ms=T0)
    return {tp: r.error for tp, r in outcome.responses.items()}


def test_a_failed_append_takes_its_whole_dir_offline_and_only_it(tmp_path: pathlib.Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    manager, parts = hosted(tmp_path)
    assert produce(manager, A0, A1, B2) == dict.fromkeys((A0, A1, B2), ErrorCode.NONE)
    monkeypatch.setattr(parts[A0].log, "append_as_leader", eio)
    assert produce(manager, A0) == {A0: ErrorCode.KAFKA_STORAGE_ERROR}
    offline_dir = str(tmp_path / "a")
    assert list(manager.offline_log_dirs) == [offline_dir]
    assert "Input/output error" in manager.offline_log_dirs[offline_dir]
    assert manager.replica_state(A0) is manager.replica_state(A1) is rm.ReplicaState.OFFLINE_REPLICA
    assert manager.is_offline(A1) and not manager.is_offline(B2)
    # Its neighbour in the dir is offline too (its own log never failed); the other dir serves.
    assert produce(manager, A1, B2) == {A1: ErrorCode.KAFKA_STORAGE_ERROR, B2: ErrorCode.NONE}
    assert consume(manager, A0, A1, B2) == {A0: ErrorCode.KAFKA_STORAGE_ERROR,
                                            A1: ErrorCode.KAFKA_STORAGE_ERROR, B2: ErrorCode.NONE}
    # A second failure in a dir already offline changes nothing.
    assert manager.handle_storage_error(A1, OSError(errno.EIO, "again")) == []


def test_a_failed_read_takes_its_dir_offline(tmp_path: pathlib.Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    manager, parts = hosted(tmp_path)
    produce(manager, A0, B2)
    monkeypatch.setattr(parts[B2].log, "read", eio)
    assert consume(manager, A0, B2) == {A0: ErrorCode.NONE, B2: ErrorCode.KAFKA_STORAGE_ERROR}
    assert list(manager.offline_log_dirs) == [str(tmp_path / "b")]
    assert produce(manager, A0) == {A0: ErrorCode.NONE}


class Store:
    def __init__(self, parts: dict[TopicPartition, Partition]) -> None:
        self.parts = parts

    def open_partition(self, info: im.PartitionInfo) -> Partition:
        raise AssertionError("every replica is hosted already")

    def delete_partition(self, partition: Partition) -> None:
        raise AssertionError("nothing is deleted")


def test_a_role_change_that_cannot_write_its_epoch_takes_the_dir_offline_not_the_broker(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager, parts = hosted(tmp_path)
    reconciler = rc.Reconciler(broker_id=1, manager=manager, store=Store(parts))
    monkeypatch.setattr(parts[A0], "make_follower", eio)

    def info(tp: TopicPartition, leader: int) -> im.PartitionInfo:
        return im.PartitionInfo(topic_id=parts[tp].topic_id, topic_name=tp.topic, partition_id=tp.partition,
                                registration=im.PartitionRegistration(
                                    replicas=(1, 2), isr=(1, 2), leader=leader, leader_epoch=2,
                                    partition_epoch=2))

    result = reconciler._apply(deletes=(), assigned=(info(A0, 2), info(B2, 1)), now_ms=T0)
    assert set(result.stop_fetching) >= {A0, A1}
    assert manager.replica_state(A0) is rm.ReplicaState.OFFLINE_REPLICA
    assert parts[B2].leader_epoch == 2, "the replica in the healthy dir converged"
    # Offline replicas are left alone by later passes (no role change on a dead disk).
    again = reconciler._apply(deletes=(), assigned=(info(A0, 1),), now_ms=T0)
    assert again.became_leader == [] and manager.replica_state(A0) is rm.ReplicaState.OFFLINE_REPLICA
