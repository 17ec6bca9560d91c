"""The controller side of a quorum member: QuorumController, ControllerService, jobs.

Owns :class:`ControllerHost`, which :class:`~.controller_server.ControllerServer`
plugs into its raft driver: the raft listener (QuorumController + the MetadataLoader
whose image snapshots are made from), the ControllerService servicer, and the periodic
jobs of an active controller:

- bootstrap: the first active controller of a new cluster writes the records of
  ``bootstrap.checkpoint`` (from ``kraftlog storage format``; ``metadata.version``
  at its latest level when there is none) when the log holds no ``metadata.version``;
- fence brokers whose ``broker.session.timeout.ms`` ran out, and move their leaderships;
- a NoOpRecord every ``metadata.max.idle.interval.ms`` so brokers see the log advance;
- auto leader rebalance every ``leader.imbalance.check.interval.seconds``;
- metadata snapshots (KIP-630) when ``metadata.log.max.record.bytes.between.snapshots``
  or ``metadata.log.max.snapshot.interval.ms`` says so, on every member (each raft
  replica snapshots its own log, as in Kafka).

Also :data:`CONFIG_KEYS`, the controller's server.properties keys (Kafka's names).
Composition root: asyncio and the clock.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kraftlog import config as kconfig
from kraftlog import errors
from kraftlog.controller import driver, server
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.controller.feature_control import METADATA_VERSION
from kraftlog.controller.result import ControllerResult
from kraftlog.controller.state import ControllerState
from kraftlog.metadata import bootstrap, record_convert
from kraftlog.metadata import loader as ld
from kraftlog.metadata import records as mr
from kraftlog.metadata import snapshot as msnap
from kraftlog.raft import consensus
from kraftlog.raft import driver as raft_driver
from kraftlog.raft.snapshot import SnapshotReader
from kraftlog.security import tls
from kraftlog.telemetry import controller_tracing

logger = logging.getLogger(__name__)

T = TypeVar("T")

_I = kconfig.ConfigType.INT
_L = kconfig.ConfigType.LONG
_B = kconfig.ConfigType.BOOLEAN
_DEFAULTS = ControllerConfig()

CONFIG_KEYS = (
    kconfig.ConfigKey(name="default.replication.factor", type=_I,
                      default=_DEFAULTS.default_replication_factor,
                      validator=kconfig.at_least(1),
                      doc="replication factor of topics created without one"),
    kconfig.ConfigKey(name="num.partitions", type=_I, default=_DEFAULTS.num_partitions,
                      validator=kconfig.at_least(1),
                      doc="partition count of topics created without one"),
    kconfig.ConfigKey(name="min.insync.replicas", type=_I,
                      default=_DEFAULTS.min_insync_replicas, validator=kconfig.at_least(1),
                      doc="default min.insync.replicas of topics"),
    kconfig.ConfigKey(name="unclean.leader.election.enable", type=_B,
                      default=_DEFAULTS.unclean_leader_election_enable,
                      doc="elect a leader outside the ISR when none is left (data loss)"),
    kconfig.ConfigKey(name="broker.session.timeout.ms", type=_I,
                      default=_DEFAULTS.broker_session_timeout_ms, validator=kconfig.at_least(1),
                      doc="ms without a heartbeat before a broker is fenced"),
    kconfig.ConfigKey(name="broker.heartbeat.interval.ms", type=_I,
                      default=_DEFAULTS.broker_heartbeat_interval_ms,
                      validator=kconfig.at_least(1), doc="ms between broker heartbeats"),
    kconfig.ConfigKey(name="auto.leader.rebalance.enable", type=_B,
                      default=_DEFAULTS.auto_leader_rebalance_enable,
                      doc="periodically move leadership back to preferred replicas"),
    kconfig.ConfigKey(name="leader.imbalance.check.interval.seconds", type=_I, default=300,
                      validator=kconfig.at_least(1),
                      doc="seconds between auto leader rebalance rounds"),
    kconfig.ConfigKey(name="metadata.max.idle.interval.ms", type=_I,
                      default=_DEFAULTS.metadata_max_idle_interval_ms,
                      validator=kconfig.at_least(0),
                      doc="ms between NoOpRecords of an idle active controller (0 = never)"),
    kconfig.ConfigKey(name="metadata.log.max.record.bytes.between.snapshots", type=_L,
                      default=msnap.DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS,
                      validator=kconfig.at_least(1),
                      doc="record bytes appended after which a metadata snapshot is made"),
    kconfig.ConfigKey(name="metadata.log.max.snapshot.interval.ms", type=_L,
                      default=msnap.DEFAULT_MAX_SNAPSHOT_INTERVAL_MS,
                      validator=kconfig.at_least(0),
                      doc="ms after which a metadata snapshot is made if anything was "
                          "appended (0 = never by time)"),
)

FENCE_CHECK_INTERVAL_S = 0.25
SNAPSHOT_CHECK_INTERVAL_S = 0.5


def controller_config(cfg: kconfig.Config, cluster_id: str) -> ControllerConfig:
    return ControllerConfig(
        cluster_id=cluster_id,
        default_replication_factor=cfg.get_int("default.replication.factor"),
        num_partitions=cfg.get_int("num.partitions"),
        min_insync_replicas=cfg.get_int("min.insync.replicas"),
        unclean_leader_election_enable=cfg.get_bool("unclean.leader.election.enable"),
        broker_session_timeout_ms=cfg.get_int("broker.session.timeout.ms"),
        broker_heartbeat_interval_ms=cfg.get_int("broker.heartbeat.interval.ms"),
        auto_leader_rebalance_enable=cfg.get_bool("auto.leader.rebalance.enable"),
        metadata_max_idle_interval_ms=cfg.get_int("metadata.max.idle.interval.ms"),
    )


def _decode(value: bytes, offset: int) -> Any:
    return record_convert.decode(value, offset=offset)


RECORD_CACHE_SIZE = 20_000
"""Records :class:`RecordCache` holds at most (two full operations' worth)."""


class RecordCache:
    """Each committed record decoded once per process, not once per consumer.

    Two consumers read every committed record here: the QuorumController and the
    MetadataLoader (kept for snapshots). On a standby both decode the same bytes; on the
    active controller the loader decodes what the controller has just encoded. So
    :meth:`encode` and :meth:`decode` remember ``bytes -> record`` and the next
    :meth:`decode` of equal bytes takes the record (and forgets it: each record has
    exactly one other consumer). Keyed by the bytes themselves, so it is exact: decoding
    is a pure function of the bytes, and records are immutable values, safe to share.
    Bounded (oldest out first); a miss only costs the decode it would have cost anyway.
    """

    def __init__(self, capacity: int = RECORD_CACHE_SIZE) -> None:
        self._capacity = capacity
        self._records: collections.OrderedDict[bytes, mr.MetadataRecord] = (
            collections.OrderedDict())

    def __len__(self) -> int:
        return len(self._records)

    def encode(self, record: mr.MetadataRecord) -> bytes:
        value = record_convert.encode(record)
        self._remember(value, record)
        return value

    def decode(self, data: bytes, *, offset: int) -> mr.MetadataRecord:
        key = data if type(data) is bytes else bytes(data)
        record = self._records.pop(key, None)
        if record is None:
            record = record_convert.decode(key, offset=offset)
            self._remember(key, record)
        return record

    def decode_at(self, value: bytes, offset: int) -> mr.MetadataRecord:
        """:meth:`decode` with the QuorumController's ``Decode`` signature."""
        return self.decode(value, offset=offset)

    def _remember(self, value: bytes, record: mr.MetadataRecord) -> None:
        records = self._records
        records[value] = record
        if len(records) > self._capacity:
            records.popitem(last=False)


class _SnapshotBookkeeper:
    """Record bytes committed since the last snapshot, and when that was."""

    def __init__(self) -> None:
        self.bytes_since_snapshot = 0
        self.last_snapshot_ms = time.monotonic_ns() // 1_000_000


class _CountingLoader:
    """Feeds the loader and counts the committed record bytes for the snapshot policy."""

    def __init__(self, loader: ld.MetadataLoader, books: _SnapshotBookkeeper) -> None:
        self._loader = loader
        self._books = books

    def handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        self._loader.handle_commit(batches)
        self._books.bytes_since_snapshot += sum(b.size_in_bytes for b in batches)

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        self._loader.handle_load_snapshot(reader)
        self._books.bytes_since_snapshot = 0

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self._loader.handle_leader_change(leader_id, epoch)


class _RaftProxy:
    """The QuorumController's raft, bound after the driver (which needs the listener) exists."""

    def __init__(self, host: ControllerHost) -> None:
        self._host = host

    def _raft(self) -> raft_driver.RaftDriver:
        if self._host.raft is None:
            raise errors.NotLeaderError("the raft driver is not running yet", leader_id=-1)
        return self._host.raft

    def propose_nowait(self, records: Sequence[bytes], *, epoch: int | None = None) -> int:
        return self._raft().propose_nowait(records, epoch=epoch)

    async def call(self, fn: Callable[[consensus.RaftClient, int], T]) -> T:
        return await self._raft().call(fn)

    def leader_and_epoch(self) -> tuple[int, int]:
        return self._raft().leader_and_epoch()

    def leader_next_offset(self, epoch: int) -> int | None:
        return self._raft().leader_next_offset(epoch)


class ControllerHost:
    """Everything a quorum member runs besides raft itself."""

    def __init__(self, cfg: kconfig.Config, *, node_id: int, cluster_id: str,
                 voters: dict[int, str], metadata_dir: pathlib.Path | None = None) -> None:
        self.node_id = node_id
        # bootstrap.checkpoint written by `kraftlog storage format`; read now, so a damaged
        # file stops the process before it starts rather than at its first activation.
        self.bootstrap_records = (None if metadata_dir is None else bootstrap.read_bootstrap(
            metadata_dir, decode=_decode))
        self.cluster_id = cluster_id
        self.voters = voters
        self.config = controller_config(cfg, cluster_id)
        self.broker_identity = tls.identities(cfg)[0]  # checked only on mTLS listeners
        self.rebalance_interval_s = cfg.get_int("leader.imbalance.check.interval.seconds")
        self.snapshot_policy = msnap.SnapshotPolicy(
            max_bytes_between_snapshots=cfg.get_int(
                "metadata.log.max.record.bytes.between.snapshots"),
            max_interval_ms=cfg.get_int("metadata.log.max.snapshot.interval.ms"))
        self.records = RecordCache()
        self.loader = ld.MetadataLoader(decode=self.records.decode)
        self._books = _SnapshotBookkeeper()
        self.controller: driver.QuorumController | None = None
        self.raft: raft_driver.RaftDriver | None = None
        self._jobs: list[asyncio.Task[None]] = []
        # Spans for elections, ISR changes, fencing and reassignments (None: tracing off).
        self.record_tracer = controller_tracing.observer(node_id, cluster_id=cluster_id)

    def endpoint_of(self, node: int) -> str:
        """A controller's ``host:port``: the raft voter set's (KIP-853), else the static one."""
        if self.raft is not None:
            return self.raft.client.endpoint_of(node) or self.voters.get(node, "")
        return self.voters.get(node, "")

    def _new_state(self) -> ControllerState:
        return ControllerState(self.config)

    # -- wiring (called by the process before the raft driver starts) --------------------------

    def listener(self) -> consensus.RaftListener:
        """Create the QuorumController; the listener the raft driver must be built with.
        :meth:`bind` then gives it that driver."""
        self.controller = driver.QuorumController(
            node_id=self.node_id, state_factory=self._new_state, raft=_RaftProxy(self),
            encode=self.records.encode, decode=self.records.decode_at,
            endpoint_of=self.endpoint_of,
            on_activate=self._on_activate, observer=self.record_tracer)
        return self.controller.raft_listener(also=[_CountingLoader(self.loader, self._books)])

    def bind(self, raft: raft_driver.RaftDriver, grpc_server: Any) -> None:
        """Use ``raft`` and serve ControllerService on ``grpc_server`` (not started yet)."""
        self.raft = raft
        assert self.controller is not None
        servicer = server.ControllerServicer(self.controller, cluster_id=self.cluster_id,
                                             endpoint_of=self.endpoint_of,
                                             broker_identity=self.broker_identity)
        server.add_to_server(servicer, grpc_server)

    def start(self) -> None:
        assert self.controller is not None
        self.controller.start()
        loop = asyncio.get_running_loop()
        jobs: list[tuple[float, Any, str]] = [
            (FENCE_CHECK_INTERVAL_S, self._fence_stale_brokers, "fence-stale-brokers"),
            (self.rebalance_interval_s, self._balance_leaders, "leader-rebalance"),
            (SNAPSHOT_CHECK_INTERVAL_S, self._maybe_snapshot, "metadata-snapshot"),
        ]
        if self.config.metadata_max_idle_interval_ms > 0:
            jobs.append((self.config.metadata_max_idle_interval_ms / 1000, self._no_op, "no-op"))
        for interval_s, job, name in jobs:
            self._jobs.append(loop.create_task(driver.run_periodically(interval_s, job, name),
                                               name=f"controller-{name}"))

    async def stop(self) -> None:
        for job in self._jobs:
            job.cancel()
        await asyncio.gather(*self._jobs, return_exceptions=True)
        self._jobs.clear()
        if self.controller is not None:
            await self.controller.stop()
        if self.record_tracer is not None:
            self.record_tracer.close()

    async def wait(self) -> None:
        if self.controller is not None:
            await self.controller.wait()

    # -- jobs -----------------------------------------------------------------------------------

    def _on_activate(self, state: Any, now_ms: int) -> ControllerResult[None] | None:
        assert isinstance(state, ControllerState)
        state.activate(now_ms)
        if METADATA_VERSION in state.features.finalized():
            return None
        records = self.bootstrap_records or state.bootstrap_records()
        logger.info("node=%s event=bootstrap_metadata source=%s records=%s", self.node_id,
                    "bootstrap.checkpoint" if self.bootstrap_records else "defaults", records)
        return ControllerResult(records=tuple(records), response=None, is_atomic=True)

    def _active(self) -> driver.QuorumController | None:
        controller = self.controller
        return controller if controller is not None and controller.active else None

    async def _fence_stale_brokers(self) -> None:
        # One broker per operation (each one's records are generated from state that
        # already holds the previous one's), so loop until nobody is left to fence.
        while (controller := self._active()) is not None:
            fenced = await controller.write(
                "FenceStaleBrokers",
                lambda s, _o, now_ms: s.maybe_fence_stale_brokers(now_ms))
            if not fenced:
                return
            logger.info("node=%s epoch=%s event=brokers_fenced brokers=%s", self.node_id,
                        controller.epoch, list(fenced))

    async def _no_op(self) -> None:
        if (controller := self._active()) is not None:
            await controller.write("NoOp", lambda s, _o, _n: s.no_op_record())

    async def _balance_leaders(self) -> None:
        if (controller := self._active()) is not None:
            again = True
            while again:
                again = await controller.write(
                    "LeaderRebalance", lambda s, _o, _n: s.maybe_balance_partition_leaders())

    async def _maybe_snapshot(self) -> None:
        raft = self.raft
        if raft is None:
            return
        books = self._books
        now_ms = time.monotonic_ns() // 1_000_000
        reason = self.snapshot_policy.snapshot_reason(
            bytes_since_last_snapshot=books.bytes_since_snapshot, now_ms=now_ms,
            last_snapshot_ms=books.last_snapshot_ms)
        if reason is None:
            return
        image = self.loader.image  # builds the image from the commits pending in the loader
        if image.provenance.last_offset < 0:
            return
        end_offset = image.provenance.last_offset + 1
        books.bytes_since_snapshot = 0
        books.last_snapshot_ms = now_ms
        try:
            writer = await raft.call(lambda client, now: client.create_snapshot(
                end_offset, now_ms=now,
                last_contained_log_timestamp=image.provenance.last_append_timestamp_ms))
            count = msnap.write_image(writer, image, encode=record_convert.encode)
            snapshot_id = await raft.call(lambda client, _now: client.freeze_snapshot(writer))
        except errors.KraftlogError as exc:
            logger.warning("node=%s event=snapshot_failed end_offset=%s error=%r",
                           self.node_id, end_offset, str(exc))
            return
        logger.info("node=%s event=snapshot_created snapshot=%s records=%s reason=%r",
                    self.node_id, snapshot_id, count, reason)
