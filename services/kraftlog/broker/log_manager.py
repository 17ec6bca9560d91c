"""The replicas' logs in ``log.dirs`` (Kafka's ``LogManager``): :class:`LocalLogs`.

Owns, for one broker: recovering every ``<topic>-<partition>/`` log found at start-up
(a log dir that fails with an I/O error is left offline, as Kafka's LogManager does),
placing a new replica in the online log dir holding the fewest, each log's and
partition's settings (the broker's defaults with the topic's configs over them),
deleting a replica's directory (renamed to ``<dir>.<id>-delete`` first), and the
per-log-dir checkpoint files: ``replication-offset-checkpoint`` (high watermarks),
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``, planned on the
event loop and written by :func:`write_checkpoint_plan` (in a worker thread while the
broker serves).

It is the reconciler's :class:`~kraftlog.broker.reconciler.ReplicaStore`. Called by the
broker server (:mod:`kraftlog.server.broker_server`), which wires it to the replica
manager's offline log dirs. Must not: serve requests, or run anything on its own (no
tasks, no threads).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import pathlib
import shutil
from collections.abc import Callable, Iterable, Mapping

from kraftlog import errors
from kraftlog.broker import partition as partition_mod
from kraftlog.broker import replica_manager as rm
from kraftlog.ids import TopicPartition, parse_dir_name, random_uuid
from kraftlog.metadata import image as im
from kraftlog.storage import checkpoint, file_handles, leader_epoch
from kraftlog.storage import cleaner as storage_cleaner
from kraftlog.storage import log as storage_log
from kraftlog.storage.log_config import LogConfig

logger = logging.getLogger(__name__)

REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
"""Per log dir: each log's flushed offset; a restart CRC-scans only what lies past it."""
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
"""Per log dir: each log's start offset (it may sit inside a segment after a leader's
log start moved, which the segments alone cannot say)."""


class LocalLogs:
    """The replicas' logs in ``log.dirs`` (the reconciler's :class:`~.reconciler.ReplicaStore`)."""

    def __init__(self, *, broker_id: int, log_dirs: list[pathlib.Path], log_config: LogConfig,
                 partition_config: partition_mod.PartitionConfig,
                 image: Callable[[], im.MetadataImage], now_ms: Callable[[], int],
                 max_compaction_lag_ms: int = storage_cleaner.DEFAULT_MAX_COMPACTION_LAG_MS,
                 handles: file_handles.FileHandleCache = file_handles.UNBOUNDED,
                 ) -> None:
        self.broker_id = broker_id
        self.handles = handles
        """The descriptors every partition log's segment files share (``kraftlog.log.max.open.files``)."""
        self._now_ms = now_ms
        """The wall clock, ms (a log's segment roll and retention times)."""
        self.log_dirs = log_dirs
        self.log_config = log_config
        self.max_compaction_lag_ms = max_compaction_lag_ms
        """``log.cleaner.max.compaction.lag.ms``: topics without their own
        ``max.compaction.lag.ms`` take it."""
        self.partition_config = partition_config
        self._image = image
        self._recovered: dict[TopicPartition, tuple[storage_log.Log,
                                                    leader_epoch.LeaderEpochFileCache]] = {}
        self._high_watermarks: dict[TopicPartition, int] = {}
        self._dir_of: dict[TopicPartition, pathlib.Path] = {}
        self._replicas_in: collections.Counter[pathlib.Path] = collections.Counter()
        """How many of ``_dir_of``'s values name each log dir (a new replica's choice costs
        O(log dirs), not O(replicas))."""
        self.startup_failures: dict[str, str] = {}
        """Log dirs whose logs could not be loaded (I/O error) -> the error: offline."""
        self.offline: Callable[[], Mapping[str, str]] = lambda: self.startup_failures
        """The log dirs offline now (the replica manager's, once it runs)."""
        self.on_dir_failure: Callable[[str, str], object] = \
            lambda log_dir, reason: self.startup_failures.setdefault(log_dir, reason)
        """Called with (log dir, error) when an I/O error here takes a log dir offline."""

    def _online_dirs(self) -> list[pathlib.Path]:
        offline = self.offline()
        return [d for d in self.log_dirs if dir_key(d) not in offline]

    def recover_all(self) -> None:
        """Open (and recover) every partition log found, before the broker serves anything.

        A log dir that fails with an I/O error is left offline (its replicas report
        KAFKA_STORAGE_ERROR once assigned), as Kafka's LogManager does at startup."""
        started_ms = self._now_ms()
        for log_dir in self.log_dirs:
            found: dict[TopicPartition, tuple[storage_log.Log, leader_epoch.LeaderEpochFileCache]] = {}
            try:
                hws = checkpoint.OffsetCheckpointFile(log_dir / REPLICATION_CHECKPOINT).read()
                recovery_points = checkpoint.OffsetCheckpointFile(
                    log_dir / RECOVERY_POINT_CHECKPOINT).read()
                log_starts = checkpoint.OffsetCheckpointFile(log_dir / LOG_START_CHECKPOINT).read()
                for child in sorted(log_dir.iterdir()):
                    if not child.is_dir() or child.name.startswith("__cluster_metadata"):
                        continue
                    try:
                        tp = parse_dir_name(child.name)
                    except ValueError:
                        continue
                    logger.info("broker=%d partition=%s event=log_recovery state=RECOVERY dir=%s "
                                "recovery_point=%d", self.broker_id, tp, child,
                                recovery_points.get(tp, 0))
                    found[tp] = self._open_log(child, recovery_point=recovery_points.get(tp, 0),
                                               log_start_offset=log_starts.get(tp, 0))
            except OSError as exc:
                for log, _cache in found.values():
                    log.close_handlers()
                logger.error("broker=%d event=log_dir_offline dir=%s at=startup error=%r",
                             self.broker_id, log_dir, str(exc))
                self.startup_failures[dir_key(log_dir)] = f"loading {log_dir}: {exc}"
                continue
            self._high_watermarks.update(hws)
            self._recovered.update(found)
            self._dir_of.update(dict.fromkeys(found, log_dir))
            self._replicas_in[log_dir] += len(found)
        logger.info("broker=%d event=logs_recovered count=%d elapsed_ms=%d", self.broker_id,
                    len(self._recovered), self._now_ms() - started_ms)

    def _open_log(self, directory: pathlib.Path, *, recovery_point: int = 0,
                  log_start_offset: int = 0, config: LogConfig | None = None
                  ) -> tuple[storage_log.Log, leader_epoch.LeaderEpochFileCache]:
        directory.mkdir(parents=True, exist_ok=True)
        cache = leader_epoch.LeaderEpochFileCache(directory / "leader-epoch-checkpoint")
        log = storage_log.Log.open(directory, config or self.log_config, now_ms=self._now_ms(),
                                   epoch_cache=cache,
                                   recovery_point=recovery_point,
                                   log_start_offset=log_start_offset, handles=self.handles)
        return log, cache

    def partition_config_for(self, topic: str) -> partition_mod.PartitionConfig:
        """The broker's partition settings with the topic's ``min.insync.replicas`` and
        ``max.message.bytes`` over them."""
        configs = self._image().configs.topic_configs(topic)
        overrides: dict[str, int] = {}
        for key, name in (("min.insync.replicas", "min_insync_replicas"),
                          ("max.message.bytes", "max_message_bytes")):
            value = configs.get(key)
            if value is not None and value.isdigit() and int(value) >= 1:
                overrides[name] = int(value)
        policy = configs.get("cleanup.policy")
        compacted = (self.partition_config.compacted if policy is None
                     else storage_cleaner.is_compacted(policy))
        return dataclasses.replace(self.partition_config, compacted=compacted,
                                   **overrides)  # type: ignore[arg-type]

    def log_config_for(self, topic: str) -> LogConfig:
        """The broker's ``log.*`` settings with the topic's (``segment.bytes``,
        ``retention.ms``, ...) over them, as Kafka builds each log's LogConfig.

        A compacted topic's active segment rolls at min(``segment.ms``,
        ``max.compaction.lag.ms``), as in Kafka (KIP-354): the cleaner never touches the
        active segment, so a record could otherwise stay uncompacted past the lag."""
        topic_configs = self._image().configs.topic_configs(topic)
        try:
            config = self.log_config.with_overrides(topic_configs)
        except errors.ConfigError as exc:
            logger.warning("broker=%d topic=%s event=invalid_topic_config error=%r action=defaults",
                           self.broker_id, topic, str(exc))
            config = self.log_config
        if not self.partition_config_for(topic).compacted:
            return config
        lag = self.max_compaction_lag_ms
        value = topic_configs.get("max.compaction.lag.ms")
        if value is not None and value.strip().isdigit() and int(value) >= 1:
            lag = int(value)
        if lag < config.segment_ms:
            return dataclasses.replace(config, segment_ms=lag)
        return config

    def apply_topic_configs(self, partitions: Iterable[partition_mod.Partition]) -> None:
        """Topic configs changed: every hosted log and partition takes its topic's new ones."""
        for partition in partitions:
            partition.log.reconfigure(self.log_config_for(partition.topic))
            partition.config = self.partition_config_for(partition.topic)

    def open_partition(self, info: im.PartitionInfo) -> partition_mod.Partition:
        tp = TopicPartition(topic=info.topic_name, partition=info.partition_id)
        opened = self._recovered.pop(tp, None)
        if opened is None:
            # A new replica goes to the online directory holding the fewest (Kafka's default).
            online = self._online_dirs()
            if not online:
                raise OSError(f"no online log dir for {tp}: every one of "
                              f"{[str(d) for d in self.log_dirs]} is offline")
            log_dir = min(online, key=lambda d: self._replicas_in[d])
            try:
                opened = self._open_log(log_dir / tp.dir_name,
                                        config=self.log_config_for(info.topic_name))
            except OSError as exc:
                self.on_dir_failure(dir_key(log_dir), f"creating the log of {tp}: {exc}")
                raise
            self._dir_of[tp] = log_dir
            self._replicas_in[log_dir] += 1
        log, cache = opened
        log.reconfigure(self.log_config_for(info.topic_name))  # recovered with the defaults
        return partition_mod.Partition(
            info.topic_id, info.topic_name, info.partition_id, log, epoch_cache=cache,
            local_broker_id=self.broker_id, config=self.partition_config_for(info.topic_name),
            high_watermark=self._high_watermarks.pop(tp, 0),
            is_replica_isr_eligible=self._is_replica_isr_eligible)

    def _is_replica_isr_eligible(self, replica_id: int) -> bool:
        # KIP-841: only registered, unfenced brokers not shutting down may join an ISR.
        return self._image().cluster.is_active(replica_id)

    def delete_partition(self, partition: partition_mod.Partition) -> None:
        tp = partition.topic_partition
        directory = pathlib.Path(partition.log.directory)
        partition.log.close()
        # Kafka renames to <dir>.<id>-delete first, so a crash mid-delete is not a live log.
        doomed = directory.with_name(f"{directory.name}.{random_uuid()}-delete")
        os.replace(directory, doomed)
        shutil.rmtree(doomed)
        home = self._dir_of.pop(tp, None)
        if home is not None:
            self._replicas_in[home] -= 1

    def plan_checkpoints(self, high_watermarks: Mapping[TopicPartition, int] | None,
                         partitions: Iterable[partition_mod.Partition] | None) -> CheckpointPlan:
        """The contents of each online log dir's ``replication-offset-checkpoint`` (given
        ``high_watermarks``) and recovery-point / log-start-offset checkpoints (given
        ``partitions``), read now on the event loop; :func:`write_checkpoint_plan` writes them
        (in a worker thread while the broker serves: each file costs two fsyncs, 2-20 ms on a
        busy disk, which stalled every request on the loop)."""
        plan: CheckpointPlan = []
        online = self._online_dirs()
        # Every replica in the one online dir (the usual single log dir): no per-replica
        # lookup of its dir (at 10,000 replicas those lookups were most of the periodic tick).
        single = (online[0] if len(online) == 1
                  and self._replicas_in[online[0]] == len(self._dir_of) else None)
        if high_watermarks is not None:
            for log_dir in online:
                mine = (dict(high_watermarks) if single is not None else
                        {tp: hw for tp, hw in high_watermarks.items() if self._dir_of.get(tp) == log_dir})
                plan.append((log_dir, REPLICATION_CHECKPOINT, mine))
        if partitions is not None:
            by_dir: dict[pathlib.Path, list[partition_mod.Partition]] = {d: [] for d in online}
            if single is not None:
                by_dir[single] = list(partitions)
            else:
                for partition in partitions:
                    home = self._dir_of.get(partition.topic_partition)
                    if home is not None and home in by_dir:
                        by_dir[home].append(partition)
            for log_dir, found in by_dir.items():
                plan.append((log_dir, RECOVERY_POINT_CHECKPOINT,
                             {p.topic_partition: p.log.recovery_point for p in found}))
                plan.append((log_dir, LOG_START_CHECKPOINT,
                             {p.topic_partition: p.log.log_start_offset for p in found}))
        return plan

    def report_checkpoint_failures(self, failures: Iterable[tuple[str, str]]) -> None:
        """Take the log dirs whose checkpoint writes failed offline (on the event loop)."""
        for log_dir, reason in failures:
            self.on_dir_failure(log_dir, reason)

    def write_checkpoints(self, high_watermarks: dict[TopicPartition, int]) -> None:
        """Each online log dir's ``replication-offset-checkpoint``, written now."""
        self.report_checkpoint_failures(write_checkpoint_plan(self.plan_checkpoints(high_watermarks, None)))

    def write_log_checkpoints(self, partitions: Iterable[partition_mod.Partition]) -> None:
        """Each online log dir's recovery points and log start offsets (Kafka's
        ``recovery-point-offset-checkpoint`` / ``log-start-offset-checkpoint``), written now."""
        self.report_checkpoint_failures(write_checkpoint_plan(self.plan_checkpoints(None, partitions)))

    def close(self, partitions: list[partition_mod.Partition]) -> None:
        offline = self.offline()
        for partition in partitions:
            if rm.log_dir_of(partition) in offline:
                continue  # its files were closed when the dir failed; nothing to flush
            # Flush, snapshot the producer state (so the restart need not replay the log), close.
            try:
                partition.close()
            except OSError as exc:
                logger.error("broker=%d partition=%s event=close_failed error=%r",
                             self.broker_id, partition.topic_partition, str(exc))
        for log, _cache in self._recovered.values():
            log.close()
        self._recovered.clear()


CheckpointPlan = list[tuple[pathlib.Path, str, dict[TopicPartition, int]]]
"""(log dir, checkpoint file name, contents), in write order."""


def write_checkpoint_plan(plan: CheckpointPlan) -> list[tuple[str, str]]:
    """Write each planned checkpoint file (atomically); returns (log dir, error) per failed dir,
    whose later files are skipped. Touches only those files: safe in a worker thread while one
    write runs at a time."""
    failed: dict[str, str] = {}
    for log_dir, name, contents in plan:
        key = dir_key(log_dir)
        if key in failed:
            continue
        try:
            checkpoint.OffsetCheckpointFile(log_dir / name).write(contents)
        except OSError as exc:
            failed[key] = f"writing {name}: {exc}"
    return list(failed.items())


def dir_key(log_dir: pathlib.Path | str) -> str:
    """A log dir as :func:`~kraftlog.broker.replica_manager.log_dir_of` names it."""
    return os.path.normpath(str(log_dir))
