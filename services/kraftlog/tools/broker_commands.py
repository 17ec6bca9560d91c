"""``kraftlog broker``: the broker role's subcommand (see :mod:`kraftlog.tools.cli`).

Owns only argument parsing; the process itself is :mod:`kraftlog.broker.process`.
Edge module.
"""

from __future__ import annotations

from typing import Any

from kraftlog.broker import combined_process, process
from kraftlog.telemetry import logging as log_setup


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
    broker.set_defaults(func=process.run_broker)
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
    server.set_defaults(func=combined_process.run_server)
