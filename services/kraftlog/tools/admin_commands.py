"""``kraftlog admin [--config FILE] [--bootstrap-controller ...] [--listen HOST:PORT]``.

Runs the stateless AdminService (:mod:`kraftlog.server.admin_server`) until SIGTERM/SIGINT.
Settings are Kafka-style properties (a file, ``--override key=value``, or the shortcut
flags; without ``--config`` their defaults are the endpoint variables,
``--bootstrap-controller`` ``$KRAFTLOG_BOOTSTRAP_CONTROLLER`` and ``--listen``
``$KRAFTLOG_ADMIN`` when it names one address, while a process started with a file
(``kraftlog dev``, the Helm chart) takes its endpoints from the file and the flags only):

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
SERVING while the process serves) and server reflection. Owns argument parsing and the
settings; the process is :mod:`kraftlog.server.admin_server`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from kraftlog import cli_conventions as conventions
from kraftlog import config as kconfig
from kraftlog import errors, rpc
from kraftlog.admin import admin_service
from kraftlog.raft.raft_config import parse_voters
from kraftlog.security import config as security_config
from kraftlog.security import tls
from kraftlog.server import admin_server
from kraftlog.telemetry import logging as log_setup
from kraftlog.telemetry import metrics
from kraftlog.tools import quorum_commands

logger = logging.getLogger(__name__)

DEFAULT_LISTENER = "ADMIN://0.0.0.0:19090"

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
    kconfig.ConfigKey(name="listener.security.protocol.map", type=_L, default=None,
                      validator=security_config.protocol_map_validator,
                      doc="NAME:PROTOCOL,...: the served listener's protocol, and those of "
                          "the controller and broker listeners it dials"),
    kconfig.ConfigKey(name="controller.listener.names", type=_L, default=["CONTROLLER"],
                      doc="the controllers' listener (its protocol: how controllers are dialed)"),
    kconfig.ConfigKey(name="inter.broker.listener.name", type=_S, default="PLAINTEXT",
                      doc="the brokers' listener (its protocol: how brokers are dialed)"),
    *security_config.SERVER_CONFIG_KEYS,
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


def admin_overrides(args: argparse.Namespace) -> list[str]:
    """``--override`` entries, then the shortcut flags as properties; without ``--config``
    an unset flag takes its endpoint variable (a file names its own endpoints: the
    variables of an operator's shell must not move a ``kraftlog dev`` or pod process)."""
    overrides = list(args.override or ())
    use_env = args.config is None
    bootstrap = args.bootstrap_controller or (conventions.env_default(
        conventions.BOOTSTRAP_CONTROLLER_ENV) if use_env else None)
    if bootstrap:
        overrides.append(f"controller.quorum.bootstrap.servers={bootstrap}")
    listen = args.listen
    if listen is None and use_env and (
            admin := conventions.env_default(conventions.ADMIN_ENV)) is not None:
        addresses = [a.strip() for a in admin.split(",") if a.strip()]
        if len(addresses) != 1:
            raise errors.ConfigError(f"${conventions.ADMIN_ENV} names {len(addresses)} "
                                     "addresses; give --listen HOST:PORT")
        listen = addresses[0]
    if listen:
        overrides.append(f"listeners=ADMIN://{listen}")
    return overrides


def run_admin(args: argparse.Namespace) -> int:
    cfg = kconfig.load(ADMIN_CONFIG, args.config, admin_overrides(args))
    log_setup.configure(level=args.log_level or cfg.get_str("kraftlog.log.level"),
                        log_format=args.log_format or cfg.get_str("kraftlog.log.format"))
    for key in cfg.unused():
        logger.warning("event=unused_config key=%s", key)
    settings = admin_settings(cfg)
    listen = listen_address(cfg)  # ConfigError for an empty or malformed listeners
    listener_name = cfg.get_list("listeners")[0].partition("://")[0]
    server_tls = tls.listener_tls(cfg, listener_name)
    rpc.configure_client(tls.node_client_tls(cfg, [
        (cfg.get_list("controller.listener.names") or ["CONTROLLER"])[0],
        cfg.get_str("inter.broker.listener.name")]))
    return asyncio.run(admin_server.serve(settings, listen,
                             metrics_port=cfg.get_int("kraftlog.metrics.port"),
                             metrics_host=cfg.get_str("kraftlog.metrics.host"),
                             server_tls=server_tls))


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
                       help="controller addresses (= controller.quorum.bootstrap.servers; "
                            f"without --config default: ${conventions.BOOTSTRAP_CONTROLLER_ENV})")
    admin.add_argument("--listen", default=None, metavar="HOST:PORT",
                       help=f"serve here (default: without --config ${conventions.ADMIN_ENV} when "
                            f"it names one address, else listeners, {DEFAULT_LISTENER})")
    admin.add_argument("--log-level", default=None, choices=log_setup.LEVELS,
                       help="stderr log level (default: kraftlog.log.level, INFO)")
    admin.add_argument("--log-format", default=None, choices=log_setup.FORMATS,
                       help="text, or json (default: kraftlog.log.format, text)")
    admin.set_defaults(func=run_admin)
