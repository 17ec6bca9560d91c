"""One broker (Kafka's ``BrokerServer``): :class:`BrokerServer`, run by ``kraftlog broker``.

Startup, in order:

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
   broker is registered, caught up and unfenced; "in-sync" once it is also in the ISR of
   the partitions it hosts, or has been out of it ``kraftlog.readiness.isr.timeout.ms``
   (:mod:`kraftlog.broker.readiness`; the Helm chart's readiness probe). The same port
   serves the AdminService (:func:`kraftlog.admin.admin_service.serve_on`, forwarding to the
   active controller of ``controller.quorum.voters``), so tools take ``--bootstrap-server
   BROKER`` (KIP-590); the listeners named in ``kraftlog.kafka.listener.names`` (default
   ``KAFKA``) speak Kafka's binary protocol instead (:mod:`kraftlog.broker.kafka_server`,
   :mod:`kraftlog.broker.kafka_apis`: the same data plane); every further broker listener
   (e.g. EXTERNAL) gets BrokerService and AdminService on a gRPC server of its own, whose
   Metadata names that listener's endpoints;
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

Composition root: process I/O (files, signals, sockets, the clock); the tool
(:mod:`kraftlog.tools.broker_commands`) parses the command line and sets up logging.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pathlib
import resource as rlimit
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kraftlog import config as kconfig
from kraftlog import errors, health_server, malloc_tuning, rpc, rpc_guard
from kraftlog.admin import admin_service
from kraftlog.broker import (
    clean_shutdown,
    controller_client,
    data_plane,
    fetcher_driver,
    kafka_apis,
    kafka_server,
    log_cleaner,
    log_manager,
    server,
)
from kraftlog.broker import group_coordinator_driver as gcd
from kraftlog.broker import partition as partition_mod
from kraftlog.broker import readiness as broker_readiness
from kraftlog.broker import reconciler as rc
from kraftlog.broker import replica_manager as rm
from kraftlog.broker import replication_quota as rq
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import Uuid, random_uuid
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import loader as ld
from kraftlog.metadata import record_convert
from kraftlog.raft import driver
from kraftlog.raft import quorum_state_store as qss
from kraftlog.raft.raft_config import parse_voters
from kraftlog.raft.storage_log import StorageRaftLog
from kraftlog.security import config as security_config
from kraftlog.security import tls
from kraftlog.server import controller_server, shared_server
from kraftlog.storage import cleaner as storage_cleaner
from kraftlog.storage import file_handles, log_dir_lock, meta_properties
from kraftlog.storage.log_config import LogConfig
from kraftlog.telemetry import broker_metrics as bm
from kraftlog.telemetry import grpc_tracing, metrics, tracing
from kraftlog.telemetry import logging as log_setup
from kraftlog.v1 import common_pb2, controller_pb2

logger = logging.getLogger(__name__)

BROKER_SERVICE_NAME = "kraftlog.v1.BrokerService"
REPLICATION_CHECKPOINT = log_manager.REPLICATION_CHECKPOINT
RECOVERY_POINT_CHECKPOINT = log_manager.RECOVERY_POINT_CHECKPOINT
LOG_START_CHECKPOINT = log_manager.LOG_START_CHECKPOINT
RECONCILE_PASS_INTERVAL_S = 120.0
DELTA_STEP_PARTITIONS = 8
"""Replicas a metadata delta converges at once; the rest of a large delta is drained by its
own task in slices of this size for up to :data:`DELTA_TURN_BUDGET_S` per event-loop turn
(creating or moving thousands of replicas must not stop health checks and fetches for
seconds; a new leader's leader-epoch checkpoint alone is two fsyncs, 10-40 ms on a busy
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
    kconfig.ConfigKey(name="controller.quorum.voters", type=_S, default="",
                      doc="the controller voter set, id@host:port,...; with a dynamic quorum "
                          "(KIP-853) leave empty and set controller.quorum.bootstrap.servers"),
    kconfig.ConfigKey(name="listeners", type=_L, default=None, required=True,
                      doc="NAME://host:port,...; each broker listener is served (Metadata on it names "
                          "its listener's endpoints) and registered"),
    kconfig.ConfigKey(name="advertised.listeners", type=_L, default=None,
                      doc="NAME://host:port,... registered for clients and other brokers "
                          "(default: listeners)"),
    kconfig.ConfigKey(name="log.dirs", type=_L, default=None, required=True,
                      doc="directories holding partition logs, each formatted"),
    kconfig.ConfigKey(name="metadata.log.dir", type=_S, default=None,
                      doc="directory holding __cluster_metadata-0; default: first of log.dirs"),
    kconfig.ConfigKey(name="broker.rack", type=_S, default="", doc="this broker's rack"),
    kconfig.ConfigKey(name="kraftlog.readiness.isr.timeout.ms", type=_I, default=300_000,
                      validator=kconfig.at_least(0),
                      doc="the 'in-sync' health service turns SERVING after this long out of "
                          "the ISR of a hosted partition (kraftlog.broker.readiness)"),
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
                      validator=security_config.protocol_map_validator,
                      doc="NAME:PROTOCOL,...; PLAINTEXT or SSL (SASL_* refused for now)"),
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
                          "the least recently used are closed and reopened on demand; "
                          "0 = half of the open-files limit (RLIMIT_NOFILE, its soft limit raised "
                          "to the hard one at start)"),
    kconfig.ConfigKey(name="kraftlog.malloc.mmap.threshold.bytes", type=_I,
                      default=DEFAULT_MALLOC_MMAP_THRESHOLD_BYTES, validator=kconfig.at_least(0),
                      doc="glibc M_MMAP_THRESHOLD for the broker process (its trim threshold is 4x): "
                          "record buffers below it are reused from the heap instead of fresh, "
                          "page-faulted mmaps; 0 = glibc's defaults"),
    *gcd.CONFIG_KEYS,
    *kafka_server.CONFIG_KEYS,
    *log_cleaner.CONFIG_KEYS,
    *security_config.SERVER_CONFIG_KEYS,
    *metrics.CONFIG_KEYS,
    *log_setup.CONFIG_KEYS,
])

# The raft observer's timeouts share the controllers' keys (controller.quorum.*).
for _name, _key in controller_server.CONTROLLER_CONFIG.keys().items():
    if _name.startswith("controller.quorum.") and _name != "controller.quorum.voters":
        BROKER_CONFIG.define(_key)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


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


# -- the process --------------------------------------------------------------------------------

class _Publisher:
    """MetadataPublisher: reconcile, then move the fetchers; runs in the raft driver's task."""

    def __init__(self, reconciler: rc.Reconciler, fetchers: fetcher_driver.ReplicaFetcherManager,
                 data: data_plane.DataPlane, on_image: Callable[[], None],
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
        """One span per partition leader change seen here (every partition leader change is a span),
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


async def serve(cfg: kconfig.Config, *, shared: shared_server.SharedServer | None = None) -> int:
    """Run a :class:`BrokerServer` until SIGTERM/SIGINT; with ``shared`` (combined mode) it
    listens to the co-located controller's raft driver instead of fetching the log as an
    observer, and stops on ``shared.stop``."""
    return await BrokerServer(cfg, shared=shared).run()


def _extra_listener_servers(extra: list[common_pb2.Endpoint],
                            advertised: list[common_pb2.Endpoint],
                            servicer_for: Callable[[str], server.BrokerServicer],
                            admin_settings: admin_service.AdminSettings,
                            tls_for: Callable[[str], tls.ServerTls | None],
                            ) -> tuple[list[Any], list[Any]]:
    """A gRPC server (BrokerService + AdminService, bound, not started) per further broker
    listener, e.g. the Helm chart's EXTERNAL one. gRPC does not tell a servicer which port a
    call came in on, and Metadata and leader hints must name the endpoints of the listener
    the client connected to (Kafka's rule), so each listener gets a servicer of its own."""
    names = {e.listener_name for e in advertised}
    servers: list[Any] = []
    locators: list[Any] = []
    for endpoint in extra:
        if endpoint.listener_name not in names:
            raise errors.ConfigError(f"listener {endpoint.listener_name} is not in "
                                     f"advertised.listeners {sorted(names)}: clients of it "
                                     "could not be told where to connect")
        server_tls = tls_for(endpoint.listener_name)
        grpc_server = server.create_server(servicer_for(endpoint.listener_name),
                                           server_tls=server_tls)
        locators.append(admin_service.serve_on(grpc_server, admin_settings))
        rpc.bind(grpc_server, f"{endpoint.host or '0.0.0.0'}:{endpoint.port}",
                 server_tls=server_tls)
        servers.append(grpc_server)
    return servers, locators


class BrokerServer:
    """One broker (Kafka's ``BrokerServer``): the startup steps of the module docstring.

    :meth:`start` locks every log dir and the metadata dir first (``.lock``,
    :mod:`kraftlog.storage.log_dir_lock`: a second process on them exits at once), checks
    and recovers the logs, and starts serving; :meth:`wait` returns the exit code when the
    broker should stop (a signal, ``shared.stop`` or a failed task), after the controlled
    shutdown; :meth:`shutdown` stops what :meth:`start` started and writes the final
    checkpoints (and the clean-shutdown marker after a completed controlled shutdown).
    :meth:`run` is the three in turn.
    """

    def __init__(self, cfg: kconfig.Config, *,
                 shared: shared_server.SharedServer | None = None) -> None:
        self.cfg = cfg
        self.shared = shared
        self.node_id = cfg.get_int("node.id")
        self.exit_code = 0
        self._shut_down_cleanly = False
        self._resources = contextlib.AsyncExitStack()
        self._serving = False
        """True once every task runs (shutdown must stop them and close the logs)."""
        self._tasks: list[asyncio.Task[Any]] = []
        self.kafka_listeners: list[kafka_server.KafkaListener] = []
        self.extra_servers: list[Any] = []
        self.extra_locators: list[Any] = []
        # The periodic checkpoint write in its worker thread, if one runs: awaited before the
        # shutdown writes the same files.
        self._checkpoint_write: asyncio.Future[list[tuple[str, str]]] | None = None

    async def run(self) -> int:
        try:
            await self.start()
            return await self.wait()
        finally:
            await self.shutdown()

    # -- start-up ------------------------------------------------------------------------------

    async def start(self) -> None:
        cfg, shared, node_id = self.cfg, self.shared, self.node_id
        resources = self._resources
        resources.enter_context(log_dir_lock.lock_dirs(
            [*map(pathlib.Path, cfg.get_list("log.dirs")),
             *map(pathlib.Path, filter(None, [cfg.get_str("metadata.log.dir")]))]))
        if shared is not None:
            resources.callback(shared.broker_done)
        if "broker" not in cfg.get_list("process.roles"):
            raise errors.ConfigError("process.roles must contain 'broker' for 'kraftlog broker'")
        voters_text = cfg.get_str("controller.quorum.voters")
        voters = parse_voters(voters_text) if voters_text.strip() else {}
        if not voters and not cfg.get_list("controller.quorum.bootstrap.servers"):
            raise errors.ConfigError("set controller.quorum.voters or (dynamic quorum, KIP-853) "
                                     "controller.quorum.bootstrap.servers")
        if node_id in voters and shared is None:
            raise errors.ConfigError(f"node.id {node_id} is a controller voter; a broker must use "
                                     "an id outside controller.quorum.voters (or run both roles "
                                     "in one process with 'kraftlog server')")
        controller_names = set(cfg.get_list("controller.listener.names"))
        kafka_names = set(cfg.get_list(kafka_server.LISTENER_NAMES))
        all_listeners = [e for e in parse_listeners(cfg.get_list("listeners"))
                         if e.listener_name not in controller_names]
        kafka_endpoints = [e for e in all_listeners if e.listener_name in kafka_names]
        listeners = [e for e in all_listeners if e.listener_name not in kafka_names]  # gRPC
        advertised = [e for e in parse_listeners(cfg.get_list("advertised.listeners")
                                                 or cfg.get_list("listeners"))
                      if e.listener_name not in controller_names]
        if cfg.get_str("inter.broker.listener.name") in kafka_names:
            raise errors.ConfigError(f"inter.broker.listener.name "
                                     f"{cfg.get_str('inter.broker.listener.name')} is a "
                                     f"Kafka-protocol listener ({kafka_server.LISTENER_NAMES}); "
                                     "brokers replicate over a gRPC one")
        protocols = security_config.parse_protocol_map(
            cfg.get_list("listener.security.protocol.map"))
        for e in kafka_endpoints:
            if security_config.listener_protocol(protocols, e.listener_name) \
                    is not security_config.Protocol.PLAINTEXT:
                raise errors.ConfigError(f"listener {e.listener_name} is a Kafka-protocol "
                                         "listener: it serves PLAINTEXT only so far (no SSL or "
                                         "SASL on it yet)")
        # gRPC endpoints first: tools and the admin service dial a broker's first registered one.
        advertised.sort(key=lambda e: e.listener_name in kafka_names)
        if not listeners or not advertised:
            raise errors.ConfigError("listeners has no gRPC broker listener (only "
                                     f"controller.listener.names {sorted(controller_names)} and "
                                     f"{kafka_server.LISTENER_NAMES} {sorted(kafka_names)})")
        log_dirs = self.log_dirs = [pathlib.Path(d) for d in cfg.get_list("log.dirs")]
        meta_dir = pathlib.Path(cfg.get_str("metadata.log.dir") or log_dirs[0])
        cluster_id = shared_server.check_storage(meta_dir, node_id)
        dir_ids = [p.directory_id for d in log_dirs
                   if (p := check_log_dir(d, node_id, cluster_id)).directory_id is not None]
        raft_log: StorageRaftLog | None = None
        store: qss.FileQuorumStateStore | None = None
        if shared is None:  # combined mode: the controller owns the metadata log
            partition_dir = meta_dir / shared_server.METADATA_PARTITION_DIR
            store = qss.FileQuorumStateStore(partition_dir / qss.QUORUM_STATE_FILE_NAME,
                                             cluster_id=cluster_id)
            store.read()  # a corrupt file refuses before anything starts
            raft_log = StorageRaftLog.open(partition_dir, clock_ms=wall_ms)
            resources.callback(raft_log.close)
        tracer = self.tracer = tracing.setup_tracing(role="broker", node_id=node_id)
        resources.callback(tracer.shutdown)  # flushes the spans still buffered

        listener_name = cfg.get_str("inter.broker.listener.name")
        if listener_name not in {e.listener_name for e in advertised}:
            raise errors.ConfigError(f"inter.broker.listener.name {listener_name} is not among the "
                                     f"advertised listeners "
                                     f"{sorted(e.listener_name for e in advertised)}")
        group_config = gcd.config_from(cfg)  # a bad offsets.* value fails before anything opens
        # TLS: the served listener's, and one client side for the controllers and the replicas.
        server_tls = tls.listener_tls(cfg, listeners[0].listener_name)
        rpc.configure_client(tls.node_client_tls(
            cfg, [(cfg.get_list("controller.listener.names") or ["CONTROLLER"])[0],
                  listener_name]))
        loader = self.loader = ld.MetadataLoader(decode=record_convert.decode)
        quota_window = rq.QuotaWindow(
            samples=cfg.get_int("replication.quota.window.num"),
            sample_ms=cfg.get_int("replication.quota.window.size.seconds") * 1000)
        self.leader_quota = rq.ReplicationQuota(rq.QuotaType.LEADER, window=quota_window)
        self.follower_quota = rq.ReplicationQuota(rq.QuotaType.FOLLOWER, window=quota_window)
        manager = self.manager = rm.ReplicaManager(broker_id=node_id,
                                                   leader_quota=self.leader_quota)
        self._health_changed = asyncio.Event()
        self._alter_wakeup = asyncio.Event()
        self._reconcile_wakeup = asyncio.Event()
        data = self.data = data_plane.DataPlane(manager, now_ms=wall_ms,
                                            on_alter_partition=self._alter_wakeup.set)
        partition_config = partition_mod.PartitionConfig(
            replica_lag_time_max_ms=cfg.get_int("replica.lag.time.max.ms"),
            min_insync_replicas=cfg.get_int("min.insync.replicas"),
            max_message_bytes=cfg.get_int("message.max.bytes"),
            compacted=storage_cleaner.is_compacted(cfg.get_list("log.cleanup.policy")))
        logs = self.logs = log_manager.LocalLogs(
            broker_id=node_id, log_dirs=log_dirs, log_config=broker_log_config(cfg),
            partition_config=partition_config, image=lambda: loader.image, now_ms=wall_ms,
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
        dir_id_of = {log_manager.dir_key(d): i for d, i in zip(log_dirs, dir_ids, strict=True)}
        reconciler = rc.Reconciler(broker_id=node_id, manager=manager, store=logs)

        settings = shared_server.raft_config(cfg)
        controllers = controller_client.KnownControllers(voters)
        client = self.client = controller_client.ControllerClient(
            controllers, raft_leader=lambda: loader.leader_id,
            request_timeout_ms=settings.request_timeout_ms)
        lifecycle = self.lifecycle = controller_client.BrokerLifecycle(
            client, broker_id=node_id, cluster_id=cluster_id, incarnation_id=random_uuid(),
            listeners=advertised, rack=cfg.get_str("broker.rack"), log_dir_ids=dir_ids,
            heartbeat_interval_ms=cfg.get_int("broker.heartbeat.interval.ms"),
            metadata_offset=lambda: loader.image.provenance.last_offset,
            on_change=self._health_changed.set, previous_broker_epoch=previous_broker_epoch,
            offline_log_dirs=lambda: [dir_id_of[d] for d in manager.offline_log_dirs
                                      if d in dir_id_of])

        def endpoint_of(broker_id: int) -> str | None:
            broker = loader.image.cluster.broker(broker_id)
            endpoint = broker.endpoint(listener_name) if broker is not None else None
            return None if endpoint is None else f"{endpoint.host}:{endpoint.port}"

        fetchers = self.fetchers = fetcher_driver.ReplicaFetcherManager(
            broker_id=node_id, manager=manager, data=data, endpoint=endpoint_of,
            broker_epoch=lambda: lifecycle.broker_epoch, config=fetcher_driver.FetcherConfig(
                fetch_backoff_ms=cfg.get_int("replica.fetch.backoff.ms"),
                fetch_max_bytes=cfg.get_int("replica.fetch.max.bytes"),
                fetch_response_max_bytes=cfg.get_int("replica.fetch.response.max.bytes"),
                fetch_wait_max_ms=cfg.get_int("replica.fetch.wait.max.ms"),
                fetch_min_bytes=cfg.get_int("replica.fetch.min.bytes"),
                num_fetchers=cfg.get_int(NUM_REPLICA_FETCHERS)), quota=self.follower_quota)
        self.publisher = _Publisher(reconciler, fetchers, data, on_image=self._health_changed.set,
                                    tracer=tracer.tracer,
                                    quotas=(self.leader_quota, self.follower_quota),
                                    cluster_id=cluster_id, on_configs=logs.apply_topic_configs,
                                    static_num_fetchers=cfg.get_int(NUM_REPLICA_FETCHERS),
                                    on_pending=self._reconcile_wakeup.set)
        loader.add_publisher(self.publisher)

        # Group offsets (__consumer_offsets): published after the reconciler, so it sees the
        # replicas already moved; loads / unloads partitions as their leadership moves here.
        groups = self.groups = gcd.GroupCoordinatorDriver(
            broker_id=node_id, data=data, image=lambda: loader.image,
            listener_name=listener_name, config=group_config,
            create_topics=self._create_topics, now_ms=wall_ms)
        loader.add_publisher(groups)
        if shared is None:
            assert raft_log is not None and store is not None
            raft = driver.RaftDriver(node_id=node_id, voters=voters, cluster_id=cluster_id,
                                     config=settings, log=raft_log, store=store, listener=loader,
                                     channel_interceptors=(
                                         grpc_tracing.client_interceptors(tracer.tracer)
                                         if tracer.enabled else ()),
                                     dynamic=driver.DynamicQuorum(bootstrap_servers=tuple(
                                         cfg.get_list("controller.quorum.bootstrap.servers")
                                         or ())))
        else:
            shared.register_listener(loader)
            published = await shared.wait_published()
            if published is None:
                return  # the process stops before the controller started raft: wait() answers 0
            raft = published
        self.raft = raft
        raft_client = raft.client
        controllers.bind(lambda: raft_client.voter_set.endpoints())
        # The AdminService on each listener finds the controllers the metadata log names.
        admin_settings = admin_service.AdminSettings(
            bootstrap_controllers=tuple(dict.fromkeys(
                [*voters.values(), *(cfg.get_list("controller.quorum.bootstrap.servers") or ())])),
            voters=controllers, request_timeout_ms=settings.request_timeout_ms)

        # Combined mode: the controller's endpoint serves the process; no second one.
        metrics_port = cfg.get_int("kraftlog.metrics.port") if shared is None else 0
        registry = self.registry = metrics.MetricsRegistry() if metrics_port else None
        self.broker_metrics = bm.BrokerMetrics(registry.registry) if registry is not None else None
        self.producer_id_allocator = controller_client.ProducerIdAllocator(client, lifecycle)
        # Requests on the streams (FetchStream, ProduceStream) are timed by the servicer: the
        # interceptors see a stream as one call.
        observe_request = (self.broker_metrics.observe_request
                           if self.broker_metrics is not None else None)
        servicer = server.BrokerServicer(data, broker_id=node_id, cluster_id=cluster_id,
                                         image=lambda: loader.image,
                                         controller_id=lambda: loader.leader_id,
                                         listener_name=listener_name,
                                         log_dirs=[str(d) for d in log_dirs],
                                         ready=lambda: lifecycle.ready,
                                         producer_ids=self._allocate_producer_id, groups=groups,
                                         broker_identity=tls.identities(cfg)[0],
                                         observe_request=observe_request)
        apis = kafka_apis.KafkaApis(data, broker_id=node_id, cluster_id=cluster_id,
                                    image=lambda: loader.image, ready=lambda: lifecycle.ready,
                                    producer_ids=self._allocate_producer_id, groups=groups,
                                    controller=lambda method, request, deadline_s: client.call(
                                        method, request, deadline_s=deadline_s),
                                    monotonic_s=time.monotonic)
        self.kafka_listeners = [
            kafka_server.KafkaListener(apis, name=e.listener_name, host=e.host, port=e.port,
                                       broker_id=node_id,
                                       max_request_bytes=cfg.get_int("socket.request.max.bytes"))
            for e in kafka_endpoints]
        grpc_server = self.grpc_server = server.create_server(
            servicer, interceptors=grpc_tracing.data_path_interceptors(
                tracer.tracer if tracer.enabled else None,
                self.broker_metrics.observe_request if self.broker_metrics is not None else None),
            server_tls=server_tls)
        self.admin_locator = admin_service.serve_on(grpc_server, admin_settings, interceptors=(
                grpc_tracing.client_interceptors(tracer.tracer) if tracer.enabled else ()))
        health = self.health = health_server.ServerHealth(
            grpc_server, service=BROKER_SERVICE_NAME, reflected=(admin_service.SERVICE_NAME,))
        listen = f"{listeners[0].host or '0.0.0.0'}:{listeners[0].port}"
        rpc.bind(grpc_server, listen, server_tls=server_tls)
        self.extra_servers, self.extra_locators = _extra_listener_servers(
            listeners[1:], advertised, lambda name: server.BrokerServicer(
                data, broker_id=node_id, cluster_id=cluster_id, image=lambda: loader.image,
                controller_id=lambda: loader.leader_id, listener_name=name,
                log_dirs=[str(d) for d in log_dirs], ready=lambda: lifecycle.ready,
                producer_ids=self._allocate_producer_id, groups=groups,
                broker_identity=tls.identities(cfg)[0], observe_request=observe_request),
            admin_settings,
            lambda name: tls.listener_tls(cfg, name))
        if registry is not None:
            try:
                registry.serve(metrics_port, cfg.get_str("kraftlog.metrics.host"))
            except OSError as exc:
                await grpc_server.stop(None)
                raise errors.ConfigError(f"cannot serve metrics on "
                                         f"{cfg.get_str('kraftlog.metrics.host')}:{metrics_port}: "
                                         f"{exc}") from None
        await grpc_server.start()
        for extra_server in self.extra_servers:
            await extra_server.start()
        for kafka_listener in self.kafka_listeners:
            try:
                await kafka_listener.start()
            except OSError as exc:
                await grpc_server.stop(None)
                raise errors.ConfigError(f"cannot listen on {kafka_listener.host}:"
                                         f"{kafka_listener.port} ({kafka_listener.name}): "
                                         f"{exc}") from None
        await health.start(serving=False)
        await health.set_named(health_server.IN_SYNC_SERVICE_NAME, False)
        self._in_sync_gate = broker_readiness.InSyncGate(
            timeout_ms=cfg.get_int("kraftlog.readiness.isr.timeout.ms"))
        data.start()
        groups.start()
        if shared is None:
            raft.start()
        lifecycle.start()
        logger.info("broker=%d event=started listener=%s cluster_id=%s voters=%s pid=%d", node_id,
                    listen, cluster_id, ",".join(f"{v}@{e}" for v, e in sorted(voters.items())),
                    os.getpid())
        data.on_log_start_offsets_moved = self._persist_log_start_offsets

        self._stop = shared.stop if shared is not None else asyncio.Event()
        loop = asyncio.get_running_loop()
        if shared is None:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop.set)
        self._tasks = [loop.create_task(self._publish_health(), name="broker-health"),
                       loop.create_task(self._send_alter_partitions(),
                                        name="broker-alter-partition"),
                       loop.create_task(self._drain_reconcile(), name="broker-reconcile-drain"),
                       loop.create_task(self._periodic(), name="broker-periodic"),
                       loop.create_task(data.wait(), name="broker-data-plane"),
                       loop.create_task(lifecycle.wait(), name="broker-lifecycle"),
                       loop.create_task(groups.wait(), name="broker-group-coordinator-wait")]
        if self.broker_metrics is not None:
            self._tasks.append(loop.create_task(self._sample_metrics(self.broker_metrics),
                                                name="broker-metrics"))
        self._stop_task = loop.create_task(self._stop.wait(), name="broker-stop-signal")
        self._raft_task = loop.create_task(raft.wait(), name="broker-raft-wait")
        self._serving = True

    # -- what the servicer and the group coordinator call ----------------------------------------

    async def _create_topics(self, request: Any, deadline_s: float) -> Any:
        return await self.client.call("CreateTopics", request, deadline_s=deadline_s)

    async def _allocate_producer_id(self, deadline_s: float) -> tuple[ErrorCode, int, str]:
        return await self.producer_id_allocator.allocate(deadline_s=deadline_s)

    # -- the tasks -------------------------------------------------------------------------------

    async def _publish_health(self) -> None:
        gate, loader, health, node_id = (self._in_sync_gate, self.loader, self.health,
                                         self.node_id)
        in_sync: bool | None = None
        # The last scan and the topics image it read: images share unchanged parts, so an
        # image with the same topics object (NoOp records, configs, heartbeats) needs none.
        scanned: tuple[object, list[im.PartitionInfo]] | None = None
        while True:
            # Woken by metadata (ISR changes) and lifecycle changes; while a timeout is
            # pending, also when it expires. One O(partitions) scan per topics change at most.
            deadline_ms = gate.next_deadline_ms()
            timeout_s = (None if deadline_ms is None
                         else max(0.0, deadline_ms - monotonic_ms()) / 1000 + 0.01)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._health_changed.wait(), timeout_s)
            self._health_changed.clear()
            serving = self.lifecycle.ready
            if await health.set_serving(serving):
                logger.info("broker=%d event=health serving=%s broker_epoch=%d "
                            "metadata_offset=%d", node_id, serving,
                            self.lifecycle.broker_epoch, loader.image.provenance.last_offset)
            if serving and (scanned is None or scanned[0] is not loader.image.topics):
                scanned = (loader.image.topics,
                           list(broker_readiness.out_of_sync(loader.image, node_id)))
            lagging = scanned[1] if serving and scanned is not None else []
            ready = gate.update(now_ms=monotonic_ms(), base_ready=serving,
                                lagging=len(lagging))
            if ready != in_sync:
                in_sync = ready
                await health.set_named(health_server.IN_SYNC_SERVICE_NAME, ready)
                logger.info("broker=%d event=health service=%s serving=%s timed_out=%s "
                            "out_of_isr=%s", node_id, health_server.IN_SYNC_SERVICE_NAME, ready,
                            gate.timed_out, ",".join(f"{p.topic_name}-{p.partition_id}"
                                                     for p in lagging[:10]) or "-")

    async def _drain_reconcile(self) -> None:
        # A large delta's replicas, a slice per event-loop turn (DELTA_STEP_PARTITIONS).
        reconciler = self.publisher.reconciler
        while True:
            await self._reconcile_wakeup.wait()
            self._reconcile_wakeup.clear()
            while reconciler.pending:
                await asyncio.sleep(0)
                turn_ends = time.monotonic() + DELTA_TURN_BUDGET_S
                while reconciler.pending and time.monotonic() < turn_ends:
                    self.publisher.drain_step(self.loader.image)
            self.groups.wake()

    async def _send_alter_partitions(self) -> None:
        while True:
            await self._alter_wakeup.wait()
            self._alter_wakeup.clear()
            requests = self.manager.take_alter_partition_requests()
            # In requests of at most ALTER_PARTITION_MAX_PARTITIONS, one after the other: the
            # active controller handles each in one event, and thousands of partitions in one
            # event stalled its loop past the quorum's fetch timeout.
            for first in range(0, len(requests), ALTER_PARTITION_MAX_PARTITIONS):
                await _alter_partitions(self.client, self.manager, self.lifecycle,
                                        requests[first:first + ALTER_PARTITION_MAX_PARTITIONS],
                                        self.tracer.tracer,
                                        on_isr_change=None if self.broker_metrics is None
                                        else self.broker_metrics.observe_isr_change)
                self.data.dispatch()

    async def _periodic(self) -> None:
        cfg, manager, logs, node_id = self.cfg, self.manager, self.logs, self.node_id
        interval_s = cfg.get_int("replica.high.watermark.checkpoint.interval.ms") / 1000
        retention_s = cfg.get_int("log.retention.check.interval.ms") / 1000
        last_retention = time.monotonic()
        tick_s = min(interval_s, retention_s)
        last_plan: log_manager.CheckpointPlan | None = None
        cleaner = log_cleaner.LogCleaner.from_config(cfg, image=lambda: self.loader.image,
                                                     broker_id=node_id)
        while True:
            await asyncio.sleep(min(interval_s, retention_s))
            if len(manager.offline_log_dirs) >= len(self.log_dirs):
                # Kafka halts a broker whose every log dir failed: nothing left to serve.
                raise errors.StorageError(
                    f"every log dir is offline ({', '.join(sorted(manager.offline_log_dirs))}): "
                    "replace the failed disks and restart the broker")
            # Contents read here, files written (fsynced) off the loop, failures handled here.
            plan = logs.plan_checkpoints(manager.high_watermarks(),
                                         [p for tp, p in manager.partitions.items()
                                          if not manager.is_offline(tp)])
            if plan != last_plan:  # an idle broker's files already say this: no rewrite
                self._checkpoint_write = asyncio.ensure_future(
                    asyncio.to_thread(log_manager.write_checkpoint_plan, plan))
                failures = await asyncio.shield(self._checkpoint_write)
                logs.report_checkpoint_failures(failures)
                last_plan = None if failures else plan
            # Each phase below walks every replica: at 10,000 a phase is tens of ms, so the
            # loop gets a turn between them (health checks and fetches wait for one phase,
            # not for the whole tick).
            await asyncio.sleep(0)
            now = time.monotonic()
            # A full pass every RECONCILE_PASS_INTERVAL_S, a slice of it per tick.
            steps = max(1, int(RECONCILE_PASS_INTERVAL_S / tick_s))
            self.publisher.reconcile_step(self.loader.image,
                                          -(-2 * len(manager.partitions) // steps) + 1)
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

    async def _persist_log_start_offsets(self) -> None:
        # DeleteRecords moved a leader's log start offset: checkpoint it before the answer,
        # so a restart cannot bring back the deleted records left in its first segment.
        # After the periodic write in flight, then on the loop with nothing awaited, so the
        # two never replace the same files at once (they share the temporary file names).
        while self._checkpoint_write is not None and not self._checkpoint_write.done():
            await asyncio.wait({self._checkpoint_write})
        manager = self.manager
        plan = [entry for entry in self.logs.plan_checkpoints(
            None, [p for tp, p in manager.partitions.items() if not manager.is_offline(tp)])
            if entry[1] == LOG_START_CHECKPOINT]
        self.logs.report_checkpoint_failures(log_manager.write_checkpoint_plan(plan))

    async def _sample_metrics(self, sink: bm.BrokerMetrics) -> None:
        quotas = (("leader", self.leader_quota), ("follower", self.follower_quota))
        while True:
            sink.sample(list(self.manager.partitions.values()), quotas, wall_ms())
            await asyncio.sleep(METRICS_SAMPLE_INTERVAL_S)

    # -- stopping --------------------------------------------------------------------------------

    async def wait(self) -> int:
        """Until a signal, ``shared.stop`` or a failed task; then the controlled shutdown
        (at most ``broker.session.timeout.ms``). The exit code: 1 after a failed task (printed
        as one line on stderr), else 0."""
        if not self._serving:
            return self.exit_code
        done, _ = await asyncio.wait({self._stop_task, self._raft_task, *self._tasks},
                                     return_when=asyncio.FIRST_COMPLETED)
        failed = [t for t in (self._raft_task, *self._tasks)
                  if t in done and not t.cancelled() and t.exception() is not None]
        if failed:
            self.exit_code = 1
            print(f"kraftlog: error: broker task {failed[0].get_name()} failed: "
                  f"{failed[0].exception()}", file=sys.stderr)
        else:
            timeout_s = self.cfg.get_int("broker.session.timeout.ms") / 1000
            done_ok = await self.lifecycle.controlled_shutdown(timeout_s)
            self._shut_down_cleanly = done_ok
            logger.info("broker=%d event=controlled_shutdown completed=%s", self.node_id, done_ok)
        return self.exit_code

    async def shutdown(self) -> None:
        """Stop what :meth:`start` started; write the final checkpoints and close the logs."""
        try:
            if self._serving:
                await self._stop_serving()
        finally:
            await self._resources.aclose()

    async def _stop_serving(self) -> None:
        self._serving = False
        manager, logs = self.manager, self.logs
        await self.health.shutdown()
        for kafka_listener in self.kafka_listeners:
            await kafka_listener.stop()
        await self.lifecycle.stop()
        await self.fetchers.stop()
        await self.groups.stop()
        await self.data.stop()
        if self.shared is None:
            await self.raft.stop(graceful=False)
        tasks = (*self._tasks, self._stop_task, self._raft_task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.producer_id_allocator.close()
        await self.client.close()
        await rpc_guard.stop_server(self.grpc_server, SHUTDOWN_GRACE_S)
        for extra_server in self.extra_servers:
            await rpc_guard.stop_server(extra_server, SHUTDOWN_GRACE_S)
        await self.admin_locator.close()
        for locator in self.extra_locators:
            await locator.close()
        if self._checkpoint_write is not None:
            await asyncio.gather(self._checkpoint_write, return_exceptions=True)
        logs.write_checkpoints(manager.high_watermarks())
        logs.close(list(manager.partitions.values()))
        # After the flush of close: every recovery point is its log end, so the next start
        # scans nothing (Kafka's clean-shutdown path).
        logs.write_log_checkpoints(p for tp, p in manager.partitions.items()
                                   if not manager.is_offline(tp))
        if self.registry is not None:
            self.registry.close()
        if self._shut_down_cleanly:
            clean_shutdown.write(self.log_dirs, self.lifecycle.broker_epoch)
            logger.info("broker=%d event=clean_shutdown_marked broker_epoch=%d", self.node_id,
                        self.lifecycle.broker_epoch)


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
                topic_id=record_convert.uuid_to_proto(request.topic_id))
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
            topic_id = record_convert.uuid_from_proto(topic_answer.topic_id)
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


def apply_malloc_config(cfg: kconfig.Config) -> None:
    threshold = cfg.get_int("kraftlog.malloc.mmap.threshold.bytes")
    if malloc_tuning.tune(threshold):
        logger.info("event=malloc_tuned mmap_threshold_bytes=%d", threshold)
