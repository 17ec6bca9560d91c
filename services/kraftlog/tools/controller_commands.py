"""``kraftlog controller --config FILE [--override key=value ...]``: run one quorum member.

Reads a Kafka ``server.properties`` (the keys in
:data:`kraftlog.server.controller_server.CONTROLLER_CONFIG`, Kafka's names and units;
other keys are reported as unused), sets up logging (``--log-level`` / ``--log-format``)
and runs a :class:`~kraftlog.server.controller_server.ControllerServer` until
SIGTERM/SIGINT. Owns only argument parsing and process set-up.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from kraftlog import config as kconfig
from kraftlog.server import controller_server
from kraftlog.telemetry import logging as log_setup

logger = logging.getLogger(__name__)


def run_controller(args: argparse.Namespace) -> int:
    overrides = list(args.override or ())
    if args.metrics_port is not None:
        overrides.append(f"kraftlog.metrics.port={args.metrics_port}")
    cfg = kconfig.load(controller_server.CONTROLLER_CONFIG, args.config, overrides)
    log_setup.configure(level=args.log_level or cfg.get_str("kraftlog.log.level"),
                        log_format=args.log_format or cfg.get_str("kraftlog.log.format"))
    # The driver logs one line per role change; the core's own line would repeat it.
    logging.getLogger("kraftlog.raft.consensus").setLevel(logging.WARNING)
    for key in cfg.unused():
        logger.warning("event=unused_config key=%s", key)
    return asyncio.run(controller_server.serve(cfg))


def register(subparsers: Any) -> None:
    """Add ``controller`` to the ``kraftlog`` command (see :mod:`kraftlog.tools.cli`)."""
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
