"""The one ``kraftlog`` command: role and tool subcommands.

Each room of the package that offers commands has a ``commands`` module with
``register(subparsers)``, which adds its subcommands and sets ``func`` on each
parser to a callable ``(argparse.Namespace) -> int`` (the exit code). This module
only assembles them and turns expected errors into one clear line on stderr and
a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kraftlog import __version__, errors

# Rooms that contribute subcommands, in help order. A missing module is a bug,
# not an optional feature, so imports are not guarded.
_COMMAND_MODULES = ("kraftlog.storage.commands", "kraftlog.raft.commands",
                    "kraftlog.admin.quorum_commands", "kraftlog.broker.commands",
                    "kraftlog.dev.commands", "kraftlog.admin.server_commands",
                    "kraftlog.admin.topic_commands", "kraftlog.admin.reassign_commands")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraftlog",
        description="kraftlog: Kafka's KRaft architecture as gRPC microservices.",
    )
    parser.add_argument("--version", action="version", version=f"kraftlog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except errors.KraftlogError as exc:
        print(f"kraftlog: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(f"kraftlog: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
