"""One controller quorum member (Kafka's ``ControllerServer``): :class:`ControllerServer`.

``kraftlog controller`` (:mod:`kraftlog.tools.controller_commands`) and ``kraftlog
server`` run it. Takes a Kafka ``server.properties`` (the keys in :data:`CONTROLLER_CONFIG`, Kafka's
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
SERVING while the node knows a leader (itself included), NOT_SERVING otherwise;
"caught-up" (the Helm chart's readiness probe) while it also leads, or its log reaches
the high watermark of its leader's last Fetch answer (checked every
:data:`CAUGHT_UP_POLL_S`).
Each role change is one log line from the driver
(``node=<id> epoch=<e> from=<role> to=<role> leader=<id> reason=...``).

Observability (:mod:`kraftlog.telemetry`): OpenTelemetry traces of every election when
the ``OTEL_*`` variables configure an exporter (off otherwise), a Prometheus endpoint with
the raft and controller metrics (:mod:`kraftlog.telemetry.controller_metrics`)
on ``--metrics-port`` / ``kraftlog.metrics.port`` (0 = none), and logs at
``--log-level`` / ``kraftlog.log.level`` as text or JSON lines
(``--log-format`` / ``kraftlog.log.format``).

Every refusal is a :class:`kraftlog.errors.KraftlogError`, which :mod:`kraftlog.tools.cli`
prints as one line on stderr with exit code 1. The replicated state machine is the
QuorumController (:mod:`.controller_host`), which also serves ControllerService on the
same listener. Composition root: owns process I/O (signals, sockets); the tool sets up
logging.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pathlib
import signal
import sys
import time
from typing import Any

from kraftlog import config as kconfig
from kraftlog import errors, health_server, rpc, rpc_guard
from kraftlog.ids import ZERO_UUID
from kraftlog.raft import consensus, driver, listeners, transport
from kraftlog.raft import quorum_state_store as qss
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.raft_config import RaftConfig, parse_voters
from kraftlog.raft.storage_log import StorageRaftLog
from kraftlog.security import config as security_config
from kraftlog.security import tls
from kraftlog.server import controller_host as controller_process
from kraftlog.server import shared_server
from kraftlog.storage import log_dir_lock, meta_properties
from kraftlog.telemetry import controller_metrics, grpc_tracing, metrics, raft_tracing, tracing
from kraftlog.telemetry import logging as log_setup

logger = logging.getLogger(__name__)

METADATA_PARTITION_DIR = shared_server.METADATA_PARTITION_DIR
RAFT_SERVICE_NAME = "kraftlog.v1.RaftService"
SHUTDOWN_GRACE_S = 1.0
METRICS_SAMPLE_INTERVAL_S = 1.0
CAUGHT_UP_POLL_S = 0.5
"""How often a controller re-checks its "caught-up" readiness (no event says the log grew)."""

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
                      validator=security_config.protocol_map_validator,
                      doc="NAME:PROTOCOL,...; PLAINTEXT or SSL (SASL_* refused for now)"),
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
    *security_config.SERVER_CONFIG_KEYS,
    *metrics.CONFIG_KEYS,
    *log_setup.CONFIG_KEYS,
])


# The QuorumController's own keys (Kafka's names) live in the same properties file.
for _key in controller_process.CONFIG_KEYS:
    CONTROLLER_CONFIG.define(_key)


# -- configuration ----------------------------------------------------------------------------------

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


# -- the server -------------------------------------------------------------------------------------

async def serve(cfg: kconfig.Config, *, shared: shared_server.SharedServer | None = None) -> int:
    """Run a :class:`ControllerServer` until SIGTERM/SIGINT (or, combined with a broker in
    one process, until ``shared.stop``); the exit code."""
    return await ControllerServer(cfg, shared=shared).run()


class ControllerServer:
    """One quorum member: raft over the metadata log, the QuorumController, RaftService,
    ControllerService, health and metrics.

    :meth:`start` takes the ``.lock`` of the metadata dir and every ``log.dirs`` entry
    first (:mod:`kraftlog.storage.log_dir_lock`: a second process on them exits at once,
    before it reads anything), checks the storage, then starts serving; :meth:`wait`
    returns the exit code when the process should stop (a signal, ``shared.stop``, or a
    failed raft driver or controller); :meth:`shutdown` stops everything :meth:`start`
    started, in reverse order, whatever happened. :meth:`run` is the three in turn.
    """

    def __init__(self, cfg: kconfig.Config, *,
                 shared: shared_server.SharedServer | None = None) -> None:
        self.cfg = cfg
        self.shared = shared
        self.node_id = cfg.get_int("node.id")
        self.raft: driver.RaftDriver | None = None
        self.host: controller_process.ControllerHost | None = None
        self.exit_code = 0
        self._resources = contextlib.AsyncExitStack()
        self._serving = False
        """True once the raft driver and the QuorumController run (shutdown must stop them)."""

    async def run(self) -> int:
        try:
            await self.start()
            return await self.wait()
        finally:
            await self.shutdown()

    async def start(self) -> None:
        cfg, shared, node_id = self.cfg, self.shared, self.node_id
        resources = self._resources
        resources.enter_context(log_dir_lock.lock_dirs(
            [shared_server.metadata_dir(cfg), *map(pathlib.Path, cfg.get_list("log.dirs") or [])]))
        if "controller" not in cfg.get_list("process.roles"):
            raise errors.ConfigError("process.roles must contain 'controller' for "
                                     "'kraftlog controller'")
        voters_text = cfg.get_str("controller.quorum.voters")
        voters = parse_voters(voters_text) if voters_text.strip() else {}
        bootstrap = cfg.get_list("controller.quorum.bootstrap.servers") or []
        if not voters and not bootstrap:
            raise errors.ConfigError("set controller.quorum.voters (static voters) or "
                                     "controller.quorum.bootstrap.servers (dynamic voters, "
                                     "KIP-853)")
        if voters and node_id not in voters:
            raise errors.ConfigError(f"node.id {node_id} is not in controller.quorum.voters "
                                     f"{sorted(voters)}; for a dynamic quorum leave it empty "
                                     "and set controller.quorum.bootstrap.servers")
        settings = shared_server.raft_config(cfg)
        listen = controller_listener(cfg)
        listener_name = (cfg.get_list("controller.listener.names") or ["CONTROLLER"])[0]
        server_tls = tls.listener_tls(cfg, listener_name)
        rpc.configure_client(tls.node_client_tls(cfg, [listener_name]))
        directory = shared_server.metadata_dir(cfg)
        cluster_id = shared_server.check_storage(directory, node_id)
        props = meta_properties.read(directory)
        directory_id = props.directory_id if props is not None and props.directory_id is not None \
            else ZERO_UUID
        partition_dir = directory / METADATA_PARTITION_DIR
        store = qss.FileQuorumStateStore(partition_dir / qss.QUORUM_STATE_FILE_NAME,
                                         cluster_id=cluster_id)
        stored = store.read()  # CorruptFileError for a damaged file: refuse before anything starts
        if stored is not None:
            qss.check_configured_voters(stored, voters, source=str(store.path))
        log = StorageRaftLog.open(partition_dir, clock_ms=lambda: time.time_ns() // 1_000_000)
        resources.callback(log.close)
        if stored is None and log.end_offset > 0:
            raise errors.InconsistentStorageError(
                f"{store.path} is missing but the metadata log ends at offset "
                f"{log.end_offset}: the election state (this node's vote) is lost, and "
                "starting fresh could vote twice in one epoch; restore the file or re-create "
                "this replica from an empty directory")
        tracer = tracing.setup_tracing(role="controller", node_id=node_id)
        resources.callback(tracer.shutdown)  # flushes the spans still buffered
        registry = metrics.MetricsRegistry()
        resources.callback(registry.close)
        host = self.host = controller_process.ControllerHost(
            cfg, node_id=node_id, cluster_id=cluster_id, voters=voters, metadata_dir=directory)
        metrics_port = cfg.get_int("kraftlog.metrics.port")
        metrics_host = cfg.get_str("kraftlog.metrics.host")

        servicer = transport.RaftServicer(voter_identity=tls.identities(cfg)[1],
                                          voters=frozenset(voters))
        server: Any = transport.create_server(servicer, interceptors=(
            grpc_tracing.server_interceptors(tracer.tracer) if tracer.enabled else ()),
            server_tls=server_tls)
        health = self._health = health_server.ServerHealth(
            server, service=RAFT_SERVICE_NAME, reflected=("kraftlog.v1.ControllerService",))
        rpc.bind(server, listen, server_tls=server_tls)
        raft_metrics = metrics.RaftMetrics(registry.registry, node_id=node_id,
                                           cluster_id=cluster_id)
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
            is_leader=lambda: self.raft is not None and self.raft.status.role is Role.LEADER)
        if host.controller is not None:
            host.controller.on_event_timed = ctl_metrics.observe_event
        if shared is not None:
            # Combined mode: the co-located broker's metadata loader hears the same log.
            broker_listener = await shared.wait_registered()
            if broker_listener is None:
                return  # stopping before the broker was set up: wait() answers 0
            listener = listeners.FanOutListener([listener, broker_listener])
        raft = self.raft = driver.RaftDriver(
            node_id=node_id, voters=voters, cluster_id=cluster_id, config=settings, log=log,
            store=store, clock=clock, listener=listener, on_status=status_q.put_nowait,
            observer=raft_tracer, channel_interceptors=(
                grpc_tracing.client_interceptors(tracer.tracer) if tracer.enabled else ()),
            dynamic=driver.DynamicQuorum(
                directory_id=directory_id, local_endpoint=advertised_endpoint(cfg, listen),
                bootstrap_servers=tuple(bootstrap),
                auto_join=cfg.get_bool("controller.quorum.auto.join.enable")))
        raft_metrics.set_status(role=raft.status.role.value, epoch=raft.status.epoch,
                                leader_id=raft.status.leader_id)
        host.bind(raft, server)
        servicer.handler = raft
        await server.start()
        resources.push_async_callback(rpc_guard.stop_server, server, SHUTDOWN_GRACE_S)
        await health.start(serving=False)
        await health.set_named(health_server.CAUGHT_UP_SERVICE_NAME, False)
        raft.start()
        host.start()
        self._serving = True
        self._raft_tracer, self._clock = raft_tracer, clock
        if shared is not None:
            shared.publish(raft)
        logger.info("node=%s epoch=%s event=started listener=%s cluster_id=%s voters=%s pid=%s",
                    node_id, raft.status.epoch, listen, cluster_id,
                    ",".join(f"{v}@{e}" for v, e in sorted(voters.items())), os.getpid())

        self._stop = shared.stop if shared is not None else asyncio.Event()
        loop = asyncio.get_running_loop()
        if shared is None:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop.set)

        async def publish_health() -> None:
            caught_up: bool | None = None
            while True:
                try:
                    status = await asyncio.wait_for(status_q.get(), CAUGHT_UP_POLL_S)
                except TimeoutError:
                    status = None
                if status is not None:
                    raft_metrics.set_status(role=status.role.value, epoch=status.epoch,
                                            leader_id=status.leader_id)
                    serving = status.leader_id >= 0 and status.role is not Role.RESIGNED
                    if await health.set_serving(serving):
                        logger.info("node=%s epoch=%s event=health serving=%s role=%s "
                                    "leader=%s", node_id, status.epoch, serving,
                                    status.role.value, status.leader_id)
                # Log progress changes no status: polled (safe: one thread, the driver parked).
                now_caught_up = bool(health.serving) and raft.client.is_caught_up()
                if now_caught_up != caught_up:
                    caught_up = now_caught_up
                    await health.set_named(health_server.CAUGHT_UP_SERVICE_NAME, now_caught_up)
                    logger.info("node=%s epoch=%s event=health service=%s serving=%s "
                                "log_end_offset=%d", node_id, raft.status.epoch,
                                health_server.CAUGHT_UP_SERVICE_NAME, now_caught_up,
                                log.end_offset)

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

        self._health_task = loop.create_task(publish_health(), name="raft-health")
        self._metrics_task = loop.create_task(sample_log_metrics(), name="raft-metrics")
        self._stop_task = loop.create_task(self._stop.wait(), name="raft-stop-signal")
        self._driver_task = loop.create_task(raft.wait(), name="raft-driver-wait")
        self._controller_task = loop.create_task(host.wait(), name="controller-wait")

    async def wait(self) -> int:
        """Until a signal, ``shared.stop``, or a failed raft driver or controller; the exit
        code (1 after a failure, which is printed as one line on stderr)."""
        if not self._serving:
            return self.exit_code
        raft = self.raft
        assert raft is not None
        done, _ = await asyncio.wait({self._stop_task, self._driver_task, self._controller_task},
                                     return_when=asyncio.FIRST_COMPLETED)
        failed = [t for t in (self._driver_task, self._controller_task)
                  if t in done and not t.cancelled() and t.exception() is not None]
        if failed:
            self.exit_code = 1
            which = "raft driver" if failed[0] is self._driver_task else "controller"
            print(f"kraftlog: error: {which} failed: {failed[0].exception()}",
                  file=sys.stderr)
        else:
            logger.info("node=%s epoch=%s event=shutdown role=%s", self.node_id,
                        raft.status.epoch, raft.status.role.value)
        return self.exit_code

    async def shutdown(self) -> None:
        """Stop what :meth:`start` started: a leader resigns (graceful unless a task failed)."""
        try:
            if self._serving:
                await self._stop_serving()
        finally:
            await self._resources.aclose()

    async def _stop_serving(self) -> None:
        self._serving = False
        raft, host, shared = self.raft, self.host, self.shared
        assert raft is not None and host is not None
        if shared is not None:
            # The broker's controlled shutdown needs this controller (or another) to answer.
            self._stop.set()
            broker_shutdown_s = self.cfg.get_int("broker.session.timeout.ms") / 1000
            if not await shared.wait_broker_done(broker_shutdown_s + SHUTDOWN_GRACE_S):
                logger.warning("node=%s event=shutdown detail='the co-located broker did not "
                               "stop in time'", self.node_id)
        await self._health.shutdown()
        await host.stop()
        await raft.stop(graceful=self.exit_code == 0)
        self._raft_tracer.close(self._clock.monotonic_ms())
        tasks = (self._health_task, self._stop_task, self._driver_task, self._metrics_task,
                 self._controller_task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
