"""The dev cluster's layout: names, ports, the configs it writes, cluster.json."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import pytest

from kraftlog import config as kconfig
from kraftlog import errors
from kraftlog.dev import layout as lay
from kraftlog.dev import process as dev_process
from kraftlog.security import tls
from kraftlog.server import broker_server as broker_process
from kraftlog.server import controller_server as raft_commands
from kraftlog.tools import admin_commands


def make(tmp_path: pathlib.Path, **kwargs: object) -> lay.Layout:
    return lay.Layout(directory=tmp_path, cluster_id="MkU3OEVBNTcwNTJENDM2Qg", **kwargs)  # type: ignore[arg-type]


def test_default_nodes_names_and_ports(tmp_path: pathlib.Path) -> None:
    layout = make(tmp_path)
    assert [n.name for n in layout.nodes] == [
        "controller-1", "controller-2", "controller-3", "broker-101", "broker-102",
        "broker-103", "admin"]
    assert [n.port for n in layout.nodes] == [19091, 19092, 19093, 19101, 19102, 19103, 19090]
    assert layout.voters == "1@127.0.0.1:19091,2@127.0.0.1:19092,3@127.0.0.1:19093"
    assert layout.bootstrap_servers == "127.0.0.1:19101,127.0.0.1:19102,127.0.0.1:19103"
    # Kafka clients: each broker's KAFKA listener, its gRPC port + 10.
    assert layout.kafka_bootstrap_servers == "127.0.0.1:19111,127.0.0.1:19112,127.0.0.1:19113"
    assert ("listeners=PLAINTEXT://127.0.0.1:19101,KAFKA://127.0.0.1:19111"
            in layout.config_text(layout.find("broker-101")).splitlines())
    assert len({n.port for n in make(tmp_path, controllers=5, brokers=9).nodes}) == 15


def test_find_by_name_or_id(tmp_path: pathlib.Path) -> None:
    layout = make(tmp_path)
    assert layout.find("broker-102").node_id == 102
    assert layout.find("2").name == "controller-2"
    assert layout.find("admin").role is lay.Role.ADMIN
    with pytest.raises(errors.ConfigError, match=r"no node 'broker-7'.*controller-1"):
        layout.find("broker-7")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"controllers": 2}, "--controllers must be one of"),
    ({"brokers": 0}, "--brokers must be 1..9"),
    ({"brokers": 10}, "--brokers must be 1..9"),
    ({"base_port": 80}, "--base-port must be"),
])
def test_bad_shapes_are_refused(tmp_path: pathlib.Path, kwargs: dict[str, object],
                                message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        make(tmp_path, **kwargs)


def test_written_configs_parse_with_no_unused_keys(tmp_path: pathlib.Path) -> None:
    layout = make(tmp_path)
    for node, definition in ((layout.of_role(lay.Role.CONTROLLER)[0],
                              raft_commands.CONTROLLER_CONFIG),
                             (layout.of_role(lay.Role.BROKER)[0], broker_process.BROKER_CONFIG)):
        raw, sources = kconfig.parse_properties(layout.config_text(node))
        cfg = definition.parse(raw, sources=sources)
        assert cfg.unused() == ()
        assert cfg.get_int("node.id") == node.node_id
        assert cfg.get_int("min.insync.replicas") == 2
    admin = layout.of_role(lay.Role.ADMIN)[0]
    raw, sources = kconfig.parse_properties(layout.config_text(admin))
    assert admin_commands.ADMIN_CONFIG.parse(raw, sources=sources).unused() == ()
    one_broker = make(tmp_path, brokers=1)
    text = one_broker.config_text(one_broker.of_role(lay.Role.CONTROLLER)[0])
    assert "default.replication.factor=1" in text and "min.insync.replicas=1" in text


def test_mtls_layout_writes_certificates_and_configs_every_role_can_serve(
        tmp_path: pathlib.Path) -> None:
    layout = dev_process.create_or_load(tmp_path / "c", controllers=1, brokers=1,
                                        base_port=None, with_admin=True, security="mtls")
    assert lay.load(layout.directory) == layout and layout.security == "mtls"
    assert oct(layout.keystore_path("broker-101").stat().st_mode & 0o777) == "0o600"
    for node, definition in ((layout.of_role(lay.Role.CONTROLLER)[0],
                              raft_commands.CONTROLLER_CONFIG),
                             (layout.of_role(lay.Role.BROKER)[0], broker_process.BROKER_CONFIG),
                             (layout.of_role(lay.Role.ADMIN)[0], admin_commands.ADMIN_CONFIG)):
        raw, sources = kconfig.parse_properties(layout.config_text(node))
        cfg = definition.parse(raw, sources=sources)
        assert cfg.unused() == (), node
        listener = raw["listeners"].partition("://")[0]
        served = tls.listener_tls(cfg, listener)
        assert served is not None and served.authenticates, node
    values, _ = kconfig.load_properties(layout.client_properties_path)
    assert values["security.protocol"] == "SSL"
    assert tls.client_tls_from_properties(values, what="t") is not None
    # Resuming keeps the CA; another --security is a different cluster.
    before = layout.truststore_path.read_bytes()
    dev_process.create_or_load(layout.directory, controllers=None, brokers=None,
                               base_port=None, with_admin=True)
    assert layout.truststore_path.read_bytes() == before
    with pytest.raises(errors.ConfigError, match="created with --security mtls"):
        dev_process.create_or_load(layout.directory, controllers=None, brokers=None,
                                   base_port=None, with_admin=True, security="none")
    with pytest.raises(errors.ConfigError, match="--security must be one of"):
        lay.Layout(directory=tmp_path, cluster_id="x", security="tls")


def test_cluster_json_round_trip_and_errors(tmp_path: pathlib.Path) -> None:
    layout = make(tmp_path, controllers=5, brokers=4, base_port=20000, with_admin=False)
    (tmp_path / lay.LAYOUT_FILE).write_text(layout.to_json())
    assert lay.load(tmp_path) == layout
    assert lay.load(tmp_path / "elsewhere") is None
    for text, message in (("{", "not JSON"), ("[]", "expected an object"),
                          ('{"version": 1}', "missing field 'clusterId'"),
                          (layout.to_json().replace('"brokers": 4', '"brokers": "4"'),
                           "brokers must be a int")):
        (tmp_path / lay.LAYOUT_FILE).write_text(text)
        with pytest.raises(errors.ConfigError, match=message) as caught:
            lay.load(tmp_path)
        assert str(tmp_path / lay.LAYOUT_FILE) in str(caught.value)


def test_flags_that_contradict_the_stored_shape(tmp_path: pathlib.Path) -> None:
    stored = make(tmp_path)
    lay.check_same_shape(stored, controllers=3, brokers=None, base_port=None)
    with pytest.raises(errors.ConfigError, match=r"created with --brokers 3.*--delete-data"):
        lay.check_same_shape(stored, controllers=None, brokers=4, base_port=None)


def test_a_node_between_fork_and_exec_counts_as_running(tmp_path: pathlib.Path) -> None:
    """``dev up`` checks its nodes right after starting them; a child that has not exec'd
    yet still carries the parent's command line and must not look dead."""
    layout = make(tmp_path)
    admin = layout.find("admin")
    layout.pid_path(admin).parent.mkdir(parents=True, exist_ok=True)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child only waits to be killed
        signal.pause()
        os._exit(0)
    try:
        layout.pid_path(admin).write_text(f"{child}\n")
        assert dev_process.running_pid(layout, admin) == child
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    assert dev_process.running_pid(layout, admin) is None  # gone: dead, not running
    # A live process that is something else (a reused pid) is not the node.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        layout.pid_path(admin).write_text(f"{other.pid}\n")
        assert dev_process.running_pid(layout, admin) is None
    finally:
        other.kill()
        other.wait()


def test_broker_config_overrides_reach_every_broker_and_cluster_json(
        tmp_path: pathlib.Path) -> None:
    layout = dev_process.create_or_load(
        tmp_path, controllers=None, brokers=None, base_port=None, with_admin=True,
        broker_config=(("num.replica.fetchers", "2"), ("replica.lag.time.max.ms", "30000")))
    for node in layout.of_role(lay.Role.BROKER):
        text = layout.config_text(node)
        assert "num.replica.fetchers=2" in text
        # After dev up's own defaults, so it wins over them.
        assert "replica.lag.time.max.ms=30000" in text
        assert "replica.lag.time.max.ms=10000" not in text
        raw, sources = kconfig.parse_properties(text)
        cfg = broker_process.BROKER_CONFIG.parse(raw, sources=sources)
        assert cfg.unused() == () and cfg.get_int("num.replica.fetchers") == 2
    assert "num.replica.fetchers" not in layout.config_text(layout.find("controller-1"))
    assert lay.load(tmp_path) == layout  # kept in cluster.json
    # Another dev up without the flag keeps them; with it, replaces them.
    assert dev_process.create_or_load(tmp_path, controllers=None, brokers=None,
                                      base_port=None, with_admin=True) == layout
    changed = dev_process.create_or_load(tmp_path, controllers=None, brokers=None,
                                         base_port=None, with_admin=True, broker_config=())
    assert changed.broker_config == () and lay.load(tmp_path) == changed
    assert changed.cluster_id == layout.cluster_id


@pytest.mark.parametrize(("settings", "message"), [
    ((("node.id", "7"),), "set by dev up itself"),
    ((("log.dirs", "/tmp/x"),), "set by dev up itself"),
    ((("Bad Name", "1"),), "not a config name"),
    ((("a.b", "1\nnode.id=9"),), "spans lines"),
    ((("a.b", "1"), ("a.b", "2")), "given twice"),
])
def test_bad_broker_config_overrides_are_refused(tmp_path: pathlib.Path,
                                                 settings: tuple[tuple[str, str], ...],
                                                 message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        make(tmp_path, broker_config=settings)
    assert not (tmp_path / lay.LAYOUT_FILE).exists()


def test_broker_config_flag_parsing_and_old_cluster_json(tmp_path: pathlib.Path) -> None:
    assert lay.parse_setting("num.replica.fetchers=2") == ("num.replica.fetchers", "2")
    assert lay.parse_setting(" a.b = x=y ") == ("a.b", "x=y")
    for bad in ("novalue", "=3", ""):
        with pytest.raises(errors.ConfigError, match="KEY=VALUE"):
            lay.parse_setting(bad)
    # A cluster.json from before the flag has no brokerConfig: no overrides.
    old = make(tmp_path).to_json().replace(',\n  "brokerConfig": {}', "")
    assert "brokerConfig" not in old
    (tmp_path / lay.LAYOUT_FILE).write_text(old)
    assert lay.load(tmp_path) == make(tmp_path)
    (tmp_path / lay.LAYOUT_FILE).write_text(
        make(tmp_path).to_json().replace('"brokerConfig": {}', '"brokerConfig": {"node.id": "3"}'))
    with pytest.raises(errors.ConfigError, match=r"cluster\.json: .*set by dev up itself"):
        lay.load(tmp_path)
    (tmp_path / lay.LAYOUT_FILE).write_text(
        make(tmp_path).to_json().replace('"brokerConfig": {}', '"brokerConfig": ["x"]'))
    with pytest.raises(errors.ConfigError, match="brokerConfig must map names to strings"):
        lay.load(tmp_path)


def test_dev_up_refuses_a_bad_broker_config_before_starting_anything(
        tmp_path: pathlib.Path) -> None:
    for flag, message in (("novalue", "wants KEY=VALUE"), ("listeners=X://h:1", "set by dev up")):
        done = subprocess.run([sys.executable, "-m", "kraftlog", "dev", "up", "--dir",
                               str(tmp_path), "--broker-config", flag],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 1 and message in done.stderr, done.stderr
        assert done.stderr.startswith("kraftlog: error:")
        assert not (tmp_path / lay.LAYOUT_FILE).exists() and not list(tmp_path.glob("*.pid"))
