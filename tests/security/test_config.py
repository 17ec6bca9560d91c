"""Security settings with Kafka's names: protocol map, PEM stores, client auth, clients."""

from __future__ import annotations

import pytest

from kraftlog.errors import ConfigError
from kraftlog.security import config as sc


def test_protocol_map_serves_plaintext_and_ssl_and_refuses_sasl_clearly() -> None:
    mapping = sc.parse_protocol_map(["CONTROLLER:SSL", "PLAINTEXT:PLAINTEXT"])
    assert sc.listener_protocol(mapping, "CONTROLLER") is sc.Protocol.SSL
    assert sc.listener_protocol(mapping, "ADMIN") is sc.Protocol.PLAINTEXT
    assert sc.listener_protocol({}, "SSL") is sc.Protocol.SSL
    with pytest.raises(ConfigError, match="SASL is not supported yet"):
        sc.parse_protocol_map(["CLIENT:SASL_SSL"])
    with pytest.raises(ConfigError, match="unknown protocol"):
        sc.parse_protocol_map(["CLIENT:TLS"])
    with pytest.raises(ConfigError, match="NAME:PROTOCOL"):
        sc.parse_protocol_map(["CLIENT"])


def test_server_ssl_needs_a_keystore_and_a_truststore_for_mtls() -> None:
    with pytest.raises(ConfigError, match="no keystore"):
        sc.server_ssl(sc.mapping_lookup({}), listener="L")
    with pytest.raises(ConfigError, match="needs a truststore"):
        sc.server_ssl({"ssl.keystore.location": "/k.pem",
                       "ssl.client.auth": "required"}.get, listener="L")
    ssl = sc.server_ssl({"ssl.keystore.location": "/k.pem", "ssl.truststore.location": "/t",
                         "ssl.client.auth": "required"}.get, listener="L")
    assert ssl.client_auth is sc.ClientAuth.REQUIRED
    assert ssl.keystore == sc.PemSource(path="/k.pem")


def test_requested_client_auth_encrypted_keys_and_mixed_sources_are_refused() -> None:
    base = {"ssl.keystore.location": "/k.pem", "ssl.truststore.location": "/t"}
    with pytest.raises(ConfigError, match="requested is not supported"):
        sc.server_ssl({**base, "ssl.client.auth": "requested"}.get, listener="L")
    with pytest.raises(ConfigError, match="encrypted private keys"):
        sc.server_ssl({**base, "ssl.key.password": "x"}.get, listener="L")
    with pytest.raises(ConfigError, match="not both"):
        sc.server_ssl({**base, "ssl.keystore.key": "K", "ssl.keystore.certificate.chain": "C"}
                      .get, listener="L")
    with pytest.raises(ConfigError, match="go together"):
        sc.server_ssl({"ssl.keystore.key": "K"}.get, listener="L")
    with pytest.raises(ConfigError, match="not both"):
        sc.server_ssl({**base, "ssl.truststore.certificates": "C"}.get, listener="L")


def test_inline_pem_keystore() -> None:
    ssl = sc.server_ssl({"ssl.keystore.key": "K", "ssl.keystore.certificate.chain": "C"}.get,
                        listener="L")
    assert (ssl.inline_key, ssl.inline_chain) == ("K", "C")


def test_client_protocol_and_truststore() -> None:
    assert sc.client_protocol(sc.mapping_lookup({})) is sc.Protocol.PLAINTEXT
    assert sc.client_protocol(sc.mapping_lookup({"security.protocol": "SSL"})) is sc.Protocol.SSL
    with pytest.raises(ConfigError, match="SASL"):
        sc.client_protocol(sc.mapping_lookup({"security.protocol": "SASL_SSL"}))
    with pytest.raises(ConfigError, match="one of PLAINTEXT, SSL"):
        sc.client_protocol(sc.mapping_lookup({"security.protocol": "ssl3"}))
    with pytest.raises(ConfigError, match="no truststore"):
        sc.client_ssl(sc.mapping_lookup({"security.protocol": "SSL"}), what="client")
