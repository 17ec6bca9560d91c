"""The QuorumController's event loop (controller/driver.py) against a hand-driven fake raft.

A tiny state machine (topic name -> id in a TimelineHashMap) stands in for the managers so
these tests check only the loop's rules: pipelined replay, answers only at commit, reads
at the committed offset, revert + NOT_CONTROLLER on leadership loss, standby replay of
committed batches and snapshots, and the measured event timings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest

from kraftlog import errors
from kraftlog.controller import driver
from kraftlog.controller.result import ControllerResult
from kraftlog.ids import Uuid
from kraftlog.metadata import records as r
from kraftlog.raft import consensus
from kraftlog.raft import epoch_state as es
from kraftlog.raft import messages as m
from kraftlog.raft.snapshot import SnapshotReader
from kraftlog.timeline.snapshot_registry import SnapshotRegistry
from kraftlog.timeline.timeline_hash_map import TimelineHashMap

T = TypeVar("T")
NODE = 1


class TopicsState:
    def __init__(self) -> None:
        self._registry = SnapshotRegistry()
        self.topics: TimelineHashMap[str, Uuid] = TimelineHashMap(self._registry)
        self.replayed: list[int] = []

    @property
    def registry(self) -> SnapshotRegistry:
        return self._registry

    def replay(self, record: r.MetadataRecord, offset: int) -> None:
        assert isinstance(record, r.TopicRecord)
        self.topics[record.name] = record.topic_id
        self.replayed.append(offset)


def topic(name: str) -> r.TopicRecord:
    return r.TopicRecord(name=name, topic_id=Uuid(name.encode().ljust(16, b"\0")[:16]))


def encode(record: r.MetadataRecord) -> bytes:
    assert isinstance(record, r.TopicRecord)
    return record.name.encode()


def decode(value: bytes, offset: int) -> r.MetadataRecord:
    return topic(value.decode())


class FakeRaft:
    """Assigns offsets like a raft leader; the test decides what commits."""

    def __init__(self) -> None:
        self.next_offset = 0
        self.leading = False
        self.proposed: list[tuple[int, list[bytes]]] = []

    def leader_next_offset(self, epoch: int) -> int | None:
        return None  # no raft control records between the controller's writes here

    def propose_nowait(self, records: Sequence[bytes], *, epoch: int | None = None) -> int:
        if not self.leading:
            raise errors.NotLeaderError("not the leader", leader_id=2)
        first = self.next_offset
        self.next_offset += len(records)
        self.proposed.append((first, list(records)))
        return self.next_offset - 1

    async def call(self, fn: Callable[[Any, int], T]) -> T:
        state: object = SimpleNamespace()
        if self.leading:
            state = es.LeaderState(es.Epoch(3), local_id=es.NodeId(NODE), voters=[1, 2, 3],
                                   epoch_start_offset=self.next_offset - 1,
                                   check_quorum_deadline_ms=0)
            state.next_offset = self.next_offset  # type: ignore[attr-defined]
        return fn(SimpleNamespace(quorum=SimpleNamespace(state=state)),  # type: ignore[arg-type]
                  0)

    def leader_and_epoch(self) -> tuple[int, int]:
        return (NODE if self.leading else 2), 3


def create(name: str) -> driver.Generate[str]:
    def generate(state: TopicsState, next_offset: int, now_ms: int) -> ControllerResult[str]:
        if name in state.topics:
            return ControllerResult(records=(), response=f"{name} exists")
        return ControllerResult(records=(topic(name),), response=f"{name}@{next_offset}")
    return generate


def committed(first: int, values: list[bytes], epoch: int = 3) -> consensus.CommittedBatch:
    return consensus.CommittedBatch(base_offset=first, last_offset=first + len(values) - 1,
                                    epoch=epoch, append_timestamp_ms=0, records=tuple(values))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def active_controller(raft: FakeRaft) -> tuple[driver.QuorumController,
                                                   driver.ControllerRaftListener]:
    controller = driver.QuorumController(node_id=NODE, state_factory=TopicsState, raft=raft,
                                         encode=encode, decode=decode,
                                         endpoint_of=lambda n: f"host{n}:9093")
    controller.start()
    listener = controller.raft_listener()
    raft.next_offset = 5  # LeaderChange at 4
    raft.leading = True
    listener.handle_leader_change(NODE, 3)
    await settle()
    assert controller.active and controller.committed_offset == 4
    return controller, listener


def test_a_write_is_replayed_at_once_but_answered_only_when_committed() -> None:
    async def scenario() -> None:
        raft = FakeRaft()
        controller, listener = await active_controller(raft)
        first = asyncio.ensure_future(controller.write("create", create("a")))
        second = asyncio.ensure_future(controller.write("create", create("b")))
        await settle()
        state = controller.state
        assert isinstance(state, TopicsState)
        # Pipelined: both replayed, neither answered.
        assert state.replayed == [5, 6] and not first.done() and not second.done()
        # A read sees only the committed state.
        seen = await controller.read("list", lambda s, epoch: sorted(s.topics.at(epoch)))
        assert seen == []
        listener.handle_commit([committed(5, [b"a"])])
        await settle()
        assert first.result() == "a@5" and not second.done()
        listener.handle_commit([committed(6, [b"b"])])
        await settle()
        assert second.result() == "b@6"
        assert await controller.read("list", lambda s, e: sorted(s.topics.at(e))) == ["a", "b"]
        # A write with no records answers once everything before it committed.
        assert await controller.write("create", create("a")) == "a exists"
        await controller.stop()
    asyncio.run(scenario())


def test_losing_leadership_reverts_to_the_committed_offset_and_fails_pending_writes() -> None:
    async def scenario() -> None:
        raft = FakeRaft()
        controller, listener = await active_controller(raft)
        done = asyncio.ensure_future(controller.write("create", create("kept")))
        lost = asyncio.ensure_future(controller.write("create", create("lost")))
        await settle()
        listener.handle_commit([committed(5, [b"kept"])])
        await settle()
        assert done.result() == "kept@5"
        raft.leading = False
        listener.handle_leader_change(2, 4)
        await settle()
        with pytest.raises(errors.NotLeaderError) as caught:
            lost.result()
        assert caught.value.leader_id == 2 and caught.value.leader_endpoint == "host2:9093"
        state = controller.state
        assert isinstance(state, TopicsState)
        assert sorted(state.topics) == ["kept"]  # "lost" reverted
        assert not controller.active and controller.last_written_offset == 5
        # A standby refuses writes and reads with the active controller's hint.
        with pytest.raises(errors.NotLeaderError, match="node 2"):
            await controller.write("create", create("x"))
        # ... and replays what the new leader commits (offset 6 was overwritten by it).
        listener.handle_commit([committed(7, [b"from-2", b"also"])])
        await settle()
        assert sorted(state.topics) == ["also", "from-2", "kept"]
        assert controller.committed_offset == 8
        await controller.stop()
    asyncio.run(scenario())


def test_a_refused_append_renounces_at_once() -> None:
    async def scenario() -> None:
        raft = FakeRaft()
        controller, _listener = await active_controller(raft)
        raft.leading = False  # raft lost leadership; its leader-change event is still coming
        with pytest.raises(errors.NotLeaderError):
            await controller.write("create", create("a"))
        assert not controller.active
        await controller.stop()
    asyncio.run(scenario())


def test_a_standby_loads_a_snapshot_then_becomes_active_on_top_of_it() -> None:
    async def scenario() -> None:
        raft = FakeRaft()
        controller = driver.QuorumController(node_id=NODE, state_factory=TopicsState,
                                             raft=raft, encode=encode, decode=decode)
        controller.start()
        listener = controller.raft_listener()
        listener.handle_commit([committed(0, [b"old"])])
        listener.handle_load_snapshot(SnapshotReader(
            snapshot_id=m.OffsetAndEpoch(offset=10, epoch=2), last_contained_log_timestamp=0,
            records=(b"s1", b"s2")))
        await settle()
        state = controller.state
        assert isinstance(state, TopicsState)
        assert sorted(state.topics) == ["s1", "s2"]  # a snapshot replaces the state
        assert controller.committed_offset == 9
        raft.next_offset, raft.leading = 11, True
        listener.handle_leader_change(NODE, 3)
        assert await controller.write("create", create("s1")) == "s1 exists"
        pending = asyncio.ensure_future(controller.write("create", create("new")))
        await settle()
        listener.handle_commit([committed(11, [b"new"])])
        assert await pending == "new@11"
        assert controller.timings["create"].count == 2
        assert controller.timings["_Commit"].count >= 1
        await controller.stop()
    asyncio.run(scenario())


def test_an_operation_over_the_record_limit_is_refused_whole() -> None:
    async def scenario() -> None:
        raft = FakeRaft()
        controller, _ = await active_controller(raft)

        def huge(state: Any, next_offset: int, now_ms: int) -> ControllerResult[str]:
            return ControllerResult(records=tuple(topic(f"t{i}") for i in range(10_001)),
                                    response="never")
        with pytest.raises(errors.KraftlogError, match="at most 10000"):
            await controller.write("huge", huge)
        assert raft.proposed == []
        await controller.stop()
    asyncio.run(scenario())


def test_another_epochs_committed_records_make_an_active_controller_renounce_first() -> None:
    """Raft may deliver a new leader's records before it reports the leader change (both
    come out of one poll): the controller reverts its uncommitted writes, then replays."""
    async def scenario() -> None:
        raft = FakeRaft()
        controller, listener = await active_controller(raft)
        lost = asyncio.ensure_future(controller.write("create", create("mine")))
        await settle()
        raft.leading = False
        listener.handle_commit([committed(5, [b"theirs"], epoch=4)])
        await settle()
        with pytest.raises(errors.NotLeaderError):
            lost.result()
        state = controller.state
        assert isinstance(state, TopicsState)
        assert sorted(state.topics) == ["theirs"] and not controller.active
        assert controller.committed_offset == 5
        await controller.stop()
    asyncio.run(scenario())


def test_a_fatal_error_answers_the_failing_write_and_every_later_one_instead_of_hanging() -> None:
    async def scenario() -> None:
        raft = FakeRaft()
        controller, _ = await active_controller(raft)

        def broken(records: Sequence[bytes], *, epoch: int | None = None) -> int:
            raise RuntimeError("disk on fire")
        raft.propose_nowait = broken  # type: ignore[method-assign]
        with pytest.raises(errors.KraftlogError, match="failed while handling create"):
            await asyncio.wait_for(controller.write("create", create("a")), 5)
        with pytest.raises(RuntimeError, match="disk on fire"):
            await controller.wait()
        with pytest.raises(errors.KraftlogError, match="has failed"):
            await asyncio.wait_for(controller.write("create", create("b")), 5)
        await controller.stop()
    asyncio.run(scenario())
