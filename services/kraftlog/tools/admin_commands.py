"""``kraftlog admin [--config FILE] [--bootstrap-controller ...] [--listen HOST:PORT]``.

Runs the stateless AdminService (:mod:`.admin_service`) until SIGTERM/SIGINT. Settings
are Kafka-style properties (a file, ``--override key=value``, or the shortcut flags):

- ``controller.quorum.bootstrap.servers`` (``host:port,...``) or
  ``controller.quorum.voters`` (``id@host:port,...``): where the controllers are;
  at least one of them;
- ``listeners``: ``NAME://host:port``; the first entry is served (default
  ``ADMIN://0.0.0.0:19090``);
- ``request.timeout.ms``: bound of one attempt against one node;
- ``default.api.timeout.ms``: a call's deadline when the caller sets none;
- ``retry.backoff.ms``: pause between rounds that found no active controller;
- ``kraftlog.log.level`` / ``kraftlog.log.format``;
- ``kraftlog.metrics.port`` / ``kraftlog.metrics.host``: the Prometheus ``/metrics``
  endpoint (0 = none) with :class:`~kraftlog.telemetry.admin_metrics.AdminMetrics`.

Tracing follows the ``OTEL_*`` variables as in the other roles: a SERVER span per
AdminService call, and the calls it makes to controllers and brokers carry its
context, so one trace shows an operator's request and the controller's work for it.

The gRPC server also serves health (``""``, ``liveness`` and ``kraftlog.v1.AdminService``,
SERVING while the process serves) and server reflection. Edge module: process I/O.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from typing import Any

import grpc.aio

from kraftlog import config as kconfig
from kraftlog import errors, health_server, rpc_guard
from kraftlog.admin import admin_service
from kraftlog.raft import transport
from kraftlog.raft.raft_config import parse_voters
from kraftlog.telemetry import admin_metrics, grpc_tracing, metrics, tracing
from kraftlog.telemetry import logging as log_setup
from kraftlog.tools import quorum_commands
from kraftlog.v1 import admin_pb2

logger = logging.getLogger(__name__)

ADMIN_SERVICE_NAME = "kraftlog.v1.AdminService"
DEFAULT_LISTENER = "ADMIN://0.0.0.0:19090"
SHUTDOWN_GRACE_S = 1.0

_I = kconfig.ConfigType.INT
_S = kconfig.ConfigType.STRING
_L = kconfig.ConfigType.LIST
_DEFAULTS = admin_service.AdminSettings(bootstrap_controllers=())

ADMIN_CONFIG = kconfig.ConfigDef([
    kconfig.ConfigKey(name="controller.quorum.bootstrap.servers", type=_L, default=None,
                      doc="controller addresses host:port,... to find the quorum from"),
    kconfig.ConfigKey(name="controller.quorum.voters", type=_S, default=None,
                      doc="the controller voter set, id@host:port,... (alternative to "
                          "controller.quorum.bootstrap.servers)"),
    kconfig.ConfigKey(name="listeners", type=_L, default=[DEFAULT_LISTENER],
                      doc="NAME://host:port,...; the first is served"),
    kconfig.ConfigKey(name="request.timeout.ms", type=_I, default=_DEFAULTS.request_timeout_ms,
                      validator=kconfig.at_least(1),
                      doc="ms one attempt against one controller or broker may take"),
    kconfig.ConfigKey(name="default.api.timeout.ms", type=_I,
                      default=_DEFAULTS.default_api_timeout_ms, validator=kconfig.at_least(1),
                      doc="ms a call may take, retries included, when the caller sets no "
                          "deadline"),
    kconfig.ConfigKey(name="retry.backoff.ms", type=_I, default=_DEFAULTS.retry_backoff_ms,
                      validator=kconfig.at_least(1),
                      doc="ms between rounds of attempts that found no active controller"),
    *metrics.CONFIG_KEYS,
    *log_setup.CONFIG_KEYS,
])

ADMIN_METHODS = frozenset(
    f"/{ADMIN_SERVICE_NAME}/{method.name}"
    for method in admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods)
"""The RPCs the admin's server interceptor times (and traces when tracing is on)."""


def admin_settings(cfg: kconfig.Config) -> admin_service.AdminSettings:
    """The service's settings; ConfigError when no controller address is given."""
    voters_text = cfg.get_str("controller.quorum.voters")
    voters = parse_voters(voters_text) if voters_text else {}
    bootstrap = cfg.get_list("controller.quorum.bootstrap.servers")
    if bootstrap:
        bootstrap = quorum_commands.parse_bootstrap(",".join(bootstrap))
    if not bootstrap and not voters:
        raise errors.ConfigError("set controller.quorum.bootstrap.servers (or "
                                 "--bootstrap-controller) or controller.quorum.voters")
    return admin_service.AdminSettings(
        bootstrap_controllers=tuple(dict.fromkeys([*bootstrap, *voters.values()])),
        voters=voters,
        request_timeout_ms=cfg.get_int("request.timeout.ms"),
        default_api_timeout_ms=cfg.get_int("default.api.timeout.ms"),
        retry_backoff_ms=cfg.get_int("retry.backoff.ms"))


def listen_address(cfg: kconfig.Config) -> str:
    """The ``host:port`` of the first ``listeners`` entry."""
    entries = cfg.get_list("listeners")
    if not entries:
        raise errors.ConfigError("listeners is empty; give NAME://host:port")
    entry = entries[0]
    _name, sep, address = entry.partition("://")
    if not sep:
        raise errors.ConfigError(f"listeners entry {entry!r} is not NAME://host:port")
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or not 0 < int(port) < 65536:
        raise errors.ConfigError(f"listeners entry {entry!r}: bad host:port")
    return f"{host or '0.0.0.0'}:{port}"


async def serve(settings: admin_service.AdminSettings, listen: str, *,
                metrics_port: int = 0, metrics_host: str = "0.0.0.0") -> int:
    tracer = tracing.setup_tracing(role="admin", node_id=None)
    registry = metrics.MetricsRegistry()
    try:
        return await _serve(settings, listen, tracer=tracer, registry=registry,
                            metrics_port=metrics_port, metrics_host=metrics_host)
    finally:
        registry.close()
        tracer.shutdown()  # flushes the spans still buffered


async def _serve(settings: admin_service.AdminSettings, listen: str, *,
                 tracer: tracing.Tracing, registry: metrics.MetricsRegistry,
                 metrics_port: int, metrics_host: str) -> int:
    locator = admin_service.ClusterLocator(
        settings, interceptors=grpc_tracing.client_interceptors(tracer.tracer)
        if tracer.enabled else ())
    sink = admin_metrics.AdminMetrics(
        registry.registry, active_controller_known=lambda: locator.active_controller is not None)
    if metrics_port:
        try:
            registry.serve(metrics_port, metrics_host)
        except OSError as exc:
            raise errors.ConfigError(f"cannot serve metrics on {metrics_host}:{metrics_port}: "
                                     f"{exc}") from None
    servicer = admin_service.AdminServicer(locator)
    server: Any = grpc.aio.server(options=transport.server_options(), interceptors=[
        grpc_tracing.DataPathInterceptor(tracer.tracer if tracer.enabled else None,
                                         sink.observe_request, methods=ADMIN_METHODS)])
    admin_service.add_to_server(servicer, server)
    health = health_server.ServerHealth(server, service=ADMIN_SERVICE_NAME)
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError as exc:
        raise errors.ConfigError(f"cannot listen on {listen}: {exc}") from None
    if port == 0:
        raise errors.ConfigError(f"cannot listen on {listen}")
    await server.start()
    await health.start(serving=True)  # stateless: ready as soon as it listens
    logger.info("event=started role=admin listener=%s controllers=%s pid=%s", listen,
                ",".join(settings.bootstrap_controllers), os.getpid())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        logger.info("event=shutdown role=admin")
    finally:
        await health.shutdown()
        await rpc_guard.stop_server(server, SHUTDOWN_GRACE_S)
        await locator.close()
    return 0


def run_admin(args: argparse.Namespace) -> int:
    overrides = list(args.override or ())
    if args.bootstrap_controller:
        overrides.append(f"controller.quorum.bootstrap.servers={args.bootstrap_controller}")
    if args.listen:
        overrides.append(f"listeners=ADMIN://{args.listen}")
    cfg = kconfig.load(ADMIN_CONFIG, args.config, overrides)
    log_setup.configure(level=args.log_level or cfg.get_str("kraftlog.log.level"),
                        log_format=args.log_format or cfg.get_str("kraftlog.log.format"))
    for key in cfg.unused():
        logger.warning("event=unused_config key=%s", key)
    settings = admin_settings(cfg)
    return asyncio.run(serve(settings, listen_address(cfg),
                             metrics_port=cfg.get_int("kraftlog.metrics.port"),
                             metrics_host=cfg.get_str("kraftlog.metrics.host")))


def register(subparsers: Any) -> None:
    """Add ``admin`` to the ``kraftlog`` command (see :mod:`kraftlog.tools.cli`)."""
    admin = subparsers.add_parser(
        "admin", help="run the AdminService (stateless operator API)",
        description="Run the stateless AdminService: it finds the active controller and "
                    "the brokers and serves topic, reassignment, election, config, log-dir "
                    "and quorum RPCs for the kraftlog CLI and any gRPC client.")
    admin.add_argument("--config", default=None, metavar="FILE",
                       help="a properties file (controller.quorum.bootstrap.servers or "
                            "controller.quorum.voters, listeners, request.timeout.ms, ...)")
    admin.add_argument("--override", action="append", metavar="KEY=VALUE",
                       help="set a property, overriding the file; repeatable")
    admin.add_argument("--bootstrap-controller", default=None, metavar="HOST:PORT[,...]",
                       help="controller addresses (= controller.quorum.bootstrap.servers)")
    admin.add_argument("--listen", default=None, metavar="HOST:PORT",
                       help=f"serve here (default: listeners, {DEFAULT_LISTENER})")
    admin.add_argument("--log-level", default=None, choices=log_setup.LEVELS,
                       help="stderr log level (default: kraftlog.log.level, INFO)")
    admin.add_argument("--log-format", default=None, choices=log_setup.FORMATS,
                       help="text, or json (default: kraftlog.log.format, text)")
    admin.set_defaults(func=run_admin)
