"""``kraftlog controller``'s observability options: flags win over config keys, and bad
values are refused before anything starts."""

from __future__ import annotations

import argparse
import pathlib

import pytest

from kraftlog import errors
from kraftlog.server import controller_server
from kraftlog.tools import controller_commands as commands


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers())
    return parser.parse_args(["controller", *argv])


def test_flags_default_to_the_config_keys() -> None:
    args = parse("--config", "x.properties")
    assert args.log_level is None and args.log_format is None and args.metrics_port is None
    args = parse("--config", "x", "--log-format", "json", "--log-level", "DEBUG",
                 "--metrics-port", "9404")
    assert (args.log_format, args.log_level, args.metrics_port) == ("json", "DEBUG", 9404)
    keys = {name: key.default for name, key in controller_server.CONTROLLER_CONFIG.keys().items()}
    assert keys["kraftlog.metrics.port"] == 0 and keys["kraftlog.log.format"] == "text"
    assert keys["kraftlog.log.level"] == "INFO"


@pytest.mark.parametrize("bad", ["kraftlog.log.format=xml", "kraftlog.metrics.port=-1",
                                 "kraftlog.log.level=LOUD"])
def test_bad_observability_config_is_refused(tmp_path: pathlib.Path, bad: str) -> None:
    config = tmp_path / "c.properties"
    config.write_text("node.id=1\nprocess.roles=controller\n"
                      "controller.quorum.voters=1@127.0.0.1:1\n"
                      "listeners=CONTROLLER://127.0.0.1:1\n"
                      f"metadata.log.dir={tmp_path}\n{bad}\n")
    with pytest.raises(errors.ConfigError):
        commands.run_controller(parse("--config", str(config)))
