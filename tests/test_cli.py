"""The ``kraftlog`` command's assembly: each command imports only the room that owns it."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from kraftlog.tools import cli


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    raise AssertionError("no subcommands")


def test_each_module_registers_exactly_the_commands_listed_for_it() -> None:
    for module, commands in cli._COMMAND_MODULES.items():
        parser = argparse.ArgumentParser()
        importlib.import_module(module).register(parser.add_subparsers())
        assert _choices(parser) == list(commands), module
    every = _choices(cli.build_parser(every_command=True))
    assert every == [c for commands in cli._COMMAND_MODULES.values() for c in commands]


def test_a_command_imports_only_its_own_room() -> None:
    probe = ("import sys, kraftlog.tools.cli as c; c.build_parser(['topics', 'list']); "
             "print(sorted(m for m in sys.modules if m.startswith('kraftlog.')"
             " and m.endswith(('process', 'commands', '_server', '_host'))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    loaded = done.stdout
    assert "kraftlog.tools.topic_commands" in loaded
    for heavy in ("kraftlog.server.controller_host", "kraftlog.server.broker_server",
                  "kraftlog.tools.dev_commands"):
        assert heavy not in loaded, loaded


def test_unknown_command_and_help_still_list_every_command() -> None:
    done = subprocess.run([sys.executable, "-m", "kraftlog", "nope"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "leader-election" in done.stderr and "produce" in done.stderr
