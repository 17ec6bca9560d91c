"""The group coordinator's asyncio task: load, commit, fetch and expire offsets in ``__consumer_offsets``.

Owns :class:`GroupCoordinatorDriver`, the edge around the pure
:class:`~kraftlog.broker.group_coordinator.GroupCoordinatorState`:

* FindCoordinator: the leader of the group's ``__consumer_offsets`` partition from the
  metadata image; the first lookup asks the active controller to create the topic
  (``offsets.topic.num.partitions`` partitions, ``offsets.topic.replication.factor``
  replicas or as many as there are live brokers, with a warning; configs
  ``cleanup.policy=compact``, ``compression.type=producer``,
  ``segment.bytes=offsets.topic.segment.bytes``) and answers COORDINATOR_NOT_AVAILABLE
  until the partition has a leader;
* Kafka's ``onElection`` / ``onResignation``: a metadata publisher that wakes the task, which
  compares the ``__consumer_offsets`` partitions led here with those it owns (and every
  :data:`SYNC_INTERVAL_S`): a partition newly led is loaded (its log read from the log
  start to the log end in ``offsets.load.buffer.size`` reads, decoded and replayed in
  :data:`LOAD_SLICE_BYTES` slices with the event loop running between them), one no
  longer led is unloaded; each load and unload is one INFO line
  with counts and time;
* OffsetCommit: one batch (``offsets.topic.compression.codec``, none by default) of
  OffsetCommitKey/Value records appended on the partition leader with acks=all; the
  answer (and the cache update) waits until the high watermark passes it, or
  REQUEST_TIMED_OUT after ``offsets.commit.timeout.ms``;
* OffsetFetch from the cache (only acknowledged commits are there);
* expiration: every ``offsets.retention.check.interval.ms``, offsets committed more than
  ``offsets.retention.minutes`` ago get a tombstone (acks=all) and leave the cache.

Callers: :mod:`kraftlog.server.broker_server` (wiring), :mod:`kraftlog.broker.server` (the
RPC handlers). Edge module: asyncio and the clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kraftlog import config as kconfig
from kraftlog.broker import data_plane
from kraftlog.broker import group_coordinator as gc
from kraftlog.broker import group_offsets as go
from kraftlog.broker import replica_manager as rm
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import ConfigError, KraftlogError
from kraftlog.ids import TopicPartition
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.storage.compression import CompressionType
from kraftlog.v1 import controller_pb2

logger = logging.getLogger(__name__)

SYNC_INTERVAL_S = 0.5
"""Upper bound between two comparisons of led and owned partitions."""
LOAD_SLICE_BYTES = 64 * 1024
"""A load decodes and replays this much of a read, then lets the event loop run."""
CREATE_TOPIC_TIMEOUT_MS = 10_000
CREATE_RETRY_BACKOFF_S = 1.0

_I = kconfig.ConfigType.INT
_LONG = kconfig.ConfigType.LONG
CONFIG_KEYS = (
    kconfig.ConfigKey(name="offsets.topic.num.partitions", type=_I,
                      default=go.DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS,
                      validator=kconfig.at_least(1),
                      doc="partitions of __consumer_offsets when this broker creates it"),
    kconfig.ConfigKey(name="offsets.topic.replication.factor", type=_I,
                      default=go.DEFAULT_OFFSETS_TOPIC_REPLICATION_FACTOR,
                      validator=kconfig.at_least(1),
                      doc="replicas of __consumer_offsets (fewer, with a warning, when fewer "
                          "brokers are alive at creation)"),
    kconfig.ConfigKey(name="offsets.topic.segment.bytes", type=_I,
                      default=go.DEFAULT_OFFSETS_TOPIC_SEGMENT_BYTES,
                      validator=kconfig.at_least(1),
                      doc="segment.bytes of __consumer_offsets, bytes"),
    kconfig.ConfigKey(name="offsets.retention.minutes", type=_I,
                      default=go.DEFAULT_OFFSETS_RETENTION_MINUTES, validator=kconfig.at_least(1),
                      doc="minutes after its commit that a committed offset expires"),
    kconfig.ConfigKey(name="offsets.retention.check.interval.ms", type=_LONG,
                      default=go.DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS,
                      validator=kconfig.at_least(1), doc="ms between expired-offset passes"),
    kconfig.ConfigKey(name="offsets.load.buffer.size", type=_I,
                      default=go.DEFAULT_OFFSETS_LOAD_BUFFER_SIZE, validator=kconfig.at_least(1),
                      doc="bytes read per step when loading a __consumer_offsets partition"),
    kconfig.ConfigKey(name="offsets.commit.timeout.ms", type=_I,
                      default=go.DEFAULT_OFFSETS_COMMIT_TIMEOUT_MS, validator=kconfig.at_least(1),
                      doc="ms an offset commit waits for every in-sync replica"),
    kconfig.ConfigKey(name="offsets.topic.compression.codec", type=_I, default=0,
                      validator=kconfig.at_least(0),
                      doc="codec of the coordinator's batches: 0 none, 1 gzip, 3 lz4, 4 zstd"),
    kconfig.ConfigKey(name="offset.metadata.max.bytes", type=_I,
                      default=go.DEFAULT_OFFSET_METADATA_MAX_BYTES, validator=kconfig.at_least(0),
                      doc="largest metadata string of an offset commit, bytes"),
)
"""The broker settings of the offsets coordinator (Kafka's names and defaults)."""


def config_from(cfg: kconfig.Config) -> gc.GroupCoordinatorConfig:
    """The coordinator's settings from a broker config holding :data:`CONFIG_KEYS`."""
    return gc.GroupCoordinatorConfig(
        offsets_topic_num_partitions=cfg.get_int("offsets.topic.num.partitions"),
        offsets_topic_replication_factor=cfg.get_int("offsets.topic.replication.factor"),
        offsets_topic_segment_bytes=cfg.get_int("offsets.topic.segment.bytes"),
        offsets_retention_ms=cfg.get_int("offsets.retention.minutes") * 60_000,
        offsets_retention_check_interval_ms=cfg.get_int("offsets.retention.check.interval.ms"),
        offsets_load_buffer_size=cfg.get_int("offsets.load.buffer.size"),
        offsets_commit_timeout_ms=cfg.get_int("offsets.commit.timeout.ms"),
        offset_metadata_max_bytes=cfg.get_int("offset.metadata.max.bytes"),
        offsets_topic_compression_codec=_codec(cfg.get_int("offsets.topic.compression.codec")))


def _codec(value: int) -> CompressionType:
    try:
        codec = CompressionType(value)
    except ValueError:
        codec = CompressionType.SNAPPY
    if codec is CompressionType.SNAPPY:
        raise ConfigError(f"offsets.topic.compression.codec={value}: use 0 (none), 1 (gzip), "
                          "3 (lz4) or 4 (zstd); snappy is not supported")
    return codec


CreateTopics = Callable[[controller_pb2.CreateTopicsRequest, float], Awaitable[Any]]
"""(request, deadline as time.monotonic()) -> CreateTopicsResponse from the active controller."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorAnswer:
    """One FindCoordinator key's answer."""

    key: str
    error: ErrorCode
    message: str = ""
    node_id: int = -1
    host: str = ""
    port: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupAnswer:
    """OffsetCommit / OffsetFetch outcome: a group-wide error, or per-partition answers."""

    error: ErrorCode
    message: str = ""
    coordinator_partition: int = -1
    """The group's __consumer_offsets partition (for the coordinator hint)."""
    partitions: dict[tuple[str, int], tuple[ErrorCode, str]] = dataclasses.field(
        default_factory=dict)
    """OffsetCommit: every requested partition's outcome."""
    offsets: dict[TopicPartition, go.OffsetAndMetadata | None] = dataclasses.field(
        default_factory=dict)
    """OffsetFetch: the committed offsets (None: none committed)."""


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _slices(data: bytes, size: int) -> Iterator[memoryview]:
    """``data`` (whole batches) cut at batch boundaries into pieces of about ``size`` bytes."""
    view = memoryview(data)
    start = end = 0
    for header in bh.iter_batches(view):
        end = header.position + header.size_in_bytes
        if end - start >= size:
            yield view[start:end]
            start = end
    if end > start:
        yield view[start:end]


class GroupCoordinatorDriver:
    """Committed offsets of the groups this broker coordinates. See the module docstring."""

    def __init__(self, *, broker_id: int, data: data_plane.DataPlane,
                 image: Callable[[], im.MetadataImage], listener_name: str,
                 config: gc.GroupCoordinatorConfig, create_topics: CreateTopics | None = None,
                 now_ms: Callable[[], int] = wall_ms) -> None:
        self.broker_id = broker_id
        self.data = data
        self._image = image
        self.listener_name = listener_name
        self.config = config
        self._create_topics = create_topics
        self._now_ms = now_ms
        self.state = gc.GroupCoordinatorState(broker_id=broker_id, config=config)
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._create: asyncio.Task[None] | None = None
        self._expiry: asyncio.Task[int] | None = None
        self._create_after = 0.0
        self._pending: dict[go.OffsetKey, int] = {}
        """Keys with a commit appended but not yet acknowledged (expiry leaves them alone)."""

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name="broker-group-coordinator")

    async def wait(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        tasks: list[asyncio.Task[Any]] = [
            t for t in (self._task, self._create, self._expiry, *self._loads.values())
            if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loads.clear()

    def on_metadata_update(self, delta: dl.MetadataDelta, image: im.MetadataImage) -> None:
        """MetadataPublisher: registered after the reconciler's, so the replicas have moved."""
        del delta, image
        self._wakeup.set()

    def wake(self) -> None:
        self._wakeup.set()

    async def _run(self) -> None:
        next_expiry = time.monotonic() + self.config.offsets_retention_check_interval_ms / 1000
        while True:
            expiry = self._expiry
            if expiry is not None and expiry.done() and not expiry.cancelled():
                self._expiry = None
                failure = expiry.exception()
                if failure is not None:
                    raise failure  # an invariant broke: the broker stops, loudly
            self.sync()
            if time.monotonic() >= next_expiry:
                next_expiry = (time.monotonic()
                               + self.config.offsets_retention_check_interval_ms / 1000)
                if self._expiry is None or self._expiry.done():
                    # Its own task: its acks=all appends must not hold up immigration.
                    self._expiry = asyncio.get_running_loop().create_task(
                        self.expire_offsets(), name="broker-group-offsets-expiry")
            self._wakeup.clear()
            wait_s = max(0.0, min(SYNC_INTERVAL_S, next_expiry - time.monotonic()))
            try:
                async with asyncio.timeout(wait_s):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    # -- immigration / emigration -------------------------------------------------------------

    def _leading(self) -> dict[int, int]:
        # The offsets topic's partitions from the image, each looked up here: walking every
        # hosted replica was 8% of an idle 10,000-partition broker (issue 16).
        manager = self.data.manager
        leading: dict[int, int] = {}
        topic = self._image().topics.get_topic_by_name(go.GROUP_METADATA_TOPIC_NAME)
        if topic is None:
            return leading
        for index in topic.partitions:
            tp = TopicPartition(topic=go.GROUP_METADATA_TOPIC_NAME, partition=index)
            partition = manager.get_partition(tp)
            if (partition is not None and partition.is_leader
                    and manager.replica_state(tp) is rm.ReplicaState.ONLINE_REPLICA):
                leading[index] = partition.leader_epoch
        return leading

    def sync(self) -> None:
        """Converge the owned partitions on those led here (load new ones, unload lost ones)."""
        topic = self._image().topics.get_topic_by_name(go.GROUP_METADATA_TOPIC_NAME)
        if topic is not None:
            self.state.set_partition_count(len(topic.partitions))
        now_ms = self._now_ms()
        started = time.monotonic()
        plan = self.state.plan(self._leading(), now_ms=now_ms)
        for owned in plan.unloaded:
            load = self._loads.pop(owned.partition, None)
            if load is not None:
                load.cancel()
            logger.info("broker=%d partition=%s-%d event=group_offsets_unloaded leader_epoch=%d "
                        "state=%s groups=%d offsets=%d owned_ms=%d elapsed_ms=%.1f",
                        self.broker_id, go.GROUP_METADATA_TOPIC_NAME, owned.partition,
                        owned.leader_epoch, owned.state.value, owned.cache.group_count,
                        owned.cache.offset_count, now_ms - owned.load_started_ms,
                        (time.monotonic() - started) * 1000)
        for partition, epoch in plan.load:
            logger.info("broker=%d partition=%s-%d event=group_offsets_loading leader_epoch=%d",
                        self.broker_id, go.GROUP_METADATA_TOPIC_NAME, partition, epoch)
            previous = self._loads.pop(partition, None)
            if previous is not None:
                previous.cancel()
            self._loads[partition] = asyncio.get_running_loop().create_task(
                self._load(partition, epoch),
                name=f"broker-group-load-{go.GROUP_METADATA_TOPIC_NAME}-{partition}")

    async def _load(self, index: int, leader_epoch: int) -> None:
        owned = self.state.loading(index, leader_epoch)
        if owned is None:
            return
        started = time.monotonic()
        tp = TopicPartition(topic=go.GROUP_METADATA_TOPIC_NAME, partition=index)
        records = tombstones = skipped = 0
        try:
            partition = self.data.manager.get_partition(tp)
            if partition is None:
                raise KraftlogError(f"{tp} is not hosted here")
            log = partition.log
            start, end = log.log_start_offset, log.log_end_offset
            offset = start
            while offset < end:
                data = log.read(offset, self.config.offsets_load_buffer_size,
                                min_one_message=True)
                if not data.records or data.next_offset <= offset:
                    break
                for piece in _slices(data.records, LOAD_SLICE_BYTES):
                    summary = owned.cache.replay_batches(rb.decode_batches(piece))
                    records += summary.records
                    tombstones += summary.tombstones
                    skipped += summary.skipped
                    await asyncio.sleep(0)  # heartbeats and requests run between slices
                    if self.state.loading(index, leader_epoch) is not owned:
                        return  # unloaded or superseded meanwhile
                offset = data.next_offset
        except asyncio.CancelledError:
            raise
        except (KraftlogError, OSError, ValueError) as exc:
            logger.error("broker=%d partition=%s event=group_offsets_load_failed leader_epoch=%d "
                         "error=%r", self.broker_id, tp, leader_epoch, str(exc))
            self.state.fail_load(owned)
            return
        finally:
            if self._loads.get(index) is asyncio.current_task():
                del self._loads[index]
        if self.state.complete_load(owned):
            logger.info("broker=%d partition=%s event=group_offsets_loaded leader_epoch=%d "
                        "groups=%d offsets=%d records=%d tombstones=%d skipped=%d "
                        "log_start_offset=%d log_end_offset=%d elapsed_ms=%d", self.broker_id,
                        tp, leader_epoch, owned.cache.group_count, owned.cache.offset_count,
                        records, tombstones, skipped, start, end,
                        (time.monotonic() - started) * 1000)

    # -- FindCoordinator ----------------------------------------------------------------------

    def find_coordinator(self, keys: Sequence[str]) -> list[CoordinatorAnswer]:
        image = self._image()
        topic = image.topics.get_topic_by_name(go.GROUP_METADATA_TOPIC_NAME)
        if topic is None:
            self._maybe_create_topic(image)
        else:
            self.state.set_partition_count(len(topic.partitions))
        answers = []
        for key in keys:
            if not key:
                answers.append(CoordinatorAnswer(key=key, error=ErrorCode.INVALID_REQUEST,
                                                 message="the group id must not be empty"))
                continue
            partition = self.state.partition_for(key)
            if topic is None:
                answers.append(CoordinatorAnswer(
                    key=key, error=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    message=f"{go.GROUP_METADATA_TOPIC_NAME} is being created; retry"))
                continue
            registration = topic.partition(partition)
            broker = (image.cluster.broker(registration.leader)
                      if registration is not None and registration.has_leader else None)
            endpoint = broker.endpoint(self.listener_name) if broker is not None else None
            if registration is None or endpoint is None or not image.cluster.is_active(
                    registration.leader):
                answers.append(CoordinatorAnswer(
                    key=key, error=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    message=f"{go.GROUP_METADATA_TOPIC_NAME}-{partition} has no live leader"))
                continue
            answers.append(CoordinatorAnswer(key=key, error=ErrorCode.NONE,
                                             node_id=registration.leader, host=endpoint.host,
                                             port=endpoint.port))
        return answers

    def _maybe_create_topic(self, image: im.MetadataImage) -> None:
        if (self._create is not None or self._create_topics is None
                or time.monotonic() < self._create_after):
            return
        self._create = asyncio.get_running_loop().create_task(
            self._create_topic(image), name="broker-create-offsets-topic")

    async def _create_topic(self, image: im.MetadataImage) -> None:
        assert self._create_topics is not None
        try:
            live = len(image.cluster.unfenced_broker_ids())
            wanted = self.config.offsets_topic_replication_factor
            replication_factor = max(1, min(wanted, live))
            if replication_factor < wanted:
                # Kafka refuses instead (INVALID_REPLICATION_FACTOR until enough brokers are
                # alive, FindCoordinator answering COORDINATOR_NOT_AVAILABLE meanwhile).
                logger.warning("broker=%d event=offsets_topic_replication_factor_reduced "
                               "offsets.topic.replication.factor=%d live_brokers=%d using=%d",
                               self.broker_id, wanted, live, replication_factor)
            request = controller_pb2.CreateTopicsRequest(
                timeout_ms=CREATE_TOPIC_TIMEOUT_MS, topics=[
                    controller_pb2.CreateTopicsRequest.CreatableTopic(
                        name=go.GROUP_METADATA_TOPIC_NAME,
                        num_partitions=self.config.offsets_topic_num_partitions,
                        replication_factor=replication_factor, configs=[
                            controller_pb2.CreateTopicsRequest.CreatableTopicConfig(
                                name=name, value=value) for name, value in (
                                ("cleanup.policy", "compact"),
                                ("compression.type", "producer"),
                                ("segment.bytes", str(self.config.offsets_topic_segment_bytes)))])])
            try:
                answer = await self._create_topics(
                    request, time.monotonic() + CREATE_TOPIC_TIMEOUT_MS / 1000)
            except TimeoutError:
                logger.warning("broker=%d event=offsets_topic_create_failed error=REQUEST_TIMED_OUT",
                               self.broker_id)
                self._create_after = time.monotonic() + CREATE_RETRY_BACKOFF_S
                return
            code = ErrorCode(answer.error.code)
            results = list(answer.topics)
            if code is ErrorCode.NONE and results:
                code = ErrorCode(results[0].error.code)
            message = answer.error.message or (results[0].error.message if results else "")
            if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                logger.info("broker=%d event=offsets_topic_created topic=%s partitions=%d "
                            "replication_factor=%d result=%s", self.broker_id,
                            go.GROUP_METADATA_TOPIC_NAME,
                            self.config.offsets_topic_num_partitions, replication_factor,
                            code.name)
            else:
                logger.warning("broker=%d event=offsets_topic_create_failed error=%s message=%r",
                               self.broker_id, code.name, message)
                self._create_after = time.monotonic() + CREATE_RETRY_BACKOFF_S
        finally:
            self._create = None

    # -- OffsetCommit / OffsetFetch -----------------------------------------------------------

    def _partition_exists(self, tp: TopicPartition) -> bool:
        topic = self._image().topics.get_topic_by_name(tp.topic)
        return topic is not None and topic.partition(tp.partition) is not None

    async def commit_offsets(self, group_id: str, entries: Sequence[gc.CommitEntry], *,
                             generation_id: int | None = None, member_id: str = ""
                             ) -> GroupAnswer:
        code, message = gc.check_group(group_id, generation_id=generation_id,
                                       member_id=member_id)
        if code is not ErrorCode.NONE:
            return GroupAnswer(error=code, message=message)
        lookup = self.state.lookup(group_id)
        if lookup.error is not ErrorCode.NONE or lookup.owned is None:
            return GroupAnswer(error=lookup.error, message=lookup.message,
                               coordinator_partition=lookup.partition)
        owned = lookup.owned
        check = gc.validate_commit(entries, metadata_max_bytes=self.config.offset_metadata_max_bytes,
                                   partition_exists=self._partition_exists)
        outcome: dict[tuple[str, int], tuple[ErrorCode, str]] = dict(check.errors)
        if check.accepted:
            now_ms = self._now_ms()
            values = {tp: go.OffsetAndMetadata(offset=e.offset, leader_epoch=e.leader_epoch,
                                               metadata=e.metadata, commit_timestamp_ms=now_ms)
                      for tp, e in check.accepted.items()}
            keys = {tp: go.OffsetKey(group=group_id, topic=tp.topic, partition=tp.partition)
                    for tp in values}
            error, error_message, base_offset = await self._append(
                lookup.partition, [go.commit_record(keys[tp], v) for tp, v in values.items()],
                keys.values(), now_ms)
            if error is ErrorCode.NONE and self.state.is_current(owned):
                for index, (tp, value) in enumerate(values.items()):
                    owned.cache.put(group_id, tp, dataclasses.replace(
                        value, record_offset=base_offset + index))
            for tp in values:
                outcome[(tp.topic, tp.partition)] = (error, error_message)
        return GroupAnswer(error=ErrorCode.NONE, coordinator_partition=lookup.partition,
                           partitions=outcome)

    async def _append(self, index: int, records: list[rb.RecordInput],
                      keys: Iterable[go.OffsetKey], now_ms: int) -> tuple[ErrorCode, str, int]:
        """Append ``records`` to ``__consumer_offsets-index`` with acks=all; (error, message,
        base offset). Errors are mapped as Kafka maps them for commits."""
        tp = TopicPartition(topic=go.GROUP_METADATA_TOPIC_NAME, partition=index)
        try:
            batch = rb.build_batch(records, now_ms=now_ms,
                                   compression=self.config.offsets_topic_compression_codec)
        except ValueError as exc:
            return ErrorCode.INVALID_COMMIT_OFFSET_SIZE, str(exc), -1
        held = list(keys)
        for key in held:
            self._pending[key] = self._pending.get(key, 0) + 1
        try:
            results = await self.data.produce(
                {tp: batch}, acks=-1, timeout_ms=self.config.offsets_commit_timeout_ms)
        finally:
            for key in held:
                left = self._pending[key] - 1
                if left:
                    self._pending[key] = left
                else:
                    del self._pending[key]
        result = results[tp]
        if result.error is ErrorCode.NONE:
            return ErrorCode.NONE, "", result.base_offset
        error = gc.commit_error_for_append(result.error)
        return error, f"{tp} append answered {result.error.name}: {result.error_message}", -1

    def fetch_offsets(self, group_id: str, partitions: Sequence[TopicPartition] | None
                      ) -> GroupAnswer:
        if not group_id:
            return GroupAnswer(error=ErrorCode.INVALID_GROUP_ID,
                               message="the group id must not be empty")
        lookup = self.state.lookup(group_id)
        if lookup.error is not ErrorCode.NONE or lookup.owned is None:
            return GroupAnswer(error=lookup.error, message=lookup.message,
                               coordinator_partition=lookup.partition)
        return GroupAnswer(error=ErrorCode.NONE, coordinator_partition=lookup.partition,
                           offsets=lookup.owned.cache.offsets(group_id, partitions))

    # -- expiration ---------------------------------------------------------------------------

    async def expire_offsets(self) -> int:
        """Tombstone every offset older than ``offsets.retention.minutes``; how many went."""
        removed = 0
        for owned in self.state.owned().values():
            if not self.state.is_current(owned):
                continue
            now_ms = self._now_ms()
            expired = [(key, record_offset) for key, record_offset in owned.cache.expired(
                now_ms=now_ms, retention_ms=self.config.offsets_retention_ms)
                if key not in self._pending]
            if not expired:
                continue
            started = time.monotonic()
            error, message, base_offset = await self._append(
                owned.partition, [go.commit_record(key, None) for key, _ in expired],
                [key for key, _ in expired], now_ms)
            if error is not ErrorCode.NONE:
                logger.warning("broker=%d partition=%s-%d event=group_offsets_expire_failed "
                               "error=%s message=%r", self.broker_id,
                               go.GROUP_METADATA_TOPIC_NAME, owned.partition, error.name, message)
                continue
            if not self.state.is_current(owned):
                continue
            for index, (key, _record_offset) in enumerate(expired):
                if owned.cache.delete(key.group, TopicPartition(topic=key.topic,
                                                                partition=key.partition),
                                      record_offset=base_offset + index):
                    removed += 1
            logger.info("broker=%d partition=%s-%d event=group_offsets_expired offsets=%d "
                        "retention_ms=%d elapsed_ms=%d", self.broker_id,
                        go.GROUP_METADATA_TOPIC_NAME, owned.partition, len(expired),
                        self.config.offsets_retention_ms, (time.monotonic() - started) * 1000)
        return removed
