"""The asyncio driver of one raft node: real time and gRPC around the sans-I/O core.

Owns the :class:`~.consensus.RaftClient` and the one task that touches it. Every
input (an inbound request from the :class:`~.transport.RaftServicer`, a response
or send failure from :class:`~.transport.RaftPeers`, a call from the state
machine such as ``propose`` or ``resign``) is put on an inbox queue; the task
loops: handle one input, ``poll(now_ms)``, hand the core's outbound requests to
the transport, then sleep until the wake-up time ``poll`` returned or the next
input, whichever comes first. That is the driver contract in the core's
docstring, and what ``tests/raft/sim.py`` does with virtual time. When the task
is parked on an empty inbox, the task that brings an input does those same steps
itself instead of queueing it (``_try_inline``): one task switch less per step of
the replication path, and still only one task in the core at a time (one thread,
no ``await`` while in it).

The leader's fsync runs on a thread of its own (:meth:`RaftDriver._start_leader_flush`,
through the log's ``begin_flush`` / ``complete_flush``): it starts right after the append,
while the loop answers the followers' parked Fetches and takes their acknowledgements;
the leader's copy counts towards the high watermark when the fsync has returned and the
owner has recorded it, as KRaft counts the leader's flushed offset. A follower's fsync
stays inline: its next Fetch, which reports the new offset, must wait for it anyway.

Time is a :class:`Clock`: the core runs on a monotonic millisecond clock;
DescribeQuorum timestamps are moved to the wall clock (ms since the Unix epoch,
as the protocol defines them) on the way out.

Shutdown (:meth:`RaftDriver.stop`): a leader resigns (KIP-595 graceful
resignation), the loop keeps running up to ``resign_wait_ms`` so EndQuorumEpoch
reaches the voters, then the task is cancelled, pending callers get
:class:`~.transport.DriverStoppedError` and the channels close. The log and the
quorum-state store belong to the caller, who closes them after ``stop``. An
exception from the core (an invariant violation, a disk error) is fatal: the
task ends with it and :meth:`RaftDriver.wait` re-raises it.

Observability: every core event is logged (one line per role change) and, with an
injected :class:`RaftObserver` (tracing), also handed to it with each send, send
outcome and inbound request, so spans can follow a request across processes. Without
one the driver does no tracing work at all.

Edge module: asyncio and the clock live here; no raft rule does.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kraftlog import errors
from kraftlog import ids as uuid
from kraftlog.raft import consensus, transport
from kraftlog.raft import epoch_state as es
from kraftlog.raft import messages as m
from kraftlog.raft.quorum_state_store import QuorumStateStore
from kraftlog.raft.raft_config import RaftConfig
from kraftlog.raft.raft_log import PendingFlush, RaftLog

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_SLEEP_MS = 1000
"""Upper bound of one idle wait, so a lost wake-up can never stall the loop for long."""
DEFAULT_RESIGN_WAIT_MS = 500


class Clock(Protocol):
    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that never goes back (the core's ``now_ms``)."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch (timestamps shown to operators)."""
        ...


class SystemClock:
    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class DynamicQuorum:
    """This node's KIP-853 identity and settings (defaults: a static-voters node)."""

    directory_id: uuid.Uuid = m.NO_DIRECTORY
    """``directory.id`` of the metadata log dir (meta.properties): the voter key's second half."""
    local_endpoint: str = ""
    """``host:port`` other controllers reach this node at (its advertised controller listener)."""
    bootstrap_servers: tuple[str, ...] = ()
    """``controller.quorum.bootstrap.servers``."""
    auto_join: bool = False
    """``controller.quorum.auto.join.enable``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Status:
    """What the node knows, published after every poll that changed it."""

    node_id: int
    role: es.Role
    epoch: int
    leader_id: int


class RaftObserver(Protocol):
    """Tracing around the core (``kraftlog.telemetry.raft_tracing`` implements it).

    Called on the event loop only; must not block, raise or call back into the driver.
    """

    def on_event(self, event: consensus.RaftEvent) -> None:
        """Every core event, in order (from the owner task)."""
        ...

    def send_context(self, destination: int,
                     request: m.RaftRequest) -> contextvars.Context | None:
        """The context the send task runs in: its current span goes out with the call."""
        ...

    def on_send_result(self, destination: int, request: m.RaftRequest,
                       response: m.RaftResponse | None) -> None:
        """How a send ended: the answer, or ``None`` for a failure."""
        ...

    def inbound(self, source: int, request: m.RaftRequest
                ) -> contextlib.AbstractContextManager[Callable[[m.RaftResponse], None]]:
        """Entered in the serving task (the caller's propagated span is current) around the
        wait for the answer; the yielded callable receives the answer."""
        ...


# -- inbox items ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class _InboundRequest:
    source: int
    request: m.RaftRequest
    future: asyncio.Future[m.RaftResponse]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Response:
    source: int
    request: m.RaftRequest
    response: m.RaftResponse


@dataclass(frozen=True, slots=True, kw_only=True)
class _SendFailure:
    destination: int
    request: m.RaftRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class _Call:
    fn: Callable[[consensus.RaftClient, int], Any]
    future: asyncio.Future[Any]


@dataclass(frozen=True, slots=True)
class _Wakeup:
    """Poll now: something changed the core from outside the task (``propose_nowait``)."""


_WAKEUP = _Wakeup()


@dataclass(frozen=True, slots=True, kw_only=True)
class _FlushDone:
    """The leader's fsync thread finished ``flush`` (``error``: it raised)."""

    flush: PendingFlush
    error: Exception | None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Fatal:
    """The core failed while another task was driving it (:meth:`RaftDriver._try_inline`);
    the owner task raises it, so the driver fails exactly as if the owner had hit it."""

    error: Exception


_Item = _InboundRequest | _Response | _SendFailure | _Call | _Wakeup | _FlushDone | _Fatal


class _CoreSink:
    """The core's MessageSink: buffers sends (flushed after each core call) and resolves
    parked fetches. Never calls back into the core."""

    def __init__(self) -> None:
        self.outbox: list[tuple[int, m.RaftRequest]] = []
        self.parked: dict[int, asyncio.Future[m.RaftResponse]] = {}
        self.wall_offset_ms = 0

    def send(self, destination: int, request: m.RaftRequest) -> None:
        self.outbox.append((destination, request))

    def complete(self, request_id: int, response: m.RaftResponse) -> None:
        future = self.parked.pop(request_id, None)
        if future is not None and not future.done():  # done: the caller's deadline passed
            future.set_result(response)


class _FlushThread:
    """A daemon thread that runs the leader's fsyncs in order and reports each to the loop
    with ``call_soon_threadsafe`` (one wake-up of the loop; no futures on the way)."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop,
                 done: Callable[[PendingFlush, Exception | None], None]) -> None:
        self._loop = loop
        self._done = done
        self._queue: queue.SimpleQueue[PendingFlush | None] = queue.SimpleQueue()
        threading.Thread(target=self._main, name=name, daemon=True).start()

    def submit(self, flush: PendingFlush) -> None:
        self._queue.put(flush)

    def close(self) -> None:
        """The thread ends after the flush it is running (it owns that flush's descriptor)."""
        self._queue.put(None)

    def _main(self) -> None:
        while (flush := self._queue.get()) is not None:
            error: Exception | None = None
            try:
                flush.run()
            except Exception as exc:  # reported to the loop: a failed fsync is fatal there
                error = exc
            try:
                self._loop.call_soon_threadsafe(self._done, flush, error)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return


class RaftDriver:
    """One raft node on asyncio. Create, :meth:`start`, then :meth:`stop`."""

    def __init__(self, *, node_id: int, voters: Mapping[int, str], cluster_id: str,
                 config: RaftConfig, log: RaftLog, store: QuorumStateStore,
                 listener: consensus.RaftListener, clock: Clock | None = None,
                 rng: random.Random | None = None,
                 on_status: Callable[[Status], None] | None = None,
                 resign_wait_ms: int = DEFAULT_RESIGN_WAIT_MS,
                 observer: RaftObserver | None = None,
                 channel_interceptors: Sequence[Any] = (),
                 dynamic: DynamicQuorum | None = None) -> None:
        dynamic = dynamic or DynamicQuorum()
        self.node_id = node_id
        self._observer = observer
        self.clock: Clock = clock or SystemClock()
        self.config = config
        self._on_status = on_status
        self._resign_wait_ms = resign_wait_ms
        self._sink = _CoreSink()
        self._inbox: asyncio.Queue[_Item] = asyncio.Queue()
        self._wakeup_queued = False
        # The owner task is parked waiting for input until ``_planned_wakeup_ms`` (monotonic):
        # another task may then drive the core itself (see _try_inline).
        self._owner_idle = False
        self._planned_wakeup_ms = 0
        self._next_request_id = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._log = log
        # The leader's fsync runs here, one at a time, while the loop keeps serving.
        self._flusher: _FlushThread | None = None
        self._flush_in_flight: PendingFlush | None = None
        self._last_role: es.Role | None = None
        # Raises CorruptFileError here for an unreadable quorum-state: before any I/O starts.
        # controller.quorum.bootstrap.servers get ids -2, -3, ... as in Kafka: an observer
        # asks them who leads until it knows the voters.
        self._bootstrap = {-2 - i: address
                           for i, address in enumerate(dynamic.bootstrap_servers)}
        self.client = consensus.RaftClient(
            node_id=node_id, voters=voters, cluster_id=cluster_id, config=config, log=log,
            store=store, rng=rng or random.Random(), listener=listener, sink=self._sink,
            now_ms=self.clock.monotonic_ms(), on_event=self._on_event,
            directory_id=dynamic.directory_id, local_endpoint=dynamic.local_endpoint,
            bootstrap_servers=sorted(self._bootstrap, reverse=True),
            auto_join=dynamic.auto_join)
        self.client.defer_leader_flush = True
        self.client.wall_clock_offset_ms = self.clock.wall_ms() - self.clock.monotonic_ms()
        self._last_role = self.client.role
        self.status = self._current_status()
        self.peers = transport.RaftPeers(
            self._resolve_endpoint, self,
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms, interceptors=channel_interceptors)

    def _resolve_endpoint(self, destination: int) -> str:
        if destination == self.node_id:
            return ""
        return self._bootstrap.get(destination) or self.client.endpoint_of(destination)

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError(f"node {self.node_id}: driver already started")
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name=f"raft-driver-{self.node_id}")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def wait(self) -> None:
        """Until the loop ends; re-raises the core's exception if it failed."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self, *, graceful: bool = True) -> None:
        """Resign if leader and give EndQuorumEpoch ``resign_wait_ms`` to go out; then stop."""
        if graceful and self.running and not self._stopping:
            try:
                resigned = await self.call(lambda client, now_ms: client.resign(now_ms))
            except transport.DriverStoppedError:
                resigned = False
            deadline_ms = self.clock.monotonic_ms() + self._resign_wait_ms
            while resigned and self.running and self.clock.monotonic_ms() < deadline_ms:
                # Reading (never mutating) the core from here is safe: one thread, and the
                # owner task is parked at an await whenever this line runs.
                state = self.client.quorum.state
                if not (isinstance(state, es.ResignedState) and state.unacknowledged):
                    break
                await asyncio.sleep(0.01)
        self._stopping = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            # return_exceptions: the loop's own failure was logged by _run; a cancel of
            # the caller still propagates.
            await asyncio.gather(self._task, return_exceptions=True)
        self._fail_pending()
        if self._flusher is not None:
            # A running fsync owns its descriptor: the caller may close the log meanwhile.
            self._flusher.close()
        await self.peers.close()

    # -- inputs (any coroutine on the loop) ----------------------------------------------------------

    async def handle_request(self, source: int, request: m.RaftRequest) -> m.RaftResponse:
        if self._stopping or not self.running:
            raise transport.DriverStoppedError(f"node {self.node_id} is not running")
        future: asyncio.Future[m.RaftResponse] = asyncio.get_running_loop().create_future()
        item = _InboundRequest(source=source, request=request, future=future)
        if self._observer is None:
            self._submit(item)
            return await future
        # Entered before the core sees the request, so the observer learns the caller's trace
        # context before the core's events about this request.
        with self._observer.inbound(source, request) as answered:
            self._submit(item)
            response = await future
            answered(response)
        return response

    def leader_and_epoch(self) -> tuple[int, int]:
        return self.status.leader_id, self.status.epoch

    def deliver_response(self, destination: int, request: m.RaftRequest,
                         response: m.RaftResponse) -> None:
        if self._observer is not None:
            self._observer.on_send_result(destination, request, response)
        self._submit(_Response(source=destination, request=request, response=response))

    def deliver_send_failure(self, destination: int, request: m.RaftRequest) -> None:
        if self._observer is not None:
            self._observer.on_send_result(destination, request, None)
        self._submit(_SendFailure(destination=destination, request=request))

    async def call(self, fn: Callable[[consensus.RaftClient, int], T]) -> T:
        """Run ``fn(client, now_ms)`` between polls and return its result (in the owner task, or
        in this one when the owner is idle: see ``_try_inline``)."""
        if self._stopping or not self.running:
            raise transport.DriverStoppedError(f"node {self.node_id} is not running")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._submit(_Call(fn=fn, future=future))
        result: T = await future
        return result

    def propose_nowait(self, records: Sequence[bytes], *, epoch: int | None = None) -> int:
        """Queue records on the leader at once and return the last one's offset.

        Kafka's ``prepareAppend``: the state machine's task appends to the core's
        accumulator directly, without a round trip through the inbox, so a stream of
        writes costs no task switch each. Safe because the loop is single-threaded and
        this task never holds the core across an ``await``; a wake-up item makes the
        driver poll (drain the accumulator at the linger deadline). NotLeaderError if
        this node does not lead.
        """
        if self._stopping or not self.running:
            raise transport.DriverStoppedError(f"node {self.node_id} is not running")
        offset = self.client.propose([bytes(r) for r in records], self.clock.monotonic_ms(),
                                     epoch=epoch)
        self._wake_owner()
        return offset

    def leader_next_offset(self, epoch: int) -> int | None:
        """The offset this node appends next as leader of ``epoch``; None if it is not. Safe
        from any task on the loop (reads only; no task holds the core across an await)."""
        state = self.client.quorum.state
        if not isinstance(state, es.LeaderState) or state.epoch != epoch:
            return None
        return state.next_offset

    async def propose(self, records: Sequence[bytes]) -> int:
        """Queue records on the leader; returns the last one's offset (NotLeaderError if not)."""
        values = [bytes(r) for r in records]
        return await self.call(lambda client, now_ms: client.propose(values, now_ms))

    def _wake_owner(self) -> None:
        if not self._wakeup_queued:
            self._wakeup_queued = True
            self._inbox.put_nowait(_WAKEUP)

    def _submit(self, item: _Item) -> None:
        if not self._try_inline(item):
            self._inbox.put_nowait(item)

    def _try_inline(self, item: _Item) -> bool:
        """Drive the core with ``item`` from the calling task if the owner task is idle.

        The owner parked on an empty inbox would only wake up to do exactly this: handle
        the item, poll, send. Doing it here saves that task switch on every step of the
        replication path (a Fetch arriving, a Fetch answer, a propose). Safe for the same
        reason ``propose_nowait`` is: one thread, and no task holds the core across an
        ``await``. The owner is woken only if it must act before it planned to (the
        leader's deferred fsync, an earlier timer). False: queue it for the owner instead.
        """
        if not self._owner_idle or self._stopping or not self._inbox.empty():
            return False
        self._owner_idle = False  # a nested input (from a listener callback) is queued
        try:
            now_ms = self.clock.monotonic_ms()
            self._handle(item, now_ms)
            self._flush()
            wakeup_ms = self.client.poll(now_ms)
            self._flush()
            wakeup_ms = self._start_leader_flush(wakeup_ms)
            self._publish_status()
        except Exception as exc:
            if isinstance(item, _InboundRequest | _Call) and not item.future.done():
                item.future.set_exception(
                    transport.DriverStoppedError(f"node {self.node_id} failed: {exc!r}"))
            self._inbox.put_nowait(_Fatal(error=exc))
            return True
        finally:
            # Still parked, unless something was queued meanwhile (the owner wakes for it).
            self._owner_idle = self._inbox.empty() and not self._stopping
        if wakeup_ms < self._planned_wakeup_ms:
            self._wake_owner()
        return True

    # -- the owner task ------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while not self._stopping:
                now_ms = self.clock.monotonic_ms()
                while not self._inbox.empty():
                    self._handle(self._inbox.get_nowait(), now_ms)
                wakeup_ms = self.client.poll(now_ms)
                self._flush()
                wakeup_ms = self._start_leader_flush(wakeup_ms)
                self._publish_status()
                now_ms = self.clock.monotonic_ms()
                sleep_ms = min(max(wakeup_ms - now_ms, 0), MAX_SLEEP_MS)
                self._planned_wakeup_ms = now_ms + sleep_ms
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that
                # races with the queue handing over an item, and stop() would then hang.
                self._owner_idle = self._inbox.empty()
                try:
                    async with asyncio.timeout(sleep_ms / 1000):
                        item = await self._inbox.get()
                except TimeoutError:
                    continue
                finally:
                    self._owner_idle = False
                self._handle(item, self.clock.monotonic_ms())
                self._flush()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("node=%s epoch=%s event=driver_failed", self.node_id,
                             self.client.epoch)
            self._stopping = True
            self._fail_pending()
            raise

    def _handle(self, item: _Item, now_ms: int) -> None:
        client = self.client
        if isinstance(item, _InboundRequest):
            if item.future.done():  # the caller gave up (deadline) before we got to it
                return
            self._next_request_id += 1
            answer = client.handle_request(item.source, item.request, now_ms,
                                           self._next_request_id)
            if isinstance(answer, m.Pending):
                self._sink.parked[self._next_request_id] = item.future
            else:
                item.future.set_result(self._to_wall_clock(answer))
        elif isinstance(item, _Response):
            client.handle_response(item.source, item.request, item.response, now_ms)
        elif isinstance(item, _SendFailure):
            client.handle_send_failure(item.destination, item.request, now_ms)
        elif isinstance(item, _Wakeup):
            self._wakeup_queued = False  # the poll that follows is the point
        elif isinstance(item, _FlushDone):
            self._flush_in_flight = None
            if item.error is not None:
                raise item.error  # a failed fsync is fatal, as on the loop thread
            self._log.complete_flush(item.flush)  # the poll that follows counts it
        elif isinstance(item, _Fatal):
            raise item.error
        else:
            if item.future.done():
                return
            try:
                result = item.fn(client, now_ms)
            except (errors.NotLeaderError, ValueError) as exc:  # expected outcomes for callers
                item.future.set_exception(exc)
                return
            item.future.set_result(result)

    def _start_leader_flush(self, wakeup_ms: int) -> int:
        """Begin the leader's fsync on the flusher thread if it has entries to make durable and
        none is running; returns the next wake-up (a synchronous flush polls again).

        The core counts the leader's copy towards the HW only once ``complete_flush`` moved
        the log's flushed offset, so the HW never passes it; meanwhile the loop keeps
        answering Fetches (the followers append and fsync in parallel) and two followers'
        acknowledgements may commit without it, as in Raft. Entries appended while one
        runs wait for the next (group commit)."""
        if self._flush_in_flight is not None or not self.client.needs_leader_flush():
            return wakeup_ms
        pending = self._log.begin_flush()
        if pending is None:  # the log flushed synchronously (a roll, ...): it counts now
            wakeup_ms = min(wakeup_ms, self.client.poll(self.clock.monotonic_ms()))
            self._flush()
            return wakeup_ms
        self._flush_in_flight = pending
        if self._flusher is None:
            self._flusher = _FlushThread(f"raft-flush-{self.node_id}",
                                         asyncio.get_running_loop(), self._flush_finished)
        self._flusher.submit(pending)
        return wakeup_ms

    def _flush_finished(self, pending: PendingFlush, error: Exception | None) -> None:
        if not self._stopping:
            self._submit(_FlushDone(flush=pending, error=error))

    def _to_wall_clock(self, response: m.RaftResponse) -> m.RaftResponse:
        if not isinstance(response, m.DescribeQuorumResponse):
            return response
        offset_ms = self.clock.wall_ms() - self.clock.monotonic_ms()

        def shift(r: m.ReplicaDescription) -> m.ReplicaDescription:
            return dataclasses.replace(
                r, last_fetch_timestamp=(r.last_fetch_timestamp + offset_ms
                                         if r.last_fetch_timestamp >= 0 else -1),
                last_caught_up_timestamp=(r.last_caught_up_timestamp + offset_ms
                                          if r.last_caught_up_timestamp >= 0 else -1))

        return dataclasses.replace(response,
                                   current_voters=tuple(shift(r) for r in response.current_voters),
                                   observers=tuple(shift(r) for r in response.observers))

    def _flush(self) -> None:
        outbox, self._sink.outbox = self._sink.outbox, []
        observer = self._observer
        for destination, request in outbox:
            self.peers.send(destination, request, context=(
                observer.send_context(destination, request) if observer is not None else None))

    def _fail_pending(self) -> None:
        stopped = transport.DriverStoppedError(f"node {self.node_id} stopped")
        for future in self._sink.parked.values():
            if not future.done():
                future.set_exception(stopped)
        self._sink.parked.clear()
        while not self._inbox.empty():
            item = self._inbox.get_nowait()
            if isinstance(item, _InboundRequest | _Call) and not item.future.done():
                item.future.set_exception(stopped)

    # -- observability -------------------------------------------------------------------------------

    def _current_status(self) -> Status:
        return Status(node_id=self.node_id, role=self.client.role, epoch=self.client.epoch,
                      leader_id=self.client.leader_hint())

    def _publish_status(self) -> None:
        status = self._current_status()
        if status != self.status:
            self.status = status
            if self._on_status is not None:
                self._on_status(status)

    def _on_event(self, event: consensus.RaftEvent) -> None:
        if self._observer is not None:
            self._observer.on_event(event)
        if event.kind is consensus.RaftEventKind.ROLE_CHANGE:
            role_name, _, reason = event.detail.partition(": ")
            previous = self._last_role.value if self._last_role is not None else "-"
            self._last_role = self.client.role
            logger.info("node=%s epoch=%s from=%s to=%s leader=%s reason=%r", event.node_id,
                        event.epoch, previous, role_name, event.leader_id, reason)
        else:
            logger.info("node=%s epoch=%s event=%s leader=%s detail=%r", event.node_id,
                        event.epoch, event.kind.value, event.leader_id, event.detail)
