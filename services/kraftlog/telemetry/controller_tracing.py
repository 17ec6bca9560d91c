"""Controller decisions as OpenTelemetry spans, derived from the records the active controller
writes.

Owns two things:

* :func:`derive_events`, a pure function: one operation's records (and the partitions as
  they stood before them) in, :class:`ControllerEvent` values out —
  a PartitionChangeRecord that sets another leader is a *partition leader election*
  (reason: fenced broker, controlled shutdown, preferred, unclean, reassignment, ...);
  one that sets another ISR is an *ISR change*; a FenceBrokerRecord, or a
  BrokerRegistrationChangeRecord with ``fenced`` true, is a *broker fenced*; adding or
  removing replicas appearing, changing and disappearing are a reassignment's start,
  steps and completion (or cancellation).
* :class:`ControllerTracer`, the :class:`kraftlog.controller.driver.RecordObserver` that
  the QuorumController calls where it appends records. It turns the events into spans
  ``controller.partition_leader_election``, ``controller.isr_change`` and
  ``controller.broker_fenced``, each open from the append to the commit of its records
  (status ERROR when the records are reverted on a leadership loss), and one
  ``controller.reassignment`` span per moving partition from submission to completion,
  with a span event per step.

Span attributes: ``kraftlog.node.id``, ``controller.epoch``, ``controller.operation``
(the write that produced the records: ``FenceStaleBrokers``, ``ElectLeaders``, ...),
``metadata.offset``, ``topic``, ``partition``, ``leader_epoch`` (after the record), and per kind ``old_leader`` /
``new_leader`` / ``reason``, ``old_isr`` / ``new_isr``, ``broker.id``, ``replicas`` /
``adding_replicas`` / ``removing_replicas``.

Linking to the brokers: a partition leader election span gets trace and span ids derived
from (cluster id, topic id, partition, new leader epoch)
(:func:`kraftlog.telemetry.tracing.partition_leader_ids`). The brokers know the same four
values when they replay the PartitionChangeRecord, so their ``broker.become_leader`` /
``broker.become_follower`` spans link to the election without any trace context in the
metadata log. (Carrying a ``traceparent`` record header instead would need the raft
append path, the metadata loader and the delta to carry per-record headers; the leader
epoch already names the election uniquely, and a delta that batches many records still
tells each partition's epoch, where a metadata offset would not.)

Runs on the controller's event-loop task; never raises into it (a failing hook costs
spans, not the controller) and never changes what it observes. With tracing off the
process installs no tracer at all.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, Status, StatusCode

from kraftlog.controller.partition_change import PartitionRegistration, TopicIdPartition
from kraftlog.ids import Uuid
from kraftlog.metadata import records as r
from kraftlog.telemetry import tracing

logger = logging.getLogger(__name__)
P = ParamSpec("P")


class EventKind(enum.Enum):
    PARTITION_LEADER_ELECTION = "controller.partition_leader_election"
    ISR_CHANGE = "controller.isr_change"
    BROKER_FENCED = "controller.broker_fenced"
    REASSIGNMENT_STARTED = "reassignment_started"
    REASSIGNMENT_STEP = "reassignment_step"
    REASSIGNMENT_COMPLETED = "reassignment_completed"
    REASSIGNMENT_CANCELLED = "reassignment_cancelled"


REASSIGNMENT_SPAN = "controller.reassignment"


class Reason(enum.Enum):
    """Why a partition got another leader, or a broker was fenced."""

    FENCED_BROKER = "fenced_broker"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    BROKER_UNREGISTERED = "broker_unregistered"
    BROKER_REGISTERED = "broker_registered"
    BROKER_UNFENCED = "broker_unfenced"
    PREFERRED = "preferred"
    UNCLEAN = "unclean"
    REASSIGNMENT = "reassignment"
    ALTER_PARTITION = "alter_partition"
    OTHER = "other"


# The controller's write names (controller/server.py, server/controller_host.py) -> reason.
_OPERATION_REASONS = {
    "FenceStaleBrokers": Reason.FENCED_BROKER,
    "UnregisterBroker": Reason.BROKER_UNREGISTERED,
    "BrokerRegistration": Reason.BROKER_REGISTERED,
    "ElectLeaders": Reason.PREFERRED,
    "LeaderRebalance": Reason.PREFERRED,
    "AlterPartitionReassignments": Reason.REASSIGNMENT,
    "AlterPartition": Reason.ALTER_PARTITION,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerEvent:
    """One decision read off the records. Partition fields are -1 / () when not relevant."""

    kind: EventKind
    operation: str
    offset: int
    topic: str = ""
    topic_id: Uuid | None = None
    partition: int = -1
    leader_epoch: int = -1
    """The partition's leader epoch after the record."""
    broker_id: int = -1
    reason: Reason | None = None
    old_leader: int = -1
    new_leader: int = -1
    old_isr: tuple[int, ...] = ()
    new_isr: tuple[int, ...] = ()
    replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    immediate: bool = False
    """A reassignment done in one step (every target replica was in sync already)."""


class PartitionLookup(Protocol):
    """The partitions as they stand before the records (the controller's timeline state)."""

    def partition(self, topic_id: Uuid, partition_id: int) -> PartitionRegistration | None: ...

    def topic_name(self, topic_id: Uuid) -> str: ...


def _reassigning(p: PartitionRegistration) -> bool:
    return bool(p.adding_replicas or p.removing_replicas)


def _election_reason(operation: str, before: PartitionRegistration, new_leader: int,
                     replicas_changed: bool) -> Reason:
    if new_leader >= 0 and new_leader not in before.isr:
        return Reason.UNCLEAN
    if replicas_changed:
        return Reason.REASSIGNMENT
    if operation == "BrokerHeartbeat":
        # A heartbeat moves leaders away from a broker shutting down, or onto one just
        # unfenced (partitions that had none).
        return Reason.BROKER_UNFENCED if before.leader < 0 else Reason.CONTROLLED_SHUTDOWN
    if operation == "BrokerRegistration" and before.leader < 0:
        return Reason.BROKER_UNFENCED
    return _OPERATION_REASONS.get(operation, Reason.OTHER)


def _fence_reason(operation: str) -> Reason:
    if operation == "BrokerHeartbeat":
        return Reason.CONTROLLED_SHUTDOWN
    return _OPERATION_REASONS.get(operation, Reason.OTHER)


def derive_events(operation: str, records: Sequence[r.MetadataRecord], base_offset: int,
                  lookup: PartitionLookup) -> list[ControllerEvent]:
    """The decisions in one operation's records (``base_offset`` is the first one's offset).

    Records of one operation may touch a partition more than once; each is read against
    the partition as the earlier ones left it."""
    events: list[ControllerEvent] = []
    overlay: dict[TopicIdPartition, PartitionRegistration] = {}
    names: dict[Uuid, str] = {}

    def name_of(topic_id: Uuid) -> str:
        if topic_id in names:
            return names[topic_id]
        try:
            return lookup.topic_name(topic_id)
        except KeyError:
            return str(topic_id)

    for i, record in enumerate(records):
        offset = base_offset + i
        if isinstance(record, r.TopicRecord):
            names[record.topic_id] = record.name
        elif isinstance(record, r.PartitionRecord):
            overlay[TopicIdPartition(record.topic_id, record.partition_id)] = \
                PartitionRegistration.from_record(record)
        elif isinstance(record, r.FenceBrokerRecord) or (
                isinstance(record, r.BrokerRegistrationChangeRecord) and record.fenced):
            events.append(ControllerEvent(kind=EventKind.BROKER_FENCED, operation=operation,
                                          offset=offset, broker_id=record.broker_id,
                                          reason=_fence_reason(operation)))
        elif isinstance(record, r.PartitionChangeRecord):
            key = TopicIdPartition(record.topic_id, record.partition_id)
            before = overlay.get(key) or lookup.partition(record.topic_id, record.partition_id)
            if before is None:
                continue  # replay would refuse it; nothing sensible to say
            after = before.merge(record)
            overlay[key] = after
            # Every event of this record shares these; dataclasses.replace fills the rest.
            common = ControllerEvent(kind=EventKind.ISR_CHANGE, operation=operation,
                                     offset=offset, topic=name_of(record.topic_id),
                                     topic_id=record.topic_id, partition=record.partition_id,
                                     leader_epoch=after.leader_epoch, old_leader=before.leader,
                                     new_leader=after.leader, old_isr=before.isr,
                                     new_isr=after.isr, replicas=after.replicas)
            replicas_changed = (after.replicas != before.replicas
                                or after.adding_replicas != before.adding_replicas
                                or after.removing_replicas != before.removing_replicas)
            if after.leader != before.leader:
                events.append(dataclasses.replace(
                    common, kind=EventKind.PARTITION_LEADER_ELECTION,
                    reason=_election_reason(operation, before, after.leader,
                                            replicas_changed)))
            if after.isr != before.isr:
                events.append(common)
            was, now = _reassigning(before), _reassigning(after)
            kind: EventKind | None = None
            if now and not was:
                kind = EventKind.REASSIGNMENT_STARTED
            elif now and was:
                changed = replicas_changed or after.isr != before.isr \
                    or after.leader != before.leader
                kind = EventKind.REASSIGNMENT_STEP if changed else None
            elif was:
                kind = (EventKind.REASSIGNMENT_CANCELLED
                        if operation == "AlterPartitionReassignments"
                        else EventKind.REASSIGNMENT_COMPLETED)
            elif after.replicas != before.replicas:
                kind = EventKind.REASSIGNMENT_COMPLETED
            if kind is not None:
                events.append(dataclasses.replace(
                    common, kind=kind, adding_replicas=after.adding_replicas,
                    removing_replicas=after.removing_replicas,
                    immediate=not was and not now))
    return events


# -- spans ------------------------------------------------------------------------------------------

class StateLookup:
    """:class:`PartitionLookup` over the controller's ``ControllerState`` (latest view)."""

    def __init__(self, state: Any) -> None:
        self._replication = state.replication

    def partition(self, topic_id: Uuid, partition_id: int) -> PartitionRegistration | None:
        found: PartitionRegistration | None = self._replication.partitions.get(
            TopicIdPartition(topic_id, partition_id))
        return found

    def topic_name(self, topic_id: Uuid) -> str:
        name: str = self._replication.topic_name(topic_id)
        return name


def _guarded(fn: Callable[P, None]) -> Callable[P, None]:
    """Tracing must never take the controller down: a failing hook costs a span."""

    @functools.wraps(fn)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:
            logger.exception("event=tracing_failed hook=%s", fn.__name__)

    return guarded


def _ids(ids: Sequence[int]) -> list[int]:
    return list(ids)


def global_tracer() -> trace.Tracer | None:
    """The process's tracer when :func:`tracing.setup_tracing` installed an SDK provider
    globally; None when tracing is off (then no observer is installed at all)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        return provider.get_tracer(tracing.INSTRUMENTATION_NAME)
    return None


class ControllerTracer:
    """Spans for the QuorumController's decisions (the driver's ``RecordObserver``)."""

    def __init__(self, tracer: trace.Tracer, *, node_id: int, cluster_id: str = "",
                 lookup_factory: Callable[[Any], PartitionLookup] = StateLookup) -> None:
        self._tracer = tracer
        self._node_id = node_id
        self._cluster_id = cluster_id
        self._lookup_factory = lookup_factory
        # Spans waiting for the commit of their offset, in offset order.
        self._uncommitted: deque[tuple[int, Span]] = deque()
        # Open reassignment spans by (topic, partition).
        self._reassignments: dict[tuple[str, int], Span] = {}

    def _attributes(self, event: ControllerEvent, epoch: int) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "kraftlog.node.id": self._node_id, "controller.epoch": epoch,
            "controller.operation": event.operation, "metadata.offset": event.offset}
        if event.kind is EventKind.BROKER_FENCED:
            attributes["broker.id"] = event.broker_id
        else:
            attributes.update({"topic": event.topic, "partition": event.partition,
                               "leader_epoch": event.leader_epoch,
                               "old_leader": event.old_leader, "new_leader": event.new_leader,
                               "old_isr": _ids(event.old_isr), "new_isr": _ids(event.new_isr),
                               "replicas": _ids(event.replicas)})
        if event.reason is not None:
            attributes["reason"] = event.reason.value
        if event.adding_replicas or event.removing_replicas:
            attributes["adding_replicas"] = _ids(event.adding_replicas)
            attributes["removing_replicas"] = _ids(event.removing_replicas)
        return attributes

    @_guarded
    def records_appended(self, operation: str, records: Sequence[r.MetadataRecord], state: Any,
                         base_offset: int, epoch: int) -> None:
        """Called before the records are replayed into ``state``."""
        events = derive_events(operation, records, base_offset, self._lookup_factory(state))
        last_offset = base_offset + len(records) - 1
        for event in events:
            attributes = self._attributes(event, epoch)
            if event.kind in (EventKind.PARTITION_LEADER_ELECTION, EventKind.ISR_CHANGE,
                              EventKind.BROKER_FENCED):
                if event.kind is EventKind.PARTITION_LEADER_ELECTION:
                    # Ids the brokers can compute: their become_leader / become_follower
                    # spans link here (tracing.partition_leader_ids).
                    span = tracing.start_span_with_ids(
                        self._tracer, event.kind.value, tracing.partition_leader_ids(
                            cluster_id=self._cluster_id, topic_id=event.topic_id,
                            partition=event.partition, leader_epoch=event.leader_epoch),
                        attributes=attributes)
                else:
                    span = self._tracer.start_span(event.kind.value, attributes=attributes)
                if event.kind is EventKind.ISR_CHANGE:
                    span.set_attribute("isr_change", "shrink" if len(event.new_isr)
                                       < len(event.old_isr) else "expand")
                self._uncommitted.append((last_offset, span))
            else:
                self._reassignment(event, attributes, last_offset)

    def _reassignment(self, event: ControllerEvent, attributes: dict[str, Any],
                      last_offset: int) -> None:
        key = (event.topic, event.partition)
        span = self._reassignments.get(key)
        if event.kind is EventKind.REASSIGNMENT_STARTED:
            if span is not None:
                span.end()
            target = [x for x in event.replicas if x not in event.removing_replicas]
            span = self._tracer.start_span(REASSIGNMENT_SPAN, attributes={
                **attributes, "target_replicas": target})
            span.add_event("submitted", attributes)
            self._reassignments[key] = span
            return
        if span is None:
            # Done in one step, or begun under an earlier controller: a span of its own.
            span = self._tracer.start_span(REASSIGNMENT_SPAN, attributes={
                **attributes, "immediate" if event.immediate else "resumed": True})
            self._reassignments[key] = span
        if event.kind is EventKind.REASSIGNMENT_STEP:
            span.add_event("step", attributes)
            return
        outcome = "completed" if event.kind is EventKind.REASSIGNMENT_COMPLETED else "cancelled"
        span.add_event(outcome, attributes)
        span.set_attribute("outcome", outcome)
        span.set_attribute("replicas", _ids(event.replicas))
        del self._reassignments[key]
        self._uncommitted.append((last_offset, span))

    @_guarded
    def committed(self, offset: int) -> None:
        """Raft committed up to ``offset``: the decisions up to there took effect."""
        while self._uncommitted and self._uncommitted[0][0] <= offset:
            _, span = self._uncommitted.popleft()
            span.set_status(Status(StatusCode.OK))
            span.end()

    @_guarded
    def reverted(self, committed_offset: int) -> None:
        """Leadership lost: what was appended after ``committed_offset`` never happened."""
        for _, span in self._uncommitted:
            span.set_status(Status(StatusCode.ERROR, "reverted: controller lost leadership "
                                                     f"with offset {committed_offset} committed"))
            span.end()
        self._uncommitted.clear()
        for span in self._reassignments.values():
            # The reassignment goes on under the next active controller, which traces the rest.
            span.set_attribute("outcome", "controller_failover")
            span.end()
        self._reassignments.clear()

    def close(self) -> None:
        self.reverted(-1)


def observer(node_id: int, tracer: trace.Tracer | None = None, *, cluster_id: str = ""
             ) -> ControllerTracer | None:
    """The tracer to hand the QuorumController, or None when tracing is off."""
    chosen = tracer if tracer is not None else global_tracer()
    if chosen is None:
        return None
    return ControllerTracer(chosen, node_id=node_id, cluster_id=cluster_id)
