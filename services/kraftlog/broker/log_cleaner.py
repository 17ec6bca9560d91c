"""The broker's log cleaner: which replicas to compact, when, and the ``cleaner-offset-checkpoint`` files.

Owned here (Kafka's LogCleaner thread loop + LogCleanerManager bookkeeping):
the broker's ``log.cleanup.policy`` / ``log.cleaner.*`` settings, the choice
of the replica logs whose effective ``cleanup.policy`` contains ``compact``
(topic config over the dynamic broker config over the static one), the
per-log-dir checkpoint of where each partition's clean section ends, the
filthiest-first order, the backoff when nothing is due, and the logs that
failed and are left alone until restart (Kafka's "uncleanable" partitions).
The compaction itself is :mod:`kraftlog.storage.cleaner`.

Called from the broker process's periodic task in three steps: :meth:`LogCleaner.plan`
on the event loop thread that owns every partition log (which logs are due, a
snapshot of their segments), :func:`prepare` in a worker thread (the decoding,
filtering and writing of ``.cleaned`` files: seconds for a large dirty section,
which must not stall the loop), then :meth:`LogCleaner.commit` back on the loop
(checks the segments did not change meanwhile, swaps, writes the checkpoint).
:meth:`LogCleaner.maybe_clean` does all three on one thread (tests). Every
replica cleans its own copy below its own high watermark, as in Kafka. Pure: no
clock (``now_ms`` comes in), no asyncio, no threads of its own.
"""

from __future__ import annotations

import logging
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kraftlog import config as kconfig
from kraftlog.broker import partition as partition_mod
from kraftlog.errors import KraftlogError
from kraftlog.ids import TopicPartition, parse_dir_name
from kraftlog.metadata import image as im
from kraftlog.storage import checkpoint, cleaner

logger = logging.getLogger(__name__)

DEFAULT_BACKOFF_MS = 15_000

CONFIG_KEYS = (
    kconfig.ConfigKey(name="log.cleanup.policy", type=kconfig.ConfigType.LIST, default=["delete"],
                      validator=kconfig.one_of("delete", "compact"),
                      doc="default cleanup.policy of topics that set none: delete and/or compact"),
    kconfig.ConfigKey(name="log.cleaner.enable", type=kconfig.ConfigType.BOOLEAN, default=True,
                      doc="run the log cleaner (compaction of cleanup.policy=compact topics)"),
    kconfig.ConfigKey(name="log.cleaner.backoff.ms", type=kconfig.ConfigType.LONG, default=DEFAULT_BACKOFF_MS,
                      validator=kconfig.at_least(0), doc="ms the cleaner sleeps when no log is due"),
    kconfig.ConfigKey(name="log.cleaner.min.cleanable.ratio", type=kconfig.ConfigType.DOUBLE,
                      default=cleaner.DEFAULT_MIN_CLEANABLE_DIRTY_RATIO, validator=kconfig.between(0, 1),
                      doc="default min.cleanable.dirty.ratio: dirty / cleanable bytes that make a log due"),
    kconfig.ConfigKey(name="log.cleaner.delete.retention.ms", type=kconfig.ConfigType.LONG,
                      default=cleaner.DEFAULT_DELETE_RETENTION_MS, validator=kconfig.at_least(0),
                      doc="default delete.retention.ms: ms a tombstone outlives the cleaning that kept it"),
    kconfig.ConfigKey(name="log.cleaner.min.compaction.lag.ms", type=kconfig.ConfigType.LONG,
                      default=cleaner.DEFAULT_MIN_COMPACTION_LAG_MS, validator=kconfig.at_least(0),
                      doc="default min.compaction.lag.ms: ms a record stays uncompacted"),
    kconfig.ConfigKey(name="log.cleaner.max.compaction.lag.ms", type=kconfig.ConfigType.LONG,
                      default=cleaner.DEFAULT_MAX_COMPACTION_LAG_MS, validator=kconfig.at_least(1),
                      doc="default max.compaction.lag.ms: ms after which a dirty segment is cleaned "
                          "whatever the ratio"),
    kconfig.ConfigKey(name="log.cleaner.dedupe.buffer.size", type=kconfig.ConfigType.LONG,
                      default=cleaner.DEFAULT_DEDUPE_BUFFER_SIZE, validator=kconfig.at_least(1024),
                      doc="bytes of key -> offset map per cleaning (24 bytes a key, Kafka's accounting); "
                          "a larger dirty section is cleaned in several passes"),
)
"""The broker's ``log.cleanup.policy`` and ``log.cleaner.*`` keys (Kafka's names and defaults)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogCleanerSettings:
    """The broker-wide cleaner settings; ``defaults`` are the static ``log.*`` values by Kafka name."""

    enabled: bool = True
    backoff_ms: int = DEFAULT_BACKOFF_MS
    defaults: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: kconfig.Config) -> LogCleanerSettings:
        defaults = {
            "log.cleanup.policy": ",".join(cfg.get_list("log.cleanup.policy")),
            "log.cleaner.min.cleanable.ratio": str(cfg.get_float("log.cleaner.min.cleanable.ratio")),
            "log.cleaner.delete.retention.ms": str(cfg.get_int("log.cleaner.delete.retention.ms")),
            "log.cleaner.min.compaction.lag.ms": str(cfg.get_int("log.cleaner.min.compaction.lag.ms")),
            "log.cleaner.max.compaction.lag.ms": str(cfg.get_int("log.cleaner.max.compaction.lag.ms")),
            "log.cleaner.dedupe.buffer.size": str(cfg.get_int("log.cleaner.dedupe.buffer.size")),
        }
        return cls(enabled=cfg.get_bool("log.cleaner.enable"), backoff_ms=cfg.get_int("log.cleaner.backoff.ms"),
                   defaults=defaults)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cleaned:
    """One cleaning the cleaner did."""

    topic_partition: TopicPartition
    result: cleaner.CleanResult
    dirty_ratio: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedClean:
    """A due log and its planned cleaning; :func:`prepare` reads only ``plan``."""

    partition: partition_mod.Partition
    plan: cleaner.CleanPlan
    dirty_ratio: float


PreparedOutcome = tuple[PlannedClean, cleaner.PreparedClean | KraftlogError | OSError]


def prepare(planned: Iterable[PlannedClean]) -> list[PreparedOutcome]:
    """Build the offset maps and write the ``.cleaned`` files of planned cleanings.

    Safe on a worker thread (the broker runs it in one so the event loop keeps
    serving): it reads segment files through its own descriptors, writes only
    ``.cleaned`` files and touches no log or partition object. A failure is
    returned in place of its result for :meth:`LogCleaner.commit` to handle.
    """
    out: list[PreparedOutcome] = []
    for item in planned:
        try:
            out.append((item, cleaner.prepare_clean(item.plan)))
        except (KraftlogError, OSError) as exc:
            out.append((item, exc))
    return out


class LogCleaner:
    """Compacts the replicas of compacted topics, filthiest first. Create one per broker process."""

    def __init__(self, *, settings: LogCleanerSettings, image: Callable[[], im.MetadataImage] | None = None,
                 broker_id: int | None = None) -> None:
        self._settings = settings
        self._image = image
        self._broker_id = broker_id
        self._checkpoints: dict[pathlib.Path, dict[TopicPartition, int]] = {}
        self._horizons: dict[TopicPartition, int] = {}
        self._uncleanable: set[TopicPartition] = set()
        self._idle_until_ms: int | None = None

    @classmethod
    def from_config(cls, cfg: kconfig.Config, *, image: Callable[[], im.MetadataImage],
                    broker_id: int) -> LogCleaner:
        return cls(settings=LogCleanerSettings.from_config(cfg), image=image, broker_id=broker_id)

    @property
    def uncleanable(self) -> frozenset[TopicPartition]:
        """Partitions whose cleaning failed; they are skipped until the process restarts."""
        return frozenset(self._uncleanable)

    def effective_config(self, topic: str) -> dict[str, str]:
        """Static ``log.*`` defaults, overridden by dynamic broker configs, overridden by the topic's."""
        merged = dict(self._settings.defaults)
        image = self._image() if self._image is not None else None
        if image is not None:
            merged.update(image.configs.broker_configs(None))
            if self._broker_id is not None:
                merged.update(image.configs.broker_configs(self._broker_id))
            merged.update(image.configs.topic_configs(topic))
        return merged

    def deletes_old_segments(self, topic: str) -> bool:
        """Whether ``topic``'s effective ``cleanup.policy`` has ``delete``: time and size
        retention apply to it (a ``compact``-only topic keeps every key's latest record)."""
        policy = cleaner.cleanup_policy(self.effective_config(topic))
        items = [] if policy is None else [i.strip().lower() for i in policy.split(",")]
        return policy is None or "delete" in items

    def checkpoint_of(self, directory: str) -> int | None:
        """The cleaner checkpoint of the partition log at ``directory``, None when it has none."""
        path = pathlib.Path(directory)
        tp = _tp_of(path)
        return None if tp is None else self._read_checkpoints(path.parent).get(tp)

    def maybe_clean(self, partitions: Iterable[partition_mod.Partition], now_ms: int) -> list[Cleaned]:
        """:meth:`plan`, :func:`prepare` and :meth:`commit` in one go, all on the calling thread."""
        return self.commit(prepare(self.plan(partitions, now_ms)), now_ms)

    def plan(self, partitions: Iterable[partition_mod.Partition], now_ms: int) -> list[PlannedClean]:
        """The due compacted logs, filthiest first, each with its cleaning planned (owner's thread).

        Empty while backing off: when nothing was due, the next look is
        ``log.cleaner.backoff.ms`` later. A log whose measuring fails is marked
        uncleanable and skipped from then on.
        """
        if not self._settings.enabled:
            return []
        if self._idle_until_ms is not None and now_ms < self._idle_until_ms:
            return []
        due: list[PlannedClean] = []
        by_topic: dict[str, dict[str, str]] = {}  # once per topic, not per partition (issue 16)
        for partition in partitions:
            tp = partition.topic_partition
            if tp in self._uncleanable:
                continue
            props = by_topic.get(partition.topic)
            if props is None:
                props = by_topic[partition.topic] = self.effective_config(partition.topic)
            if not cleaner.is_compacted(cleaner.cleanup_policy(props)):
                continue
            try:
                config = cleaner.CleanerConfig.from_properties(props)
                found = cleaner.cleanable_range(
                    partition.log, checkpoint_offset=self.checkpoint_of(partition.log.directory),
                    high_watermark=partition.high_watermark, now_ms=now_ms, config=config)
                if not found.is_due(config, now_ms=now_ms, delete_horizon_ms=self._horizons.get(tp)):
                    continue
                plan = cleaner.plan_clean(partition.log, found, now_ms=now_ms, config=config)
            except (KraftlogError, OSError) as exc:
                self._mark_uncleanable(tp, exc)
                continue
            due.append(PlannedClean(partition=partition, plan=plan, dirty_ratio=found.dirty_ratio))
        if not due:
            self._idle_until_ms = now_ms + self._settings.backoff_ms
            return []
        self._idle_until_ms = None
        return sorted(due, key=lambda planned: -planned.dirty_ratio)

    def commit(self, prepared: Iterable[PreparedOutcome], now_ms: int) -> list[Cleaned]:
        """Swap the prepared cleanings in and move the checkpoints (owner's thread); returns what was cleaned.

        A cleaning whose log changed meanwhile is dropped (tried again later);
        one that failed marks its partition uncleanable.
        """
        done: list[Cleaned] = []
        for planned, outcome in prepared:
            tp = planned.partition.topic_partition
            if isinstance(outcome, cleaner.CleaningAbandoned):
                logger.info("broker=%s partition=%s event=log_cleaning_abandoned reason=%r", self._broker_id, tp,
                            str(outcome))
                continue
            if isinstance(outcome, BaseException):
                self._mark_uncleanable(tp, outcome)
                continue
            try:
                result = cleaner.commit_clean(planned.partition.log, outcome, now_ms=now_ms)
            except cleaner.CleaningAbandoned as exc:
                logger.info("broker=%s partition=%s event=log_cleaning_abandoned reason=%r", self._broker_id, tp,
                            str(exc))
                continue
            except (KraftlogError, OSError) as exc:
                cleaner.abort_clean(outcome)
                self._mark_uncleanable(tp, exc)
                continue
            if result.earliest_delete_horizon_ms is None:
                self._horizons.pop(tp, None)
            else:
                self._horizons[tp] = result.earliest_delete_horizon_ms
            self._write_checkpoint(pathlib.Path(planned.partition.log.directory), result.end_offset)
            logger.info("broker=%s partition=%s event=log_cleaned dirty_ratio=%.3f end_offset=%d bytes_read=%d "
                        "bytes_written=%d records_retained=%d segments=%d->%d", self._broker_id, tp,
                        planned.dirty_ratio, result.end_offset, result.bytes_read, result.bytes_written,
                        result.records_retained, result.segments_before, result.segments_after)
            done.append(Cleaned(topic_partition=tp, result=result, dirty_ratio=planned.dirty_ratio))
        return done

    def _mark_uncleanable(self, tp: TopicPartition, exc: BaseException) -> None:
        self._uncleanable.add(tp)
        logger.error("broker=%s partition=%s event=log_uncleanable error=%r", self._broker_id, tp, str(exc))

    def _read_checkpoints(self, log_dir: pathlib.Path) -> dict[TopicPartition, int]:
        cached = self._checkpoints.get(log_dir)
        if cached is None:
            try:
                cached = checkpoint.OffsetCheckpointFile(log_dir / checkpoint.CLEANER_OFFSET_CHECKPOINT).read()
            except KraftlogError as exc:
                # A damaged checkpoint only costs a full re-cleaning: start over.
                logger.warning("broker=%s event=cleaner_checkpoint_unreadable dir=%s error=%r", self._broker_id,
                               log_dir, str(exc))
                cached = {}
            self._checkpoints[log_dir] = cached
        return cached

    def _write_checkpoint(self, directory: pathlib.Path, end_offset: int) -> None:
        tp = _tp_of(directory)
        if tp is None:
            return
        log_dir = directory.parent
        entries = self._read_checkpoints(log_dir)
        entries[tp] = end_offset
        # Entries of partitions no longer in this dir go (Kafka drops them on deletion).
        for gone in [t for t in entries if not os.path.isdir(log_dir / t.dir_name)]:
            del entries[gone]
        checkpoint.OffsetCheckpointFile(log_dir / checkpoint.CLEANER_OFFSET_CHECKPOINT).write(entries)


def _tp_of(directory: pathlib.Path) -> TopicPartition | None:
    try:
        return parse_dir_name(directory.name)
    except ValueError:
        return None
