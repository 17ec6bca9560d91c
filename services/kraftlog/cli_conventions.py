"""What every ``kraftlog`` subcommand shares: exit codes, ``--output``, endpoint variables.

Owns the conventions that make the command one tool rather than a dozen (issue 18):

- **exit codes**: 0 ok, 1 error (one line on stderr), 2 usage (argparse prints the
  subcommand's usage), 130 interrupted; a command with a code of its own (``dev status``
  and ``reassign verify`` exit 3) declares it with :func:`declare_exit_codes`, and
  :mod:`kraftlog.tools.cli` writes the list into every parser's ``--help`` epilog
  (:func:`exit_codes_epilog`);
- **``--output table|json``** on every read command (:func:`add_output_option`);
  ``text``, the older name of ``table`` on some commands, is still accepted;
- **JSON keys** are lowerCamelCase (:data:`JSON_KEY_STYLE`), as Kafka's tools that print
  JSON do (kafka-log-dirs: ``logDirs``, ``offsetLag``, ``isFuture``; DumpLogSegments'
  ``baseOffset``, ``lastOffset``; Kafka's generated message JSON converters). Kafka's own
  file formats keep their exact keys (the reassignment plan's ``log_dirs``), as does
  ``log dump``'s JSON, which uses DumpLogSegments' names (``CreateTime``);
- **endpoint variables** (:data:`BOOTSTRAP_SERVER_ENV`, :data:`BOOTSTRAP_CONTROLLER_ENV`,
  :data:`ADMIN_ENV`): the default of ``--bootstrap-server``, ``--bootstrap-controller``
  and ``--admin`` wherever a command takes them; ``kraftlog dev up`` prints the three
  ``export`` lines.

Called by the ``*commands`` modules while they build their parsers, and by
:mod:`kraftlog.tools.cli`. Pure: argparse and the environment only, no I/O of its own.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

STANDARD_EXIT_CODES: Mapping[int, str] = {
    EXIT_OK: "ok",
    EXIT_ERROR: "error (one line on stderr)",
    EXIT_USAGE: "usage error (bad or missing flags)",
}
_EXIT_CODES_DEST = "_exit_codes"

BOOTSTRAP_SERVER_ENV = "KRAFTLOG_BOOTSTRAP_SERVER"
"""Brokers, ``HOST:PORT[,...]``: produce, consume and (KIP-590) the admin commands."""
BOOTSTRAP_CONTROLLER_ENV = "KRAFTLOG_BOOTSTRAP_CONTROLLER"
"""Controllers, ``HOST:PORT[,...]``: ``quorum describe``."""
ADMIN_ENV = "KRAFTLOG_ADMIN"
"""``kraftlog admin`` services, ``HOST:PORT[,...]``: the admin commands."""
COMMAND_CONFIG_ENV = "KRAFTLOG_COMMAND_CONFIG"
"""Default of ``--command-config``: a client properties file (``security.protocol``,
``ssl.*``) every tool that dials the cluster uses."""

OUTPUT_FORMATS = ("table", "json")
OUTPUT_ALIASES: Mapping[str, str] = {"text": "table"}

JSON_KEY_STYLE = re.compile(r"^[a-z][a-zA-Z0-9]*$")
"""lowerCamelCase: a lower-case letter, then letters and digits."""


def declare_exit_codes(parser: argparse.ArgumentParser, codes: Mapping[int, str]) -> None:
    """Record the exit codes ``parser``'s command uses beyond 0, 1 and 2 (for its --help)."""
    parser.set_defaults(**{_EXIT_CODES_DEST: dict(codes)})


def exit_codes(parser: argparse.ArgumentParser) -> dict[int, str]:
    """Every exit code ``parser``'s command can end with, ascending."""
    extra: Mapping[int, str] = parser.get_default(_EXIT_CODES_DEST) or {}
    codes = {**STANDARD_EXIT_CODES, **extra, EXIT_INTERRUPTED: "interrupted (Ctrl-C)"}
    return dict(sorted(codes.items()))


def exit_codes_epilog(parser: argparse.ArgumentParser) -> str:
    return "exit codes: " + ", ".join(f"{code} {what}"
                                      for code, what in exit_codes(parser).items())


def _output_format(text: str) -> str:
    return OUTPUT_ALIASES.get(text, text)


def add_output_option(parser: argparse.ArgumentParser, *, help_text: str | None = None,
                      ) -> None:
    """``--output table|json`` (default table; ``text`` is accepted for table)."""
    parser.add_argument("--output", type=_output_format, choices=OUTPUT_FORMATS,
                        default="table", metavar="table|json",
                        help=help_text or "table (default) or json, one object with "
                                          "lowerCamelCase keys, for scripts")


def env_default(variable: str) -> str | None:
    """The endpoint variable's value, None when unset or blank."""
    value = os.environ.get(variable, "").strip()
    return value or None
