"""The consumer: read assigned partitions from their leaders, in order, from chosen offsets.

Owns :class:`Consumer`, a synchronous API (no background thread, no event loop)
for the CLI, a Spark task and benchmarks::

    consumer = Consumer(ConsumerConfig(bootstrap_servers=("127.0.0.1:19101",),
                                       auto_offset_reset=OffsetReset.EARLIEST))
    consumer.assign([TopicPartition(topic="events", partition=0)])
    consumer.seek_to_beginning()
    for record in consumer.poll(max_records=500, timeout_ms=1000):
        print(record.partition, record.offset, record.key, record.value)
    consumer.close()

Manual assignment only (no group membership). With ``group.id`` the consumer keeps
committed offsets in the group's coordinator (Kafka's ``__consumer_offsets``):
:meth:`Consumer.commit` (synchronous; the current positions by default),
:meth:`Consumer.committed`, and a partition without a position starts from the
group's committed offset, else by ``auto.offset.reset``; with ``enable.auto.commit``
the positions are committed every ``auto.commit.interval.ms`` from :meth:`poll` and at
:meth:`close`. The coordinator is found with FindCoordinator (asked of any broker)
and looked up again after NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE /
COORDINATOR_LOAD_IN_PROGRESS or a connection failure, within the call's deadline. :meth:`Consumer.poll` keeps
at most one Fetch in flight per leader broker, for all assigned partitions it
leads (in parallel, as gRPC futures, long-polling up to ``fetch.max.wait.ms``),
returns as soon as any answer brings records, and sends the next Fetch for the
partitions it just served before returning (prefetch, as Kafka's consumer does).
Fetch and ListOffsets carry the leader epoch from metadata (KIP-320). A broker
serves consumers only up to the high watermark, so every record returned is
committed. Batches are decoded by
:func:`kraftlog.storage.record_batch.decode_batch_records` (CRC-checked) and kept per
partition; records before the position (the start of a batch fetched from its
middle) and control batches are skipped.

A batch that fails its CRC or does not decode (written before the leader validated
batches, a disk bit flip) stops its partition there, as Kafka's ``CompletedFetch``
does: the records before it are delivered, then the poll that reaches it raises
:class:`~kraftlog.client.errors.CorruptRecordBatchError` naming the partition, the
offset the position stays at and the offset past the batch. Records of other
partitions already collected by that poll are returned first and the error comes with
the next poll (Kafka's ``FetchCollector``); every poll raises it again, and the
partition is not fetched, until the application seeks (``seek(tp, error.next_offset)``
skips the batch).

Errors per partition: NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH / LEADER_NOT_AVAILABLE / UNKNOWN_TOPIC_OR_PARTITION and
connection failures mark the metadata stale (refreshed after
``retry.backoff.ms``; a ``current_leader`` hint in the answer, KIP-951, is used at
once) and the partition is fetched again from its new leader;
OFFSET_OUT_OF_RANGE resets the position by ``auto.offset.reset`` (earliest,
latest) or raises :class:`~kraftlog.client.errors.OffsetOutOfRangeError` (none).
Positions are only resolved lazily (like Kafka's ``seekToBeginning``): a
ListOffsets to the leader at the next poll or :meth:`Consumer.position`.

Not thread-safe (like Kafka's consumer): use one per thread. Edge module: gRPC,
the clock.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NamedTuple

import grpc

from kraftlog.client import errors as client_errors
from kraftlog.client import fetch_wire
from kraftlog.client import metadata_client as md
from kraftlog.client.config import ConsumerConfig, OffsetReset
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import CorruptRecordError
from kraftlog.ids import TopicPartition
from kraftlog.security import tls
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.v1 import broker_pb2, common_pb2

logger = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
_RPC_GRACE_S = 5.0
AUTO_COMMIT_MIN_TIMEOUT_MS = 1000


class ConsumerRecord(NamedTuple):
    """One committed record, as Kafka's ``ConsumerRecord`` describes it.

    A NamedTuple rather than a frozen dataclass because one is built per record
    on the consumer's hot path: construction costs about a tenth as much. Build it
    with keywords all the same.
    """

    # The first five fields are a storage Record's, in its order: the decoder builds
    # ConsumerRecords directly (record_batch.decode_batch_records), one tuple per record.
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[rb.Header, ...]
    topic: str
    partition: int
    timestamp_type: bh.TimestampType
    leader_epoch: int
    """The partition leader epoch of the batch the record came in, -1 if unknown."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's ``OffsetAndMetadata``): the next offset the group reads."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None
    """The leader epoch of the last record consumed, None if unknown."""

    def __post_init__(self) -> None:
        if isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0:
            raise ValueError(f"a committed offset must be a non-negative int, got {self.offset!r}")


_COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
"""Group-call answers after which the coordinator is looked up again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetAndTimestamp:
    """An ``offsets_for_times`` answer: the first offset whose timestamp is at/after the one asked."""

    offset: int
    timestamp_ms: int


class _Reset(enum.Enum):
    EARLIEST = EARLIEST_TIMESTAMP
    LATEST = LATEST_TIMESTAMP


def _now() -> float:
    return time.monotonic()


class Consumer:
    """A Kafka-style consumer with manual assignment. See the module docstring."""

    def __init__(self, config: ConsumerConfig) -> None:
        self.config = config
        self._channels = md.BrokerChannels(
            retry_backoff_ms=config.retry_backoff_ms,
            client_tls=tls.client_tls_from_properties(dict(config.security),
                                                      what="bootstrap.servers"))
        self.metadata = md.MetadataCache(config.bootstrap_servers, self._channels,
                                         retry_backoff_ms=config.retry_backoff_ms,
                                         metadata_max_age_ms=config.metadata_max_age_ms)
        self._assigned: list[TopicPartition] = []
        self._next_drain = 0
        self._positions: dict[TopicPartition, int] = {}
        """Per partition: the offset of the next record poll() returns."""
        self._fetch_next: dict[TopicPartition, int] = {}
        """Per partition: where the next Fetch starts (past everything buffered or skipped)."""
        self._resets: dict[TopicPartition, _Reset] = {}
        self._buffers: dict[TopicPartition, deque[ConsumerRecord]] = {}
        self._fetched_records: dict[TopicPartition, int] = {}
        """Per partition: how many records the last Fetch answer buffered (the prefetch bound)."""
        self._high_watermarks: dict[TopicPartition, int] = {}
        self._backoff_until: dict[TopicPartition, float] = {}
        self._in_flight: dict[tuple[str, bool], tuple[grpc.Future, dict[TopicPartition, int]]] = {}
        """Fetches in flight by (broker address, whether for caught-up partitions): at most
        one per broker for partitions with data to read and one for partitions already at
        their high watermark (a long-poll the broker holds up to fetch.max.wait.ms)."""
        self._wakeup = threading.Condition()
        self._closed = False
        self._coordinator: str | None = None
        """The group coordinator's address, None until FindCoordinator answers."""
        self._next_auto_commit = _now() + config.auto_commit_interval_ms / 1000
        self._corrupt: dict[TopicPartition, client_errors.CorruptRecordBatchError] = {}
        """Partitions stopped at a batch that does not decode: raised once their buffer is
        drained, until a seek (or an assignment without them) clears it."""

    # -- assignment and positions -------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replacing any earlier assignment)."""
        self._check_open()
        wanted = list(dict.fromkeys(partitions))
        for tp in wanted:
            if not isinstance(tp, TopicPartition):
                raise ValueError(f"assign() takes TopicPartition values, got {tp!r}")
        keep = set(wanted)
        for table in (self._positions, self._fetch_next, self._resets, self._buffers,
                      self._fetched_records, self._high_watermarks, self._backoff_until,
                      self._corrupt):
            for tp in [tp for tp in table if tp not in keep]:
                del table[tp]
        self._assigned = wanted
        self._next_drain = 0
        deadline = _now() + self.config.default_api_timeout_ms / 1000
        for topic in dict.fromkeys(tp.topic for tp in wanted):
            info = self.metadata.topic(topic, deadline=deadline)
            for tp in wanted:
                if tp.topic == topic and tp.partition >= info.partition_count:
                    raise client_errors.UnknownTopicError(
                        topic, f"partition {tp.partition} of topic {topic!r} does not exist "
                        f"(it has {info.partition_count} partitions)")

    def assign_topic(self, topic: str) -> list[TopicPartition]:
        """Assign every partition of ``topic``; returns them."""
        deadline = _now() + self.config.default_api_timeout_ms / 1000
        info = self.metadata.topic(topic, deadline=deadline)
        partitions = [TopicPartition(topic=topic, partition=p.partition) for p in info.partitions]
        self.assign(partitions)
        return partitions

    def assignment(self) -> list[TopicPartition]:
        return list(self._assigned)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` next (ValueError when negative)."""
        self._check_assigned(tp)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"seek offset must be a non-negative int, got {offset!r}")
        self._positions[tp] = offset
        self._fetch_next[tp] = offset
        self._resets.pop(tp, None)
        self._buffers.pop(tp, None)
        self._corrupt.pop(tp, None)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from the log start offset (resolved at the next poll/position)."""
        self._seek_reset(partitions, _Reset.EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read only what arrives after the current high watermark (resolved lazily)."""
        self._seek_reset(partitions, _Reset.LATEST)

    def position(self, tp: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record poll() will return for ``tp``."""
        self._check_assigned(tp)
        if tp not in self._positions:
            self._resolve_resets([tp], self._deadline(timeout_ms))
        return self._positions[tp]

    def high_watermark(self, tp: TopicPartition) -> int | None:
        """The high watermark of ``tp`` from the last fetch answer, None before one."""
        return self._high_watermarks.get(tp)

    # -- offsets lookups ----------------------------------------------------------------------

    def beginning_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """Each partition's log start offset."""
        found = self._list_offsets({tp: EARLIEST_TIMESTAMP for tp in partitions},
                                   self._deadline(timeout_ms))
        return {tp: offset for tp, (offset, _ts) in found.items()}

    def end_offsets(self, partitions: Iterable[TopicPartition],
                    timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """Each partition's high watermark (the offset the next committed record will get)."""
        found = self._list_offsets({tp: LATEST_TIMESTAMP for tp in partitions},
                                   self._deadline(timeout_ms))
        return {tp: offset for tp, (offset, _ts) in found.items()}

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timeout_ms: int | None = None,
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset whose timestamp is at or after each time (ms); None when none is."""
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamp for {tp} must be a non-negative int (ms), got {ts!r}")
        found = self._list_offsets(dict(timestamps), self._deadline(timeout_ms))
        return {tp: None if offset < 0 else OffsetAndTimestamp(offset=offset, timestamp_ms=ts)
                for tp, (offset, ts) in found.items()}

    # -- polling ------------------------------------------------------------------------------

    def poll(self, max_records: int | None = None, timeout_ms: int = 1000
             ) -> list[ConsumerRecord]:
        """Up to ``max_records`` records (default ``max.poll.records``), waiting up to ``timeout_ms``.

        Returns [] when nothing arrives in time. Records of one partition come in
        offset order; partitions are served round-robin from what is buffered.
        Raises CorruptRecordBatchError once a partition's records up to a batch that
        does not decode were returned (see the module docstring).
        """
        self._check_open()
        limit = self.config.max_poll_records if max_records is None else max_records
        if limit <= 0:
            raise ValueError(f"max_records must be positive, got {max_records}")
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms}")
        deadline = _now() + timeout_ms / 1000
        # Like Kafka's poll: first commit what earlier polls returned, when it is time.
        self._maybe_auto_commit()
        while True:
            self._handle_completed()
            try:
                records = self._drain_buffers(limit)
            except client_errors.CorruptRecordBatchError:
                self._send_fetches(deadline)  # the other partitions keep coming
                raise
            # Fetch ahead of the application (Kafka's consumer does too): partitions
            # with a short buffer get their next Fetch now, answered while the
            # caller works on these records.
            self._send_fetches(deadline)
            if records:
                return records
            if self._in_flight:
                self._wait_for_any(deadline)
            else:
                pause = min(max(0.0, deadline - _now()), self.config.retry_backoff_ms / 1000)
                if pause > 0:
                    time.sleep(pause)
            if _now() >= deadline and not any(self._buffers.values()):
                self._handle_completed()
                if not any(self._buffers.values()):
                    return []

    def close(self) -> None:
        """Release channels; pending fetches are cancelled. With auto-commit on, the
        positions are committed first (failures are ignored, as Kafka's close does)."""
        if self._closed:
            return
        if self._auto_commits:
            with contextlib.suppress(client_errors.ClientError):
                self.commit(timeout_ms=min(self.config.default_api_timeout_ms, 5000))
        self._closed = True
        for future, _parts in self._in_flight.values():
            future.cancel()
        self._in_flight.clear()
        self._channels.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- committed offsets (group.id) ----------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
               timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` (default: the positions of every assigned partition that has
        one) for ``group.id``, waiting until the coordinator stored them.

        Raises KafkaApiError for a partition the coordinator refused (e.g.
        OFFSET_METADATA_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION), ClientTimeoutError when
        retriable errors outlast ``timeout_ms`` (default ``default.api.timeout.ms``).
        """
        group = self._group()
        if offsets is None:
            wanted = {tp: OffsetAndMetadata(offset=self._positions[tp])
                      for tp in self._assigned if tp in self._positions}
        else:
            wanted = {}
            for tp, value in offsets.items():
                if not isinstance(tp, TopicPartition):
                    raise ValueError(f"commit() takes TopicPartition keys, got {tp!r}")
                wanted[tp] = value if isinstance(value, OffsetAndMetadata) else (
                    OffsetAndMetadata(offset=value))
        if not wanted:
            return
        deadline = self._deadline(timeout_ms)
        pending = dict(wanted)
        last_error: Exception | None = None
        while True:
            topics: dict[str, list[broker_pb2.OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
            for tp, value in pending.items():
                topics.setdefault(tp.topic, []).append(
                    broker_pb2.OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=tp.partition, committed_offset=value.offset,
                        committed_leader_epoch=(-1 if value.leader_epoch is None
                                                else value.leader_epoch),
                        committed_metadata=value.metadata))
            request = broker_pb2.OffsetCommitRequest(
                group_id=group, generation_id_or_member_epoch=-1, topics=[
                    broker_pb2.OffsetCommitRequest.OffsetCommitRequestTopic(name=name,
                                                                            partitions=parts)
                    for name, parts in topics.items()])
            answer = self._coordinator_call("OffsetCommit", request, deadline)
            retry_coordinator = False
            for topic in answer.topics:
                for part in topic.partitions:
                    tp = TopicPartition(topic=topic.name, partition=part.partition_index)
                    if tp not in pending:
                        continue
                    code = client_errors.code_of(part.error.code)
                    if code is ErrorCode.NONE:
                        del pending[tp]
                        continue
                    error = client_errors.error_for(code, part.error.message, topic=tp.topic,
                                                    context=f"OffsetCommit {tp} for group {group!r}")
                    # Kafka's OffsetCommitResponseHandler: coordinator errors and timeouts
                    # look the coordinator up again and retry; anything else is final.
                    if code not in _COORDINATOR_ERRORS and code is not ErrorCode.REQUEST_TIMED_OUT:
                        raise error
                    retry_coordinator = True
                    last_error = error
            if not pending:
                return
            if retry_coordinator:
                self._coordinator = None
            self._backoff_or_timeout(deadline, f"commit of {len(pending)} offset(s) for group "
                                               f"{group!r}", last_error)

    def committed(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (None where nothing is committed)."""
        group = self._group()
        wanted = list(dict.fromkeys(partitions))
        for tp in wanted:
            if not isinstance(tp, TopicPartition):
                raise ValueError(f"committed() takes TopicPartition values, got {tp!r}")
        if not wanted:
            return {}
        return self._fetch_committed(group, wanted, self._deadline(timeout_ms))

    def _fetch_committed(self, group: str, wanted: Sequence[TopicPartition], deadline: float
                         ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        topics: dict[str, list[int]] = {}
        for tp in wanted:
            topics.setdefault(tp.topic, []).append(tp.partition)
        request = broker_pb2.OffsetFetchRequest(group_id=group, topics=[
            common_pb2.TopicPartitions(topic=name, partitions=parts)
            for name, parts in topics.items()])
        answer = self._coordinator_call("OffsetFetch", request, deadline)
        out: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted)
        for topic in answer.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic=topic.name, partition=part.partition_index)
                code = client_errors.code_of(part.error.code)
                if code is not ErrorCode.NONE:
                    raise client_errors.error_for(code, part.error.message, topic=tp.topic,
                                                  context=f"OffsetFetch {tp} for group {group!r}")
                if tp in out and part.committed_offset >= 0:
                    out[tp] = OffsetAndMetadata(
                        offset=part.committed_offset, metadata=part.metadata,
                        leader_epoch=(None if part.committed_leader_epoch < 0
                                      else part.committed_leader_epoch))
        return out

    @property
    def _auto_commits(self) -> bool:
        return self.config.group_id is not None and self.config.enable_auto_commit

    def _maybe_auto_commit(self) -> None:
        """Commit the positions when ``auto.commit.interval.ms`` passed (Kafka commits
        asynchronously and logs failures; here a failure waits for the next interval)."""
        if not self._auto_commits or _now() < self._next_auto_commit:
            return
        self._next_auto_commit = _now() + self.config.auto_commit_interval_ms / 1000
        with contextlib.suppress(client_errors.ClientError):
            # Bounded so an unreachable coordinator costs a poll at most about a second
            # (or the interval, if longer).
            self.commit(timeout_ms=min(self.config.request_timeout_ms,
                                       max(AUTO_COMMIT_MIN_TIMEOUT_MS,
                                           self.config.auto_commit_interval_ms)))

    def _group(self) -> str:
        self._check_open()
        if self.config.group_id is None:
            raise client_errors.ClientError(
                "INVALID_GROUP_ID: this consumer has no group.id; committed offsets need one")
        return self.config.group_id

    def _backoff_or_timeout(self, deadline: float, what: str, cause: Exception | None) -> None:
        if _now() + self.config.retry_backoff_ms / 1000 >= deadline:
            raise client_errors.ClientTimeoutError(
                f"{what} did not complete before the deadline"
                + (f"; last error: {cause}" if cause else ""))
        time.sleep(self.config.retry_backoff_ms / 1000)

    def _find_coordinator(self, group: str, deadline: float) -> str:
        """The coordinator's address: FindCoordinator to known brokers, then the bootstrap
        servers, until one answers with a coordinator (retrying COORDINATOR_NOT_AVAILABLE)."""
        last_error: Exception | None = None
        while True:
            candidates = list(dict.fromkeys([*self.metadata.brokers().values(),
                                             *self.metadata.bootstrap_servers]))
            request = broker_pb2.FindCoordinatorRequest(
                key_type=broker_pb2.COORDINATOR_KEY_TYPE_GROUP, coordinator_keys=[group])
            failures: dict[str, str] = {}
            for address in candidates:
                remaining = deadline - _now()
                if remaining <= 0:
                    break
                try:
                    answer = self._channels.stub(address).FindCoordinator(
                        request, timeout=min(remaining, self.config.request_timeout_ms / 1000))
                except grpc.RpcError as exc:
                    failures[address] = md.rpc_error_text(exc)
                    continue
                found = [c for c in answer.coordinators if c.key == group]
                if not found:
                    continue
                coordinator = found[0]
                code = client_errors.code_of(coordinator.error.code)
                if code is ErrorCode.NONE and coordinator.port > 0:
                    return md.address_of(coordinator.host, coordinator.port)
                error = client_errors.error_for(code, coordinator.error.message,
                                                context=f"FindCoordinator for group {group!r}")
                if code is not ErrorCode.COORDINATOR_NOT_AVAILABLE and not error.retriable:
                    raise error
                last_error = error
                break
            else:
                if failures:
                    last_error = client_errors.BrokersUnavailableError(
                        failures, f"FindCoordinator for group {group!r}")
            self._backoff_or_timeout(deadline, f"finding the coordinator of group {group!r}",
                                     last_error)

    def _coordinator_call(self, method: str, request: Any, deadline: float) -> Any:
        """``method`` on the group's coordinator: the answer once its group-wide error is NONE.

        Coordinator moves and loads are retried until ``deadline``; any other group-wide
        error raises KafkaApiError."""
        group = request.group_id
        last_error: Exception | None = None
        while True:
            if self._coordinator is None:
                self._coordinator = self._find_coordinator(group, deadline)
            address = self._coordinator
            remaining = max(0.05, deadline - _now())
            try:
                answer = getattr(self._channels.stub(address), method)(
                    request, timeout=min(remaining, self.config.request_timeout_ms / 1000))
            except grpc.RpcError as exc:
                self._coordinator = None
                last_error = client_errors.BrokersUnavailableError(
                    {address: md.rpc_error_text(exc)}, f"{method} for group {group!r}")
                self._backoff_or_timeout(deadline, f"{method} for group {group!r}", last_error)
                continue
            code = client_errors.code_of(answer.error.code)
            if code is ErrorCode.NONE:
                return answer
            error = client_errors.error_for(code, answer.error.message,
                                            context=f"{method} for group {group!r}")
            if code not in _COORDINATOR_ERRORS:
                raise error
            last_error = error
            hint = answer.coordinator
            if (code is ErrorCode.NOT_COORDINATOR and answer.HasField("coordinator")
                    and hint.leader_id >= 0 and hint.HasField("endpoint") and hint.endpoint.port
                    and md.address_of(hint.endpoint.host, hint.endpoint.port) != address):
                self._coordinator = md.address_of(hint.endpoint.host, hint.endpoint.port)
                continue  # the answer named the coordinator: go there at once
            self._coordinator = None
            self._backoff_or_timeout(deadline, f"{method} for group {group!r}", last_error)

    # -- internals ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise client_errors.ClientClosedError("the consumer is closed")

    def _check_assigned(self, tp: TopicPartition) -> None:
        self._check_open()
        if tp not in self._assigned:
            raise ValueError(f"{tp} is not assigned to this consumer")

    def _deadline(self, timeout_ms: int | None) -> float:
        wait = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        return _now() + wait / 1000

    def _seek_reset(self, partitions: Iterable[TopicPartition] | None, reset: _Reset) -> None:
        targets = self._assigned if partitions is None else list(partitions)
        for tp in targets:
            self._check_assigned(tp)
        for tp in targets:
            self._positions.pop(tp, None)
            self._fetch_next.pop(tp, None)
            self._buffers.pop(tp, None)
            self._corrupt.pop(tp, None)
            self._resets[tp] = reset

    def _default_reset(self, tp: TopicPartition) -> _Reset:
        policy = self.config.auto_offset_reset
        if policy is OffsetReset.EARLIEST:
            return _Reset.EARLIEST
        if policy is OffsetReset.LATEST:
            return _Reset.LATEST
        raise client_errors.OffsetOutOfRangeError(
            f"no position for {tp} and auto.offset.reset=none", offsets={tp: -1})

    def _resolve_resets(self, tps: Sequence[TopicPartition], deadline: float) -> None:
        wanted: dict[TopicPartition, int] = {}
        unknown = [tp for tp in tps if tp not in self._positions]
        if self.config.group_id is not None:
            # No position and no explicit seek: the group's committed offset, if any.
            undecided = [tp for tp in unknown if tp not in self._resets]
            if undecided:
                committed = self._fetch_committed(self.config.group_id, undecided, deadline)
                for tp, value in committed.items():
                    if value is not None:
                        self._positions[tp] = value.offset
                        self._fetch_next[tp] = value.offset
        for tp in unknown:
            if tp in self._positions:
                continue
            reset = self._resets.get(tp) or self._default_reset(tp)
            wanted[tp] = reset.value
        if not wanted:
            return
        found = self._list_offsets(wanted, deadline)
        for tp, (offset, _ts) in found.items():
            self._positions[tp] = offset
            self._fetch_next[tp] = offset
            self._resets.pop(tp, None)

    def _list_offsets(self, timestamps: Mapping[TopicPartition, int], deadline: float
                      ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets to each partition's leader, retrying leader moves until ``deadline``."""
        self._check_open()
        pending = dict(timestamps)
        result: dict[TopicPartition, tuple[int, int]] = {}
        last_error: dict[TopicPartition, Exception] = {}
        for topic in dict.fromkeys(tp.topic for tp in pending):
            self.metadata.topic(topic, deadline=deadline)
        while pending:
            by_leader: dict[str, list[TopicPartition]] = {}
            epochs: dict[TopicPartition, int] = {}
            for tp in pending:
                leader = self.metadata.leader(tp)
                if leader is None:
                    last_error[tp] = client_errors.KafkaApiError(
                        ErrorCode.LEADER_NOT_AVAILABLE, f"no leader known for {tp}")
                    continue
                epochs[tp] = leader.leader_epoch
                by_leader.setdefault(leader.address, []).append(tp)
            for address, tps in by_leader.items():
                request = broker_pb2.ListOffsetsRequest(replica_id=-1, topics=[
                    broker_pb2.ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                        broker_pb2.ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=tp.partition, current_leader_epoch=epochs[tp],
                            timestamp=pending[tp]) for tp in tps if tp.topic == topic])
                    for topic in dict.fromkeys(tp.topic for tp in tps)])
                remaining = max(0.05, deadline - _now())
                try:
                    answer = self._channels.stub(address).ListOffsets(
                        request, timeout=min(remaining, self.config.request_timeout_ms / 1000))
                except grpc.RpcError as exc:
                    self.metadata.report_unreachable(address)
                    for tp in tps:
                        last_error[tp] = client_errors.BrokersUnavailableError(
                            {address: md.rpc_error_text(exc)}, f"ListOffsets for {tp}")
                    continue
                for topic in answer.topics:
                    for part in topic.partitions:
                        tp = TopicPartition(topic=topic.name, partition=part.partition_index)
                        if tp not in pending:
                            continue
                        code = client_errors.code_of(part.error.code)
                        if code is ErrorCode.NONE:
                            result[tp] = (part.offset, part.timestamp)
                            del pending[tp]
                            continue
                        error = client_errors.error_for(code, part.error.message, topic=tp.topic,
                                                        context=f"ListOffsets {tp}")
                        if not error.retriable:
                            raise error
                        last_error[tp] = error
                        self.metadata.request_update()
            if not pending:
                break
            if _now() + self.config.retry_backoff_ms / 1000 >= deadline:
                first = next(iter(pending))
                cause = last_error.get(first)
                raise client_errors.ClientTimeoutError(
                    f"offsets of {', '.join(str(tp) for tp in pending)} not found before the "
                    f"deadline" + (f"; last error: {cause}" if cause else ""))
            time.sleep(self.config.retry_backoff_ms / 1000)
            self.metadata.maybe_refresh(deadline=deadline)
        return result

    def _drain_buffers(self, limit: int) -> list[ConsumerRecord]:
        """Buffered records, up to ``limit``, starting after the partition served last
        (round-robin, so a partition with a deep buffer cannot starve the others)."""
        out: list[ConsumerRecord] = []
        count = len(self._assigned)
        for step in range(count):
            index = (self._next_drain + step) % count
            tp = self._assigned[index]
            buffer = self._buffers.get(tp)
            if not buffer:
                corrupt = self._corrupt.get(tp)
                if corrupt is None:
                    continue
                if out:
                    # Kafka's FetchCollector: what this poll collected is returned; the
                    # next poll starts here and raises.
                    self._next_drain = index
                    break
                # The poll after this one serves the other partitions first, so one
                # stopped partition cannot starve them while the application decides.
                self._next_drain = (index + 1) % count
                raise corrupt
            take = min(limit - len(out), len(buffer))
            if take == len(buffer):
                out.extend(buffer)
                buffer.clear()
            else:
                out.extend(buffer.popleft() for _ in range(take))
            # An emptied buffer means everything before the fetch position was returned
            # or skipped (control batches), so the position moves there.
            self._positions[tp] = (self._fetch_next.get(tp, out[-1].offset + 1) if not buffer
                                   else out[-1].offset + 1)
            self._next_drain = (index + 1) % count
            if len(out) >= limit:
                break
        return out

    def _send_fetches(self, deadline: float) -> None:
        """Send a Fetch to each leader for its partitions that have no Fetch in flight and
        at most one answer's worth of records buffered (never blocks on the answers).

        Double buffering: while the application works through one answer, the next one
        is on its way, so the consumer does not wait for a round trip per answer. A
        partition holds at most about two answers (2 x ``max.partition.fetch.bytes``)
        plus the one in flight; one with less than ``max.poll.records`` buffered is
        always fetched.
        """
        now = _now()
        self.metadata.maybe_refresh(deadline=max(deadline, now + 1.0))
        busy = {tp for _future, parts in self._in_flight.values() for tp in parts}
        floor = self.config.max_poll_records
        fetched = self._fetched_records
        fetchable = [tp for tp in self._assigned
                     if tp not in busy and tp not in self._corrupt
                     and self._backoff_until.get(tp, 0) <= now
                     and len(self._buffers.get(tp) or ()) <= max(floor - 1, fetched.get(tp, 0))]
        unresolved = [tp for tp in fetchable if tp not in self._positions]
        if unresolved:
            try:
                self._resolve_resets(unresolved, max(deadline, now + 1.0))
            except client_errors.ClientTimeoutError:
                for tp in unresolved:
                    self._backoff_until[tp] = _now() + self.config.retry_backoff_ms / 1000
        by_slot: dict[tuple[str, bool], list[tuple[TopicPartition, int]]] = {}
        for tp in fetchable:
            if tp not in self._fetch_next:
                continue
            leader = self.metadata.leader(tp)
            if leader is None:
                self.metadata.request_update()
                self._backoff_until[tp] = _now() + self.config.retry_backoff_ms / 1000
                continue
            # A partition read up to its last known high watermark goes in a Fetch of its
            # own: the broker holds that one until new data comes, and it must not keep
            # the partitions behind it on the same broker waiting.
            hw = self._high_watermarks.get(tp)
            slot = (leader.address, hw is not None and self._fetch_next[tp] >= hw)
            if slot not in self._in_flight:
                by_slot.setdefault(slot, []).append((tp, leader.leader_epoch))
        for slot, tps in by_slot.items():
            self._send_fetch(slot, tps, self.config.fetch_max_wait_ms)

    def _send_fetch(self, slot: tuple[str, bool], tps: Sequence[tuple[TopicPartition, int]],
                    max_wait_ms: int) -> None:
        """One Fetch to ``slot``'s broker address for ``tps`` (partition, leader epoch from
        metadata).

        The epoch lets the broker fence a client with stale metadata
        (FENCED_LEADER_EPOCH) or one ahead of it (UNKNOWN_LEADER_EPOCH), KIP-320.
        """
        offsets = {tp: self._fetch_next[tp] for tp, _epoch in tps}
        topics: dict[str, list[broker_pb2.FetchRequest.FetchPartition]] = {}
        for tp, epoch in tps:
            topics.setdefault(tp.topic, []).append(broker_pb2.FetchRequest.FetchPartition(
                partition=tp.partition, current_leader_epoch=epoch, fetch_offset=offsets[tp],
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=self.config.max_partition_fetch_bytes))
        request = broker_pb2.FetchRequest(
            replica_id=-1, replica_epoch=-1, max_wait_ms=max_wait_ms,
            min_bytes=self.config.fetch_min_bytes, max_bytes=self.config.fetch_max_bytes,
            topics=[broker_pb2.FetchRequest.FetchTopic(topic=name, partitions=parts)
                    for name, parts in topics.items()])
        future = self._channels.raw_fetch(slot[0]).future(
            request, timeout=max_wait_ms / 1000 + self.config.request_timeout_ms / 1000)
        self._in_flight[slot] = (future, offsets)

        def wake(_done: grpc.Future) -> None:
            with self._wakeup:
                self._wakeup.notify_all()

        future.add_done_callback(wake)

    def _wait_for_any(self, deadline: float) -> None:
        """Wait until a Fetch in flight is answered (or ``deadline``), then take the answers."""
        with self._wakeup:
            while not any(f.done() for f, _p in self._in_flight.values()):
                remaining = deadline - _now()
                if remaining <= 0:
                    return
                self._wakeup.wait(remaining)
        self._handle_completed()

    def _handle_completed(self) -> None:
        for slot in [a for a, (f, _p) in self._in_flight.items() if f.done()]:
            future, offsets = self._in_flight.pop(slot)
            self._handle_fetch(slot[0], future, offsets)

    def _handle_fetch(self, address: str, future: grpc.Future,
                      offsets: Mapping[TopicPartition, int]) -> None:
        backoff = _now() + self.config.retry_backoff_ms / 1000
        try:
            data: bytes = future.result()
            # The answer's bytes, read in place (fetch_wire): no copy of the records.
            answer = fetch_wire.parse_fetch_response(data)
        except grpc.RpcError as exc:
            del exc
            self.metadata.report_unreachable(address)
            for tp in offsets:
                self._backoff_until[tp] = backoff
            return
        except grpc.FutureCancelledError:
            return
        except ValueError as exc:
            logger.warning("Fetch answer from %s is not a FetchResponse: %s", address, exc)
            self.metadata.report_unreachable(address)
            for tp in offsets:
                self._backoff_until[tp] = backoff
            return
        if client_errors.code_of(answer.error_code) is not ErrorCode.NONE:
            self.metadata.request_update()
            for tp in offsets:
                self._backoff_until[tp] = backoff
            return
        for part in answer.partitions:
            tp = TopicPartition(topic=part.topic, partition=part.partition_index)
            fetched_at = offsets.get(tp)
            if fetched_at is None or self._fetch_next.get(tp) != fetched_at:
                continue  # not asked, or seeked away while the fetch was in flight
            code = client_errors.code_of(part.error_code)
            if code is ErrorCode.NONE:
                self._high_watermarks[tp] = part.high_watermark
                if part.records_end > part.records_start:
                    self._buffer(tp, fetched_at, data, part.records_start, part.records_end)
            elif code is ErrorCode.OFFSET_OUT_OF_RANGE:
                self._on_out_of_range(tp, fetched_at)
            elif client_errors.is_retriable(code) or client_errors.needs_metadata_refresh(code):
                self.metadata.request_update()
                if part.current_leader is not None and self.metadata.apply_leader_hint(
                        tp, part.current_leader):
                    continue  # the new leader is known: fetch from it at once
                self._backoff_until[tp] = backoff
            else:
                raise client_errors.error_for(code, part.error_message, topic=tp.topic,
                                              context=f"Fetch {tp} from {address}")

    def _on_out_of_range(self, tp: TopicPartition, offset: int) -> None:
        policy = self.config.auto_offset_reset
        if policy is OffsetReset.NONE:
            raise client_errors.OffsetOutOfRangeError(
                f"fetch offset {offset} of {tp} is out of range and auto.offset.reset=none",
                offsets={tp: offset})
        del self._positions[tp]
        del self._fetch_next[tp]
        self._buffers.pop(tp, None)
        self._resets[tp] = _Reset.EARLIEST if policy is OffsetReset.EARLIEST else _Reset.LATEST

    def _buffer(self, tp: TopicPartition, position: int, data: bytes, start: int,
                end: int) -> None:
        """Decode the records of ``data[start:end]`` (a Fetch answer's range for ``tp``)
        from ``position`` on and queue them."""
        topic, partition = tp.topic, tp.partition
        last: bh.BatchHeader | None = None
        bad: bh.BatchHeader | None = None
        fetched: list[ConsumerRecord] = []
        try:
            # A Fetch answer may end in a partial batch (cut at the byte limit, as Kafka's
            # consumer tolerates): iter_batches stops before it.
            for batch in bh.iter_batches(data, start, end):
                bad = batch
                if batch.is_control or batch.last_offset < position:
                    batch.validate()
                else:
                    records = rb.decode_batch_records(batch, ConsumerRecord, (
                        topic, partition, batch.timestamp_type, batch.partition_leader_epoch))
                    if batch.base_offset < position:  # the fetch started inside this batch
                        records = [r for r in records if r.offset >= position]
                    fetched.extend(records)
                bad = None
                last = batch
        except CorruptRecordError as exc:
            self._stop_at_corrupt_batch(tp, position, last, bad, str(exc))
        else:
            if last is None and end - start >= bh.LOG_OVERHEAD:
                # Brokers send whole batches only, at least one (KIP-74): bytes without a
                # whole batch are one whose length field lies.
                declared = bh.LOG_OVERHEAD + bh.FRAME.unpack_from(data, start)[1]
                self._stop_at_corrupt_batch(
                    tp, position, None, None,
                    f"the batch at offset {position} declares {declared} bytes, but the Fetch "
                    f"answer holds only {end - start}: its length is corrupt")
        buffer = self._buffers.get(tp)
        if buffer is None:
            buffer = self._buffers[tp] = deque()
        buffer.extend(fetched)
        self._fetched_records[tp] = len(fetched)
        if last is not None:
            self._fetch_next[tp] = max(position, last.next_offset)
        if not buffer:
            # Only control batches or records before the position (or a corrupt batch at
            # once): the position moves to where the next read starts.
            self._positions[tp] = self._fetch_next[tp]

    def _stop_at_corrupt_batch(self, tp: TopicPartition, position: int,
                               last: bh.BatchHeader | None, bad: bh.BatchHeader | None,
                               cause: str) -> None:
        """Hold ``tp`` at the first batch of a Fetch answer that does not decode (the good
        ones before it are buffered by the caller): its position stops there and the
        error waits in ``_corrupt`` for the poll that drains the buffer."""
        offset = position if last is None else max(position, last.next_offset)
        # The header's offsets lie outside the CRC: trust them only when they agree with
        # where the batch must start.
        skip_to = (bad.next_offset if bad is not None and bad.base_offset <= offset < bad.next_offset
                   else None)
        if last is None:
            self._fetch_next[tp] = offset
        self._corrupt[tp] = client_errors.CorruptRecordBatchError(tp, offset, skip_to, cause)
        logger.warning("consumer partition=%s event=corrupt_batch offset=%d next_offset=%s "
                       "error=%r", tp, offset, skip_to, cause)
