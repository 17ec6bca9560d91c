"""The QuorumController: one asyncio task, one event queue, around the pure controller state.

Owns the active/standby life of a controller (Kafka's ``QuorumController``, KIP-631):

* Every request, periodic job and raft callback becomes an event on one queue,
  drained by one task; nothing else touches the :class:`ControllerStateLike`.
* A write: ``generate(state, next_offset, now_ms)`` reads state only and returns
  records + a response (:class:`~.result.ControllerResult`); the records are
  proposed to raft (one ``propose_nowait`` call, so one batch: atomic; no await, so
  writes stream at CPU speed and raft batches them per linger/fsync), replayed into the
  timeline state at once (pipelined: the next write already sees them), a timeline
  snapshot is taken at the write's last offset, and the caller is answered only
  when raft commits that offset. A write with no records is answered once
  everything written before it has committed.
* Reads (:meth:`QuorumController.read`) run against the last committed offset.
* On losing leadership the state reverts to the last committed offset and every
  pending write fails with NOT_CONTROLLER (``errors.NotLeaderError``). A standby
  replays committed batches and snapshots as raft delivers them.
* Raft callbacks (:class:`ControllerRaftListener`) arrive on the raft driver's task;
  they only enqueue events.

Event-queue time (enqueue -> start) and processing time are measured per event kind
(:attr:`QuorumController.timings`). An optional :class:`RecordObserver` (tracing) sees
each operation's records before they are replayed, then the commits and reverts.

Edge module (asyncio); the rules live in the managers and the raft core.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kraftlog import errors
from kraftlog.controller.result import ControllerResult
from kraftlog.metadata.records import MetadataRecord
from kraftlog.raft import consensus
from kraftlog.raft import epoch_state as es
from kraftlog.raft.snapshot import SnapshotReader
from kraftlog.timeline.snapshot_registry import SnapshotRegistry

logger = logging.getLogger(__name__)

R = TypeVar("R")
T = TypeVar("T")

MAX_RECORDS_PER_OPERATION = 10_000
"""Kafka's ``MAX_RECORDS_PER_USER_OP``: one operation appends at most this many records."""


class ControllerStateLike(Protocol):
    """What the driver needs of the managers' state (``controller.state.ControllerState``)."""

    @property
    def registry(self) -> SnapshotRegistry: ...

    def replay(self, record: MetadataRecord, offset: int) -> None: ...


class RaftLike(Protocol):
    """The part of ``raft.driver.RaftDriver`` the controller uses."""

    def propose_nowait(self, records: Sequence[bytes], *, epoch: int | None = None) -> int:
        """Append to the leader's accumulator now; the last record's offset."""
        ...

    async def call(self, fn: Callable[[consensus.RaftClient, int], T]) -> T: ...

    def leader_and_epoch(self) -> tuple[int, int]: ...

    def leader_next_offset(self, epoch: int) -> int | None:
        """The offset the leader of ``epoch`` appends next (None: not that leader). Raft may
        have appended control records (KIP-853 VotersRecord) since the controller's last
        write: they change no controller state, and the next write lands after them."""
        ...


class RecordObserver(Protocol):
    """Watches what the active controller writes (``telemetry.controller_tracing`` implements
    it, turning records into spans). Called on the controller task; must not raise or block."""

    def records_appended(self, operation: str, records: Sequence[MetadataRecord], state: Any,
                         base_offset: int, epoch: int) -> None:
        """``records`` were proposed at ``base_offset``..; ``state`` is not yet replayed."""
        ...

    def committed(self, offset: int) -> None: ...

    def reverted(self, committed_offset: int) -> None:
        """Leadership lost: everything appended after ``committed_offset`` is undone."""
        ...


Encode = Callable[[MetadataRecord], bytes]
Decode = Callable[[bytes, int], MetadataRecord]
Generate = Callable[[Any, int, int], ControllerResult[R]]


# -- events ---------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class _Write:
    name: str
    generate: Generate[Any]
    future: asyncio.Future[Any]
    enqueued_ns: int


@dataclass(slots=True, kw_only=True)
class _Read:
    name: str
    fn: Callable[[Any, int], Any]
    future: asyncio.Future[Any]
    enqueued_ns: int


@dataclass(slots=True, kw_only=True)
class _Commit:
    batches: Sequence[consensus.CommittedBatch]
    enqueued_ns: int


@dataclass(slots=True, kw_only=True)
class _LoadSnapshot:
    end_offset: int
    records: tuple[bytes, ...]
    enqueued_ns: int


@dataclass(slots=True, kw_only=True)
class _LeaderChange:
    leader_id: int
    epoch: int
    enqueued_ns: int


_Event = _Write | _Read | _Commit | _LoadSnapshot | _LeaderChange


@dataclass(slots=True)
class EventTimings:
    """Totals per event kind: count, queue time and processing time (ns)."""

    count: int = 0
    queue_ns: int = 0
    process_ns: int = 0
    max_queue_ns: int = 0
    max_process_ns: int = 0


@dataclass(slots=True, kw_only=True)
class _Pending:
    offset: int
    future: asyncio.Future[Any]
    response: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerStatus:
    node_id: int
    active: bool
    epoch: int
    leader_id: int
    committed_offset: int
    last_written_offset: int


class ControllerRaftListener:
    """The raft listener of a controller process: enqueues, never touches state.

    ``also`` gets every callback too (the metadata loader that keeps the image
    brokers' snapshots are made from).
    """

    def __init__(
        self, controller: QuorumController, also: Sequence[consensus.RaftListener] = ()
    ) -> None:
        self._controller = controller
        self._also = list(also)

    def handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        self._controller.enqueue(_Commit(batches=batches, enqueued_ns=time.monotonic_ns()))
        for listener in self._also:
            listener.handle_commit(batches)

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        self._controller.enqueue(
            _LoadSnapshot(
                end_offset=reader.snapshot_id.offset,
                records=reader.records,
                enqueued_ns=time.monotonic_ns(),
            )
        )
        for listener in self._also:
            listener.handle_load_snapshot(reader)

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self._controller.enqueue(
            _LeaderChange(leader_id=leader_id, epoch=epoch, enqueued_ns=time.monotonic_ns())
        )
        for listener in self._also:
            listener.handle_leader_change(leader_id, epoch)


class QuorumController:
    """The controller's event loop. Create, :meth:`start`, feed raft callbacks via
    :meth:`raft_listener`, call :meth:`write` / :meth:`read`, then :meth:`stop`."""

    def __init__(
        self,
        *,
        node_id: int,
        state_factory: Callable[[], ControllerStateLike],
        raft: RaftLike,
        encode: Encode,
        decode: Decode,
        endpoint_of: Callable[[int], str] = lambda _node: "",
        on_status: Callable[[ControllerStatus], None] | None = None,
        on_activate: Callable[[Any, int], ControllerResult[Any] | None] | None = None,
        observer: RecordObserver | None = None,
    ) -> None:
        self.node_id = node_id
        self._state_factory = state_factory
        self.state = state_factory()
        self._raft = raft
        self._encode = encode
        self._decode = decode
        self._endpoint_of = endpoint_of
        self._on_status = on_status
        # Called with (state, now_ms) on becoming active; records it returns are written
        # first (the bootstrap metadata of a new cluster).
        self._on_activate = on_activate
        self._observer = observer
        self._queue: asyncio.Queue[_Event] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.active = False
        self.epoch = -1
        self.leader_id = -1
        # Offsets: the last record replayed into `state`, and the last one raft committed.
        self.last_written_offset = -1
        self.committed_offset = -1
        self._pending: deque[_Pending] = deque()
        self._failed = False
        self.timings: dict[str, EventTimings] = {}
        # (kind, queue_ns, process_ns) per handled event: the controller's metrics.
        self.on_event_timed: Callable[[str, int, int], None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-{self.node_id}"
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._fail_pending("controller stopped")
        while not self._queue.empty():
            event = self._queue.get_nowait()
            if isinstance(event, _Write | _Read) and not event.future.done():
                event.future.set_exception(
                    errors.NotLeaderError(f"controller {self.node_id} stopped", leader_id=-1)
                )

    async def wait(self) -> None:
        """Until the loop ends; re-raises its failure (an invariant violation is fatal)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    def raft_listener(self, also: Sequence[consensus.RaftListener] = ()) -> ControllerRaftListener:
        return ControllerRaftListener(self, also)

    def enqueue(self, event: _Event) -> None:
        if self._failed and isinstance(event, _Write | _Read):
            # The loop is gone (a fatal error): answer at once rather than never.
            event.future.set_exception(errors.KraftlogError(
                f"controller {self.node_id} has failed; see its log"))
            return
        self._queue.put_nowait(event)

    def _fail_queued(self, failure: errors.KraftlogError) -> None:
        while not self._queue.empty():
            queued = self._queue.get_nowait()
            if isinstance(queued, _Write | _Read) and not queued.future.done():
                queued.future.set_exception(failure)

    # -- the public face ---------------------------------------------------------------------------

    async def write(self, name: str, generate: Generate[R]) -> R:
        """Run ``generate(state, next_offset, now_ms)`` on the active controller; answer when
        its records commit. NotLeaderError (NOT_CONTROLLER) with the active one's hint
        otherwise."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self.enqueue(
            _Write(name=name, generate=generate, future=future, enqueued_ns=time.monotonic_ns())
        )
        return await future

    async def read(self, name: str, fn: Callable[[Any, int], T]) -> T:
        """``fn(state, committed_offset)`` on the active controller, in the event loop."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.enqueue(_Read(name=name, fn=fn, future=future, enqueued_ns=time.monotonic_ns()))
        return await future

    def status(self) -> ControllerStatus:
        return ControllerStatus(
            node_id=self.node_id,
            active=self.active,
            epoch=self.epoch,
            leader_id=self.leader_id,
            committed_offset=self.committed_offset,
            last_written_offset=self.last_written_offset,
        )

    def not_controller(self) -> errors.NotLeaderError:
        leader = self.leader_id if self.leader_id != self.node_id else -1
        return errors.NotLeaderError(
            f"node {self.node_id} is not the active controller"
            + (
                f"; the active controller is node {leader}"
                if leader >= 0
                else "; no active controller is known"
            ),
            leader_id=leader,
            leader_endpoint=self._endpoint_of(leader) if leader >= 0 else "",
        )

    # -- the task ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            started_ns = time.monotonic_ns()
            kind = event.name if isinstance(event, _Write | _Read) else type(event).__name__
            try:
                if isinstance(event, _Write):
                    await self._handle_write(event)
                elif isinstance(event, _Read):
                    self._handle_read(event)
                elif isinstance(event, _Commit):
                    self._handle_commit(event.batches)
                elif isinstance(event, _LoadSnapshot):
                    self._handle_load_snapshot(event)
                else:
                    await self._handle_leader_change(event.leader_id, event.epoch)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception(
                    "node=%s epoch=%s event=controller_failed while=%s",
                    self.node_id,
                    self.epoch,
                    kind,
                )
                self._failed = True
                failure = errors.KraftlogError(
                    f"controller {self.node_id} failed while handling {kind}; see its log")
                if isinstance(event, _Write | _Read) and not event.future.done():
                    event.future.set_exception(failure)
                self._fail_pending("controller failed")
                self._fail_queued(failure)
                raise
            finished_ns = time.monotonic_ns()
            timing = self.timings.get(kind)
            if timing is None:
                timing = self.timings[kind] = EventTimings()
            timing.count += 1
            queue_ns = started_ns - event.enqueued_ns
            process_ns = finished_ns - started_ns
            timing.queue_ns += queue_ns
            timing.process_ns += process_ns
            timing.max_queue_ns = max(timing.max_queue_ns, queue_ns)
            timing.max_process_ns = max(timing.max_process_ns, process_ns)
            if self.on_event_timed is not None:
                self.on_event_timed(kind, queue_ns, process_ns)

    async def _handle_write(self, event: _Write) -> None:
        if event.future.done():
            return
        if not self.active:
            event.future.set_exception(self.not_controller())
            return
        self._skip_raft_control_records()
        next_offset = self.last_written_offset + 1
        now_ms = time.time_ns() // 1_000_000
        try:
            result = event.generate(self.state, next_offset, now_ms)
        except errors.KraftlogError as exc:  # a manager's refusal that is not an error code
            event.future.set_exception(exc)
            return
        await self._append(event.name, result, event.future)

    async def _append(
        self, name: str, result: ControllerResult[Any], future: asyncio.Future[Any] | None
    ) -> None:
        """Propose, replay and snapshot ``result``'s records; answer ``future`` at commit."""
        records = result.records
        if not records:
            if future is not None:
                self._complete_at(self.last_written_offset, future, result.response)
            return
        if len(records) > MAX_RECORDS_PER_OPERATION:
            if future is not None:
                future.set_exception(
                    errors.KraftlogError(
                        f"{name} would append {len(records)} records; at most "
                        f"{MAX_RECORDS_PER_OPERATION} per operation"
                    )
                )
            return
        self._skip_raft_control_records()
        next_offset = self.last_written_offset + 1
        values = [self._encode(r) for r in records]
        try:
            last_offset = self._raft.propose_nowait(values, epoch=self.epoch)
        except errors.NotLeaderError:
            # Raft lost leadership before our leader-change event arrived: renounce now.
            self._renounce("raft refused the append")
            if future is not None:
                future.set_exception(self.not_controller())
            return
        if last_offset != next_offset + len(values) - 1:
            raise errors.InvariantViolation(
                f"controller {self.node_id} epoch {self.epoch}: {name} expected offsets "
                f"{next_offset}..{next_offset + len(values) - 1}, raft assigned up to "
                f"{last_offset}"
            )
        if self._observer is not None:
            self._observer.records_appended(name, records, self.state, next_offset, self.epoch)
        for i, record in enumerate(records):
            self.state.replay(record, next_offset + i)
        self.last_written_offset = last_offset
        self.state.registry.get_or_create_snapshot(last_offset)
        if future is not None:
            self._complete_at(last_offset, future, result.response)

    def _skip_raft_control_records(self) -> None:
        # Offsets raft gave its own control records (a voter change) since our last write:
        # no controller state changes there, as at activation (_handle_leader_change).
        next_offset = self._raft.leader_next_offset(self.epoch)
        if next_offset is not None and next_offset > self.last_written_offset + 1:
            self.last_written_offset = next_offset - 1

    def _complete_at(self, offset: int, future: asyncio.Future[Any], response: Any) -> None:
        if offset <= self.committed_offset:
            if not future.done():
                future.set_result(response)
        else:
            self._pending.append(_Pending(offset=offset, future=future, response=response))

    def _handle_read(self, event: _Read) -> None:
        if event.future.done():
            return
        if not self.active:
            event.future.set_exception(self.not_controller())
            return
        try:
            event.future.set_result(event.fn(self.state, self.committed_offset))
        except errors.KraftlogError as exc:
            event.future.set_exception(exc)

    def _handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        for batch in batches:
            if self.active and batch.epoch != self.epoch:
                # Raft delivers another leader's records before it reports the leader
                # change (both come from one poll): leadership is gone, whatever was
                # written and not committed with it.
                self._renounce(f"raft committed records of epoch {batch.epoch}")
            if self.active and batch.last_offset <= self.last_written_offset:
                pass  # ours: replayed when written
            else:
                if self.active:
                    raise errors.InvariantViolation(
                        f"controller {self.node_id} epoch {self.epoch}: committed batch "
                        f"{batch.base_offset}..{batch.last_offset} beyond the last written "
                        f"offset {self.last_written_offset}"
                    )
                for i, value in enumerate(batch.records):
                    self.state.replay(
                        self._decode(value, batch.base_offset + i), batch.base_offset + i
                    )
                self.last_written_offset = batch.last_offset
            self.committed_offset = batch.last_offset
        if self.active:
            self.state.registry.delete_snapshots_up_to(self.committed_offset)
            while self._pending and self._pending[0].offset <= self.committed_offset:
                pending = self._pending.popleft()
                if not pending.future.done():
                    pending.future.set_result(pending.response)
            if self._observer is not None:
                self._observer.committed(self.committed_offset)
        self._publish_status()

    def _handle_load_snapshot(self, event: _LoadSnapshot) -> None:
        if self.active:
            raise errors.InvariantViolation(
                f"controller {self.node_id}: raft loaded snapshot at {event.end_offset} "
                "while this controller is active"
            )
        self.state = self._state_factory()
        for value in event.records:
            self.state.replay(self._decode(value, event.end_offset - 1), event.end_offset - 1)
        self.last_written_offset = self.committed_offset = event.end_offset - 1
        logger.info(
            "node=%s epoch=%s event=controller_snapshot_loaded end_offset=%s records=%s",
            self.node_id,
            self.epoch,
            event.end_offset,
            len(event.records),
        )
        self._publish_status()

    async def _handle_leader_change(self, leader_id: int, epoch: int) -> None:
        active_epoch = self.epoch
        self.leader_id, self.epoch = leader_id, epoch
        if self.active and (leader_id != self.node_id or epoch != active_epoch):
            # Another leader, or this node again but in a later epoch (it lost and won
            # leadership between two of raft's reports): what this epoch wrote and did not
            # commit is gone either way, and the state must catch up from raft first.
            self._renounce(f"node {leader_id} leads epoch {epoch}")
        if leader_id == self.node_id and not self.active:
            next_offset = await self._raft.call(
                lambda client, _now_ms: _leader_next_offset(client, epoch)
            )
            # Leadership of this epoch already gone (a new event follows). A later epoch
            # does not count: its event is still queued behind the commits of the epochs
            # in between, which the state does not hold yet.
            if next_offset is None:
                return
            self.active = True
            # Everything before this epoch was delivered to us (raft fires a local leader
            # change only then). The records from there to next_offset are raft control
            # records, which change no controller state, so the state is the committed
            # state as of next_offset - 1 and that is where a revert would return to.
            self.last_written_offset = self.committed_offset = next_offset - 1
            self.state.registry.get_or_create_snapshot(self.committed_offset)
            logger.info(
                "node=%s epoch=%s event=controller_activated committed_offset=%s",
                self.node_id,
                epoch,
                self.committed_offset,
            )
            if self._on_activate is not None:
                activation = self._on_activate(self.state, time.time_ns() // 1_000_000)
                if activation is not None:
                    await self._append("Activate", activation, None)
        self._publish_status()

    def _renounce(self, why: str) -> None:
        """Lost leadership: back to the committed state, fail what was not committed."""
        if not self.active:
            return
        self.active = False
        registry = self.state.registry
        if registry.has_snapshot(self.committed_offset):
            registry.revert_to_snapshot(self.committed_offset)
            registry.delete_snapshots_up_to(self.committed_offset + 1)
        else:  # nothing kept to revert to: rebuild is impossible here, so this is fatal
            raise errors.InvariantViolation(
                f"controller {self.node_id}: no timeline snapshot at the committed offset "
                f"{self.committed_offset} to revert to (kept: {registry.epochs()})"
            )
        reverted = self.last_written_offset - self.committed_offset
        self.last_written_offset = self.committed_offset
        if self._observer is not None:
            self._observer.reverted(self.committed_offset)
        self._fail_pending(why)
        logger.info(
            "node=%s epoch=%s event=controller_renounced reason=%r "
            "reverted_offsets=%s committed_offset=%s",
            self.node_id,
            self.epoch,
            why,
            reverted,
            self.committed_offset,
        )

    def _fail_pending(self, why: str) -> None:
        while self._pending:
            pending = self._pending.popleft()
            if not pending.future.done():
                error = self.not_controller()
                error.args = (f"{error.args[0]} ({why})",)
                pending.future.set_exception(error)

    def _publish_status(self) -> None:
        if self._on_status is not None:
            self._on_status(self.status())


def _leader_next_offset(client: consensus.RaftClient, epoch: int) -> int | None:
    state = client.quorum.state
    if not isinstance(state, es.LeaderState) or state.epoch != epoch:
        return None
    return state.next_offset


async def run_periodically(
    interval_s: float, job: Callable[[], Awaitable[object]], name: str
) -> None:
    """Call ``job`` every ``interval_s`` until cancelled; a failing job is logged, not fatal."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await job()
        except errors.NotLeaderError:
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("event=periodic_job_failed job=%s", name)
