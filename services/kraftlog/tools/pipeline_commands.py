"""``kraftlog pipeline balance|metadata-audit``: the Spark jobs as CLI commands.

Owns :func:`register`; the two jobs' argument parsers are
:mod:`kraftlog.pipeline.job_args` (shared with their ``spark-submit`` entry points,
:mod:`kraftlog.pipeline.balance` and :mod:`kraftlog.pipeline.audit`, so both take the
same arguments). Parsing and checking the arguments imports no Spark; the job module is imported only when the command runs, so a bad option fails
fast with one line on stderr, and a machine without the ``spark`` extra or Java gets
one line saying so. As a CLI command the job runs on ``local[2]`` unless
``--master`` names another master. Edge module (CLI).
"""

from __future__ import annotations

import argparse
from typing import Any

from kraftlog.pipeline import job_args


def run_balance(args: argparse.Namespace) -> int:
    job_args.check_balance_arguments(args)
    from kraftlog.pipeline import balance

    return balance.main_with_args(args, default_master=job_args.CLI_MASTER)


def run_audit(args: argparse.Namespace) -> int:
    from kraftlog.pipeline import audit as audit_job

    return audit_job.main_with_args(args, default_master=job_args.CLI_MASTER)


def register(subparsers: Any) -> None:
    """Add ``pipeline`` to the ``kraftlog`` command (see :mod:`kraftlog.tools.cli`)."""
    pipeline = subparsers.add_parser(
        "pipeline", help="Spark jobs over the cluster (balance, metadata-audit)",
        description="Spark jobs over a kraftlog cluster; each also runs with spark-submit "
                    "(services/kraftlog/pipeline/balance.py, audit.py).")
    sub = pipeline.add_subparsers(dest="pipeline_command", metavar="JOB")
    sub.required = True
    balance = sub.add_parser("balance", help="even bytes and leaders across brokers",
                             description=job_args.balance_parser().description)
    job_args.add_balance_arguments(balance)
    balance.set_defaults(func=run_balance)
    audit = sub.add_parser("metadata-audit", help="the metadata log as a table of events + "
                                                  "a plot of leader changes",
                           description=job_args.audit_parser().description)
    job_args.add_audit_arguments(audit)
    audit.set_defaults(func=run_audit)
