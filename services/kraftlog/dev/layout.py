"""The shape of a local dev cluster: which nodes, their ports, data dirs and configs.

A dev cluster lives in one directory, like a StatefulSet's pods with their volumes::

    <dir>/cluster.json               this layout (written by the first ``dev up``; a later
                                     ``dev up --broker-config`` replaces its broker settings)
    <dir>/controller-1/              node 1's metadata log dir (formatted once)
    <dir>/controller-1.properties    its server.properties
    <dir>/controller-1.log           its stdout/stderr
    <dir>/controller-1.pid           its process id while it runs
    <dir>/broker-101/ ...            the same for brokers (log.dirs)
    <dir>/admin.properties ...       the admin service (stateless: no data dir)
    <dir>/tls/                       with ``--security mtls``: the throwaway CA
                                     (``ca.pem``), one keystore per node
                                     (``<node>.pem``, CN = the node's name) and the
                                     command-line user's (``client.pem``, CN ``admin``)
    <dir>/client.properties          with ``--security mtls``: the clients' settings
                                     (``--command-config``, ``$KRAFTLOG_COMMAND_CONFIG``)

This module is pure: it computes names, ports and config text and reads/writes
``cluster.json``; :mod:`kraftlog.dev.process` starts and stops the processes.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import pathlib
import re
from collections.abc import Mapping

from kraftlog import errors

LAYOUT_FILE = "cluster.json"
LAYOUT_VERSION = 1
DEFAULT_BASE_PORT = 19090
CONTROLLER_COUNTS = (1, 3, 5)
MAX_BROKERS = 9
FIRST_BROKER_ID = 101
SECURITY_MODES = ("none", "mtls")
TLS_DIR = "tls"
CLIENT_PROPERTIES = "client.properties"
CLIENT_CERTIFICATE = "client"
CLIENT_COMMON_NAME = "admin"
KAFKA_PORT_OFFSET = 10
"""A broker's Kafka listener (``KAFKA://``) is on its gRPC port + this (19111-19113 by default)."""

# Timeouts that suit a laptop: a dead broker is fenced within seconds, a dead controller
# replaced within about a second. Kafka's defaults (18 s sessions) are made for real networks.
CONTROLLER_SETTINGS: Mapping[str, object] = {
    "controller.quorum.election.timeout.ms": 1000,
    "controller.quorum.fetch.timeout.ms": 2000,
    "broker.session.timeout.ms": 6000,
    "metadata.max.idle.interval.ms": 500,
}
BROKER_SETTINGS: Mapping[str, object] = {
    "broker.heartbeat.interval.ms": 1000,
    "broker.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 10000,
    # Throttles measured over 2 one-second samples bite at once (Kafka's 11 samples let
    # the first ~10 s of a move run unthrottled, confusing on a laptop).
    "replication.quota.window.num": 2,
    "controller.quorum.fetch.timeout.ms": 2000,
}


DEV_MANAGED_BROKER_KEYS = ("node.id", "process.roles", "controller.quorum.voters",
                           "listeners", "log.dirs")
"""Broker settings ``dev up`` writes itself (from the layout), never overridden."""
_SETTING_NAME = re.compile(r"[a-z][a-z0-9._-]*")


def parse_setting(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (``--broker-config``) as a pair; ConfigError naming what is wrong."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise errors.ConfigError(f"--broker-config wants KEY=VALUE, got {text!r}")
    return key, value.strip()


def _check_broker_config(settings: tuple[tuple[str, str], ...]) -> None:
    for key, value in settings:
        if not _SETTING_NAME.fullmatch(key):
            raise errors.ConfigError(f"--broker-config: {key!r} is not a config name "
                                     "(lower case, digits, '.', '_', '-')")
        if key in DEV_MANAGED_BROKER_KEYS:
            raise errors.ConfigError(f"--broker-config: {key} is set by dev up itself "
                                     f"({', '.join(DEV_MANAGED_BROKER_KEYS)})")
        if "\n" in value or "\r" in value:
            raise errors.ConfigError(f"--broker-config: the value of {key} spans lines")
    keys = [key for key, _ in settings]
    if len(set(keys)) != len(keys):
        raise errors.ConfigError(f"--broker-config: a key given twice in {keys}")


class Role(enum.Enum):
    CONTROLLER = "controller"
    BROKER = "broker"
    ADMIN = "admin"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """One process of the dev cluster."""

    role: Role
    node_id: int  # -1 for the admin service
    port: int

    @property
    def name(self) -> str:
        return self.role.value if self.role is Role.ADMIN else f"{self.role.value}-{self.node_id}"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """A dev cluster's nodes on ``host``: controllers on base_port+1.., brokers on
    base_port+11.., the admin service on base_port."""

    directory: pathlib.Path
    cluster_id: str
    controllers: int = 3
    brokers: int = 3
    base_port: int = DEFAULT_BASE_PORT
    host: str = "127.0.0.1"
    with_admin: bool = True
    broker_config: tuple[tuple[str, str], ...] = ()
    """``--broker-config`` settings: every broker's properties, after dev up's defaults."""
    security: str = "none"
    """``none`` (PLAINTEXT everywhere) or ``mtls``: every listener SSL with client
    certificates required, every node dialing with its own certificate."""

    def __post_init__(self) -> None:
        _check_broker_config(self.broker_config)
        if self.security not in SECURITY_MODES:
            raise errors.ConfigError(f"--security must be one of {', '.join(SECURITY_MODES)}, "
                                     f"not {self.security!r}")
        if self.controllers not in CONTROLLER_COUNTS:
            raise errors.ConfigError(f"--controllers must be one of {CONTROLLER_COUNTS}, "
                                     f"not {self.controllers}")
        if not 1 <= self.brokers <= MAX_BROKERS:
            raise errors.ConfigError(f"--brokers must be 1..{MAX_BROKERS}, not {self.brokers}")
        if not 1024 <= self.base_port <= 65535 - KAFKA_PORT_OFFSET - MAX_BROKERS:
            raise errors.ConfigError(f"--base-port must be 1024..{65535 - KAFKA_PORT_OFFSET - MAX_BROKERS}, "
                                     f"not {self.base_port}")

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every process, in start order (controllers, brokers, admin)."""
        nodes = [Node(role=Role.CONTROLLER, node_id=i, port=self.base_port + i)
                 for i in range(1, self.controllers + 1)]
        nodes += [Node(role=Role.BROKER, node_id=FIRST_BROKER_ID + i,
                       port=self.base_port + 11 + i) for i in range(self.brokers)]
        if self.with_admin:
            nodes.append(Node(role=Role.ADMIN, node_id=-1, port=self.base_port))
        return tuple(nodes)

    def of_role(self, role: Role) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.role is role)

    def endpoint(self, node: Node) -> str:
        return f"{self.host}:{node.port}"

    @property
    def voters(self) -> str:
        """``controller.quorum.voters``: id@host:port,..."""
        return ",".join(f"{n.node_id}@{self.endpoint(n)}" for n in self.of_role(Role.CONTROLLER))

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self.endpoint(n) for n in self.of_role(Role.BROKER))

    def kafka_endpoint(self, node: Node) -> str:
        """A broker's Kafka listener, for Kafka clients (kcat, librdkafka, the Java client)."""
        return f"{self.host}:{node.port + KAFKA_PORT_OFFSET}"

    @property
    def kafka_bootstrap_servers(self) -> str:
        """``bootstrap.servers`` for Kafka clients."""
        return ",".join(self.kafka_endpoint(n) for n in self.of_role(Role.BROKER))

    def find(self, name: str) -> Node:
        """The node called ``name`` (``controller-1``, ``broker-101``, ``admin``) or with
        that node id (``1``, ``101``)."""
        for node in self.nodes:
            if name == node.name or (name.isdigit() and node.node_id == int(name)):
                return node
        known = ", ".join(n.name for n in self.nodes)
        raise errors.ConfigError(f"no node {name!r} in the dev cluster at {self.directory} "
                                 f"(nodes: {known})")

    # -- per-node files ---------------------------------------------------------------------

    def data_dir(self, node: Node) -> pathlib.Path:
        return self.directory / node.name

    def config_path(self, node: Node) -> pathlib.Path:
        return self.directory / f"{node.name}.properties"

    def log_path(self, node: Node) -> pathlib.Path:
        return self.directory / f"{node.name}.log"

    def pid_path(self, node: Node) -> pathlib.Path:
        return self.directory / f"{node.name}.pid"

    @property
    def tls_dir(self) -> pathlib.Path:
        return self.directory / TLS_DIR

    def keystore_path(self, name: str) -> pathlib.Path:
        """The PEM keystore (key + certificate) of node ``name`` or of ``client``."""
        return self.tls_dir / f"{name}.pem"

    @property
    def truststore_path(self) -> pathlib.Path:
        return self.tls_dir / "ca.pem"

    @property
    def client_properties_path(self) -> pathlib.Path:
        return self.directory / CLIENT_PROPERTIES

    def _security_lines(self, node: Node) -> list[str]:
        if self.security == "none":
            return []
        lines = ["listener.security.protocol.map=CONTROLLER:SSL,SSL:SSL,ADMIN:SSL"]
        if node.role is not Role.CONTROLLER:  # a controller dials controllers only
            lines.append("inter.broker.listener.name=SSL")
        return [*lines,
                f"ssl.keystore.location={self.keystore_path(node.name)}",
                f"ssl.truststore.location={self.truststore_path}",
                "ssl.client.auth=required"]

    def client_properties_text(self) -> str:
        """The clients' properties (Kafka's client config file) for this cluster."""
        lines = [f"# kraftlog dev cluster {self.cluster_id}: client settings (dev up)",
                 f"bootstrap.servers={self.bootstrap_servers}"]
        if self.security == "mtls":
            lines += ["security.protocol=SSL",
                      f"ssl.truststore.location={self.truststore_path}",
                      f"ssl.keystore.location={self.keystore_path(CLIENT_CERTIFICATE)}"]
        return "\n".join(lines) + "\n"

    @property
    def topic_defaults(self) -> dict[str, int]:
        """Replication 3 and min ISR 2 when there are 3 brokers or more (what a Kafka
        operator runs in production), fewer on smaller clusters."""
        return {"default.replication.factor": min(3, self.brokers),
                "min.insync.replicas": 2 if self.brokers >= 3 else 1}

    def config_text(self, node: Node) -> str:
        """The node's server.properties."""
        lines = [f"# kraftlog dev cluster {self.cluster_id}: {node.name} (written by dev up)"]
        if node.role is Role.CONTROLLER:
            lines += [f"node.id={node.node_id}", "process.roles=controller",
                      f"controller.quorum.voters={self.voters}",
                      f"listeners=CONTROLLER://{self.endpoint(node)}",
                      f"metadata.log.dir={self.data_dir(node)}"]
            lines += [f"{k}={v}" for k, v in {**CONTROLLER_SETTINGS,
                                                **self.topic_defaults}.items()]
        elif node.role is Role.BROKER:
            lines += [f"node.id={node.node_id}", "process.roles=broker",
                      f"controller.quorum.voters={self.voters}",
                      f"listeners={self.broker_listeners(node)}",
                      f"log.dirs={self.data_dir(node)}"]
            lines += [f"{k}={v}" for k, v in {**BROKER_SETTINGS, **self.topic_defaults,
                                                **dict(self.broker_config)}.items()]
        else:
            lines += [f"controller.quorum.voters={self.voters}",
                      f"listeners=ADMIN://{self.endpoint(node)}"]
        lines += self._security_lines(node)
        return "\n".join(lines) + "\n"

    @property
    def broker_listener(self) -> str:
        return "SSL" if self.security == "mtls" else "PLAINTEXT"

    @property
    def serves_kafka(self) -> bool:
        """The Kafka listener speaks plaintext only (no SSL or SASL on it yet), so a
        secured cluster does not open it: it would be a door around the mTLS checks."""
        return self.security == "none"

    def broker_listeners(self, node: Node) -> str:
        listeners = f"{self.broker_listener}://{self.endpoint(node)}"
        if self.serves_kafka:
            listeners += f",KAFKA://{self.kafka_endpoint(node)}"
        return listeners

    # -- cluster.json -----------------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps({"version": LAYOUT_VERSION, "clusterId": self.cluster_id,
                           "controllers": self.controllers, "brokers": self.brokers,
                           "basePort": self.base_port, "host": self.host,
                           "admin": self.with_admin,
                           "brokerConfig": dict(self.broker_config),
                           "security": self.security}, indent=2) + "\n"

    @classmethod
    def from_json(cls, directory: pathlib.Path, text: str) -> Layout:
        where = directory / LAYOUT_FILE
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise errors.ConfigError(f"{where}: not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("version") != LAYOUT_VERSION:
            raise errors.ConfigError(f"{where}: expected an object with \"version\": "
                                     f"{LAYOUT_VERSION}")
        try:
            fields = {"cluster_id": data["clusterId"], "controllers": data["controllers"],
                      "brokers": data["brokers"], "base_port": data["basePort"],
                      "host": data["host"], "with_admin": data["admin"]}
        except KeyError as exc:
            raise errors.ConfigError(f"{where}: missing field {exc}") from None
        types = {"cluster_id": str, "controllers": int, "brokers": int, "base_port": int,
                 "host": str, "with_admin": bool}
        for key, kind in types.items():
            if type(fields[key]) is not kind:
                raise errors.ConfigError(f"{where}: {key} must be a {kind.__name__}, "
                                         f"not {fields[key]!r}")
        settings = data.get("brokerConfig", {})  # absent in files from before the flag
        if not isinstance(settings, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in settings.items()):
            raise errors.ConfigError(f"{where}: brokerConfig must map names to strings, "
                                     f"not {settings!r}")
        security = data.get("security", "none")  # absent in files from before the flag
        if not isinstance(security, str):
            raise errors.ConfigError(f"{where}: security must be a string, not {security!r}")
        try:
            return cls(directory=directory, broker_config=tuple(settings.items()),
                       security=security, **fields)
        except errors.ConfigError as exc:
            raise errors.ConfigError(f"{where}: {exc}") from None


def load(directory: pathlib.Path) -> Layout | None:
    """The layout kept in ``directory``, None when no cluster was created there."""
    path = directory / LAYOUT_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise errors.ConfigError(f"cannot read {path}: {exc}") from None
    return Layout.from_json(directory, text)


def check_same_shape(stored: Layout, *, controllers: int | None, brokers: int | None,
                     base_port: int | None, security: str | None = None) -> None:
    """Refuse flags that contradict the layout a cluster was created with."""
    asked: dict[str, tuple[object, object]] = {
        "--controllers": (controllers, stored.controllers),
        "--brokers": (brokers, stored.brokers),
        "--base-port": (base_port, stored.base_port),
        "--security": (security, stored.security)}
    for flag, (wanted, have) in asked.items():
        if wanted is not None and wanted != have:
            raise errors.ConfigError(
                f"the dev cluster at {stored.directory} was created with {flag} {have}; "
                f"to change it, run 'kraftlog dev down --delete-data' first")
