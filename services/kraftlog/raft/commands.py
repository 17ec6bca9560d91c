"""``kraftlog controller --config FILE [--override key=value ...]``: run one quorum member.

Reads a Kafka ``server.properties`` (the keys in :data:`CONTROLLER_CONFIG`, Kafka's
names and units; other keys are reported as unused), checks the metadata log
directory before anything starts — it must be formatted by ``kraftlog storage
format`` for this node (``meta.properties``), its ``quorum-state`` must be
readable and agree with ``controller.quorum.voters``, and a non-empty log without
a ``quorum-state`` is refused (the node could vote twice in one epoch) — then
serves RaftService and the gRPC health service on the ``CONTROLLER`` listener
and runs the :class:`~.driver.RaftDriver` until SIGTERM/SIGINT, on which a
leader resigns gracefully (KIP-595) before the process exits 0.

Health (``grpc.health.v1``, service "" and ``kraftlog.v1.RaftService``) is
SERVING while the node knows a leader (itself included), NOT_SERVING otherwise.
Each role change is one log line from the driver
(``node=<id> epoch=<e> from=<role> to=<role> leader=<id> reason=...``).

Every refusal is a :class:`kraftlog.errors.KraftlogError`, which :mod:`kraftlog.cli`
prints as one line on stderr with exit code 1. Until the controller room plugs
its state machine in, committed records are only counted (and logged at debug).
Edge module: owns process I/O (signals, sockets, logging setup).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import pathlib
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kraftlog import config as kconfig
from kraftlog import errors
from kraftlog.raft import consensus, driver, transport
from kraftlog.raft import quorum_state_store as qss
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.raft_config import RaftConfig, parse_voters
from kraftlog.raft.snapshot import SnapshotReader
from kraftlog.raft.storage_log import StorageRaftLog
from kraftlog.storage import meta_properties

logger = logging.getLogger(__name__)

METADATA_PARTITION_DIR = "__cluster_metadata-0"
RAFT_SERVICE_NAME = "kraftlog.v1.RaftService"
SHUTDOWN_GRACE_S = 1.0

_I = kconfig.ConfigType.INT
_S = kconfig.ConfigType.STRING
_L = kconfig.ConfigType.LIST
_DEFAULTS = RaftConfig()

CONTROLLER_CONFIG = kconfig.ConfigDef([
    kconfig.ConfigKey(name="node.id", type=_I, default=None, required=True,
                      doc="this controller's id; must be in controller.quorum.voters",
                      validator=kconfig.at_least(0)),
    kconfig.ConfigKey(name="process.roles", type=_L, default=None, required=True,
                      doc="must contain 'controller' (combined mode is not supported yet)",
                      validator=kconfig.one_of("controller", "broker")),
    kconfig.ConfigKey(name="controller.quorum.voters", type=_S, default=None, required=True,
                      doc="the static voter set, id@host:port,..."),
    kconfig.ConfigKey(name="listeners", type=_L, default=None, required=True,
                      doc="NAME://host:port,...; the controller serves on its "
                          "controller.listener.names listener"),
    kconfig.ConfigKey(name="controller.listener.names", type=_L, default=["CONTROLLER"],
                      doc="listener names the controller serves raft on (the first is used)"),
    kconfig.ConfigKey(name="metadata.log.dir", type=_S, default=None,
                      doc="directory holding __cluster_metadata-0; default: first of log.dirs"),
    kconfig.ConfigKey(name="log.dirs", type=_L, default=None,
                      doc="log directories; the first holds the metadata log if "
                          "metadata.log.dir is unset"),
    kconfig.ConfigKey(name="controller.quorum.election.timeout.ms", type=_I,
                      default=_DEFAULTS.election_timeout_ms, validator=kconfig.at_least(1),
                      doc="ms a voter without a leader waits before standing (plus jitter)"),
    kconfig.ConfigKey(name="controller.quorum.fetch.timeout.ms", type=_I,
                      default=_DEFAULTS.fetch_timeout_ms, validator=kconfig.at_least(1),
                      doc="ms without a successful fetch before a follower stands"),
    kconfig.ConfigKey(name="controller.quorum.election.backoff.max.ms", type=_I,
                      default=_DEFAULTS.election_backoff_max_ms, validator=kconfig.at_least(1),
                      doc="cap, in ms, of the exponential backoff after a lost election"),
    kconfig.ConfigKey(name="controller.quorum.retry.backoff.ms", type=_I,
                      default=_DEFAULTS.retry_backoff_ms, validator=kconfig.at_least(1),
                      doc="ms before resending to a node after a failed request"),
    kconfig.ConfigKey(name="controller.quorum.request.timeout.ms", type=_I,
                      default=_DEFAULTS.request_timeout_ms, validator=kconfig.at_least(1),
                      doc="ms before an unanswered raft request counts as failed"),
    kconfig.ConfigKey(name="controller.quorum.append.linger.ms", type=_I,
                      default=_DEFAULTS.append_linger_ms, validator=kconfig.at_least(0),
                      doc="ms proposals wait to share one batch and fsync"),
    kconfig.ConfigKey(name="controller.quorum.fetch.max.wait.ms", type=_I,
                      default=_DEFAULTS.fetch_max_wait_ms, validator=kconfig.at_least(0),
                      doc="ms the leader parks a Fetch with nothing new (kraftlog extension; "
                          "keep below the request timeout)"),
])


# -- configuration ----------------------------------------------------------------------------------

def raft_config(cfg: kconfig.Config) -> RaftConfig:
    return RaftConfig(
        election_timeout_ms=cfg.get_int("controller.quorum.election.timeout.ms"),
        fetch_timeout_ms=cfg.get_int("controller.quorum.fetch.timeout.ms"),
        election_backoff_max_ms=cfg.get_int("controller.quorum.election.backoff.max.ms"),
        retry_backoff_ms=cfg.get_int("controller.quorum.retry.backoff.ms"),
        request_timeout_ms=cfg.get_int("controller.quorum.request.timeout.ms"),
        append_linger_ms=cfg.get_int("controller.quorum.append.linger.ms"),
        fetch_max_wait_ms=cfg.get_int("controller.quorum.fetch.max.wait.ms"))


def controller_listener(cfg: kconfig.Config) -> str:
    """The ``host:port`` of the controller listener named in ``listeners``."""
    names = cfg.get_list("controller.listener.names") or ["CONTROLLER"]
    for entry in cfg.get_list("listeners"):
        name, sep, address = entry.partition("://")
        if not sep:
            raise errors.ConfigError(f"listeners entry {entry!r} is not NAME://host:port")
        if name == names[0]:
            host, colon, port = address.rpartition(":")
            if not colon or not port.isdigit() or not 0 < int(port) < 65536:
                raise errors.ConfigError(f"listeners entry {entry!r}: bad host:port")
            return f"{host or '0.0.0.0'}:{port}"
    raise errors.ConfigError(f"listeners has no {names[0]}:// entry "
                             f"(controller.listener.names={','.join(names)})")


def metadata_dir(cfg: kconfig.Config) -> pathlib.Path:
    explicit = cfg.get_str("metadata.log.dir")
    if explicit:
        return pathlib.Path(explicit)
    dirs = cfg.get_list("log.dirs")
    if not dirs:
        raise errors.ConfigError("set metadata.log.dir or log.dirs")
    return pathlib.Path(dirs[0])


def check_storage(directory: pathlib.Path, node_id: int) -> str:
    """The cluster id from ``meta.properties``; refuses unformatted or foreign dirs."""
    props = meta_properties.read(directory)
    if props is None:
        raise errors.ConfigError(
            f"metadata log directory {directory} is not formatted (no meta.properties); "
            f"run 'kraftlog storage format --cluster-id ID --node-id {node_id} "
            f"--data-dir {directory}' first")
    if props.node_id != node_id:
        raise errors.InconsistentStorageError(
            f"{meta_properties.properties_path(directory)} is for node.id {props.node_id}, "
            f"but this process is node.id {node_id}")
    if not (directory / METADATA_PARTITION_DIR).is_dir():
        raise errors.ConfigError(f"{directory / METADATA_PARTITION_DIR} is missing; "
                                 "the directory was not formatted as a metadata log dir")
    return props.cluster_id


# -- the state machine stand-in ---------------------------------------------------------------------

class CountingListener:
    """Counts committed records until the controller's state machine replaces it."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.committed_records = 0

    def handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        for batch in batches:
            self.committed_records += len(batch.records)
            logger.debug("node=%s event=commit base_offset=%s last_offset=%s records=%s",
                         self.node_id, batch.base_offset, batch.last_offset, len(batch.records))

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        logger.info("node=%s event=snapshot_loaded", self.node_id)

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        pass


# -- the process ------------------------------------------------------------------------------------

async def serve(cfg: kconfig.Config) -> int:
    node_id = cfg.get_int("node.id")
    if "controller" not in cfg.get_list("process.roles"):
        raise errors.ConfigError("process.roles must contain 'controller' for "
                                 "'kraftlog controller'")
    voters = parse_voters(cfg.get_str("controller.quorum.voters"))
    if node_id not in voters:
        raise errors.ConfigError(f"node.id {node_id} is not in controller.quorum.voters "
                                 f"{sorted(voters)}; observers are not supported here yet")
    settings = raft_config(cfg)
    listen = controller_listener(cfg)
    directory = metadata_dir(cfg)
    cluster_id = check_storage(directory, node_id)
    partition_dir = directory / METADATA_PARTITION_DIR
    store = qss.FileQuorumStateStore(partition_dir / qss.QUORUM_STATE_FILE_NAME,
                                     cluster_id=cluster_id)
    stored = store.read()  # CorruptFileError for a damaged file: refuse before anything starts
    if stored is not None:
        qss.check_configured_voters(stored, voters, source=str(store.path))
    log = StorageRaftLog.open(partition_dir, clock_ms=lambda: time.time_ns() // 1_000_000)
    try:
        if stored is None and log.end_offset > 0:
            raise errors.InconsistentStorageError(
                f"{store.path} is missing but the metadata log ends at offset "
                f"{log.end_offset}: the election state (this node's vote) is lost, and "
                "starting fresh could vote twice in one epoch; restore the file or re-create "
                "this replica from an empty directory")
        return await _run(node_id, voters, cluster_id, settings, listen, log, store)
    finally:
        log.close()


async def _run(node_id: int, voters: dict[int, str], cluster_id: str, settings: RaftConfig,
               listen: str, log: StorageRaftLog, store: qss.FileQuorumStateStore) -> int:
    health = grpc_health.aio.HealthServicer()
    servicer = transport.RaftServicer()
    server: Any = transport.create_server(servicer)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    try:
        server.add_insecure_port(listen)
    except RuntimeError as exc:
        raise errors.ConfigError(f"cannot listen on {listen}: {exc}") from None
    status_q: asyncio.Queue[driver.Status] = asyncio.Queue()
    raft = driver.RaftDriver(node_id=node_id, voters=voters, cluster_id=cluster_id,
                             config=settings, log=log, store=store,
                             listener=CountingListener(node_id), on_status=status_q.put_nowait)
    servicer.handler = raft
    await server.start()
    for service in ("", RAFT_SERVICE_NAME):
        await health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
    raft.start()
    logger.info("node=%s epoch=%s event=started listener=%s cluster_id=%s voters=%s pid=%s",
                node_id, raft.status.epoch, listen, cluster_id,
                ",".join(f"{v}@{e}" for v, e in sorted(voters.items())), os.getpid())

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def publish_health() -> None:
        serving: bool | None = None
        while True:
            status = await status_q.get()
            now_serving = status.leader_id >= 0 and status.role is not Role.RESIGNED
            if now_serving != serving:
                serving = now_serving
                code = (health_pb2.HealthCheckResponse.SERVING if serving
                        else health_pb2.HealthCheckResponse.NOT_SERVING)
                for service in ("", RAFT_SERVICE_NAME):
                    await health.set(service, code)
                logger.info("node=%s epoch=%s event=health serving=%s role=%s leader=%s",
                            node_id, status.epoch, serving, status.role.value, status.leader_id)

    health_task = loop.create_task(publish_health(), name="raft-health")
    stop_task = loop.create_task(stop.wait(), name="raft-stop-signal")
    driver_task = loop.create_task(raft.wait(), name="raft-driver-wait")
    exit_code = 0
    try:
        done, _ = await asyncio.wait({stop_task, driver_task},
                                     return_when=asyncio.FIRST_COMPLETED)
        if driver_task in done and driver_task.exception() is not None:
            exit_code = 1
            print(f"kraftlog: error: raft driver failed: {driver_task.exception()}",
                  file=sys.stderr)
        else:
            logger.info("node=%s epoch=%s event=shutdown role=%s", node_id, raft.status.epoch,
                        raft.status.role.value)
    finally:
        await health.enter_graceful_shutdown()
        await raft.stop(graceful=exit_code == 0)
        for task in (health_task, stop_task, driver_task):
            task.cancel()
        await asyncio.gather(health_task, stop_task, driver_task, return_exceptions=True)
        await server.stop(SHUTDOWN_GRACE_S)
    return exit_code


def run_controller(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # The driver logs one line per role change; the core's own line would repeat it.
    logging.getLogger("kraftlog.raft.consensus").setLevel(logging.WARNING)
    cfg = kconfig.load(CONTROLLER_CONFIG, args.config, args.override or ())
    for key in cfg.unused():
        logger.warning("event=unused_config key=%s", key)
    return asyncio.run(serve(cfg))


def register(subparsers: Any) -> None:
    """Add ``controller`` to the ``kraftlog`` command (see :mod:`kraftlog.cli`)."""
    ctl = subparsers.add_parser(
        "controller", help="run a KRaft controller quorum member",
        description="Run one controller-quorum member (raft over gRPC), like "
                    "kafka-server-start.sh with process.roles=controller.")
    ctl.add_argument("--config", required=True, metavar="FILE",
                     help="a Kafka server.properties file")
    ctl.add_argument("--override", action="append", metavar="KEY=VALUE",
                     help="set a property, overriding the file; repeatable")
    ctl.add_argument("--log-level", default="INFO",
                     choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="stderr log level")
    ctl.set_defaults(func=run_controller)
