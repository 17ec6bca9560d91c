"""Security settings with Kafka's names: which listener speaks which protocol, and SSL.

Owns the parsing and validation of:

- ``listener.security.protocol.map`` (``NAME:PROTOCOL,...``): PLAINTEXT and SSL are
  served; SASL_PLAINTEXT and SASL_SSL are Kafka's names and are parsed, but refused at
  start with a clear message (SCRAM comes later) rather than served in the clear. A
  listener the map does not name is PLAINTEXT, unless its name is itself ``SSL``;
- ``inter.broker.listener.name`` and ``controller.listener.names`` pick the listeners a
  node dials the others on (their protocols decide its client side);
- KIP-651's PEM settings: ``ssl.keystore.type=PEM`` with either
  ``ssl.keystore.location`` (one PEM file: the private key and the certificate chain) or
  ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` (PEM text in the config), and
  ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` or
  ``ssl.truststore.certificates``. Encrypted keys (``ssl.key.password``) and JKS/PKCS12
  stores are refused with a clear message (gRPC takes unencrypted PEM only);
- ``ssl.client.auth=none|requested|required``. ``requested`` is refused: gRPC's Python
  server either requires a client certificate or does not ask for one;
- ``ssl.principal.mapping.rules`` (:mod:`.principal`) and kraftlog's node identities
  ``kraftlog.security.broker.principal`` / ``kraftlog.security.controller.principal``;
- a client's properties (``security.protocol`` and the same ``ssl.*`` keys), as Kafka's
  clients and ``--command-config`` files have them.

Callers: the entry points (through :mod:`.tls`, which reads the files), the client
library's config, the CLI. Pure: no I/O (file paths are kept, read by :mod:`.tls`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kraftlog import config as kconfig
from kraftlog.errors import ConfigError
from kraftlog.security import principal


class Protocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class ClientAuth(enum.Enum):
    NONE = "none"
    REQUESTED = "requested"
    REQUIRED = "required"


_S = kconfig.ConfigType.STRING
_P = kconfig.ConfigType.PASSWORD

SSL_CONFIG_KEYS = (
    kconfig.ConfigKey(name="ssl.keystore.type", type=_S, default="PEM",
                      validator=kconfig.one_of("PEM"),
                      doc="PEM only (KIP-651): the node's key and certificate chain"),
    kconfig.ConfigKey(name="ssl.keystore.location", type=_S, default=None,
                      doc="a PEM file holding the private key and the certificate chain; "
                          "reread when it changes"),
    kconfig.ConfigKey(name="ssl.keystore.certificate.chain", type=_P, default=None,
                      doc="the certificate chain as PEM text (instead of the location)"),
    kconfig.ConfigKey(name="ssl.keystore.key", type=_P, default=None,
                      doc="the unencrypted private key as PEM text (instead of the location)"),
    kconfig.ConfigKey(name="ssl.key.password", type=_P, default=None,
                      doc="refused: gRPC takes unencrypted PEM keys only"),
    kconfig.ConfigKey(name="ssl.truststore.type", type=_S, default="PEM",
                      validator=kconfig.one_of("PEM"),
                      doc="PEM only (KIP-651): the certificates trusted"),
    kconfig.ConfigKey(name="ssl.truststore.location", type=_S, default=None,
                      doc="a PEM file of trusted CA certificates; reread when it changes"),
    kconfig.ConfigKey(name="ssl.truststore.certificates", type=_P, default=None,
                      doc="trusted CA certificates as PEM text (instead of the location)"),
)
"""What both servers and clients read."""

SERVER_CONFIG_KEYS = (
    *SSL_CONFIG_KEYS,
    kconfig.ConfigKey(name="ssl.client.auth", type=_S, default="none",
                      validator=kconfig.one_of("none", "requested", "required"),
                      doc="none, or required: SSL listeners ask every client for a "
                          "certificate signed by the truststore (mTLS)"),
    kconfig.ConfigKey(name="ssl.principal.mapping.rules", type=_S,
                      default=principal.DEFAULT_RULES,
                      doc="certificate subject -> principal: DEFAULT, "
                          "RULE:pattern/replacement/[LU], ... (Kafka's syntax)"),
    kconfig.ConfigKey(name="kraftlog.security.broker.principal", type=_S,
                      default=principal.DEFAULT_BROKER_PRINCIPAL,
                      doc="with mTLS, who may act as broker {id} (replica Fetch, "
                          "heartbeats, AlterPartition): CN:<name> or User:<principal>"),
    kconfig.ConfigKey(name="kraftlog.security.controller.principal", type=_S,
                      default=principal.DEFAULT_CONTROLLER_PRINCIPAL,
                      doc="with mTLS, who may act as voter {id} (raft Vote, Fetch, "
                          "Begin/EndQuorumEpoch): CN:<name> or User:<principal>"),
)
"""What a server process reads on top (its own listeners and identity checks)."""


def protocol_map_validator(key: str, value: kconfig.ConfigValue) -> None:
    """``listener.security.protocol.map``'s validator: well-formed, known protocols."""
    parse_protocol_map(value if isinstance(value, list) else [str(value)], key=key)


def parse_protocol_map(entries: list[str], *,
                       key: str = "listener.security.protocol.map") -> dict[str, Protocol]:
    mapping: dict[str, Protocol] = {}
    for entry in entries:
        name, sep, text = entry.partition(":")
        if not sep or not name or not text:
            raise ConfigError(f"{key}: entry {entry!r} is not NAME:PROTOCOL")
        try:
            protocol = Protocol(text)
        except ValueError:
            raise ConfigError(f"{key}: listener {name}: unknown protocol {text!r} (one of "
                              f"{', '.join(p.value for p in Protocol)})") from None
        if protocol in (Protocol.SASL_PLAINTEXT, Protocol.SASL_SSL):
            raise ConfigError(f"{key}: listener {name} asks for {text}; SASL is not "
                              "supported yet: use SSL (mTLS) or PLAINTEXT")
        mapping[name] = protocol
    return mapping


def listener_protocol(mapping: Mapping[str, Protocol], name: str) -> Protocol:
    """The protocol of listener ``name`` (not in the map: PLAINTEXT unless named SSL)."""
    if name in mapping:
        return mapping[name]
    return Protocol.SSL if name == Protocol.SSL.value else Protocol.PLAINTEXT


@dataclass(frozen=True, slots=True, kw_only=True)
class PemSource:
    """PEM given inline in the config, or a file to (re)read."""

    inline: str | None = None
    path: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SslConfig:
    """A node's or a client's SSL settings, validated."""

    keystore: PemSource | None  # key + chain: one file, or two inline values below
    inline_chain: str | None
    inline_key: str | None
    truststore: PemSource | None
    client_auth: ClientAuth = ClientAuth.NONE
    principal_mapper: principal.PrincipalMapper = field(
        default_factory=principal.PrincipalMapper.from_text)


Lookup = Callable[[str], str | None]
"""A setting's text, ``None`` when unset."""


def _keystore(get: Lookup) -> tuple[PemSource | None, str | None, str | None]:
    if get("ssl.key.password"):
        raise ConfigError("ssl.key.password is set: encrypted private keys are not "
                          "supported (gRPC takes an unencrypted PEM key); decrypt it into "
                          "a file readable only by the process")
    location = get("ssl.keystore.location")
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if location and (chain or key):
        raise ConfigError("set ssl.keystore.location or ssl.keystore.certificate.chain + "
                          "ssl.keystore.key, not both")
    if bool(chain) != bool(key):
        raise ConfigError("ssl.keystore.certificate.chain and ssl.keystore.key go together")
    if location:
        return PemSource(path=location), None, None
    if chain and key:
        return PemSource(inline="inline"), chain, key
    return None, None, None


def _truststore(get: Lookup) -> PemSource | None:
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if location and inline:
        raise ConfigError("set ssl.truststore.location or ssl.truststore.certificates, "
                          "not both")
    if location:
        return PemSource(path=location)
    if inline:
        return PemSource(inline=inline)
    return None


def server_ssl(get: Lookup, *, listener: str) -> SslConfig:
    """The SSL settings a server serves listener ``listener`` with."""
    keystore, chain, key = _keystore(get)
    if keystore is None:
        raise ConfigError(f"listener {listener} is SSL but no keystore is set (set "
                          "ssl.keystore.location, or ssl.keystore.certificate.chain and "
                          "ssl.keystore.key)")
    client_auth = ClientAuth(get("ssl.client.auth") or "none")
    if client_auth is ClientAuth.REQUESTED:
        raise ConfigError("ssl.client.auth=requested is not supported: gRPC's server either "
                          "requires a client certificate or asks for none; use required "
                          "(mTLS) or none")
    truststore = _truststore(get)
    if client_auth is ClientAuth.REQUIRED and truststore is None:
        raise ConfigError("ssl.client.auth=required needs a truststore to verify client "
                          "certificates (ssl.truststore.location or "
                          "ssl.truststore.certificates)")
    return SslConfig(
        keystore=keystore, inline_chain=chain, inline_key=key, truststore=truststore,
        client_auth=client_auth,
        principal_mapper=principal.PrincipalMapper.from_text(
            get("ssl.principal.mapping.rules") or principal.DEFAULT_RULES))


def client_ssl(get: Lookup, *, what: str) -> SslConfig:
    """The SSL settings a client dials with: a truststore to verify the server (required),
    and its own certificate when it has one (needed by mTLS listeners)."""
    keystore, chain, key = _keystore(get)
    truststore = _truststore(get)
    if truststore is None:
        raise ConfigError(f"{what} is SSL but no truststore is set (ssl.truststore.location "
                          "or ssl.truststore.certificates): the server cannot be verified")
    return SslConfig(keystore=keystore, inline_chain=chain, inline_key=key,
                     truststore=truststore)


def config_lookup(cfg: kconfig.Config) -> Lookup:
    """A :data:`Lookup` over a parsed config (empty values count as unset)."""
    def get(name: str) -> str | None:
        value = cfg.values.get(name)
        return str(value) if value not in (None, "") else None
    return get


def mapping_lookup(values: Mapping[str, str]) -> Lookup:
    def get(name: str) -> str | None:
        value = values.get(name)
        return value.strip() if value and value.strip() else None
    return get


def client_protocol(get: Lookup) -> Protocol:
    """A client's ``security.protocol`` (default PLAINTEXT); SASL refused as above."""
    text = get("security.protocol") or Protocol.PLAINTEXT.value
    try:
        protocol = Protocol(text)
    except ValueError:
        raise ConfigError(f"security.protocol={text!r}: one of PLAINTEXT, SSL") from None
    if protocol in (Protocol.SASL_PLAINTEXT, Protocol.SASL_SSL):
        raise ConfigError(f"security.protocol={text}: SASL is not supported yet; use SSL")
    return protocol
