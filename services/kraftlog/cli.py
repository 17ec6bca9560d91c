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

# Rooms that contribute subcommands, in help order, with the commands each adds. Only
# the module of the command being run is imported (a CLI call should not pay for
# importing the controller and broker processes); help and usage errors import all.
# A missing module is a bug, not an optional feature, so imports are not guarded.
_COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "kraftlog.storage.commands": ("storage", "log"),
    "kraftlog.raft.commands": ("controller",),
    "kraftlog.admin.quorum_commands": ("quorum",),
    "kraftlog.broker.commands": ("broker", "server"),
    "kraftlog.dev.commands": ("dev",),
    "kraftlog.admin.server_commands": ("admin",),
    "kraftlog.admin.topic_commands": ("topics", "cluster"),
    "kraftlog.admin.reassign_commands": ("reassign", "leader-election"),
    "kraftlog.admin.delete_records_commands": ("delete-records",),
    "kraftlog.client.commands": ("produce", "consume"),
    "kraftlog.pipeline.pipeline_commands": ("pipeline",),
}

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


def _modules_for(argv: Sequence[str] | None) -> list[str]:
    """The command modules to import: the one owning the command in ``argv``, else all."""
    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    if words:
        for module, commands in _COMMAND_MODULES.items():
            if words[0] in commands:
                return [module]
    return list(_COMMAND_MODULES)


def build_parser(argv: Sequence[str] | None = None, *, every_command: bool = False,
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraftlog",
        description="kraftlog: Kafka's KRaft architecture as gRPC microservices.",
    )
    parser.add_argument("--version", action="version", version=f"kraftlog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in list(_COMMAND_MODULES) if every_command else _modules_for(argv):
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
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
