"""``kraftlog broker``: the broker role's subcommand (see :mod:`kraftlog.tools.cli`).

Owns argument parsing, the properties files (unused keys are logged) and logging set-up;
the servers are :mod:`kraftlog.server` (:class:`~kraftlog.server.broker_server.BrokerServer`,
combined mode: :mod:`kraftlog.server.combined_server`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from kraftlog import config as kconfig
from kraftlog.server import broker_server, combined_server, controller_server
from kraftlog.telemetry import logging as log_setup

logger = logging.getLogger(__name__)


def run_broker(args: argparse.Namespace) -> int:
    overrides = list(args.override or ())
    if getattr(args, "metrics_port", None) is not None:
        overrides.append(f"kraftlog.metrics.port={args.metrics_port}")
    cfg = kconfig.load(broker_server.BROKER_CONFIG, args.config, overrides)
    log_setup.configure(level=args.log_level or cfg.get_str("kraftlog.log.level"),
                        log_format=args.log_format or cfg.get_str("kraftlog.log.format"))
    logging.getLogger("kraftlog.raft.consensus").setLevel(logging.WARNING)
    for key in cfg.unused():
        logger.warning("event=unused_config key=%s", key)
    broker_server.apply_malloc_config(cfg)
    return asyncio.run(broker_server.serve(cfg))


def run_server(args: argparse.Namespace) -> int:
    overrides = list(args.override or ())
    probe = kconfig.load_properties(args.config)[0]
    roles = combined_server.parse_roles(args.roles or probe.get("process.roles", ""))
    overrides.append(f"process.roles={','.join(roles)}")
    if roles == ("controller",) or roles == ("broker",):
        definition = (controller_server.CONTROLLER_CONFIG if roles == ("controller",)
                      else broker_server.BROKER_CONFIG)
        cfg = kconfig.load(definition, args.config, overrides)
        unused: set[str] = set(cfg.unused())
    else:
        controller_cfg = kconfig.load(controller_server.CONTROLLER_CONFIG, args.config, overrides)
        broker_cfg = kconfig.load(broker_server.BROKER_CONFIG, args.config, overrides)
        cfg = controller_cfg
        unused = set(controller_cfg.unused()) & set(broker_cfg.unused())
    log_setup.configure(level=args.log_level or cfg.get_str("kraftlog.log.level"),
                        log_format=args.log_format or cfg.get_str("kraftlog.log.format"))
    logging.getLogger("kraftlog.raft.consensus").setLevel(logging.WARNING)
    for key in sorted(unused):
        logger.warning("event=unused_config key=%s", key)
    if roles == ("controller",):
        return asyncio.run(controller_server.serve(cfg))
    if roles == ("broker",):
        broker_server.apply_malloc_config(cfg)
        return asyncio.run(broker_server.serve(cfg))
    broker_server.apply_malloc_config(broker_cfg)
    return asyncio.run(combined_server.serve_combined(controller_cfg, broker_cfg))


def register(subparsers: Any) -> None:
    """Add ``broker`` and ``server`` to the ``kraftlog`` command."""
    broker = subparsers.add_parser(
        "broker", help="run a broker (partition replicas, BrokerService)",
        description="Run one broker, like kafka-server-start.sh with process.roles=broker: "
                    "it follows the metadata log as a raft observer, registers with the "
                    "active controller and serves BrokerService.")
    broker.add_argument("--config", required=True, metavar="FILE",
                        help="a Kafka server.properties file")
    broker.add_argument("--override", action="append", metavar="KEY=VALUE",
                        help="set a property, overriding the file; repeatable")
    broker.add_argument("--log-level", default=None, choices=log_setup.LEVELS,
                        help="stderr log level (default: kraftlog.log.level, INFO)")
    broker.add_argument("--log-format", default=None, choices=log_setup.FORMATS,
                        help="text, or json (default: kraftlog.log.format, text)")
    broker.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve Prometheus metrics on this port (default: "
                             "kraftlog.metrics.port; 0 = off)")
    broker.set_defaults(func=run_broker)
    register_server(subparsers)


def register_server(subparsers: Any) -> None:
    """Add ``server`` (one or both roles in one process) to the ``kraftlog`` command."""
    server = subparsers.add_parser(
        "server", help="run the controller and/or broker role in one process",
        description="Run the roles of process.roles (or --roles) in one process, like "
                    "kafka-server-start.sh; 'controller,broker' is Kafka's combined mode: "
                    "one node id, one metadata log shared by both roles.")
    server.add_argument("--config", required=True, metavar="FILE",
                        help="a Kafka server.properties file")
    server.add_argument("--roles", default=None, metavar="ROLES",
                        help="controller, broker or controller,broker (default: "
                             "process.roles from the file)")
    server.add_argument("--override", action="append", metavar="KEY=VALUE",
                        help="set a property, overriding the file; repeatable")
    server.add_argument("--log-level", default=None, choices=log_setup.LEVELS,
                        help="stderr log level (default: kraftlog.log.level, INFO)")
    server.add_argument("--log-format", default=None, choices=log_setup.FORMATS,
                        help="text, or json (default: kraftlog.log.format, text)")
    server.set_defaults(func=run_server)
