"""The asyncio owner of the broker's ReplicaManager: its data plane.

Owns :class:`DataPlane`, the one place the event loop touches the pure
:class:`~kraftlog.broker.replica_manager.ReplicaManager`: produce, fetch and
DeleteRecords calls, the futures of requests waiting in its purgatories (answered
from ``take_completed`` after every call), and the poll task that expires them and
shrinks ISRs.

Callers: the front doors that translate a wire format into its calls
(:mod:`kraftlog.broker.server` for gRPC), the replica fetchers (through
:meth:`DataPlane.dispatch` after follower appends), the group coordinator (its
``__consumer_offsets`` appends) and :mod:`kraftlog.server.broker_server` (wiring). Edge
module: asyncio and the clock; it knows no wire format (no protobuf, no grpc) and no
replication rule.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping

from kraftlog.broker import delete_records as dr
from kraftlog.broker import fetch_session, purgatory
from kraftlog.broker import replica_manager as rm
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition

POLL_INTERVAL_MS = 50
"""Upper bound between two purgatory / ISR-expiry polls."""


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class DataPlane:
    """The ReplicaManager on the event loop. See the module docstring."""

    def __init__(self, manager: rm.ReplicaManager, *, now_ms: Callable[[], int] = wall_ms,
                 on_alter_partition: Callable[[], None] | None = None) -> None:
        self.manager = manager
        self._now_ms = now_ms
        self._on_alter_partition = on_alter_partition
        self._produces: dict[int, asyncio.Future[dict[TopicPartition,
                                                      purgatory.ProducePartitionResponse]]] = {}
        self._fetches: dict[int, asyncio.Future[dict[TopicPartition,
                                                     rm.FetchPartitionResponse]]] = {}
        self._delete_records: dict[int, asyncio.Future[dict[TopicPartition,
                                                            dr.DeleteRecordsPartitionResponse]]] = {}
        self.on_log_start_offsets_moved: Callable[[], Awaitable[None]] | None = None
        """Awaited after DeleteRecords moved a log start offset, before the answer: the
        process writes ``log-start-offset-checkpoint`` there."""
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.poll_at_ms = 0
        """When the poll loop wakes next by itself; a request that parks wakes it earlier only
        if its deadline comes sooner (waking it for every parked request cost a loop turn and
        a poll of every partition)."""

    def now_ms(self) -> int:
        return self._now_ms()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._poll_loop(),
                                                            name="broker-data-plane-poll")

    async def wait(self) -> None:
        """Until the poll task ends; re-raises its failure (an invariant violation)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for produce in self._produces.values():
            produce.cancel()
        for fetch in self._fetches.values():
            fetch.cancel()
        for waiting in self._delete_records.values():
            waiting.cancel()
        self._produces.clear()
        self._fetches.clear()
        self._delete_records.clear()

    def dispatch(self) -> None:
        """Answer what became answerable, and tell the AlterPartition sender when it has work
        (waking it after every request cost a task switch and a scan of every partition)."""
        done = self.manager.take_completed()
        for produce in done.produces:
            future = self._produces.pop(produce.op_id, None)
            if future is not None and not future.done():
                future.set_result(produce.responses)
        for fetch in done.fetches:
            fetch_future = self._fetches.pop(fetch.op_id, None)
            if fetch_future is not None and not fetch_future.done():
                fetch_future.set_result(fetch.responses)
        for deleted in done.delete_records:
            delete_future = self._delete_records.pop(deleted.op_id, None)
            if delete_future is not None and not delete_future.done():
                delete_future.set_result(deleted.responses)
        if self._on_alter_partition is not None and self.manager.alter_partition_requests_ready:
            self._on_alter_partition()

    async def produce(self, entries: Mapping[TopicPartition, bytes], *, acks: int,
                      timeout_ms: int) -> dict[TopicPartition, purgatory.ProducePartitionResponse]:
        outcome = self.manager.append_records(entries, required_acks=acks, timeout_ms=timeout_ms,
                                              now_ms=self._now_ms())
        if outcome.delayed_op_id is None:
            self.dispatch()
            return outcome.responses
        future: asyncio.Future[dict[TopicPartition, purgatory.ProducePartitionResponse]] = (
            asyncio.get_running_loop().create_future())
        self._produces[outcome.delayed_op_id] = future
        self.dispatch()
        self._wake_poll_if_sooner()
        return await future

    async def fetch(self, params: purgatory.FetchParams,
                    partitions: Mapping[TopicPartition, purgatory.FetchPartitionRequest]
                    ) -> dict[TopicPartition, rm.FetchPartitionResponse]:
        outcome = self.manager.fetch_messages(params, partitions, now_ms=self._now_ms())
        if outcome.responses is not None:
            self.dispatch()
            return outcome.responses
        assert outcome.delayed_op_id is not None
        future: asyncio.Future[dict[TopicPartition, rm.FetchPartitionResponse]] = (
            asyncio.get_running_loop().create_future())
        self._fetches[outcome.delayed_op_id] = future
        self.dispatch()
        self._wake_poll_if_sooner()
        return await future

    async def delete_records(self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int
                             ) -> dict[TopicPartition, dr.DeleteRecordsPartitionResponse]:
        """DeleteRecords on the partitions led here; answered once the replicas followed."""
        outcome = self.manager.delete_records(offsets, timeout_ms=timeout_ms, now_ms=self._now_ms())
        future: asyncio.Future[dict[TopicPartition, dr.DeleteRecordsPartitionResponse]] | None = None
        if outcome.delayed_op_id is not None:
            future = asyncio.get_running_loop().create_future()
            self._delete_records[outcome.delayed_op_id] = future
        self.dispatch()
        moved = any(r.error is ErrorCode.NONE for r in outcome.responses.values())
        if moved and self.on_log_start_offsets_moved is not None:
            await self.on_log_start_offsets_moved()
        if future is None:
            return outcome.responses
        self._wake_poll_if_sooner()
        return await future

    async def fetch_in_session(self, params: purgatory.FetchParams,
                               partitions: Mapping[TopicPartition, purgatory.FetchPartitionRequest],
                               session: fetch_session.SessionRequest
                               ) -> tuple[dict[TopicPartition, rm.FetchPartitionResponse], int, ErrorCode, str]:
        """A follower's fetch with a session (KIP-227): (answers, session id, error, message)."""
        outcome = self.manager.fetch_messages(params, partitions, now_ms=self._now_ms(), session=session)
        if outcome.responses is not None:
            self.dispatch()
            return outcome.responses, outcome.session_id, outcome.error, outcome.error_message
        assert outcome.delayed_op_id is not None
        future: asyncio.Future[dict[TopicPartition, rm.FetchPartitionResponse]] = (
            asyncio.get_running_loop().create_future())
        self._fetches[outcome.delayed_op_id] = future
        self.dispatch()
        self._wake_poll_if_sooner()
        return await future, outcome.session_id, ErrorCode.NONE, ""

    def _wake_poll_if_sooner(self) -> None:
        deadline = self.manager.next_deadline_ms()
        if deadline is not None and deadline < self.poll_at_ms:
            self._wakeup.set()

    async def _poll_loop(self) -> None:
        while True:
            now_ms = self._now_ms()
            self.manager.poll(now_ms)
            self.dispatch()
            deadline = self.manager.next_deadline_ms()
            wait_ms = POLL_INTERVAL_MS if deadline is None else max(
                0, min(POLL_INTERVAL_MS, deadline - now_ms))
            self.poll_at_ms = now_ms + wait_ms
            self._wakeup.clear()
            try:
                async with asyncio.timeout(wait_ms / 1000):
                    await self._wakeup.wait()
            except TimeoutError:
                pass
