"""The Spark jobs' arguments, one parser per job, shared by both ways of running them.

``kraftlog pipeline balance|metadata-audit`` (:mod:`kraftlog.tools.pipeline_commands`)
and the jobs' own ``spark-submit`` entry points (:mod:`kraftlog.pipeline.balance`,
:mod:`kraftlog.pipeline.audit`) build their parsers here, so both take the same
arguments. Imports no Spark: a bad option fails before any Spark or network work.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from kraftlog import cli_conventions as conventions
from kraftlog import errors
from kraftlog.admin import admin_client as ac

ADMIN_ENV = conventions.ADMIN_ENV
CLI_MASTER = "local[2]"
DEFAULT_WINDOW_S = 10.0
DEFAULT_EXECUTE_TIMEOUT_S = 600.0


def _positive_float(flag: str) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number, not {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{flag} must be positive, not {text}")
        return value
    return parse


def _int_at_least(flag: str, low: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, not {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{flag} must be >= {low}, not {value}")
        return value
    return parse


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--min-improvement must be a number, not "
                                         f"{text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"--min-improvement must be in [0, 1), not {text}")
    return value


def admin_address(given: str | None) -> str:
    return given or os.environ.get(ADMIN_ENV) or ac.DEFAULT_ADMIN


def add_balance_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-admin", "--admin", dest="admin", default=None,
                        metavar="HOST:PORT",
                        help=f"the AdminService (default: ${ADMIN_ENV}, else {ac.DEFAULT_ADMIN})")
    parser.add_argument("--output", default=None, metavar="PLAN.json",
                        help="write the plan (Kafka's reassignment JSON) here; default: "
                             "print it")
    parser.add_argument("--execute", action="store_true",
                        help="submit the plan (AlterPartitionReassignments) and wait for it")
    parser.add_argument("--throttle", type=_int_at_least("--throttle", 1), default=None,
                        metavar="BYTES_PER_S",
                        help="with --execute: cap the moves' replication traffic (KIP-73)")
    parser.add_argument("--window-s", type=_positive_float("--window-s"),
                        default=DEFAULT_WINDOW_S, metavar="S",
                        help="produce rates: log end offsets and sizes sampled S seconds apart "
                             f"(default {DEFAULT_WINDOW_S:g})")
    parser.add_argument("--topics", default=None, metavar="T1,T2",
                        help="balance only these topics (default: every non-internal topic)")
    parser.add_argument("--min-improvement", type=_ratio, default=None, metavar="RATIO",
                        help="a move must narrow two brokers' byte gap by more than RATIO of "
                             "the mean broker load (default 0.02)")
    parser.add_argument("--max-moves", type=_int_at_least("--max-moves", 0), default=None,
                        metavar="N", help="at most N replica moves (default 1000)")
    parser.add_argument("--execute-timeout-s", type=_positive_float("--execute-timeout-s"),
                        default=DEFAULT_EXECUTE_TIMEOUT_S, metavar="S",
                        help="with --execute: give up waiting after S seconds "
                             f"(default {DEFAULT_EXECUTE_TIMEOUT_S:g})")
    parser.add_argument("--timeout-ms", type=_int_at_least("--timeout-ms", 1),
                        default=ac.DEFAULT_TIMEOUT_MS, metavar="MS",
                        help="deadline of each admin call")
    parser.add_argument("--master", default=None, metavar="URL",
                        help=f"Spark master (kraftlog pipeline: default {CLI_MASTER}; "
                             "spark-submit: its own)")


def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata-log-dir", required=True, metavar="DIR",
                        help="a controller's metadata.log.dir (or its __cluster_metadata-0)")
    parser.add_argument("--output-dir", required=True, metavar="OUT",
                        help="where events.parquet/, events.csv/ and leader_changes.png go")
    parser.add_argument("--bucket-s", type=_positive_float("--bucket-s"), default=None,
                        metavar="S", help="time bucket of the plot (default: the span / 60)")
    parser.add_argument("--master", default=None, metavar="URL",
                        help=f"Spark master (kraftlog pipeline: default {CLI_MASTER}; "
                             "spark-submit: its own)")


def balance_parser(prog: str = "balance.py") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Plan (and optionally run) a reassignment that evens bytes "
                               "and leaders across brokers, computed with Spark.")
    add_balance_arguments(parser)
    return parser


def audit_parser(prog: str = "audit.py") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Read a controller's metadata log with Spark into a table of "
                               "events, and plot leader changes per broker over time.")
    add_audit_arguments(parser)
    return parser


def check_balance_arguments(args: argparse.Namespace) -> None:
    """What argparse cannot check alone (before any Spark or network work)."""
    if args.throttle is not None and not args.execute:
        raise errors.ConfigError("--throttle only applies with --execute")
