"""The broker's channel to the active controller, and its lifecycle with it.

Owns :class:`ControllerClient` — calls ControllerService on the active controller,
found from the raft leader the metadata observer knows, then from NOT_CONTROLLER
hints (``active_controller``), else by trying the voters of
``controller.quorum.voters`` in turn, pausing after each round that found none, until
the call's deadline (the order is :class:`~kraftlog.controller_locator.ControllerLocator`'s);
with a dynamic quorum
(KIP-853) the voters are those of the metadata log (:class:`KnownControllers`), so a
controller added later is reached too — and
:class:`BrokerLifecycle` (Kafka's BrokerLifecycleManager): BrokerRegistration
(incarnation id, listeners, rack, log dir ids, features including
``metadata.version`` 1..1), a BrokerHeartbeat every ``broker.heartbeat.interval.ms``
carrying the metadata offset this broker has replayed, re-registration after
STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED, and controlled shutdown
(``want_shut_down`` until the controller answers ``should_shut_down``) — and
:class:`ProducerIdAllocator`: producer ids for InitProducerId from blocks got with
AllocateProducerIds (KIP-730).

Liveness never starves (issue 16): the lifecycle runs on a thread of its own, with its
own event loop and its own channels to the controllers (a fresh :class:`ControllerClient`
made there), so a broker whose main event loop is busy (a metadata burst, thousands of
partitions, a slow disk) is slow but still heartbeats on time and is not fenced for being
busy (Kafka runs BrokerLifecycleManager on its own event queue thread for the same
reason). What it reads from the broker (the replayed metadata offset, the offline log
dirs) are plain attribute reads; what it tells the broker (``on_change``) is scheduled on
the broker's loop with ``call_soon_threadsafe``. :attr:`BrokerLifecycle.max_heartbeat_lateness_ms`
says how late a heartbeat went out compared with its schedule.

Callers: :mod:`kraftlog.server.broker_server`. Edge module: asyncio, grpc, protobuf and a thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import grpc

from kraftlog import errors, rpc
from kraftlog.broker import producer_ids
from kraftlog.controller_locator import ControllerLocator
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import Uuid
from kraftlog.metadata import record_convert
from kraftlog.v1 import common_pb2, controller_pb2, controller_pb2_grpc

logger = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
HEARTBEAT_LATE_MS = 100
"""A heartbeat leaving later than this (or a tenth of the interval, if more) after its
scheduled time is logged (``event=heartbeat_late``)."""


class KnownControllers(Mapping[int, str]):
    """Controller id -> ``host:port``: ``controller.quorum.voters`` plus the voters the metadata
    log names (KIP-853), read at each use. Reads a raft client's immutable voter set, so
    the lifecycle thread may use it too."""

    def __init__(self, static: Mapping[int, str]) -> None:
        self._static = dict(static)
        self._voter_endpoints: Callable[[], Mapping[int, str]] | None = None

    def bind(self, voter_endpoints: Callable[[], Mapping[int, str]]) -> None:
        self._voter_endpoints = voter_endpoints

    def _current(self) -> dict[int, str]:
        if self._voter_endpoints is None:
            return self._static
        return {**self._static, **self._voter_endpoints()}

    def __getitem__(self, node_id: int) -> str:
        return self._current()[node_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


class ControllerClient:
    """ControllerService calls that follow the active controller. See the module docstring."""

    def __init__(self, voters: Mapping[int, str], *, raft_leader: Callable[[], int],
                 request_timeout_ms: int) -> None:
        self.voters = voters
        self._raft_leader = raft_leader
        self.request_timeout_ms = request_timeout_ms
        self._channels: dict[int, Any] = {}
        self._locator = ControllerLocator[int](self._candidates)

    def _stub(self, node_id: int) -> controller_pb2_grpc.ControllerServiceStub:
        channel = self._channels.get(node_id)
        if channel is None:
            channel = self._channels[node_id] = rpc.aio_channel(
                self.voters[node_id], options=rpc.channel_options(retry_backoff_ms=50))
        return controller_pb2_grpc.ControllerServiceStub(channel)

    def _candidates(self) -> list[int]:
        # The raft leader this broker's metadata log knows, then every voter. Empty for a
        # dynamic quorum whose voters the metadata log has not named yet.
        voters = self.voters
        leader = self._raft_leader()
        return ([leader] if leader in voters else []) + sorted(voters)

    async def call(self, method: str, request: Any, *, deadline_s: float) -> Any:
        """``method`` on the active controller; the last answer (maybe an error) at the deadline.

        Raises TimeoutError when no controller answered at all before ``deadline_s``
        (a ``time.monotonic()`` instant)."""
        last: Any = None
        locator = self._locator
        locator.begin()
        while True:
            remaining = deadline_s - time.monotonic()
            if remaining <= 0:
                if last is not None:
                    return last
                raise TimeoutError(f"{method}: no controller answered")
            attempt = locator.next()
            if attempt is None or attempt.back_off:
                await asyncio.sleep(min(RETRY_BACKOFF_S, remaining))
                if attempt is None:
                    continue
                remaining = deadline_s - time.monotonic()
                if remaining <= 0:
                    continue
            target = attempt.target
            if target not in self.voters:
                locator.unreachable(target)  # removed from a dynamic quorum meanwhile
                continue
            try:
                answer = await getattr(self._stub(target), method)(
                    request, timeout=min(remaining, self.request_timeout_ms / 1000))
            except grpc.aio.AioRpcError as exc:
                logger.debug("event=controller_call_failed method=%s controller=%d code=%s",
                             method, target, exc.code().name)
                locator.unreachable(target)
                continue
            last = answer
            if answer.error.code != ErrorCode.NOT_CONTROLLER:
                locator.answered(target)
                return answer
            hint = answer.active_controller.leader_id
            locator.not_controller(target, hint if hint in self.voters else None)

    def clone(self) -> ControllerClient:
        """A client to the same controllers with channels of its own (created on the event
        loop that first calls it): grpc.aio channels belong to one loop."""
        return ControllerClient(self.voters, raft_leader=self._raft_leader,
                                request_timeout_ms=self.request_timeout_ms)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


class BrokerLifecycle:
    """Registration, heartbeats and controlled shutdown of broker ``broker_id``, on a thread.

    ``client`` names the controllers; the thread calls them through a :meth:`clone
    <ControllerClient.clone>` with its own channels. ``on_change`` runs on the event loop
    that called :meth:`start`. Fields the broker reads (``broker_epoch``, ``fenced``,
    ``caught_up``, ``should_shut_down``) are written only by the lifecycle thread.
    """

    def __init__(self, client: ControllerClient, *, broker_id: int, cluster_id: str,
                 incarnation_id: Uuid, listeners: Sequence[common_pb2.Endpoint], rack: str,
                 log_dir_ids: Sequence[Uuid], heartbeat_interval_ms: int,
                 metadata_offset: Callable[[], int],
                 on_change: Callable[[], None] | None = None,
                 previous_broker_epoch: int = -1,
                 offline_log_dirs: Callable[[], Sequence[Uuid]] | None = None) -> None:
        self.client = client
        # Directory ids of failed log dirs: reported on every heartbeat, which then asks to be
        # fenced (want_fence), so the controller moves leaderships and ISRs off this broker.
        self._offline_log_dirs = offline_log_dirs or (lambda: ())
        self._last_offline: list[Uuid] = []
        # KIP-966: the epoch this broker cleanly shut down with (-1: unclean or first start).
        self.previous_broker_epoch = previous_broker_epoch
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.incarnation_id = incarnation_id
        self.listeners = list(listeners)
        self.rack = rack
        self.log_dir_ids = list(log_dir_ids)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._metadata_offset = metadata_offset
        self._on_change = on_change
        self.broker_epoch = -1
        self.fenced = True
        self.caught_up = False
        self.want_shut_down = False
        self.should_shut_down = False
        self.heartbeats_sent = 0
        self.max_heartbeat_lateness_ms = 0.0
        """The latest a heartbeat left after its scheduled time (an interval after the
        previous one), in ms, since the start: the lifecycle thread's own delay."""
        self._wakeup: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._owner_loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._started = threading.Event()

    @property
    def ready(self) -> bool:
        """Registered, caught up and unfenced: the broker may serve clients."""
        return self.broker_epoch >= 0 and self.caught_up and not self.fenced

    def start(self) -> None:
        """Start the lifecycle thread (from the broker's event loop, which ``on_change`` runs on)."""
        self._owner_loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._thread_main, daemon=True,
                                        name=f"broker-{self.broker_id}-lifecycle")
        self._thread.start()
        self._started.wait()

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        client = self.client.clone()
        try:
            self._loop = loop
            self._wakeup = asyncio.Event()
            self._task = loop.create_task(self._run(client), name="broker-lifecycle")
            self._started.set()
            try:
                loop.run_until_complete(self._task)
            except asyncio.CancelledError:
                self._done.set_result(None)
            except BaseException as exc:  # handed to wait() on the broker's loop
                self._done.set_exception(exc)
            else:
                self._done.set_result(None)
            loop.run_until_complete(client.close())
        finally:
            self._started.set()
            loop.close()

    async def wait(self) -> None:
        """Until the lifecycle thread ends; re-raises its failure."""
        if self._thread is not None:
            await asyncio.shield(asyncio.wrap_future(self._done))

    async def stop(self) -> None:
        if self._thread is None:
            return
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # its loop closed: the thread is ending
                loop.call_soon_threadsafe(task.cancel)
        await asyncio.to_thread(self._thread.join, 10)

    def _wake(self) -> None:
        loop, wakeup = self._loop, self._wakeup
        if loop is not None and wakeup is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
                loop.call_soon_threadsafe(wakeup.set)

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Heartbeat with want_shut_down until the controller says should_shut_down (True)."""
        if self.broker_epoch < 0:
            return False
        self.want_shut_down = True
        self._wake()
        deadline = time.monotonic() + timeout_s
        while not self.should_shut_down and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.should_shut_down

    def _changed(self) -> None:
        if self._on_change is None:
            return
        owner = self._owner_loop
        if owner is None or owner.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the broker's loop closed: nobody to tell
            owner.call_soon_threadsafe(self._on_change)

    def _offline(self) -> list[Uuid]:
        # Read from another thread: a concurrent change of the broker's dict shows up as
        # RuntimeError; the previous answer stands until the next heartbeat.
        with contextlib.suppress(RuntimeError):
            self._last_offline = list(self._offline_log_dirs())
        return self._last_offline

    async def _register(self, client: ControllerClient) -> None:
        while True:
            request = controller_pb2.BrokerRegistrationRequest(
                broker_id=self.broker_id, cluster_id=self.cluster_id,
                incarnation_id=record_convert.uuid_to_proto(self.incarnation_id),
                listeners=self.listeners, rack=self.rack,
                features=[common_pb2.SupportedFeature(name="metadata.version",
                                                      min_supported_version=1,
                                                      max_supported_version=1)],
                log_dirs=[record_convert.uuid_to_proto(d) for d in self.log_dir_ids],
                previous_broker_epoch=self.previous_broker_epoch)
            try:
                answer = await client.call(
                    "BrokerRegistration", request,
                    deadline_s=time.monotonic() + client.request_timeout_ms / 1000)
            except TimeoutError:
                continue
            code = ErrorCode(answer.error.code)
            if code is ErrorCode.NONE:
                self.broker_epoch = answer.broker_epoch
                self.fenced = True
                self.caught_up = False
                logger.info("broker=%d event=registered broker_epoch=%d controller=%d",
                            self.broker_id, self.broker_epoch,
                            answer.active_controller.leader_id)
                self._changed()
                return
            logger.info("broker=%d event=registration_failed error=%s message=%r",
                        self.broker_id, code.name, answer.error.message)
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)

    async def _run(self, client: ControllerClient) -> None:
        assert self._wakeup is not None
        await self._register(client)
        due_s: float | None = None  # when this heartbeat was scheduled to leave
        while True:
            if due_s is not None:
                lateness_ms = (time.monotonic() - due_s) * 1000
                self.max_heartbeat_lateness_ms = max(self.max_heartbeat_lateness_ms, lateness_ms)
                if lateness_ms > max(HEARTBEAT_LATE_MS, self.heartbeat_interval_ms / 10):
                    logger.info("broker=%d event=heartbeat_late lateness_ms=%d interval_ms=%d",
                                self.broker_id, lateness_ms, self.heartbeat_interval_ms)
            offline = self._offline()
            request = controller_pb2.BrokerHeartbeatRequest(
                broker_id=self.broker_id, broker_epoch=self.broker_epoch,
                current_metadata_offset=self._metadata_offset(), want_fence=bool(offline),
                want_shut_down=self.want_shut_down,
                offline_log_dirs=[record_convert.uuid_to_proto(d) for d in offline])
            sent_s = time.monotonic()
            self.heartbeats_sent += 1
            try:
                answer = await client.call(
                    "BrokerHeartbeat", request,
                    deadline_s=sent_s + self.heartbeat_interval_ms / 1000)
            except TimeoutError:
                answer = None
            if answer is not None:
                code = ErrorCode(answer.error.code)
                if code is ErrorCode.NONE:
                    state = (answer.is_fenced, answer.is_caught_up, answer.should_shut_down)
                    if state != (self.fenced, self.caught_up, self.should_shut_down):
                        self.fenced, self.caught_up, self.should_shut_down = state
                        logger.info("broker=%d event=heartbeat_state broker_epoch=%d fenced=%s "
                                    "caught_up=%s should_shut_down=%s metadata_offset=%d",
                                    self.broker_id, self.broker_epoch, self.fenced,
                                    self.caught_up, self.should_shut_down,
                                    request.current_metadata_offset)
                        self._changed()
                elif code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
                    logger.info("broker=%d event=reregister reason=%s", self.broker_id, code.name)
                    self.broker_epoch = -1
                    self.fenced = True
                    self._changed()
                    await self._register(client)
                    due_s = None
                    continue
                else:
                    logger.info("broker=%d event=heartbeat_failed error=%s", self.broker_id,
                                code.name)
            self._wakeup.clear()
            # Before caught up, heartbeat faster so unfencing does not wait a whole interval.
            interval_ms = (self.heartbeat_interval_ms
                           if (self.ready or offline) and not self.want_shut_down else min(
                               self.heartbeat_interval_ms, 100))
            # Scheduled from when the last one left (a slow answer does not add to the gap).
            due_s = max(sent_s + interval_ms / 1000, time.monotonic())
            try:
                async with asyncio.timeout(max(0.0, due_s - time.monotonic())):
                    await self._wakeup.wait()
                due_s = None  # woken early (shutdown, a change): not a scheduled beat
            except TimeoutError:
                pass


class ProducerIdAllocator:
    """Producer ids for InitProducerId, from blocks the active controller hands this broker.

    One AllocateProducerIds call at a time; it starts when the blocks run
    low (:meth:`ProducerIdBlocks.wants_block`) and :meth:`allocate` waits for
    it at most until its deadline.
    """

    def __init__(self, client: ControllerClient, lifecycle: BrokerLifecycle) -> None:
        self.client = client
        self.lifecycle = lifecycle
        self._blocks = producer_ids.ProducerIdBlocks()
        self._fetch: asyncio.Task[None] | None = None
        self._last_error = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "no producer id block yet")

    async def allocate(self, *, deadline_s: float) -> tuple[ErrorCode, int, str]:
        """``(NONE, producer id, "")``, or an error code and message by ``deadline_s`` (monotonic).

        COORDINATOR_LOAD_IN_PROGRESS (retriable) when no block arrived in time.
        """
        while True:
            producer_id = self._blocks.next_producer_id()
            self._maybe_fetch()
            if producer_id is not None:
                return ErrorCode.NONE, producer_id, ""
            fetch = self._fetch
            remaining = deadline_s - time.monotonic()
            if fetch is None or remaining <= 0:
                code, message = self._last_error
                return code, -1, message
            try:
                async with asyncio.timeout(remaining):
                    await asyncio.shield(fetch)
            except TimeoutError:
                return (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1,
                        "no producer id block from the active controller yet; retry")
            if self._blocks.wants_block() and self._last_error[0] is not ErrorCode.NONE:
                await asyncio.sleep(min(RETRY_BACKOFF_S, max(0.0, deadline_s - time.monotonic())))

    def _maybe_fetch(self) -> None:
        if self._fetch is None and self._blocks.wants_block():
            self._fetch = asyncio.get_running_loop().create_task(self._fetch_block(),
                                                                 name="broker-allocate-producer-ids")

    async def _fetch_block(self) -> None:
        try:
            if self.lifecycle.broker_epoch < 0:
                self._last_error = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                    f"broker {self.lifecycle.broker_id} is not registered yet; retry")
                return
            request = controller_pb2.AllocateProducerIdsRequest(
                broker_id=self.lifecycle.broker_id, broker_epoch=self.lifecycle.broker_epoch)
            try:
                answer = await self.client.call(
                    "AllocateProducerIds", request,
                    deadline_s=time.monotonic() + self.client.request_timeout_ms / 1000)
            except TimeoutError:
                self._last_error = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                    "no controller answered AllocateProducerIds; retry")
                return
            code = ErrorCode(answer.error.code)
            if code is not ErrorCode.NONE:
                logger.info("broker=%d event=allocate_producer_ids_failed error=%s message=%r",
                            self.lifecycle.broker_id, code.name, answer.error.message)
                # Stale epoch, not registered, no controller: the lifecycle fixes it; retry later.
                retriable = code in (ErrorCode.NOT_CONTROLLER, ErrorCode.STALE_BROKER_EPOCH,
                                     ErrorCode.BROKER_ID_NOT_REGISTERED, ErrorCode.REQUEST_TIMED_OUT)
                self._last_error = (
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if retriable else ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"AllocateProducerIds answered {code.name}: {answer.error.message}")
                return
            try:
                block = producer_ids.ProducerIdsBlock(first_producer_id=answer.producer_id_start,
                                                      size=answer.producer_id_len)
                self._blocks.add_block(block)
            except (ValueError, errors.InvariantViolation) as exc:
                logger.error("broker=%d event=producer_id_block_rejected reason=%r",
                             self.lifecycle.broker_id, str(exc))
                self._last_error = (ErrorCode.UNKNOWN_SERVER_ERROR, f"bad producer id block: {exc}")
                return
            self._last_error = (ErrorCode.NONE, "")
            logger.info("broker=%d event=producer_id_block first=%d size=%d", self.lifecycle.broker_id,
                        block.first_producer_id, block.size)
        finally:
            self._fetch = None

    async def close(self) -> None:
        if self._fetch is not None:
            self._fetch.cancel()
            await asyncio.gather(self._fetch, return_exceptions=True)
