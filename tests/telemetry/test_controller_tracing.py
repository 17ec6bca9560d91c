"""Controller spans: the decisions read off the records the active
controller writes — partition leader elections with their reason, ISR changes, fenced brokers,
reassignments from submission to completion — and the spans the tracer makes of them, ended
at commit or marked reverted when leadership is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from kraftlog import errors
from kraftlog.controller import driver
from kraftlog.controller.partition_change import PartitionRegistration
from kraftlog.controller.result import ControllerResult
from kraftlog.ids import Uuid
from kraftlog.metadata import records as r
from kraftlog.raft import consensus
from kraftlog.raft import epoch_state as es
from kraftlog.telemetry import controller_tracing as ct
from kraftlog.telemetry.controller_tracing import EventKind as K
from kraftlog.telemetry.controller_tracing import Reason
from kraftlog.timeline.snapshot_registry import SnapshotRegistry

TOPIC = Uuid.from_bits(7, 7)


class Partitions:
    """A PartitionLookup over a dict (stands in for the controller's timeline state)."""

    def __init__(self, **partitions: PartitionRegistration) -> None:
        self.partitions = {int(k[1:]): v for k, v in partitions.items()}

    def partition(self, topic_id: Uuid, partition_id: int) -> PartitionRegistration | None:
        return self.partitions.get(partition_id) if topic_id == TOPIC else None

    def topic_name(self, topic_id: Uuid) -> str:
        if topic_id != TOPIC:
            raise KeyError(topic_id)
        return "orders"


def reg(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, *,
        adding: tuple[int, ...] = (), removing: tuple[int, ...] = ()) -> PartitionRegistration:
    return PartitionRegistration(replicas=replicas, isr=isr, leader=leader,
                                 adding_replicas=adding, removing_replicas=removing)


def change(partition: int = 0, **fields: object) -> r.PartitionChangeRecord:
    return r.PartitionChangeRecord(topic_id=TOPIC, partition_id=partition, **fields)  # type: ignore[arg-type]


def kinds(events: list[ct.ControllerEvent]) -> list[K]:
    return [e.kind for e in events]


def test_fencing_a_leader_is_a_fence_an_election_and_an_isr_shrink() -> None:
    lookup = Partitions(p0=reg((2, 3, 1), (2, 3, 1), 2))
    events = ct.derive_events("FenceStaleBrokers", [
        r.FenceBrokerRecord(broker_id=2, broker_epoch=5),
        change(leader=3, isr=(3, 1)),
    ], 40, lookup)
    assert kinds(events) == [K.BROKER_FENCED, K.PARTITION_LEADER_ELECTION, K.ISR_CHANGE]
    fenced, election, isr = events
    assert (fenced.broker_id, fenced.reason, fenced.offset) == (2, Reason.FENCED_BROKER, 40)
    assert (election.topic, election.partition, election.old_leader, election.new_leader) == (
        "orders", 0, 2, 3)
    assert election.reason is Reason.FENCED_BROKER and election.offset == 41
    assert (isr.old_isr, isr.new_isr) == ((2, 3, 1), (3, 1))


def test_election_reasons_follow_the_operation_and_the_isr() -> None:
    def reason(operation: str, before: PartitionRegistration, **fields: object) -> Reason | None:
        (event,) = [e for e in ct.derive_events(operation, [change(**fields)], 0,
                                                Partitions(p0=before))
                    if e.kind is K.PARTITION_LEADER_ELECTION]
        return event.reason

    healthy = reg((1, 2, 3), (1, 2, 3), 2)
    assert reason("ElectLeaders", healthy, leader=1) is Reason.PREFERRED
    assert reason("LeaderRebalance", healthy, leader=1) is Reason.PREFERRED
    # A leader from outside the ISR is unclean whatever asked for it.
    assert reason("ElectLeaders", reg((1, 2, 3), (2,), -1), leader=3,
                  isr=(3,)) is Reason.UNCLEAN
    assert reason("BrokerHeartbeat", healthy, leader=3, isr=(1, 3)) is \
        Reason.CONTROLLED_SHUTDOWN
    assert reason("BrokerHeartbeat", reg((1, 2, 3), (2,), -1), leader=2) is \
        Reason.BROKER_UNFENCED
    assert reason("UnregisterBroker", healthy, leader=3, isr=(1, 3)) is \
        Reason.BROKER_UNREGISTERED
    assert reason("AlterPartitionReassignments", healthy, leader=3, replicas=(3, 1),
                  isr=(3, 1)) is Reason.REASSIGNMENT


def test_a_partition_losing_its_last_leader_is_an_election_to_no_leader() -> None:
    (election,) = ct.derive_events("FenceStaleBrokers", [change(leader=-1)], 0,
                                   Partitions(p0=reg((2,), (2,), 2)))
    assert (election.kind, election.old_leader, election.new_leader) == (
        K.PARTITION_LEADER_ELECTION, 2, -1)


def test_a_reassignment_starts_steps_and_completes() -> None:
    lookup = Partitions(p0=reg((1, 2, 3), (1, 2, 3), 1))
    started = ct.derive_events("AlterPartitionReassignments", [
        change(replicas=(1, 2, 3, 4), adding_replicas=(4,), removing_replicas=(3,))], 10,
        lookup)
    assert kinds(started) == [K.REASSIGNMENT_STARTED]
    assert started[0].adding_replicas == (4,) and started[0].removing_replicas == (3,)
    lookup.partitions[0] = reg((1, 2, 3, 4), (1, 2, 3), 1, adding=(4,), removing=(3,))
    step = ct.derive_events("AlterPartition", [change(isr=(1, 2, 3, 4))], 11, lookup)
    assert kinds(step) == [K.ISR_CHANGE, K.REASSIGNMENT_STEP]
    lookup.partitions[0] = reg((1, 2, 3, 4), (1, 2, 3, 4), 1, adding=(4,), removing=(3,))
    done = ct.derive_events("AlterPartition", [
        change(replicas=(1, 2, 4), isr=(1, 2, 4), adding_replicas=(), removing_replicas=())],
        12, lookup)
    assert kinds(done) == [K.ISR_CHANGE, K.REASSIGNMENT_COMPLETED]
    assert done[1].replicas == (1, 2, 4)
    # Cancelling puts the old replicas back through AlterPartitionReassignments.
    cancelled = ct.derive_events("AlterPartitionReassignments", [
        change(replicas=(1, 2, 3), isr=(1, 2, 3), adding_replicas=(), removing_replicas=())],
        12, lookup)
    assert kinds(cancelled) == [K.ISR_CHANGE, K.REASSIGNMENT_CANCELLED]
    assert not cancelled[1].immediate


def test_a_reassignment_to_in_sync_replicas_completes_at_once() -> None:
    lookup = Partitions(p0=reg((1, 2, 3), (1, 2, 3), 1))
    (done,) = ct.derive_events("AlterPartitionReassignments", [change(replicas=(2, 1))], 3,
                               lookup)
    assert done.kind is K.REASSIGNMENT_COMPLETED and done.immediate
    rec = Recorder()
    rec.tracer.records_appended("AlterPartitionReassignments", [change(replicas=(2, 1))],
                                _State(lookup), 3, 1)
    rec.tracer.committed(3)
    (span,) = rec.spans("controller.reassignment")
    assert dict(span.attributes or {})["immediate"] is True
    assert [e.name for e in span.events] == ["completed"]


def test_records_of_one_operation_are_read_against_each_other() -> None:
    new_topic = Uuid.from_bits(9, 9)
    events = ct.derive_events("CreateTopics", [
        r.TopicRecord(name="fresh", topic_id=new_topic),
        r.PartitionRecord(topic_id=new_topic, partition_id=0, replicas=(1, 2), isr=(1, 2),
                          leader=1),
        r.PartitionChangeRecord(topic_id=new_topic, partition_id=0, leader=2),
        r.PartitionChangeRecord(topic_id=new_topic, partition_id=0, leader=1),
    ], 0, Partitions())
    # Creating a partition is no election; the two changes are, each against the one before.
    assert [(e.topic, e.old_leader, e.new_leader) for e in events] == [
        ("fresh", 1, 2), ("fresh", 2, 1)]


def test_records_that_decide_nothing_give_no_events() -> None:
    lookup = Partitions(p0=reg((1, 2), (1, 2), 1))
    assert ct.derive_events("NoOp", [r.NoOpRecord()], 0, lookup) == []
    assert ct.derive_events("BrokerHeartbeat", [
        r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=3, fenced=False)], 0,
        lookup) == []
    # A leader epoch bump with the same leader is no election.
    assert ct.derive_events("AlterPartition", [change(leader=1)], 0, lookup) == []


# -- the tracer ------------------------------------------------------------------------------------

class _State:
    """What StateLookup reads: ``state.replication.partitions`` and ``topic_name``."""

    def __init__(self, lookup: Partitions) -> None:
        self.replication = self
        self._lookup = lookup
        self.partitions = {(TOPIC, k): v for k, v in lookup.partitions.items()}

    def topic_name(self, topic_id: Uuid) -> str:
        return self._lookup.topic_name(topic_id)


class Recorder:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = ct.ControllerTracer(provider.get_tracer("test"), node_id=3000)

    def spans(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]


def test_spans_end_when_their_records_commit() -> None:
    rec = Recorder()
    state = _State(Partitions(p0=reg((2, 3, 1), (2, 3, 1), 2)))
    rec.tracer.records_appended("FenceStaleBrokers", [
        r.FenceBrokerRecord(broker_id=2, broker_epoch=5), change(leader=3, isr=(3, 1))],
        state, 40, 6)
    rec.tracer.committed(40)
    assert rec.exporter.get_finished_spans() == ()  # the operation ends at offset 41
    rec.tracer.committed(41)
    (election,) = rec.spans("controller.partition_leader_election")
    attributes = dict(election.attributes or {})
    assert attributes["topic"] == "orders" and attributes["partition"] == 0
    assert (attributes["old_leader"], attributes["new_leader"]) == (2, 3)
    assert attributes["reason"] == "fenced_broker"
    assert attributes["controller.epoch"] == 6 and attributes["kraftlog.node.id"] == 3000
    assert election.status.status_code is StatusCode.OK
    (fenced,) = rec.spans("controller.broker_fenced")
    assert dict(fenced.attributes or {})["broker.id"] == 2
    (isr,) = rec.spans("controller.isr_change")
    assert dict(isr.attributes or {})["isr_change"] == "shrink"


def test_reverted_decisions_end_as_errors() -> None:
    rec = Recorder()
    state = _State(Partitions(p0=reg((1, 2, 3), (1, 2, 3), 1)))
    rec.tracer.records_appended("ElectLeaders", [change(leader=2)], state, 9, 4)
    rec.tracer.reverted(8)
    (election,) = rec.spans("controller.partition_leader_election")
    assert election.status.status_code is StatusCode.ERROR
    assert "reverted" in (election.status.description or "")


def test_a_reassignment_is_one_span_from_submission_to_completion() -> None:
    rec = Recorder()
    lookup = Partitions(p0=reg((1, 2, 3), (1, 2, 3), 1))
    rec.tracer.records_appended("AlterPartitionReassignments", [
        change(replicas=(1, 2, 3, 4), adding_replicas=(4,), removing_replicas=(3,))],
        _State(lookup), 10, 2)
    rec.tracer.committed(10)
    assert rec.spans("controller.reassignment") == []  # still moving
    lookup.partitions[0] = reg((1, 2, 3, 4), (1, 2, 3), 1, adding=(4,), removing=(3,))
    rec.tracer.records_appended("AlterPartition", [change(isr=(1, 2, 3, 4))],
                                _State(lookup), 11, 2)
    lookup.partitions[0] = reg((1, 2, 3, 4), (1, 2, 3, 4), 1, adding=(4,), removing=(3,))
    rec.tracer.records_appended("AlterPartition", [
        change(replicas=(1, 2, 4), isr=(1, 2, 4), adding_replicas=(), removing_replicas=())],
        _State(lookup), 12, 2)
    rec.tracer.committed(12)
    (span,) = rec.spans("controller.reassignment")
    assert [e.name for e in span.events] == ["submitted", "step", "completed"]
    attributes = dict(span.attributes or {})
    assert attributes["outcome"] == "completed"
    assert list(attributes["target_replicas"]) == [1, 2, 4]  # type: ignore[arg-type]
    assert list(attributes["replicas"]) == [1, 2, 4]  # type: ignore[arg-type]


def test_a_failing_lookup_costs_spans_not_the_controller() -> None:
    class Broken:
        replication = None

    rec = Recorder()
    rec.tracer.records_appended("ElectLeaders", [change(leader=2)], Broken(), 0, 1)
    rec.tracer.committed(0)
    assert rec.exporter.get_finished_spans() == ()


def test_the_observer_is_installed_only_when_an_sdk_provider_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ct.trace, "get_tracer_provider", lambda: ct.trace.ProxyTracerProvider())
    assert ct.observer(1) is None
    monkeypatch.setattr(ct.trace, "get_tracer_provider", lambda: TracerProvider())
    assert isinstance(ct.observer(1), ct.ControllerTracer)


# -- the hook in the QuorumController ---------------------------------------------------------------

class _Raft:
    """A raft leader that assigns offsets from 5 (its LeaderChange sits at 4)."""

    def __init__(self) -> None:
        self.next_offset = 5
        self.leading = True

    def leader_next_offset(self, epoch: int) -> int | None:
        return None  # no raft control records between the controller's writes here

    def propose_nowait(self, records: Sequence[bytes], *, epoch: int | None = None) -> int:
        if not self.leading:
            raise errors.NotLeaderError("not the leader", leader_id=2)
        self.next_offset += len(records)
        return self.next_offset - 1

    async def call(self, fn: Callable[[Any, int], Any]) -> Any:
        state = es.LeaderState(es.Epoch(3), local_id=es.NodeId(1), voters=[1, 2, 3],
                               epoch_start_offset=4, check_quorum_deadline_ms=0)
        state.next_offset = self.next_offset
        return fn(SimpleNamespace(quorum=SimpleNamespace(state=state)), 0)

    def leader_and_epoch(self) -> tuple[int, int]:
        return (1 if self.leading else 2), 3


class _NoState:
    def __init__(self) -> None:
        self.registry = SnapshotRegistry()
        self.replayed: list[int] = []

    def replay(self, record: r.MetadataRecord, offset: int) -> None:
        self.replayed.append(offset)


class _Calls:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def records_appended(self, operation: str, records: Sequence[r.MetadataRecord], state: Any,
                         base_offset: int, epoch: int) -> None:
        self.calls.append(("appended", operation, base_offset, epoch, list(state.replayed)))

    def committed(self, offset: int) -> None:
        self.calls.append(("committed", offset))

    def reverted(self, committed_offset: int) -> None:
        self.calls.append(("reverted", committed_offset))


def test_the_quorum_controller_reports_appends_before_replay_then_commits_and_reverts() -> None:
    async def scenario() -> None:
        calls = _Calls()
        controller = driver.QuorumController(
            node_id=1, state_factory=_NoState, raft=_Raft(), encode=lambda _r: b"x",
            decode=lambda _v, _o: r.NoOpRecord(), observer=calls)
        controller.start()
        listener = controller.raft_listener()
        listener.handle_leader_change(1, 3)
        for _ in range(20):
            await asyncio.sleep(0)
        write = asyncio.ensure_future(controller.write(
            "ElectLeaders", lambda s, o, n: ControllerResult(records=(r.NoOpRecord(),) * 2,
                                                             response=None)))
        for _ in range(20):
            await asyncio.sleep(0)
        listener.handle_commit([consensus.CommittedBatch(
            base_offset=5, last_offset=6, epoch=3, append_timestamp_ms=0,
            records=(b"x", b"x"))])
        await write
        pending = asyncio.ensure_future(controller.write(
            "ElectLeaders", lambda s, o, n: ControllerResult(records=(r.NoOpRecord(),),
                                                             response=None)))
        for _ in range(20):
            await asyncio.sleep(0)
        listener.handle_leader_change(2, 4)
        with pytest.raises(errors.NotLeaderError):
            await pending
        await controller.stop()
        # Appended before replay (nothing replayed yet), committed, then the second write
        # appended at 7 and reverted to 6 on the leadership loss.
        assert calls.calls == [("appended", "ElectLeaders", 5, 3, []), ("committed", 6),
                               ("appended", "ElectLeaders", 7, 3, [5, 6]), ("reverted", 6)]
    asyncio.run(scenario())
