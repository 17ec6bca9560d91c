"""``kraftlog broker --config FILE``: one broker process.

Startup, in order (Kafka's BrokerServer):

1. lock every ``log.dirs`` entry and the metadata log dir (``.lock``; a second process
   on them exits at once, :mod:`kraftlog.storage.log_dir_lock`), then
   read and check ``meta.properties`` of every ``log.dirs`` entry and of the
   metadata log dir (formatted by ``kraftlog storage format`` for this node and
   one cluster), then open and recover every ``<topic>-<partition>/`` log found
   (``event=log_recovery state=RECOVERY`` per log, then a summary);
2. follow the metadata log as a raft OBSERVER (this node id is not a voter): a
   :class:`~kraftlog.raft.driver.RaftDriver` over ``<metadata.log.dir>/__cluster_metadata-0``
   feeding a :class:`~kraftlog.metadata.loader.MetadataLoader`, whose publisher is
   the :class:`~kraftlog.broker.reconciler.Reconciler` (plus a full reconcile every
   :data:`RECONCILE_PASS_INTERVAL_S`, spread over that time in small steps); its fetch
   changes go to the replica fetchers;
3. register with the active controller and heartbeat (:mod:`.controller_client`);
4. serve BrokerService and gRPC health on the first ``listeners`` entry: "liveness"
   is SERVING once the server runs; "" and ``kraftlog.v1.BrokerService`` once the
   broker is registered, caught up and unfenced. The same port serves the AdminService
   (:func:`kraftlog.admin.admin_service.serve_on`, forwarding to the active controller
   of ``controller.quorum.voters``), so tools take ``--bootstrap-server BROKER`` (KIP-590);
5. send the leaders' pending ISR changes to the controller as AlterPartition (one
   request per batch of proposals; answers fed back to the partitions);
6. write ``replication-offset-checkpoint`` (high watermarks) every
   ``replica.high.watermark.checkpoint.interval.ms`` and at shutdown (with the
   recovery points and log start offsets; ``log-start-offset-checkpoint`` also before
   a DeleteRecords that moved a leader's log start offset is answered); apply
   ``log.retention.ms`` / ``log.retention.bytes`` every ``log.retention.check.interval.ms``
   (below the high watermark only).

Group offsets (:mod:`.group_coordinator_driver`, a second metadata publisher after the
reconciler's, with its own task): FindCoordinator / OffsetCommit / OffsetFetch on the
``__consumer_offsets`` partitions this broker leads, loaded when it becomes their
leader and unloaded when it stops (``offsets.*`` settings, Kafka's names).

Replication throttles (KIP-73, :mod:`.replication_quota`): every metadata delta that
touches configs re-reads the broker's ``leader.replication.throttled.rate`` /
``follower.replication.throttled.rate`` (its own BROKER resource, else the cluster
default ``""``) and the topics' ``leader.replication.throttled.replicas`` /
``follower.replication.throttled.replicas``; the rates are measured over
``replication.quota.window.num`` samples of ``replication.quota.window.size.seconds``.
The same deltas re-read ``num.replica.fetchers`` (own resource, cluster default, then the
config file): a new count moves every followed partition to its fetcher under it.

Tracing (``OTEL_*`` variables, off by default): a span per partition leader change seen
here (``broker.become_leader`` / ``broker.become_follower`` / ``broker.replica_deleted``,
linked to the controller's ``controller.partition_leader_election`` of that leader epoch)
and per AlterPartition call; sampled SERVER spans for Produce / Fetch; trace context
crosses the gRPC hops (server interceptors, raft client interceptors).

Metrics (:mod:`kraftlog.telemetry.broker_metrics`): a Prometheus ``/metrics`` endpoint on
``kraftlog.metrics.port`` (``--metrics-port``; 0 = none; not in combined mode, where the
controller's endpoint serves the process).

SIGTERM / SIGINT: controlled shutdown (heartbeats with ``want_shut_down`` until the
controller answers ``should_shut_down``, at most ``broker.session.timeout.ms``), then
everything stops and logs close; exit 0.

Edge module: process I/O (files, signals, sockets, the clock).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import logging
import os
import pathlib
import resource as rlimit
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kraftlog import config as kconfig
from kraftlog import errors, health_server, malloc_tuning, rpc_guard
from kraftlog.admin import admin_service
from kraftlog.broker import clean_shutdown, controller_client, fetcher_driver, log_cleaner, server
from kraftlog.broker import group_coordinator_driver as gcd
from kraftlog.broker import partition as partition_mod
from kraftlog.broker import reconciler as rc
from kraftlog.broker import replica_manager as rm
from kraftlog.broker import replication_quota as rq
from kraftlog.error_codes import ErrorCode
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import loader as ld
from kraftlog.metadata import record_convert
from kraftlog.raft import commands as raft_commands
from kraftlog.raft import driver, shared_driver
from kraftlog.raft import quorum_state_store as qss
from kraftlog.raft.raft_config import parse_voters
from kraftlog.raft.storage_log import StorageRaftLog
from kraftlog.storage import checkpoint, file_handles, leader_epoch, log_dir_lock, meta_properties
from kraftlog.storage import cleaner as storage_cleaner
from kraftlog.storage import log as storage_log
from kraftlog.storage.log_config import LogConfig
from kraftlog.storage.topic_partition import TopicPartition, parse_dir_name
from kraftlog.storage.uuid import Uuid, random_uuid
from kraftlog.telemetry import broker_metrics as bm
from kraftlog.telemetry import grpc_tracing, metrics, tracing
from kraftlog.telemetry import logging as log_setup
from kraftlog.v1 import common_pb2, controller_pb2

logger = logging.getLogger(__name__)

BROKER_SERVICE_NAME = "kraftlog.v1.BrokerService"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
"""Per log dir: each log's flushed offset; a restart CRC-scans only what lies past it."""
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
"""Per log dir: each log's start offset (it may sit inside a segment after a leader's
log start moved, which the segments alone cannot say)."""
RECONCILE_PASS_INTERVAL_S = 120.0
DELTA_STEP_PARTITIONS = 8
"""Replicas a metadata delta converges at once; the rest of a large delta is drained by its
own task in slices of this size for up to :data:`DELTA_TURN_BUDGET_S` per event-loop turn
(issue 16: creating or moving thousands of replicas must not stop health checks and fetches
for seconds; a new leader's leader-epoch checkpoint alone is two fsyncs, 10-40 ms on a busy
disk)."""
DELTA_TURN_BUDGET_S = 0.05
ALTER_PARTITION_MAX_PARTITIONS = 250
"""Partitions per AlterPartition request; more pending ISR changes go in further requests."""
"""One full (level-triggered) reconcile pass per this many seconds, in a step per periodic
tick; the metadata deltas do the real work, the pass only retries what they could not do."""
METRICS_SAMPLE_INTERVAL_S = 1.0
SHUTDOWN_GRACE_S = 1.0

_I = kconfig.ConfigType.INT
_S = kconfig.ConfigType.STRING
_L = kconfig.ConfigType.LIST
_B = kconfig.ConfigType.BOOLEAN
_LONG = kconfig.ConfigType.LONG
_FETCH = fetcher_driver.FetcherConfig()
NUM_REPLICA_FETCHERS = "num.replica.fetchers"

DEFAULT_MALLOC_MMAP_THRESHOLD_BYTES = malloc_tuning.DEFAULT_MMAP_THRESHOLD_BYTES

BROKER_CONFIG = kconfig.ConfigDef([
    kconfig.ConfigKey(name="node.id", type=_I, default=None, required=True,
                      doc="this broker's id; must not be a controller voter id",
                      validator=kconfig.at_least(0)),
    kconfig.ConfigKey(name="process.roles", type=_L, default=None, required=True,
                      doc="must contain 'broker' ('broker,controller': combined mode, kraftlog server)",
                      validator=kconfig.one_of("controller", "broker")),
    kconfig.ConfigKey(name="controller.quorum.voters", type=_S, default=None, required=True,
                      doc="the controller voter set, id@host:port,..."),
    kconfig.ConfigKey(name="listeners", type=_L, default=None, required=True,
                      doc="NAME://host:port,...; the first is served and registered"),
    kconfig.ConfigKey(name="advertised.listeners", type=_L, default=None,
                      doc="NAME://host:port,... registered for clients and other brokers "
                          "(default: listeners)"),
    kconfig.ConfigKey(name="log.dirs", type=_L, default=None, required=True,
                      doc="directories holding partition logs, each formatted"),
    kconfig.ConfigKey(name="metadata.log.dir", type=_S, default=None,
                      doc="directory holding __cluster_metadata-0; default: first of log.dirs"),
    kconfig.ConfigKey(name="broker.rack", type=_S, default="", doc="this broker's rack"),
    kconfig.ConfigKey(name="broker.heartbeat.interval.ms", type=_I, default=2000,
                      validator=kconfig.at_least(1), doc="ms between broker heartbeats"),
    kconfig.ConfigKey(name="broker.session.timeout.ms", type=_I, default=9000,
                      validator=kconfig.at_least(1),
                      doc="bound, in ms, of the controlled shutdown wait"),
    kconfig.ConfigKey(name="replica.lag.time.max.ms", type=_I,
                      default=partition_mod.DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                      validator=kconfig.at_least(0),
                      doc="ms a follower may lag before leaving the ISR"),
    kconfig.ConfigKey(name="min.insync.replicas", type=_I,
                      default=partition_mod.DEFAULT_MIN_INSYNC_REPLICAS,
                      validator=kconfig.at_least(1),
                      doc="default min.insync.replicas of topics that set none"),
    kconfig.ConfigKey(name="message.max.bytes", type=_I,
                      default=partition_mod.DEFAULT_MAX_MESSAGE_BYTES,
                      validator=kconfig.at_least(0), doc="largest batch accepted, bytes"),
    kconfig.ConfigKey(name="replica.fetch.backoff.ms", type=_I, default=_FETCH.fetch_backoff_ms,
                      validator=kconfig.at_least(0), doc="ms a fetcher waits after an error"),
    kconfig.ConfigKey(name="replica.fetch.max.bytes", type=_I, default=_FETCH.fetch_max_bytes,
                      validator=kconfig.at_least(1), doc="bytes per partition per fetch"),
    kconfig.ConfigKey(name="replica.fetch.response.max.bytes", type=_I,
                      default=_FETCH.fetch_response_max_bytes, validator=kconfig.at_least(1),
                      doc="bytes per follower fetch response"),
    kconfig.ConfigKey(name="replica.fetch.wait.max.ms", type=_I,
                      default=_FETCH.fetch_wait_max_ms, validator=kconfig.at_least(0),
                      doc="ms the leader may hold a follower's fetch"),
    kconfig.ConfigKey(name="replica.fetch.min.bytes", type=_I, default=_FETCH.fetch_min_bytes,
                      validator=kconfig.at_least(0), doc="bytes a follower's fetch waits for"),
    kconfig.ConfigKey(name=NUM_REPLICA_FETCHERS, type=_I, default=_FETCH.num_fetchers,
                      validator=kconfig.at_least(1),
                      doc="replica fetchers per source broker (a dynamic broker config, "
                          "when set, overrides it)"),
    kconfig.ConfigKey(name="replication.quota.window.num", type=_I,
                      default=rq.DEFAULT_QUOTA_WINDOW_NUM, validator=kconfig.at_least(1),
                      doc="samples the replication throttles' byte rates are measured over"),
    kconfig.ConfigKey(name="replication.quota.window.size.seconds", type=_I,
                      default=rq.DEFAULT_QUOTA_WINDOW_SIZE_SECONDS, validator=kconfig.at_least(1),
                      doc="seconds each replication throttle sample spans"),
    kconfig.ConfigKey(name="replica.high.watermark.checkpoint.interval.ms", type=_I,
                      default=5000, validator=kconfig.at_least(1),
                      doc="ms between replication-offset-checkpoint writes"),
    kconfig.ConfigKey(name="inter.broker.listener.name", type=_S, default="PLAINTEXT",
                      doc="the listener brokers fetch from each other on, and clients are "
                          "given in Metadata"),
    kconfig.ConfigKey(name="controller.listener.names", type=_L, default=["CONTROLLER"],
                      doc="the controllers' listener names (accepted for Kafka compatibility)"),
    kconfig.ConfigKey(name="listener.security.protocol.map", type=_L, default=None,
                      validator=kconfig.security_protocol_map("PLAINTEXT"),
                      doc="NAME:PROTOCOL,...; only PLAINTEXT is supported"),
    kconfig.ConfigKey(name="default.replication.factor", type=_I, default=None,
                      doc="used by the controller; accepted so one file serves both roles"),
    kconfig.ConfigKey(name="num.partitions", type=_I, default=None,
                      doc="used by the controller; accepted so one file serves both roles"),
    kconfig.ConfigKey(name="log.segment.bytes", type=_I, default=LogConfig().segment_bytes,
                      validator=kconfig.at_least(1), doc="segment size, bytes"),
    kconfig.ConfigKey(name="log.roll.ms", type=_LONG, default=LogConfig().segment_ms,
                      validator=kconfig.at_least(1),
                      doc="ms after which the active segment rolls (topics: segment.ms)"),
    kconfig.ConfigKey(name="log.retention.ms", type=_LONG, default=LogConfig().retention_ms,
                      doc="ms after which segments are deleted; -1 = keep forever"),
    kconfig.ConfigKey(name="log.retention.bytes", type=_LONG, default=-1,
                      doc="bytes a partition log may hold before its oldest segments go; "
                          "-1 = no limit"),
    kconfig.ConfigKey(name="log.message.timestamp.type", type=_S, default="CreateTime",
                      validator=kconfig.one_of("CreateTime", "LogAppendTime"),
                      doc="CreateTime keeps the producer's timestamps, LogAppendTime stamps the "
                          "leader's clock (topics: message.timestamp.type)"),
    kconfig.ConfigKey(name="log.message.timestamp.before.max.ms", type=_LONG,
                      default=LogConfig().message_timestamp_before_max_ms,
                      validator=kconfig.at_least(0),
                      doc="ms a CreateTime timestamp may lie before the leader's clock"),
    kconfig.ConfigKey(name="log.message.timestamp.after.max.ms", type=_LONG,
                      default=LogConfig().message_timestamp_after_max_ms,
                      validator=kconfig.at_least(0),
                      doc="ms a CreateTime timestamp may lie after the leader's clock"),
    kconfig.ConfigKey(name="log.retention.check.interval.ms", type=_LONG, default=300_000,
                      validator=kconfig.at_least(1), doc="ms between retention passes"),
    kconfig.ConfigKey(name="kraftlog.log.max.open.files", type=_I, default=0, validator=kconfig.at_least(0),
                      doc="descriptors the segment files of all partition logs may hold open at once; "
                          "the least recently used are closed and reopened on demand (issue 16); "
                          "0 = half of the open-files limit (RLIMIT_NOFILE, its soft limit raised "
                          "to the hard one at start)"),
    kconfig.ConfigKey(name="kraftlog.malloc.mmap.threshold.bytes", type=_I,
                      default=DEFAULT_MALLOC_MMAP_THRESHOLD_BYTES, validator=kconfig.at_least(0),
                      doc="glibc M_MMAP_THRESHOLD for the broker process (its trim threshold is 4x): "
                          "record buffers below it are reused from the heap instead of fresh, "
                          "page-faulted mmaps; 0 = glibc's defaults"),
    *gcd.CONFIG_KEYS,
    *log_cleaner.CONFIG_KEYS,
    *metrics.CONFIG_KEYS,
    *log_setup.CONFIG_KEYS,
])

# The raft observer's timeouts share the controllers' keys (controller.quorum.*).
for _name, _key in raft_commands.CONTROLLER_CONFIG.keys().items():
    if _name.startswith("controller.quorum.") and _name != "controller.quorum.voters":
        BROKER_CONFIG.define(_key)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# -- configuration and storage ------------------------------------------------------------------

def parse_listeners(entries: list[str]) -> list[common_pb2.Endpoint]:
    endpoints = []
    for entry in entries:
        name, sep, address = entry.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not port.isdigit() or not 0 < int(port) < 65536:
            raise errors.ConfigError(f"listeners entry {entry!r} is not NAME://host:port")
        endpoints.append(common_pb2.Endpoint(host=host, port=int(port), listener_name=name,
                                             security_protocol="PLAINTEXT"))
    if not endpoints:
        raise errors.ConfigError("listeners is empty")
    return endpoints


def check_log_dir(directory: pathlib.Path, node_id: int, cluster_id: str | None
                  ) -> meta_properties.MetaProperties:
    props = meta_properties.read(directory)
    if props is None:
        raise errors.ConfigError(
            f"log directory {directory} is not formatted (no meta.properties); run "
            f"'kraftlog storage format --cluster-id ID --node-id {node_id} "
            f"--data-dir {directory}' first")
    if props.node_id != node_id:
        raise errors.InconsistentStorageError(
            f"{meta_properties.properties_path(directory)} is for node.id {props.node_id}, "
            f"but this process is node.id {node_id}")
    if cluster_id is not None and props.cluster_id != cluster_id:
        raise errors.InconsistentStorageError(
            f"{meta_properties.properties_path(directory)} is for cluster {props.cluster_id}, "
            f"the metadata log dir for {cluster_id}")
    return props


def _raise_open_files_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; the default ``kraftlog.log.max.open.files``."""
    soft, hard = rlimit.getrlimit(rlimit.RLIMIT_NOFILE)
    if hard == rlimit.RLIM_INFINITY or hard > soft:
        target = hard if hard != rlimit.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            rlimit.setrlimit(rlimit.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            logger.warning("event=open_files_limit_unchanged soft=%d hard=%d error=%r", soft, hard, str(exc))
    return file_handles.max_open_for_limit(soft)


def broker_log_config(cfg: kconfig.Config) -> LogConfig:
    """The broker's defaults for every partition log (topics override them)."""
    return LogConfig(segment_bytes=cfg.get_int("log.segment.bytes"),
                     segment_ms=cfg.get_int("log.roll.ms"),
                     retention_ms=cfg.get_int("log.retention.ms"),
                     retention_bytes=cfg.get_int("log.retention.bytes"),
                     message_timestamp_before_max_ms=cfg.get_int("log.message.timestamp.before.max.ms"),
                     message_timestamp_after_max_ms=cfg.get_int("log.message.timestamp.after.max.ms"),
                     ).with_overrides({"log.message.timestamp.type": cfg.get_str("log.message.timestamp.type")})


class LocalLogs:
    """The replicas' logs in ``log.dirs`` (the reconciler's :class:`~.reconciler.ReplicaStore`)."""

    def __init__(self, *, broker_id: int, log_dirs: list[pathlib.Path], log_config: LogConfig,
                 partition_config: partition_mod.PartitionConfig,
                 image: Callable[[], im.MetadataImage],
                 max_compaction_lag_ms: int = storage_cleaner.DEFAULT_MAX_COMPACTION_LAG_MS,
                 handles: file_handles.FileHandleCache = file_handles.UNBOUNDED,
                 ) -> None:
        self.broker_id = broker_id
        self.handles = handles
        """The descriptors every partition log's segment files share (``kraftlog.log.max.open.files``)."""
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
        O(log dirs), not O(replicas): issue 16)."""
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
        started = time.monotonic()
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
                    len(self._recovered), (time.monotonic() - started) * 1000)

    def _open_log(self, directory: pathlib.Path, *, recovery_point: int = 0,
                  log_start_offset: int = 0, config: LogConfig | None = None
                  ) -> tuple[storage_log.Log, leader_epoch.LeaderEpochFileCache]:
        directory.mkdir(parents=True, exist_ok=True)
        cache = leader_epoch.LeaderEpochFileCache(directory / "leader-epoch-checkpoint")
        log = storage_log.Log.open(directory, config or self.log_config, now_ms=wall_ms(),
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


# -- the process --------------------------------------------------------------------------------

class _Publisher:
    """MetadataPublisher: reconcile, then move the fetchers; runs in the raft driver's task."""

    def __init__(self, reconciler: rc.Reconciler, fetchers: fetcher_driver.ReplicaFetcherManager,
                 data: server.DataPlane, on_image: Callable[[], None],
                 tracer: tracing.Tracer, quotas: tuple[rq.ReplicationQuota, ...] = (),
                 cluster_id: str = "",
                 on_configs: Callable[[Iterable[partition_mod.Partition]], None] | None = None,
                 static_num_fetchers: int = 1,
                 on_pending: Callable[[], None] | None = None) -> None:
        self.reconciler = reconciler
        self._on_pending = on_pending
        """Called when a delta left replicas queued (:meth:`drain_step` converges them)."""
        self._static_num_fetchers = static_num_fetchers
        self._on_configs = on_configs
        self.cluster_id = cluster_id
        self._metadata_offset = -1
        self.quotas = quotas
        self.fetchers = fetchers
        self.data = data
        self._on_image = on_image
        self._tracer = tracer

    def on_metadata_update(self, delta: dl.MetadataDelta, image: im.MetadataImage) -> None:
        if delta.configs_delta is not None:
            self.apply_throttles(image)
            self.apply_num_fetchers(image)
            if self._on_configs is not None:
                manager = self.reconciler.manager
                self._on_configs(p for tp, p in manager.partitions.items()
                                 if not manager.is_offline(tp))
        result = self.reconciler.apply_delta(
            delta, image, now_ms=wall_ms(),
            max_partitions=DELTA_STEP_PARTITIONS if self._on_pending is not None else None)
        self._metadata_offset = image.provenance.last_offset
        self.apply(result)
        self._on_image()
        if self.reconciler.pending and self._on_pending is not None:
            self._on_pending()

    def drain_step(self, image: im.MetadataImage) -> None:
        """Converge the next :data:`DELTA_STEP_PARTITIONS` replicas a delta left queued."""
        self.apply(self.reconciler.drain_pending(image, max_partitions=DELTA_STEP_PARTITIONS,
                                                 now_ms=wall_ms()))
        self._on_image()

    def apply_throttles(self, image: im.MetadataImage) -> None:
        """KIP-73 replication throttles from the image's broker and topic configs."""
        for quota in self.quotas:
            for problem in quota.apply_configs(image.configs, self.reconciler.broker_id):
                logger.warning("broker=%d event=invalid_throttle_config quota=%s problem=%r",
                               self.reconciler.broker_id, quota.quota_type.value, problem)
        self.fetchers.wake()

    def apply_num_fetchers(self, image: im.MetadataImage) -> None:
        """``num.replica.fetchers`` from the broker's dynamic config (its own BROKER resource,
        else the cluster default ``""``), else the config file's; a change resizes the
        fetchers. A value that is not an integer >= 1 (the controller refuses those) is
        logged and skipped."""
        broker_id = self.reconciler.broker_id
        count = self._static_num_fetchers
        for resource in (broker_id, None):
            value = image.configs.broker_configs(resource).get(NUM_REPLICA_FETCHERS)
            if value is None:
                continue
            try:
                count = int(value)
                if count < 1:
                    raise ValueError("below 1")
            except ValueError:
                logger.warning("broker=%d event=invalid_dynamic_config name=%s resource=%r "
                               "value=%r", broker_id, NUM_REPLICA_FETCHERS,
                               "" if resource is None else str(resource), value)
                count = self._static_num_fetchers
                continue
            break
        self.fetchers.resize(count)

    def reconcile_all(self, image: im.MetadataImage) -> None:
        self.apply(self.reconciler.reconcile_all(image, now_ms=wall_ms()))

    def reconcile_step(self, image: im.MetadataImage, max_partitions: int) -> None:
        self.apply(self.reconciler.reconcile_step(image, max_partitions=max_partitions,
                                                  now_ms=wall_ms())[0])

    def apply(self, result: rc.ReconcileResult) -> None:
        if result.empty:
            return
        self.fetchers.apply(result)
        self.data.dispatch()
        self._trace(result)

    def _trace(self, result: rc.ReconcileResult) -> None:
        """One span per partition leader change seen here (DESIGN §3: every leader change),
        linked to the controller's election of that leader epoch (tracing.partition_leader_ids)."""
        manager = self.reconciler.manager
        changes = [("broker.become_leader", tp) for tp in result.became_leader]
        changes += [("broker.become_follower", tp) for tp in result.became_follower]
        changes += [("broker.replica_deleted", tp) for tp in result.deleted]
        for name, tp in changes:
            partition = manager.get_partition(tp)
            attributes: dict[str, Any] = {"kraftlog.node.id": self.reconciler.broker_id,
                                          "kraftlog.partition": str(tp), "topic": tp.topic,
                                          "partition": tp.partition,
                                          "metadata.offset": self._metadata_offset}
            links = []
            if partition is not None and partition.leader_epoch > 0:
                # Epoch 0 is the partition's creation, not an election: nothing to link to.
                links.append(tracing.link_to(tracing.partition_leader_ids(
                    cluster_id=self.cluster_id, topic_id=partition.topic_id,
                    partition=tp.partition, leader_epoch=partition.leader_epoch),
                    {"kraftlog.link": "partition_leader_election"}))
            if partition is not None:
                attributes.update({"partition.leader_id": partition.leader_id,
                                   "partition.leader_epoch": partition.leader_epoch,
                                   "partition.epoch": partition.partition_epoch,
                                   "partition.isr": sorted(partition.isr),
                                   "partition.log_end_offset": partition.log_end_offset,
                                   "partition.high_watermark": partition.high_watermark})
            self._tracer.start_span(name, attributes=attributes, links=links).end()


async def serve(cfg: kconfig.Config, *, shared: shared_driver.SharedRaft | None = None) -> int:
    """Run the broker until SIGTERM/SIGINT; with ``shared`` (combined mode) it listens to
    the co-located controller's raft driver instead of fetching the log as an observer,
    and stops on ``shared.stop``. Every log dir and the metadata dir are locked first
    (``.lock``, :mod:`kraftlog.storage.log_dir_lock`): a second process on them exits at once."""
    with log_dir_lock.lock_dirs([*map(pathlib.Path, cfg.get_list("log.dirs")),
                                 *map(pathlib.Path, filter(None, [cfg.get_str("metadata.log.dir")]))]):
        return await _serve(cfg, shared=shared)


async def _serve(cfg: kconfig.Config, *, shared: shared_driver.SharedRaft | None) -> int:
    node_id = cfg.get_int("node.id")
    if "broker" not in cfg.get_list("process.roles"):
        raise errors.ConfigError("process.roles must contain 'broker' for 'kraftlog broker'")
    voters = parse_voters(cfg.get_str("controller.quorum.voters"))
    if node_id in voters and shared is None:
        raise errors.ConfigError(f"node.id {node_id} is a controller voter; a broker must use "
                                 "an id outside controller.quorum.voters (or run both roles "
                                 "in one process with 'kraftlog server')")
    controller_names = set(cfg.get_list("controller.listener.names"))
    listeners = [e for e in parse_listeners(cfg.get_list("listeners"))
                 if e.listener_name not in controller_names]
    advertised = [e for e in parse_listeners(cfg.get_list("advertised.listeners")
                                             or cfg.get_list("listeners"))
                  if e.listener_name not in controller_names]
    if not listeners or not advertised:
        raise errors.ConfigError("listeners has no broker listener (only "
                                 f"controller.listener.names {sorted(controller_names)})")
    log_dirs = [pathlib.Path(d) for d in cfg.get_list("log.dirs")]
    meta_dir = pathlib.Path(cfg.get_str("metadata.log.dir") or log_dirs[0])
    cluster_id = raft_commands.check_storage(meta_dir, node_id)
    dir_ids = [p.directory_id for d in log_dirs
               if (p := check_log_dir(d, node_id, cluster_id)).directory_id is not None]
    raft_log: StorageRaftLog | None = None
    store: qss.FileQuorumStateStore | None = None
    if shared is None:  # combined mode: the controller owns the metadata log
        partition_dir = meta_dir / raft_commands.METADATA_PARTITION_DIR
        store = qss.FileQuorumStateStore(partition_dir / qss.QUORUM_STATE_FILE_NAME,
                                         cluster_id=cluster_id)
        store.read()  # a corrupt file refuses before anything starts
        raft_log = StorageRaftLog.open(partition_dir, clock_ms=wall_ms)
    try:
        tracer = tracing.setup_tracing(role="broker", node_id=node_id)
        try:
            return await _run(cfg, node_id=node_id, voters=voters, cluster_id=cluster_id,
                              listeners=listeners, advertised=advertised, log_dirs=log_dirs,
                              dir_ids=dir_ids, raft_log=raft_log, store=store, tracer=tracer,
                              shared=shared)
        finally:
            tracer.shutdown()  # flushes the spans still buffered
    finally:
        if raft_log is not None:
            raft_log.close()
        if shared is not None:
            shared.broker_done()


async def _run(cfg: kconfig.Config, *, node_id: int, voters: dict[int, str], cluster_id: str,
               listeners: list[common_pb2.Endpoint], advertised: list[common_pb2.Endpoint],
               log_dirs: list[pathlib.Path], dir_ids: list[Uuid], raft_log: StorageRaftLog | None,
               store: qss.FileQuorumStateStore | None, tracer: tracing.Tracing,
               shared: shared_driver.SharedRaft | None = None) -> int:
    listener_name = cfg.get_str("inter.broker.listener.name")
    if listener_name not in {e.listener_name for e in advertised}:
        raise errors.ConfigError(f"inter.broker.listener.name {listener_name} is not among the "
                                 f"advertised listeners "
                                 f"{sorted(e.listener_name for e in advertised)}")
    group_config = gcd.config_from(cfg)  # a bad offsets.* value fails before anything opens
    loader = ld.MetadataLoader(decode=record_convert.decode)
    quota_window = rq.QuotaWindow(
        samples=cfg.get_int("replication.quota.window.num"),
        sample_ms=cfg.get_int("replication.quota.window.size.seconds") * 1000)
    leader_quota = rq.ReplicationQuota(rq.QuotaType.LEADER, window=quota_window)
    follower_quota = rq.ReplicationQuota(rq.QuotaType.FOLLOWER, window=quota_window)
    manager = rm.ReplicaManager(broker_id=node_id, leader_quota=leader_quota)
    health_changed = asyncio.Event()
    alter_wakeup = asyncio.Event()
    data = server.DataPlane(manager, now_ms=wall_ms, on_alter_partition=alter_wakeup.set)
    partition_config = partition_mod.PartitionConfig(
        replica_lag_time_max_ms=cfg.get_int("replica.lag.time.max.ms"),
        min_insync_replicas=cfg.get_int("min.insync.replicas"),
        max_message_bytes=cfg.get_int("message.max.bytes"),
        compacted=storage_cleaner.is_compacted(cfg.get_list("log.cleanup.policy")))
    logs = LocalLogs(broker_id=node_id, log_dirs=log_dirs,
                     log_config=broker_log_config(cfg),
                     partition_config=partition_config, image=lambda: loader.image,
                     max_compaction_lag_ms=cfg.get_int("log.cleaner.max.compaction.lag.ms"),
                     handles=file_handles.FileHandleCache(
                         max_open=cfg.get_int("kraftlog.log.max.open.files") or _raise_open_files_limit(),
                         lock=threading.Lock()))
    previous_broker_epoch = clean_shutdown.take(log_dirs)
    logs.recover_all()
    for failed_dir, reason in logs.startup_failures.items():
        manager.mark_log_dir_offline(failed_dir, reason=reason)
    logs.offline = lambda: manager.offline_log_dirs
    logs.on_dir_failure = lambda log_dir, reason: manager.mark_log_dir_offline(log_dir,
                                                                              reason=reason)
    dir_id_of = {dir_key(d): i for d, i in zip(log_dirs, dir_ids, strict=True)}
    reconciler = rc.Reconciler(broker_id=node_id, manager=manager, store=logs)

    settings = raft_commands.raft_config(cfg)
    client = controller_client.ControllerClient(
        voters, raft_leader=lambda: loader.leader_id,
        request_timeout_ms=settings.request_timeout_ms)
    lifecycle = controller_client.BrokerLifecycle(
        client, broker_id=node_id, cluster_id=cluster_id, incarnation_id=random_uuid(),
        listeners=advertised, rack=cfg.get_str("broker.rack"), log_dir_ids=dir_ids,
        heartbeat_interval_ms=cfg.get_int("broker.heartbeat.interval.ms"),
        metadata_offset=lambda: loader.image.provenance.last_offset,
        on_change=health_changed.set, previous_broker_epoch=previous_broker_epoch,
        offline_log_dirs=lambda: [dir_id_of[d] for d in manager.offline_log_dirs
                                  if d in dir_id_of])

    def endpoint_of(broker_id: int) -> str | None:
        broker = loader.image.cluster.broker(broker_id)
        endpoint = broker.endpoint(listener_name) if broker is not None else None
        return None if endpoint is None else f"{endpoint.host}:{endpoint.port}"

    fetchers = fetcher_driver.ReplicaFetcherManager(
        broker_id=node_id, manager=manager, data=data, endpoint=endpoint_of,
        broker_epoch=lambda: lifecycle.broker_epoch, config=fetcher_driver.FetcherConfig(
            fetch_backoff_ms=cfg.get_int("replica.fetch.backoff.ms"),
            fetch_max_bytes=cfg.get_int("replica.fetch.max.bytes"),
            fetch_response_max_bytes=cfg.get_int("replica.fetch.response.max.bytes"),
            fetch_wait_max_ms=cfg.get_int("replica.fetch.wait.max.ms"),
            fetch_min_bytes=cfg.get_int("replica.fetch.min.bytes"),
            num_fetchers=cfg.get_int(NUM_REPLICA_FETCHERS)), quota=follower_quota)
    reconcile_wakeup = asyncio.Event()
    publisher = _Publisher(reconciler, fetchers, data, on_image=health_changed.set,
                           tracer=tracer.tracer, quotas=(leader_quota, follower_quota),
                           cluster_id=cluster_id, on_configs=logs.apply_topic_configs,
                           static_num_fetchers=cfg.get_int(NUM_REPLICA_FETCHERS),
                           on_pending=reconcile_wakeup.set)
    loader.add_publisher(publisher)

    async def create_topics(request: Any, deadline_s: float) -> Any:
        return await client.call("CreateTopics", request, deadline_s=deadline_s)

    # Group offsets (__consumer_offsets): published after the reconciler, so it sees the
    # replicas already moved; loads / unloads partitions as their leadership moves here.
    groups = gcd.GroupCoordinatorDriver(broker_id=node_id, data=data, image=lambda: loader.image,
                                        listener_name=listener_name, config=group_config,
                                        create_topics=create_topics, now_ms=wall_ms)
    loader.add_publisher(groups)
    if shared is None:
        assert raft_log is not None and store is not None
        raft = driver.RaftDriver(node_id=node_id, voters=voters, cluster_id=cluster_id,
                                 config=settings, log=raft_log, store=store, listener=loader,
                                 channel_interceptors=(
                                     grpc_tracing.client_interceptors(tracer.tracer)
                                     if tracer.enabled else ()))
    else:
        shared.register_listener(loader)
        published = await shared.wait_published()
        if published is None:
            return 0  # the process stops before the controller started raft
        raft = published

    # Combined mode: the controller's endpoint serves the process; no second one.
    metrics_port = cfg.get_int("kraftlog.metrics.port") if shared is None else 0
    registry = metrics.MetricsRegistry() if metrics_port else None
    broker_metrics = bm.BrokerMetrics(registry.registry) if registry is not None else None
    producer_id_allocator = controller_client.ProducerIdAllocator(client, lifecycle)

    async def allocate_producer_id(deadline_s: float) -> tuple[ErrorCode, int, str]:
        return await producer_id_allocator.allocate(deadline_s=deadline_s)

    servicer = server.BrokerServicer(data, broker_id=node_id, cluster_id=cluster_id,
                                     image=lambda: loader.image,
                                     controller_id=lambda: loader.leader_id,
                                     listener_name=listener_name,
                                     log_dirs=[str(d) for d in log_dirs],
                                     ready=lambda: lifecycle.ready,
                                     producer_ids=allocate_producer_id, groups=groups)
    grpc_server = server.create_server(servicer, interceptors=grpc_tracing.data_path_interceptors(
        tracer.tracer if tracer.enabled else None,
        broker_metrics.observe_request if broker_metrics is not None else None))
    admin_locator = admin_service.serve_on(grpc_server, admin_service.AdminSettings(
        bootstrap_controllers=tuple(voters.values()), voters=voters,
        request_timeout_ms=settings.request_timeout_ms), interceptors=(
            grpc_tracing.client_interceptors(tracer.tracer) if tracer.enabled else ()))
    health = health_server.ServerHealth(grpc_server, service=BROKER_SERVICE_NAME,
                                        reflected=(admin_service.SERVICE_NAME,))
    listen = f"{listeners[0].host or '0.0.0.0'}:{listeners[0].port}"
    try:
        grpc_server.add_insecure_port(listen)
    except RuntimeError as exc:
        raise errors.ConfigError(f"cannot listen on {listen}: {exc}") from None
    if registry is not None:
        try:
            registry.serve(metrics_port, cfg.get_str("kraftlog.metrics.host"))
        except OSError as exc:
            await grpc_server.stop(None)
            raise errors.ConfigError(f"cannot serve metrics on "
                                     f"{cfg.get_str('kraftlog.metrics.host')}:{metrics_port}: "
                                     f"{exc}") from None
    await grpc_server.start()
    await health.start(serving=False)
    data.start()
    groups.start()
    if shared is None:
        raft.start()
    lifecycle.start()
    logger.info("broker=%d event=started listener=%s cluster_id=%s voters=%s pid=%d", node_id,
                listen, cluster_id, ",".join(f"{v}@{e}" for v, e in sorted(voters.items())),
                os.getpid())

    async def publish_health() -> None:
        while True:
            await health_changed.wait()
            health_changed.clear()
            serving = lifecycle.ready
            if await health.set_serving(serving):
                logger.info("broker=%d event=health serving=%s broker_epoch=%d "
                            "metadata_offset=%d", node_id, serving, lifecycle.broker_epoch,
                            loader.image.provenance.last_offset)

    async def drain_reconcile() -> None:
        # A large delta's replicas, a slice per event-loop turn (DELTA_STEP_PARTITIONS).
        while True:
            await reconcile_wakeup.wait()
            reconcile_wakeup.clear()
            while reconciler.pending:
                await asyncio.sleep(0)
                turn_ends = time.monotonic() + DELTA_TURN_BUDGET_S
                while reconciler.pending and time.monotonic() < turn_ends:
                    publisher.drain_step(loader.image)
            groups.wake()

    async def send_alter_partitions() -> None:
        while True:
            await alter_wakeup.wait()
            alter_wakeup.clear()
            requests = manager.take_alter_partition_requests()
            # In requests of at most ALTER_PARTITION_MAX_PARTITIONS, one after the other: the
            # active controller handles each in one event, and thousands of partitions in one
            # event stalled its loop past the quorum's fetch timeout (issue 16).
            for first in range(0, len(requests), ALTER_PARTITION_MAX_PARTITIONS):
                await _alter_partitions(client, manager, lifecycle,
                                        requests[first:first + ALTER_PARTITION_MAX_PARTITIONS],
                                        tracer.tracer,
                                        on_isr_change=None if broker_metrics is None
                                        else broker_metrics.observe_isr_change)
                data.dispatch()

    # The periodic checkpoint write in its worker thread, if one runs: awaited before the
    # shutdown writes the same files.
    checkpoint_write: asyncio.Future[list[tuple[str, str]]] | None = None

    async def periodic() -> None:
        nonlocal checkpoint_write
        interval_s = cfg.get_int("replica.high.watermark.checkpoint.interval.ms") / 1000
        retention_s = cfg.get_int("log.retention.check.interval.ms") / 1000
        last_retention = time.monotonic()
        tick_s = min(interval_s, retention_s)
        last_plan: CheckpointPlan | None = None
        cleaner = log_cleaner.LogCleaner.from_config(cfg, image=lambda: loader.image, broker_id=node_id)
        while True:
            await asyncio.sleep(min(interval_s, retention_s))
            if len(manager.offline_log_dirs) >= len(log_dirs):
                # Kafka halts a broker whose every log dir failed: nothing left to serve.
                raise errors.StorageError(
                    f"every log dir is offline ({', '.join(sorted(manager.offline_log_dirs))}): "
                    "replace the failed disks and restart the broker")
            # Contents read here, files written (fsynced) off the loop, failures handled here.
            plan = logs.plan_checkpoints(manager.high_watermarks(),
                                         [p for tp, p in manager.partitions.items()
                                          if not manager.is_offline(tp)])
            if plan != last_plan:  # an idle broker's files already say this: no rewrite
                checkpoint_write = asyncio.ensure_future(asyncio.to_thread(write_checkpoint_plan,
                                                                           plan))
                failures = await asyncio.shield(checkpoint_write)
                logs.report_checkpoint_failures(failures)
                last_plan = None if failures else plan
            # Each phase below walks every replica: at 10,000 a phase is tens of ms, so the
            # loop gets a turn between them (health checks and fetches wait for one phase,
            # not for the whole tick; issue 16).
            await asyncio.sleep(0)
            now = time.monotonic()
            # A full pass every RECONCILE_PASS_INTERVAL_S, a slice of it per tick.
            steps = max(1, int(RECONCILE_PASS_INTERVAL_S / tick_s))
            publisher.reconcile_step(loader.image, -(-2 * len(manager.partitions) // steps) + 1)
            await asyncio.sleep(0)
            online = {tp: p for tp, p in manager.partitions.items() if not manager.is_offline(tp)}
            if now - last_retention >= retention_s:
                last_retention = now
                for tp, partition in online.items():
                    if not cleaner.deletes_old_segments(tp.topic):
                        continue  # cleanup.policy=compact only: the cleaner keeps it small
                    # Never past the high watermark (followers may still need the data);
                    # the partition forgets producers whose batches all went.
                    try:
                        if partition.delete_old_segments(wall_ms()):
                            manager.log_start_moved(tp)  # news for fetch sessions (KIP-227)
                    except OSError as exc:
                        manager.handle_storage_error(tp, exc)
            # Compaction (cleanup.policy=compact): planned and swapped in on this loop, which
            # owns every log; the decoding and rewriting in a worker thread. Backs off
            # log.cleaner.backoff.ms when no log is due.
            await asyncio.sleep(0)
            online = {tp: p for tp, p in online.items() if not manager.is_offline(tp)}
            try:
                planned = cleaner.plan(list(online.values()), wall_ms())
                if planned:
                    cleaner.commit(await asyncio.to_thread(log_cleaner.prepare, planned), wall_ms())
            except OSError as exc:
                logger.error("broker=%d event=log_cleaner_io_error error=%r", node_id, str(exc))

    async def persist_log_start_offsets() -> None:
        # DeleteRecords moved a leader's log start offset: checkpoint it before the answer,
        # so a restart cannot bring back the deleted records left in its first segment.
        # After the periodic write in flight, then on the loop with nothing awaited, so the
        # two never replace the same files at once (they share the temporary file names).
        while checkpoint_write is not None and not checkpoint_write.done():
            await asyncio.wait({checkpoint_write})
        plan = [entry for entry in logs.plan_checkpoints(
            None, [p for tp, p in manager.partitions.items() if not manager.is_offline(tp)])
            if entry[1] == LOG_START_CHECKPOINT]
        logs.report_checkpoint_failures(write_checkpoint_plan(plan))

    data.on_log_start_offsets_moved = persist_log_start_offsets

    async def sample_metrics(sink: bm.BrokerMetrics) -> None:
        quotas = (("leader", leader_quota), ("follower", follower_quota))
        while True:
            sink.sample(list(manager.partitions.values()), quotas, wall_ms())
            await asyncio.sleep(METRICS_SAMPLE_INTERVAL_S)

    stop = shared.stop if shared is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    if shared is None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    tasks = [loop.create_task(publish_health(), name="broker-health"),
             loop.create_task(send_alter_partitions(), name="broker-alter-partition"),
             loop.create_task(drain_reconcile(), name="broker-reconcile-drain"),
             loop.create_task(periodic(), name="broker-periodic"),
             loop.create_task(data.wait(), name="broker-data-plane"),
             loop.create_task(lifecycle.wait(), name="broker-lifecycle"),
             loop.create_task(groups.wait(), name="broker-group-coordinator-wait")]
    if broker_metrics is not None:
        tasks.append(loop.create_task(sample_metrics(broker_metrics), name="broker-metrics"))
    stop_task = loop.create_task(stop.wait(), name="broker-stop-signal")
    raft_task = loop.create_task(raft.wait(), name="broker-raft-wait")
    exit_code = 0
    shut_down_cleanly = False
    try:
        done, _ = await asyncio.wait({stop_task, raft_task, *tasks},
                                     return_when=asyncio.FIRST_COMPLETED)
        failed = [t for t in (raft_task, *tasks)
                  if t in done and not t.cancelled() and t.exception() is not None]
        if failed:
            exit_code = 1
            print(f"kraftlog: error: broker task {failed[0].get_name()} failed: "
                  f"{failed[0].exception()}", file=sys.stderr)
        else:
            timeout_s = cfg.get_int("broker.session.timeout.ms") / 1000
            done_ok = await lifecycle.controlled_shutdown(timeout_s)
            shut_down_cleanly = done_ok
            logger.info("broker=%d event=controlled_shutdown completed=%s", node_id, done_ok)
    finally:
        await health.shutdown()
        await lifecycle.stop()
        await fetchers.stop()
        await groups.stop()
        await data.stop()
        if shared is None:
            await raft.stop(graceful=False)
        for task in (*tasks, stop_task, raft_task):
            task.cancel()
        await asyncio.gather(*tasks, stop_task, raft_task, return_exceptions=True)
        await producer_id_allocator.close()
        await client.close()
        await rpc_guard.stop_server(grpc_server, SHUTDOWN_GRACE_S)
        await admin_locator.close()
        if checkpoint_write is not None:
            await asyncio.gather(checkpoint_write, return_exceptions=True)
        logs.write_checkpoints(manager.high_watermarks())
        logs.close(list(manager.partitions.values()))
        # After the flush of close: every recovery point is its log end, so the next start
        # scans nothing (Kafka's clean-shutdown path).
        logs.write_log_checkpoints(p for tp, p in manager.partitions.items()
                                   if not manager.is_offline(tp))
        if registry is not None:
            registry.close()
        if shut_down_cleanly:
            clean_shutdown.write(log_dirs, lifecycle.broker_epoch)
            logger.info("broker=%d event=clean_shutdown_marked broker_epoch=%d", node_id,
                        lifecycle.broker_epoch)
    return exit_code


async def _alter_partitions(client: controller_client.ControllerClient,
                            manager: rm.ReplicaManager,
                            lifecycle: controller_client.BrokerLifecycle,
                            requests: list[partition_mod.AlterPartitionRequest],
                            tracer: tracing.Tracer,
                            on_isr_change: Callable[..., None] | None = None) -> None:
    """Send ISR proposals to the controller; feed each answer back to its partition
    (``on_isr_change(old_size=, new_size=)`` for each change the controller accepted)."""
    by_topic: dict[Uuid, controller_pb2.AlterPartitionRequest.TopicData] = {}
    for request in requests:
        topic = by_topic.get(request.topic_id)
        if topic is None:
            topic = by_topic[request.topic_id] = controller_pb2.AlterPartitionRequest.TopicData(
                topic_id=server.uuid_to_proto(request.topic_id))
        topic.partitions.append(controller_pb2.AlterPartitionRequest.PartitionData(
            partition_index=request.partition_index, leader_epoch=request.leader_epoch,
            partition_epoch=request.partition_epoch, new_isr_with_epochs=[
                controller_pb2.AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=-1)
                for b in request.new_isr]))
    message = controller_pb2.AlterPartitionRequest(
        broker_id=lifecycle.broker_id, broker_epoch=lifecycle.broker_epoch,
        topics=list(by_topic.values()))
    with tracer.start_as_current_span("partition.alter_partition", attributes={
            "kraftlog.node.id": lifecycle.broker_id,
            "kraftlog.partitions": [f"{r.topic}-{r.partition_index}" for r in requests],
            "partition.new_isrs": [",".join(map(str, r.new_isr)) for r in requests]}) as span:
        try:
            answer = await client.call(
                "AlterPartition", message,
                deadline_s=time.monotonic() + client.request_timeout_ms / 1000)
        except TimeoutError:
            answer = None
        span.set_attribute("kraftlog.error", "REQUEST_TIMED_OUT" if answer is None
                           else ErrorCode(answer.error.code).name)
    results: dict[tuple[Uuid, int], Any] = {}
    top_error = ErrorCode.REQUEST_TIMED_OUT if answer is None else ErrorCode(answer.error.code)
    if answer is not None:
        for topic_answer in answer.topics:
            topic_id = server.uuid_from_proto(topic_answer.topic_id)
            for part in topic_answer.partitions:
                results[(topic_id, part.partition_index)] = part
    now_ms = wall_ms()
    for request in requests:
        part = results.get((request.topic_id, request.partition_index))
        if part is None:
            error = top_error if top_error is not ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR
            manager.handle_alter_partition_response(request, error=error, result=None,
                                                    now_ms=now_ms)
            continue
        code = ErrorCode(part.error.code)
        result = None if code is not ErrorCode.NONE else partition_mod.LeaderAndIsr(
            leader_id=part.leader_id, leader_epoch=part.leader_epoch, isr=tuple(part.isr),
            partition_epoch=part.partition_epoch)
        outcome = manager.handle_alter_partition_response(request, error=code, result=result,
                                                          now_ms=now_ms)
        # Our proposal was committed: count it whether this answer applied it or the
        # metadata log brought the new ISR first (then the answer is ignored as stale).
        if on_isr_change is not None and result is not None \
                and tuple(sorted(result.isr)) == request.new_isr:
            on_isr_change(old_size=len(request.based_on_isr), new_size=len(result.isr))
        logger.info("broker=%d partition=%s-%d event=alter_partition_answer error=%s isr=%s "
                    "applied=%s retry=%s", lifecycle.broker_id, request.topic,
                    request.partition_index, code.name, list(part.isr), outcome.applied,
                    outcome.retry)


def run_broker(args: argparse.Namespace) -> int:
    overrides = list(args.override or ())
    if getattr(args, "metrics_port", None) is not None:
        overrides.append(f"kraftlog.metrics.port={args.metrics_port}")
    cfg = kconfig.load(BROKER_CONFIG, args.config, overrides)
    log_setup.configure(level=args.log_level or cfg.get_str("kraftlog.log.level"),
                        log_format=args.log_format or cfg.get_str("kraftlog.log.format"))
    logging.getLogger("kraftlog.raft.consensus").setLevel(logging.WARNING)
    for key in cfg.unused():
        logger.warning("event=unused_config key=%s", key)
    apply_malloc_config(cfg)
    return asyncio.run(serve(cfg))


def apply_malloc_config(cfg: kconfig.Config) -> None:
    threshold = cfg.get_int("kraftlog.malloc.mmap.threshold.bytes")
    if malloc_tuning.tune(threshold):
        logger.info("event=malloc_tuned mmap_threshold_bytes=%d", threshold)
