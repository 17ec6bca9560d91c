"""Properties files, overrides, typing and validation of Kafka-style configs."""

from __future__ import annotations

import pathlib

import pytest

from kraftlog import config
from kraftlog.errors import ConfigError
from kraftlog.security import config as security_config

DEFINITION = config.ConfigDef(
    [
        config.ConfigKey(name="node.id", type=config.ConfigType.INT, default=None,
                         doc="node id", required=True, validator=config.at_least(0)),
        config.ConfigKey(name="controller.quorum.fetch.timeout.ms", type=config.ConfigType.INT,
                         default=2000, doc="ms", validator=config.at_least(1)),
        config.ConfigKey(name="process.roles", type=config.ConfigType.LIST, default=["broker"],
                         doc="roles", validator=config.one_of("broker", "controller")),
        config.ConfigKey(name="unclean.leader.election.enable", type=config.ConfigType.BOOLEAN,
                         default=False, doc="bool"),
        config.ConfigKey(name="log.dirs", type=config.ConfigType.STRING, default="/tmp/x", doc="d"),
    ]
)


def test_properties_file_with_comments_continuations_and_escapes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# comment\n! another\n\nnode.id = 3\nprocess.roles=broker,\\\n    controller\n"
        "log.dirs: /data/a\\tb\nextra.key value with spaces\n"
    )
    parsed = config.load(DEFINITION, path)
    assert parsed.get_int("node.id") == 3
    assert parsed.get_list("process.roles") == ["broker", "controller"]
    assert parsed.get_str("log.dirs") == "/data/a\tb"
    assert parsed.get_int("controller.quorum.fetch.timeout.ms") == 2000
    assert parsed.unused() == ("extra.key",)
    assert parsed.raw["extra.key"] == "value with spaces"


def test_overrides_win_over_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("node.id=1\nunclean.leader.election.enable=false\n")
    parsed = config.load(DEFINITION, path, ["node.id=7", "unclean.leader.election.enable=TRUE"])
    assert parsed.get_int("node.id") == 7
    assert parsed.get_bool("unclean.leader.election.enable") is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("node.id=abc\n", "server.properties:1: node.id='abc' is not a valid int"),
        ("node.id=-1\n", "must be at least 0"),
        ("node.id=1\ncontroller.quorum.fetch.timeout.ms=0\n", "server.properties:2"),
        ("node.id=1\nprocess.roles=broker,zookeeper\n", "'zookeeper' is not one of"),
        ("node.id=1\nunclean.leader.election.enable=yes\n", "expected true or false"),
        ("node.id=99999999999\n", "out of range for int"),
        ("process.roles=broker\n", "missing required config node.id"),
        ("=5\nnode.id=1\n", "line has no key"),
    ],
)
def test_bad_values_name_the_key_file_and_line(tmp_path: pathlib.Path, text: str, message: str) -> None:
    path = tmp_path / "server.properties"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        config.load(DEFINITION, path)


def test_missing_and_binary_files_are_clear_errors(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(DEFINITION, tmp_path / "nope.properties")
    binary = tmp_path / "bin.properties"
    binary.write_bytes(b"\xff\xfe\x00node.id=1")
    with pytest.raises(ConfigError, match="not UTF-8"):
        config.load(DEFINITION, binary)
    with pytest.raises(ConfigError, match="is a directory"):
        config.load(DEFINITION, tmp_path)


def test_malformed_override_is_rejected() -> None:
    with pytest.raises(ConfigError, match="expected key=value"):
        config.load(DEFINITION, None, ["node.id"])


def test_typed_getters_refuse_the_wrong_type() -> None:
    parsed = config.load(DEFINITION, None, ["node.id=1"])
    with pytest.raises(ConfigError, match="not a boolean"):
        parsed.get_bool("node.id")
    with pytest.raises(ConfigError, match="unknown config"):
        parsed.get_int("no.such.key")


@pytest.mark.parametrize(("value", "message"), [
    ("PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", None),
    ("PLAINTEXT:PLAINTEXT,CONTROLLER:SSL", None),
    ("PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL", "listener SECURE asks for SASL_SSL; SASL is not "
                                           "supported yet"),
    ("PLAINTEXT", "entry 'PLAINTEXT' is not NAME:PROTOCOL"),
])
def test_security_protocol_map_serves_plaintext_and_ssl(value: str, message: str | None) -> None:
    definition = config.ConfigDef([config.ConfigKey(
        name="listener.security.protocol.map", type=config.ConfigType.LIST, default=None,
        doc="map", validator=security_config.protocol_map_validator)])
    load = lambda: config.load(definition, None, [f"listener.security.protocol.map={value}"])  # noqa: E731
    if message is None:
        assert load().get_list("listener.security.protocol.map") == value.split(",")
    else:
        with pytest.raises(ConfigError, match=message):
            load()
