"""Replica fetchers: asyncio tasks per source broker, pulling its followed partitions.

Owns :class:`ReplicaFetcherManager` (Kafka's ReplicaFetcherManager: ``num.replica.fetchers``
fetchers per leader broker, a partition going to fetcher :func:`fetcher_id`, Kafka's
hash; a new count, e.g. from a dynamic broker config, moves every partition to its new
fetcher, as Kafka's ``resizeThreadPool`` does) and
:class:`ReplicaFetcher`, which loops: build one Fetch with an entry per fetchable
partition from its pure :class:`~kraftlog.broker.follower.FollowerFetchState`
(fetch offset = log end, last fetched epoch, KIP-320), long-poll the leader's
BrokerService, and hand each partition's answer back to its state (append,
truncate on a diverging epoch, reset, back off). After OFFSET_OUT_OF_RANGE it asks
the leader's log end with ListOffsets. A transport error backs the whole fetcher
off ``replica.fetch.backoff.ms``. Each Fetch is a request on one long-lived
``FetchStream`` to the leader (a call per round cost more CPU than the replication
itself at Kafka's 16 KiB batches); a leader answering it UNIMPLEMENTED gets unary
Fetch.

KIP-73 follower throttle (:mod:`kraftlog.broker.replication_quota`): while the
broker's follower quota is exceeded, a throttled partition that is not caught up
with the leader's high watermark is left out of the Fetch (when nothing else is
left, the fetcher waits out the quota's throttle time, at most the backoff); the
bytes appended for throttled partitions are recorded against the quota.

The leader counts a follower's progress only from the fetch offsets it sends, so
records appended here are acknowledged by the next Fetch, which leaves at once.

Callers: :mod:`kraftlog.server.broker_server` applies each
:class:`~kraftlog.broker.reconciler.ReconcileResult` with
:meth:`ReplicaFetcherManager.apply`. Edge module: asyncio, grpc and the clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from kraftlog import rpc
from kraftlog.broker import data_plane, fetch_session, server
from kraftlog.broker import follower as follower_mod
from kraftlog.broker import partition as partition_mod
from kraftlog.broker import reconciler as rc
from kraftlog.broker import replica_manager as rm
from kraftlog.broker import replication_quota as rq
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import InvariantViolation
from kraftlog.ids import TopicPartition
from kraftlog.metadata import record_convert
from kraftlog.v1 import broker_pb2, broker_pb2_grpc

logger = logging.getLogger(__name__)

MIN_THROTTLE_WAIT_MS = 10
REBUILD_INTERVAL_MS = 30_000
CUT_INTERVAL_MS = 1_000
"""At most one incremental Fetch in flight is cut short per this long, for partitions added
or removed meanwhile (see ReplicaFetcher._kick)."""
"""Requests are rebuilt from every followed partition at least this often, even when no
answer moved anything (a log start offset moved by local retention reaches the leader)."""
"""Shortest wait while every fetchable partition is held back by the follower quota."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetcherConfig:
    """Kafka's replica fetcher settings, with their units."""

    fetch_backoff_ms: int = follower_mod.DEFAULT_REPLICA_FETCH_BACKOFF_MS
    """``replica.fetch.backoff.ms``."""
    fetch_max_bytes: int = follower_mod.DEFAULT_REPLICA_FETCH_MAX_BYTES
    """``replica.fetch.max.bytes`` (per partition)."""
    fetch_response_max_bytes: int = 10 * 1024 * 1024
    """``replica.fetch.response.max.bytes``."""
    fetch_wait_max_ms: int = 500
    """``replica.fetch.wait.max.ms``: how long the leader may hold a Fetch."""
    fetch_min_bytes: int = 1
    """``replica.fetch.min.bytes``."""
    request_timeout_ms: int = 30_000
    """``replica.socket.timeout.ms``-like bound on one Fetch beyond its wait."""
    num_fetchers: int = 1
    """``num.replica.fetchers``: fetchers (each its own Fetch loop) per source broker."""


def _java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around)."""
    data = text.encode("utf-16-be")
    h = 0
    for unit in struct.unpack(f">{len(data) // 2}H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """Which of a source broker's ``num_fetchers`` fetchers follows ``tp``: Kafka's
    ``AbstractFetcherManager.getFetcherId``, ``abs(31 * topic.hashCode + partition) % n``
    in 32-bit arithmetic (``Utils.abs`` maps MIN_VALUE to 0)."""
    h = (31 * _java_string_hash(tp.topic) + tp.partition) & 0xFFFFFFFF
    if h & 0x80000000:
        h = 0 if h == 0x80000000 else (1 << 32) - h
    return h % num_fetchers


class ReplicaFetcher:
    """Fetches the partitions this broker follows from broker ``source_id``."""

    def __init__(self, *, broker_id: int, source_id: int, endpoint: Callable[[int], str | None],
                 broker_epoch: Callable[[], int], data: data_plane.DataPlane, fetcher_id: int = 0,
                 config: FetcherConfig, quota: rq.ReplicationQuota | None = None,
                 on_storage_error: Callable[[TopicPartition, OSError], None] | None = None,
                 ) -> None:
        self.broker_id = broker_id
        self.quota = quota or rq.ReplicationQuota(rq.QuotaType.FOLLOWER)
        self.source_id = source_id
        self.fetcher_id = fetcher_id
        self._on_storage_error = on_storage_error or self._drop_on_storage_error
        self._endpoint = endpoint
        self._broker_epoch = broker_epoch
        self._data = data
        self.config = config
        self.states: dict[TopicPartition, follower_mod.FollowerFetchState] = {}
        self._changed = asyncio.Event()
        self._call: Any = None
        self._call_cuttable = False
        """Whether the Fetch in flight is an incremental one (see :meth:`_kick`)."""
        self._last_cut_ms = -CUT_INTERVAL_MS
        self._channel: Any = None
        self._channel_target = ""
        self._stub_of_channel: broker_pb2_grpc.BrokerServiceStub | None = None
        self._stream: Any = None
        """The open FetchStream call to the source, None until the next Fetch opens one."""
        self._stream_stub: broker_pb2_grpc.BrokerServiceStub | None = None
        self.stream_unsupported = False
        """The source answered FetchStream with UNIMPLEMENTED (an older broker): unary Fetch
        until the channel changes."""
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self.session = fetch_session.FetchSessionBuilder()
        """This fetcher's fetch session with its source (KIP-227)."""
        # The last round's requests, reused while nothing moved (_stale unset): partition ->
        # (state, request), partition -> request (for the session) and (name, index) ->
        # (partition, (state, request)) (to match answers).
        self._stale = True
        self._built_at_ms = 0
        self._entries: dict[TopicPartition, tuple[follower_mod.FollowerFetchState,
                                                  follower_mod.FollowerFetchRequest]] = {}
        self._requests: dict[TopicPartition, follower_mod.FollowerFetchRequest] = {}
        self._asked: dict[tuple[str, int], tuple[TopicPartition, tuple[
            follower_mod.FollowerFetchState, follower_mod.FollowerFetchRequest]]] = {}

    def _where(self) -> str:
        return (f"broker={self.broker_id} fetcher_source={self.source_id} "
                f"fetcher_id={self.fetcher_id}")

    def _drop_on_storage_error(self, tp: TopicPartition, error: OSError) -> None:
        logger.error("%s partition=%s event=follower_storage_error error=%r", self._where(), tp,
                     str(error))
        self.remove(tp)

    def add(self, state: follower_mod.FollowerFetchState) -> None:
        self.states[state.partition.topic_partition] = state
        self._kick()

    def remove(self, tp: TopicPartition) -> bool:
        removed = self.states.pop(tp, None) is not None
        if removed:
            self._kick()
        return removed

    def wake(self) -> None:
        """End a wait for fetchable partitions now (an in-flight Fetch is left alone)."""
        self._stale = True
        self._changed.set()

    def _kick(self) -> None:
        # The partition set changed: the next Fetch carries it. An incremental Fetch parked
        # at the leader would hold the change back for up to replica.fetch.wait.max.ms, so
        # it is cut short, at most once per CUT_INTERVAL_MS; a full one (a session opening)
        # is never cut. Cutting resets the session (the leader may have seen the request):
        # when every addition cut the Fetch in flight, a burst of them (thousands of
        # replicas created or moved at once, issue 16) made every Fetch a full one, cut
        # again before it was answered; the leaders heard from no follower and shrank
        # thousands of ISRs.
        self._stale = True
        self._changed.set()
        if self._call is not None and self._call_cuttable:
            now_ms = self._data.now_ms()
            if now_ms - self._last_cut_ms >= CUT_INTERVAL_MS:
                self._last_cut_ms = now_ms
                self._call.cancel()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{self.source_id}-{self.fetcher_id}")
        self._task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("%s event=fetcher_failed error=%r", self._where(), str(task.exception()))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._drop_stream()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None

    async def _stub(self) -> broker_pb2_grpc.BrokerServiceStub | None:
        target = self._endpoint(self.source_id)
        if target is None:
            return None
        if self._channel is None or target != self._channel_target:
            if self._channel is not None:
                await self._channel.close()
            self._channel = rpc.aio_channel(target, options=rpc.channel_options(
                retry_backoff_ms=self.config.fetch_backoff_ms))
            self._channel_target = target
            self._stub_of_channel = None
            self._stream = None
            self.stream_unsupported = False
        if self._stub_of_channel is None:
            # One stub per channel: building one per Fetch cost ~4% of a broker's loop.
            self._stub_of_channel = broker_pb2_grpc.BrokerServiceStub(self._channel)
        return self._stub_of_channel

    async def _run(self) -> None:
        backoff_s = self.config.fetch_backoff_ms / 1000
        while True:
            try:
                await self._run_once(backoff_s)
            except (asyncio.CancelledError, InvariantViolation):
                raise
            except Exception:
                # A bug or a local disk error on one answer must not silently end replication
                # from this source for every partition: log it and try again after a backoff.
                logger.exception("%s event=fetcher_error backoff_ms=%d", self._where(),
                                 self.config.fetch_backoff_ms)
                self._call = None
                self.session.reset()
                await asyncio.sleep(backoff_s)

    async def _run_once(self, backoff_s: float) -> None:
        """One Fetch round trip (or one wait while nothing is fetchable)."""
        now_ms = self._data.now_ms()
        quota = self.quota
        exceeded = quota.is_quota_exceeded(now_ms)
        held_back = False
        if (not self._stale and not exceeded and self._entries
                and now_ms - self._built_at_ms < REBUILD_INTERVAL_MS):
            # Nothing moved since the last round (every answer took the idle path): the same
            # requests again, and an incremental fetch lists none of them (issue 16).
            entries = self._entries
        else:
            entries = {}
            stale = False
            for tp, state in self.states.items():
                request = state.build_fetch_request(now_ms)
                if request is None:
                    stale = stale or state.status is follower_mod.FollowerStatus.DELAYED
                    continue
                # Kafka's shouldFollowerThrottle: never an in-sync replica.
                if exceeded and not state.is_replica_in_sync and quota.is_throttled(tp):
                    held_back = True
                    continue
                entries[tp] = (state, request)
            self._stale = stale or held_back  # a backoff ends, or the quota frees, with time
            self._built_at_ms = now_ms
            self._entries = entries
            self._requests = {tp: request for tp, (_state, request) in entries.items()}
            self._asked = {(tp.topic, tp.partition): (tp, entry) for tp, entry in entries.items()}
        if not entries:
            self._changed.clear()
            wait_s = backoff_s
            delayed = [s.delayed_until_ms for s in self.states.values()
                       if s.status is follower_mod.FollowerStatus.DELAYED]
            if delayed:
                wait_s = max(0.0, min(delayed) - now_ms) / 1000
            if held_back:
                wait_s = min(wait_s, max(MIN_THROTTLE_WAIT_MS,
                                         quota.throttle_time_ms(now_ms)) / 1000)
            try:
                async with asyncio.timeout(wait_s):
                    await self._changed.wait()
            except TimeoutError:
                pass
            return
        stub = await self._stub()
        if stub is None:
            logger.info("%s event=fetch_backoff reason=no_endpoint", self._where())
            await asyncio.sleep(backoff_s)
            return
        self._changed.clear()
        asked = self._asked  # what this request asks, as its answer is matched (see _apply)
        try:
            response = await self._fetch(stub, entries)
        except asyncio.CancelledError:
            # The leader may or may not have seen the request: the session starts over.
            self.session.reset()
            if self._call is not None and self._call.cancelled() and not self._is_cancelling():
                self._call = None
                return  # our own _kick: rebuild the request
            raise
        except grpc.aio.AioRpcError as exc:
            self.session.reset()
            self._call = None
            if exc.code() is grpc.StatusCode.CANCELLED and self._changed.is_set():
                return
            # One line when the source stops answering, not one per retry.
            logger.log(logging.DEBUG if self._failing else logging.INFO,
                       "%s event=fetch_failed code=%s backoff_ms=%d", self._where(),
                       exc.code().name, self.config.fetch_backoff_ms)
            self._failing = True
            await asyncio.sleep(backoff_s)
            return
        self._call = None
        if self._failing:
            self._failing = False
            logger.info("%s event=fetch_recovered", self._where())
        error = ErrorCode(response.error.code)
        self.session.handle_response(error=error, session_id=response.session_id)
        if error in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            # The leader lost the session (restart, eviction): a full fetch opens a new one.
            logger.info("%s event=fetch_session_reset error=%s", self._where(), error.name)
            return
        if error is not ErrorCode.NONE:
            logger.info("%s event=fetch_failed error=%s", self._where(), error.name)
            await asyncio.sleep(backoff_s)
            return
        await self._apply(stub, asked, response)
        self._data.dispatch()

    def _is_cancelling(self) -> bool:
        task = asyncio.current_task()
        return task is not None and task.cancelling() > 0

    async def _fetch(self, stub: broker_pb2_grpc.BrokerServiceStub,
                     entries: dict[TopicPartition, tuple[follower_mod.FollowerFetchState,
                                                         follower_mod.FollowerFetchRequest]]
                     ) -> broker_pb2.FetchResponse:
        # KIP-227: in a session only the partitions whose request changed are listed (none on
        # an idle round), and those no longer fetched are forgotten.
        session = self.session.build(self._requests)
        forgotten: dict[str, broker_pb2.FetchRequest.ForgottenTopic] = {}
        for tp in session.forgotten:
            gone = forgotten.get(tp.topic)
            if gone is None:
                gone = forgotten[tp.topic] = broker_pb2.FetchRequest.ForgottenTopic(topic=tp.topic)
            gone.partitions.append(tp.partition)
        topics: dict[str, broker_pb2.FetchRequest.FetchTopic] = {}
        for tp in session.send:
            request = entries[tp][1]
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = broker_pb2.FetchRequest.FetchTopic(
                    topic=tp.topic, topic_id=record_convert.uuid_to_proto(request.topic_id))
            topic.partitions.append(broker_pb2.FetchRequest.FetchPartition(
                partition=tp.partition, current_leader_epoch=request.current_leader_epoch,
                fetch_offset=request.fetch_offset, last_fetched_epoch=request.last_fetched_epoch,
                log_start_offset=request.log_start_offset,
                partition_max_bytes=request.partition_max_bytes))
        config = self.config
        self._call_cuttable = session.epoch not in (fetch_session.INITIAL_EPOCH,
                                                    fetch_session.FINAL_EPOCH)
        fetch = broker_pb2.FetchRequest(
            replica_id=self.broker_id, replica_epoch=self._broker_epoch(),
            max_wait_ms=config.fetch_wait_max_ms, min_bytes=config.fetch_min_bytes,
            max_bytes=config.fetch_response_max_bytes, topics=list(topics.values()),
            session_id=session.session_id, session_epoch=session.epoch,
            forgotten_topics_data=list(forgotten.values()))
        timeout_s = (config.fetch_wait_max_ms + config.request_timeout_ms) / 1000
        if not self.stream_unsupported:
            try:
                return await self._fetch_on_stream(stub, fetch, timeout_s)
            except grpc.aio.AioRpcError as exc:
                if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
                    raise
                # An older leader: nothing was read, so the same request goes unary.
                logger.info("%s event=fetch_stream_unsupported fallback=unary", self._where())
                self.stream_unsupported = True
        self._call = stub.Fetch(fetch, timeout=timeout_s)
        response: broker_pb2.FetchResponse = await self._call
        return response

    async def _fetch_on_stream(self, stub: broker_pb2_grpc.BrokerServiceStub,
                               request: broker_pb2.FetchRequest,
                               timeout_s: float) -> broker_pb2.FetchResponse:
        """One Fetch as a request on the long-lived FetchStream (opened on first use): the
        leader answers each request in order, so the answer read next is this request's.

        ``self._call`` is the stream while the answer is awaited, so a ``_kick`` cuts a
        parked fetch short as it does a unary one; any failure (a kick, a timeout, a
        transport error) drops the stream, and the next Fetch opens a new one.
        """
        if self._stream is None or self._stream_stub is not stub:
            self._drop_stream()
            self._stream = stub.FetchStream()
            self._stream_stub = stub
        stream = self._stream
        self._call = stream
        try:
            try:
                await stream.write(request)
            except asyncio.InvalidStateError:
                # The call ended (e.g. the leader's graceful stop) with a status grpc did
                # not raise: a transport failure like any other.
                raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                           grpc.aio.Metadata(), "the FetchStream is closed"
                                           ) from None
            try:
                async with asyncio.timeout(timeout_s):
                    response = await stream.read()
            except TimeoutError:
                raise grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(),
                                           grpc.aio.Metadata(), "no FetchStream answer in time"
                                           ) from None
        except BaseException:
            if self._stream is stream:
                self._drop_stream()
            raise
        if response is grpc.aio.EOF:
            self._drop_stream()
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                       grpc.aio.Metadata(), "the leader ended the FetchStream")
        answer: broker_pb2.FetchResponse = response
        return answer

    async def _apply(self, stub: broker_pb2_grpc.BrokerServiceStub, asked: Mapping[
                         tuple[str, int], tuple[TopicPartition, tuple[
                             follower_mod.FollowerFetchState, follower_mod.FollowerFetchRequest]]],
                     response: broker_pb2.FetchResponse) -> None:
        """Apply a Fetch answer to the partitions ``asked`` (by (topic name, index), each with
        its state and the request sent): a TopicPartition built per answered partition (its
        name checked each time) cost ~5% of an idle broker's loop."""
        for topic in response.responses:
            for data in topic.partitions:
                found = asked.get((topic.topic, data.partition_index))
                if found is None:
                    continue
                tp, entry = found
                if self.states.get(tp) is not entry[0]:
                    continue  # removed or replaced while the Fetch was out
                state, request = entry
                if (not data.error.code and not data.HasField("diverging_epoch") and not data.records
                        and state.handle_idle_answer(request, high_watermark=data.high_watermark,
                                                     log_start_offset=data.log_start_offset)):
                    continue  # nothing new for this partition (most of them, most of the time)
                self._stale = True  # its request changes (or its state): build again
                diverging = (partition_mod.EpochEndOffset(epoch=data.diverging_epoch.epoch,
                                                          end_offset=data.diverging_epoch.end_offset)
                             if data.HasField("diverging_epoch") else None)
                # Read once: every access of a bytes field copies it out of the message.
                records = data.records
                try:
                    outcome = state.handle_fetch_response(request, follower_mod.FollowerFetchResponse(
                        error=ErrorCode(data.error.code), high_watermark=data.high_watermark,
                        log_start_offset=data.log_start_offset, records=records,
                        diverging_epoch=diverging), now_ms=self._data.now_ms())
                except OSError as exc:
                    # The local log failed (append or truncation): its directory goes offline
                    # and no fetcher fetches a replica in it any more.
                    self._on_storage_error(tp, exc)
                    continue
                if (outcome.action is follower_mod.FollowerAction.APPENDED and records
                        and self.quota.is_throttled(tp)):
                    self.quota.record(len(records), self._data.now_ms())
                if outcome.action is follower_mod.FollowerAction.LIST_OFFSETS:
                    await self._list_leader_end(stub, state)

    async def _list_leader_end(self, stub: broker_pb2_grpc.BrokerServiceStub,
                               state: follower_mod.FollowerFetchState) -> None:
        tp = state.partition.topic_partition
        try:
            answer = await stub.ListOffsets(broker_pb2.ListOffsetsRequest(
                replica_id=self.broker_id, topics=[broker_pb2.ListOffsetsRequest.ListOffsetsTopic(
                    name=tp.topic, partitions=[broker_pb2.ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=tp.partition, current_leader_epoch=state.leader_epoch,
                        timestamp=server.LATEST_TIMESTAMP)])]),
                timeout=self.config.request_timeout_ms / 1000)
        except grpc.aio.AioRpcError:
            return
        for topic in answer.topics:
            for part in topic.partitions:
                if part.error.code == 0 and part.offset >= 0:
                    state.handle_leader_end_offset(part.offset, now_ms=self._data.now_ms())


class ReplicaFetcherManager:
    """``num.replica.fetchers`` :class:`ReplicaFetcher` per leader broker, keyed
    (leader id, fetcher id); applies the reconciler's fetch changes."""

    def __init__(self, *, broker_id: int, manager: rm.ReplicaManager, data: data_plane.DataPlane,
                 endpoint: Callable[[int], str | None], broker_epoch: Callable[[], int],
                 config: FetcherConfig, quota: rq.ReplicationQuota | None = None) -> None:
        if config.num_fetchers < 1:
            raise ValueError(f"num.replica.fetchers must be at least 1, got {config.num_fetchers}")
        self.broker_id = broker_id
        self.quota = quota or rq.ReplicationQuota(rq.QuotaType.FOLLOWER)
        """The broker's follower-side replication quota, shared by every fetcher."""
        self.manager = manager
        self._data = data
        self._endpoint = endpoint
        self._broker_epoch = broker_epoch
        self.config = config
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._stopping: list[asyncio.Task[None]] = []

    @property
    def num_fetchers(self) -> int:
        return self.config.num_fetchers

    def wake(self) -> None:
        """Every fetcher waiting while nothing was fetchable looks again (a throttle changed)."""
        for fetcher in self.fetchers.values():
            fetcher.wake()

    def _remove(self, tp: TopicPartition) -> None:
        for key, fetcher in list(self.fetchers.items()):
            if fetcher.remove(tp) and not fetcher.states:
                del self.fetchers[key]
                self._stopping.append(asyncio.get_running_loop().create_task(fetcher.stop()))

    def _storage_error(self, tp: TopicPartition, error: OSError) -> None:
        """A follower's log failed: its directory goes offline, its replicas stop fetching."""
        offline = self.manager.handle_storage_error(tp, error) or [tp]
        for gone in offline:
            self._remove(gone)

    def apply(self, result: rc.ReconcileResult) -> None:
        for tp in result.stop_fetching:
            self._remove(tp)
        for target in result.start_fetching:
            tp = target.topic_partition
            self._remove(tp)
            partition = self.manager.get_partition(tp)
            if partition is None or partition.is_leader:
                continue
            self._add(partition, leader_id=target.leader_id, leader_epoch=target.leader_epoch)
            logger.info("broker=%d partition=%s event=fetcher_started leader=%d leader_epoch=%d "
                        "fetch_offset=%d", self.broker_id, tp, target.leader_id,
                        target.leader_epoch, partition.log_end_offset)

    def _add(self, partition: partition_mod.Partition, *, leader_id: int,
             leader_epoch: int) -> None:
        key = (leader_id, fetcher_id(partition.topic_partition, self.config.num_fetchers))
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = self.fetchers[key] = ReplicaFetcher(
                broker_id=self.broker_id, source_id=leader_id, fetcher_id=key[1],
                endpoint=self._endpoint, broker_epoch=self._broker_epoch, data=self._data,
                config=self.config, quota=self.quota, on_storage_error=self._storage_error)
            fetcher.start()
        fetcher.add(follower_mod.FollowerFetchState(
            partition, leader_id=leader_id, leader_epoch=leader_epoch,
            fetch_backoff_ms=self.config.fetch_backoff_ms,
            partition_max_bytes=self.config.fetch_max_bytes))

    def resize(self, num_fetchers: int) -> None:
        """A new ``num.replica.fetchers``: stop every fetcher and follow each partition again
        from its fetcher under the new count, from its log end (Kafka's resizeThreadPool).
        The same count changes nothing."""
        if num_fetchers < 1:
            raise ValueError(f"num.replica.fetchers must be at least 1, got {num_fetchers}")
        if num_fetchers == self.config.num_fetchers:
            return
        followed = [(state.partition, state.leader_id, state.leader_epoch)
                    for fetcher in self.fetchers.values() for state in fetcher.states.values()]
        loop = asyncio.get_running_loop()
        for fetcher in self.fetchers.values():
            # At once: an answer the old fetcher still gets is for states it no longer has.
            fetcher.states.clear()
            self._stopping.append(loop.create_task(fetcher.stop()))
        self.fetchers.clear()
        self.config = dataclasses.replace(self.config, num_fetchers=num_fetchers)
        for partition, leader_id, leader_epoch in followed:
            self._add(partition, leader_id=leader_id, leader_epoch=leader_epoch)
        logger.info("broker=%d event=replica_fetchers_resized num_replica_fetchers=%d "
                    "partitions=%d fetchers=%d", self.broker_id, num_fetchers, len(followed),
                    len(self.fetchers))

    async def stop(self) -> None:
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), *self._stopping,
                             return_exceptions=True)
        self._stopping.clear()
