"""``kraftlog controller --config FILE [--override key=value ...]``: run one quorum member.

Reads a Kafka ``server.properties`` (the keys in :data:`CONTROLLER_CONFIG`, Kafka's
names and units; other keys are reported as unused), locks the metadata log
directory and every ``log.dirs`` entry (``.lock``: a second process on them exits at
once), checks the metadata log directory before anything starts — it must be formatted by ``kraftlog storage
format`` for this node (``meta.properties``), its ``quorum-state`` must be
readable and agree with ``controller.quorum.voters``, and a non-empty log without
a ``quorum-state`` is refused (the node could vote twice in one epoch) — then
serves RaftService and the gRPC health service on the ``CONTROLLER`` listener
and runs the :class:`~.driver.RaftDriver` until SIGTERM/SIGINT, on which a
leader resigns gracefully (KIP-595) before the process exits 0.

A dynamic quorum (KIP-853: a metadata dir formatted with ``--standalone``,
``--initial-controllers`` or ``--no-initial-controllers``) leaves
``controller.quorum.voters`` empty and sets ``controller.quorum.bootstrap.servers``; the
voter set then comes from the log, this node's voter key is its ``node.id`` and the
``directory.id`` of its metadata dir, and ``controller.quorum.auto.join.enable`` makes it
add itself once caught up.

Health (``grpc.health.v1``, service "" and ``kraftlog.v1.RaftService``) is
SERVING while the node knows a leader (itself included), NOT_SERVING otherwise.
Each role change is one log line from the driver
(``node=<id> epoch=<e> from=<role> to=<role> leader=<id> reason=...``).

Observability (:mod:`kraftlog.telemetry`): OpenTelemetry traces of every election when
the ``OTEL_*`` variables configure an exporter (off otherwise), a Prometheus endpoint with
the raft and controller metrics (:mod:`kraftlog.telemetry.controller_metrics`)
on ``--metrics-port`` / ``kraftlog.metrics.port`` (0 = none), and logs at
``--log-level`` / ``kraftlog.log.level`` as text or JSON lines
(``--log-format`` / ``kraftlog.log.format``).

Every refusal is a :class:`kraftlog.errors.KraftlogError`, which :mod:`kraftlog.cli`
prints as one line on stderr with exit code 1. The replicated state machine is the
QuorumController (:mod:`kraftlog.controller.process`), which also serves
ControllerService on the same listener.
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
from typing import Any

from kraftlog import config as kconfig
from kraftlog import errors, health_server, rpc_guard
from kraftlog.controller import process as controller_process
from kraftlog.raft import consensus, driver, listeners, shared_driver, transport
from kraftlog.raft import quorum_state_store as qss
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.raft_config import RaftConfig, parse_voters
from kraftlog.raft.storage_log import StorageRaftLog
from kraftlog.storage import log_dir_lock, meta_properties, uuid
from kraftlog.telemetry import controller_metrics, grpc_tracing, metrics, raft_tracing, tracing
from kraftlog.telemetry import logging as log_setup

logger = logging.getLogger(__name__)

METADATA_PARTITION_DIR = "__cluster_metadata-0"
RAFT_SERVICE_NAME = "kraftlog.v1.RaftService"
SHUTDOWN_GRACE_S = 1.0
METRICS_SAMPLE_INTERVAL_S = 1.0

_I = kconfig.ConfigType.INT
_S = kconfig.ConfigType.STRING
_L = kconfig.ConfigType.LIST
_DEFAULTS = RaftConfig()

CONTROLLER_CONFIG = kconfig.ConfigDef([
    kconfig.ConfigKey(name="node.id", type=_I, default=None, required=True,
                      doc="this controller's id; must be in controller.quorum.voters",
                      validator=kconfig.at_least(0)),
    kconfig.ConfigKey(name="process.roles", type=_L, default=None, required=True,
                      doc="must contain 'controller' ('broker,controller': combined mode, kraftlog server)",
                      validator=kconfig.one_of("controller", "broker")),
    kconfig.ConfigKey(name="controller.quorum.voters", type=_S, default="",
                      doc="the static voter set, id@host:port,... (kraft.version 0); leave "
                          "empty for a dynamic quorum (KIP-853, voters in the log)"),
    kconfig.ConfigKey(name="controller.quorum.bootstrap.servers", type=_L, default=None,
                      doc="host:port,... of controllers to ask who leads, for a dynamic quorum "
                          "(KIP-853) when this node knows no voter yet"),
    kconfig.ConfigKey(name="controller.quorum.auto.join.enable", type=kconfig.ConfigType.BOOLEAN,
                      default=False,
                      doc="an observer controller adds itself to the voters once caught up "
                          "(KIP-853), first removing its own id on another directory"),
    kconfig.ConfigKey(name="listeners", type=_L, default=None, required=True,
                      doc="NAME://host:port,...; the controller serves on its "
                          "controller.listener.names listener"),
    kconfig.ConfigKey(name="controller.listener.names", type=_L, default=["CONTROLLER"],
                      doc="listener names the controller serves raft on (the first is used)"),
    kconfig.ConfigKey(name="advertised.listeners", type=_L, default=None,
                      doc="NAME://host:port,... other nodes reach this controller at (KIP-853); "
                          "the static controller.quorum.voters names the addresses used"),
    kconfig.ConfigKey(name="listener.security.protocol.map", type=_L, default=None,
                      validator=kconfig.security_protocol_map("PLAINTEXT"),
                      doc="NAME:PROTOCOL,...; only PLAINTEXT is supported"),
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
    *metrics.CONFIG_KEYS,
    *log_setup.CONFIG_KEYS,
])


# The QuorumController's own keys (Kafka's names) live in the same properties file.
for _key in controller_process.CONFIG_KEYS:
    CONTROLLER_CONFIG.define(_key)


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


def advertised_endpoint(cfg: kconfig.Config, listen: str) -> str:
    """Where other controllers reach this one (KIP-853 voter endpoint): the controller
    listener's entry in ``advertised.listeners``, else the listen address unless it is a
    wildcard."""
    names = cfg.get_list("controller.listener.names") or ["CONTROLLER"]
    for entry in cfg.get_list("advertised.listeners") or []:
        name, sep, address = entry.partition("://")
        if sep and name == names[0]:
            return address
    host = listen.rpartition(":")[0]
    return "" if host in ("0.0.0.0", "::", "[::]") else listen


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


# -- the process ------------------------------------------------------------------------------------

async def serve(cfg: kconfig.Config, *, shared: shared_driver.SharedRaft | None = None) -> int:
    """Run the controller until SIGTERM/SIGINT (or, combined with a broker in one
    process, until ``shared.stop``); the exit code. The metadata dir and every
    ``log.dirs`` entry are locked first (``.lock``, :mod:`kraftlog.storage.log_dir_lock`):
    a second process on them exits at once, before it reads anything."""
    with log_dir_lock.lock_dirs([metadata_dir(cfg), *map(pathlib.Path, cfg.get_list("log.dirs") or [])]):
        return await _serve(cfg, shared=shared)


async def _serve(cfg: kconfig.Config, *, shared: shared_driver.SharedRaft | None) -> int:
    node_id = cfg.get_int("node.id")
    if "controller" not in cfg.get_list("process.roles"):
        raise errors.ConfigError("process.roles must contain 'controller' for "
                                 "'kraftlog controller'")
    voters_text = cfg.get_str("controller.quorum.voters")
    voters = parse_voters(voters_text) if voters_text.strip() else {}
    bootstrap = cfg.get_list("controller.quorum.bootstrap.servers") or []
    if not voters and not bootstrap:
        raise errors.ConfigError("set controller.quorum.voters (static voters) or "
                                 "controller.quorum.bootstrap.servers (dynamic voters, KIP-853)")
    if voters and node_id not in voters:
        raise errors.ConfigError(f"node.id {node_id} is not in controller.quorum.voters "
                                 f"{sorted(voters)}; for a dynamic quorum leave it empty and "
                                 "set controller.quorum.bootstrap.servers")
    settings = raft_config(cfg)
    listen = controller_listener(cfg)
    directory = metadata_dir(cfg)
    cluster_id = check_storage(directory, node_id)
    props = meta_properties.read(directory)
    directory_id = props.directory_id if props is not None and props.directory_id is not None \
        else uuid.ZERO_UUID
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
        tracer = tracing.setup_tracing(role="controller", node_id=node_id)
        registry = metrics.MetricsRegistry()
        try:
            host = controller_process.ControllerHost(cfg, node_id=node_id,
                                                     cluster_id=cluster_id, voters=voters,
                                                     metadata_dir=directory)
            dynamic = driver.DynamicQuorum(
                directory_id=directory_id, local_endpoint=advertised_endpoint(cfg, listen),
                bootstrap_servers=tuple(bootstrap),
                auto_join=cfg.get_bool("controller.quorum.auto.join.enable"))
            return await _run(node_id, voters, cluster_id, settings, listen, log, store,
                              dynamic=dynamic,
                              host=host, tracer=tracer, registry=registry,
                              metrics_port=cfg.get_int("kraftlog.metrics.port"),
                              metrics_host=cfg.get_str("kraftlog.metrics.host"),
                              shared=shared,
                              broker_shutdown_s=cfg.get_int("broker.session.timeout.ms") / 1000)
        finally:
            registry.close()
            tracer.shutdown()  # flushes the spans still buffered
    finally:
        log.close()


async def _run(node_id: int, voters: dict[int, str], cluster_id: str, settings: RaftConfig,
               listen: str, log: StorageRaftLog, store: qss.FileQuorumStateStore, *,
               dynamic: driver.DynamicQuorum | None = None,
               host: controller_process.ControllerHost,
               tracer: tracing.Tracing, registry: metrics.MetricsRegistry, metrics_port: int,
               metrics_host: str, shared: shared_driver.SharedRaft | None = None,
               broker_shutdown_s: float = 0.0) -> int:
    servicer = transport.RaftServicer()
    server: Any = transport.create_server(servicer, interceptors=(
        grpc_tracing.server_interceptors(tracer.tracer) if tracer.enabled else ()))
    health = health_server.ServerHealth(server, service=RAFT_SERVICE_NAME,
                                        reflected=("kraftlog.v1.ControllerService",))
    try:
        server.add_insecure_port(listen)
    except RuntimeError as exc:
        raise errors.ConfigError(f"cannot listen on {listen}: {exc}") from None
    raft_metrics = metrics.RaftMetrics(registry.registry, node_id=node_id, cluster_id=cluster_id)
    ctl_metrics = controller_metrics.ControllerMetrics(registry.registry)
    if metrics_port:
        try:
            registry.serve(metrics_port, metrics_host)
        except OSError as exc:
            raise errors.ConfigError(f"cannot serve metrics on {metrics_host}:{metrics_port}: "
                                     f"{exc}") from None
    # The tracer also runs with tracing off (a no-op tracer): it times elections for the
    # election-latency metric, and costs nothing on the Fetch path.
    raft_tracer = raft_tracing.RaftTracer(tracer.tracer, node_id=node_id,
                                          on_election_done=raft_metrics.observe_election)
    clock = driver.SystemClock()
    status_q: asyncio.Queue[driver.Status] = asyncio.Queue()
    listener: consensus.RaftListener = metrics.MeteredListener(
        host.listener(), raft_metrics, now_ms=clock.monotonic_ms,
        is_leader=lambda: raft.status.role is Role.LEADER)
    if host.controller is not None:
        host.controller.on_event_timed = ctl_metrics.observe_event
    if shared is not None:
        # Combined mode: the co-located broker's metadata loader hears the same log.
        broker_listener = await shared.wait_registered()
        if broker_listener is None:
            return 0  # stopping before the broker was set up
        listener = listeners.FanOutListener([listener, broker_listener])
    raft = driver.RaftDriver(node_id=node_id, voters=voters, cluster_id=cluster_id,
                             config=settings, log=log, store=store, clock=clock,
                             listener=listener, on_status=status_q.put_nowait,
                             observer=raft_tracer, channel_interceptors=(
                                 grpc_tracing.client_interceptors(tracer.tracer)
                                 if tracer.enabled else ()), dynamic=dynamic)
    raft_metrics.set_status(role=raft.status.role.value, epoch=raft.status.epoch,
                            leader_id=raft.status.leader_id)
    host.bind(raft, server)
    servicer.handler = raft
    await server.start()
    await health.start(serving=False)
    raft.start()
    host.start()
    if shared is not None:
        shared.publish(raft)
    logger.info("node=%s epoch=%s event=started listener=%s cluster_id=%s voters=%s pid=%s",
                node_id, raft.status.epoch, listen, cluster_id,
                ",".join(f"{v}@{e}" for v, e in sorted(voters.items())), os.getpid())

    stop = shared.stop if shared is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    if shared is None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

    async def publish_health() -> None:
        while True:
            status = await status_q.get()
            raft_metrics.set_status(role=status.role.value, epoch=status.epoch,
                                    leader_id=status.leader_id)
            serving = status.leader_id >= 0 and status.role is not Role.RESIGNED
            if await health.set_serving(serving):
                logger.info("node=%s epoch=%s event=health serving=%s role=%s leader=%s",
                            node_id, status.epoch, serving, status.role.value, status.leader_id)

    async def sample_log_metrics() -> None:
        while True:
            # Reading the log from here is safe: one thread, and the driver task is parked.
            raft_metrics.set_log(high_watermark=log.high_watermark,
                                 log_end_offset=log.end_offset,
                                 log_end_epoch=log.last_fetched_epoch())
            if host.controller is not None:
                status = host.controller.status()
                ctl_metrics.set_status(active=status.active,
                                       last_applied_offset=status.last_written_offset,
                                       last_committed_offset=status.committed_offset)
            ctl_metrics.set_image(host.loader.image)
            await asyncio.sleep(METRICS_SAMPLE_INTERVAL_S)

    health_task = loop.create_task(publish_health(), name="raft-health")
    metrics_task = loop.create_task(sample_log_metrics(), name="raft-metrics")
    stop_task = loop.create_task(stop.wait(), name="raft-stop-signal")
    driver_task = loop.create_task(raft.wait(), name="raft-driver-wait")
    controller_task = loop.create_task(host.wait(), name="controller-wait")
    exit_code = 0
    try:
        done, _ = await asyncio.wait({stop_task, driver_task, controller_task},
                                     return_when=asyncio.FIRST_COMPLETED)
        failed = [t for t in (driver_task, controller_task)
                  if t in done and not t.cancelled() and t.exception() is not None]
        if failed:
            exit_code = 1
            which = "raft driver" if failed[0] is driver_task else "controller"
            print(f"kraftlog: error: {which} failed: {failed[0].exception()}",
                  file=sys.stderr)
        else:
            logger.info("node=%s epoch=%s event=shutdown role=%s", node_id, raft.status.epoch,
                        raft.status.role.value)
    finally:
        if shared is not None:
            # The broker's controlled shutdown needs this controller (or another) to answer.
            stop.set()
            if not await shared.wait_broker_done(broker_shutdown_s + SHUTDOWN_GRACE_S):
                logger.warning("node=%s event=shutdown detail='the co-located broker did not "
                               "stop in time'", node_id)
        await health.shutdown()
        await host.stop()
        await raft.stop(graceful=exit_code == 0)
        raft_tracer.close(clock.monotonic_ms())
        for task in (health_task, stop_task, driver_task, metrics_task, controller_task):
            task.cancel()
        await asyncio.gather(health_task, stop_task, driver_task, metrics_task, controller_task,
                             return_exceptions=True)
        await rpc_guard.stop_server(server, SHUTDOWN_GRACE_S)
    return exit_code


def run_controller(args: argparse.Namespace) -> int:
    overrides = list(args.override or ())
    if args.metrics_port is not None:
        overrides.append(f"kraftlog.metrics.port={args.metrics_port}")
    cfg = kconfig.load(CONTROLLER_CONFIG, args.config, overrides)
    log_setup.configure(level=args.log_level or cfg.get_str("kraftlog.log.level"),
                        log_format=args.log_format or cfg.get_str("kraftlog.log.format"))
    # The driver logs one line per role change; the core's own line would repeat it.
    logging.getLogger("kraftlog.raft.consensus").setLevel(logging.WARNING)
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
    ctl.add_argument("--log-level", default=None, choices=log_setup.LEVELS,
                     help="stderr log level (default: kraftlog.log.level, INFO)")
    ctl.add_argument("--log-format", default=None, choices=log_setup.FORMATS,
                     help="text, or json: one object per line with the structured fields "
                          "(default: kraftlog.log.format, text)")
    ctl.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                     help="serve Prometheus metrics on this port (default: "
                          "kraftlog.metrics.port; 0 = off)")
    ctl.set_defaults(func=run_controller)
