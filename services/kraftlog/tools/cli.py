"""The one ``kraftlog`` command: role and tool subcommands.

Each ``*_commands`` module of :mod:`kraftlog.tools` has ``register(subparsers)``,
which adds its subcommands and sets ``func`` on each parser to a callable
``(argparse.Namespace) -> int`` (the exit code). This module only assembles them, writes every parser's exit codes into its ``--help`` epilog
(:mod:`kraftlog.cli_conventions`), answers a flag no parser knows with the usage of the
subcommand it was given to (argparse alone would print the top-level usage), and turns
expected errors into one clear line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from kraftlog import __version__, errors
from kraftlog import cli_conventions as conventions
from kraftlog import config as kconfig

# Rooms that contribute subcommands, in help order, with the commands each adds. Only
# the module of the command being run is imported (a CLI call should not pay for
# importing the controller and broker processes); help and usage errors import all.
# A missing module is a bug, not an optional feature, so imports are not guarded.
_COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "kraftlog.tools.storage_commands": ("storage", "log"),
    "kraftlog.tools.controller_commands": ("controller",),
    "kraftlog.tools.quorum_commands": ("quorum",),
    "kraftlog.tools.broker_commands": ("broker", "server"),
    "kraftlog.tools.broker_rack_commands": ("broker-rack",),
    "kraftlog.tools.dev_commands": ("dev",),
    "kraftlog.tools.admin_commands": ("admin",),
    "kraftlog.tools.topic_commands": ("topics", "cluster"),
    "kraftlog.tools.reassign_commands": ("reassign", "leader-election"),
    "kraftlog.tools.delete_records_commands": ("delete-records",),
    "kraftlog.tools.client_commands": ("produce", "consume"),
    "kraftlog.tools.pipeline_commands": ("pipeline",),
}

EXIT_OK = conventions.EXIT_OK
EXIT_ERROR = conventions.EXIT_ERROR
EXIT_USAGE = conventions.EXIT_USAGE


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
    for each in walk_parsers(parser):
        _add_command_config(each)
        epilog = conventions.exit_codes_epilog(each)
        each.epilog = f"{each.epilog}\n\n{epilog}" if each.epilog else epilog
    return parser


_CLIENT_FLAGS = frozenset({"--bootstrap-server", "--bootstrap-controller", "--admin"})


def _add_command_config(parser: argparse.ArgumentParser) -> None:
    """``--command-config FILE`` on every tool that dials the cluster (kafka-topics.sh's):
    a Kafka client properties file whose ``security.protocol`` and ``ssl.*`` settings
    every channel of the command uses. Servers (``--config FILE --override K=V``) take
    their own settings from their properties."""
    flags = set(parser._option_string_actions)
    if flags & _CLIENT_FLAGS and "--override" not in flags and "--command-config" not in flags:
        parser.add_argument("--command-config", default=None, metavar="FILE",
                            help="client properties (security.protocol=SSL, "
                                 "ssl.truststore.location, ssl.keystore.location, ...); "
                                 f"default ${conventions.COMMAND_CONFIG_ENV}")


def _apply_command_config(args: argparse.Namespace) -> None:
    path = getattr(args, "command_config", None)
    if path is None and hasattr(args, "command_config"):
        path = os.environ.get(conventions.COMMAND_CONFIG_ENV) or None
    if path:
        # Imported here: a command without the flag (storage format) need not load grpc.
        from kraftlog import rpc
        from kraftlog.security import tls
        values, _sources = kconfig.load_properties(path)
        rpc.configure_client(tls.client_tls_from_properties(
            values, what=f"--command-config {path}"))


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)),
                None)


def walk_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand parser below it, depth first, each once."""
    yield parser
    sub = _subcommands(parser)
    if sub is not None:
        seen: set[int] = set()
        for child in sub.choices.values():  # aliases map to the same parser
            if id(child) not in seen:
                seen.add(id(child))
                yield from walk_parsers(child)


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  ) -> argparse.ArgumentParser:
    """The innermost subcommand parser ``args`` was parsed by."""
    sub = _subcommands(parser)
    if sub is None or sub.dest is argparse.SUPPRESS:
        return parser
    name = getattr(args, sub.dest, None)
    child = sub.choices.get(name) if isinstance(name, str) else None
    return parser if child is None else chosen_parser(child, args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # Print the usage of the subcommand the flag was given to (exits 2).
        chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        _apply_command_config(args)
        code: int = args.func(args)
    except errors.KraftlogError as exc:
        print(f"kraftlog: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(f"kraftlog: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return conventions.EXIT_INTERRUPTED
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
