"""TLS for gRPC: server credentials that reload, client credentials, the caller's principal.

Owns:

- :class:`ServerTls`: a listener's credentials, built from :class:`.config.SslConfig`.
  They are gRPC's *dynamic* server credentials: on every new TLS handshake gRPC asks
  :meth:`ServerTls.fetch_certificates`, which looks at the files' (inode, size, mtime)
  and rereads them only when one changed, so a rotated Kubernetes Secret (an atomic
  symlink swap) is served from the next connection on, without a restart. Files that do
  not read as a whole key + chain (a rotation half written) keep the previous material
  and log one warning per change seen;
- :class:`ClientTls`: what a client trusts and presents (read once, when built);
- :class:`AuthenticationInterceptor`: in front of every method of an mTLS listener, maps
  the verified client certificate's subject (gRPC's auth context, RFC 2253) to a
  principal with ``ssl.principal.mapping.rules`` and makes it :func:`current_peer` for
  the handler; a call without a verified certificate, or whose subject no rule maps,
  ends with ``UNAUTHENTICATED`` before any handler runs (with ``ssl.client.auth=required``
  gRPC refuses a client without a certificate already in the handshake: the client sees
  ``UNAVAILABLE``);
- :func:`listener_tls` / :func:`node_client_tls`: what an entry point asks for, from its
  parsed config.

Callers: :mod:`kraftlog.rpc` (channels, servers), the entry points, the servicers
(:func:`current_peer`). Edge module: grpc, files.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import os
import pathlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from kraftlog import config as kconfig
from kraftlog.errors import ConfigError
from kraftlog.security import config as sconfig
from kraftlog.security import principal

logger = logging.getLogger(__name__)

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----\r?\n?",
                        re.DOTALL)
_KEY_LABELS = (b"PRIVATE KEY", b"RSA PRIVATE KEY", b"EC PRIVATE KEY")

_current_peer: contextvars.ContextVar[principal.Peer | None] = contextvars.ContextVar(
    "kraftlog_peer", default=None)


def current_peer() -> principal.Peer | None:
    """The authenticated caller of the call being handled; ``None`` on a listener that does
    not authenticate (PLAINTEXT, or SSL without client certificates)."""
    return _current_peer.get()


def set_current_peer(peer: principal.Peer | None) -> contextvars.Token[principal.Peer | None]:
    """Make ``peer`` the caller for the code that runs next in this context (the
    interceptor does it per call, in the call's own task; tests, to play a caller)."""
    return _current_peer.set(peer)


# -- PEM material ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class KeyPair:
    private_key: bytes
    certificate_chain: bytes


def split_keystore(pem: bytes, *, origin: str) -> KeyPair:
    """A KIP-651 PEM keystore (one private key, then or before its certificate chain)."""
    keys: list[bytes] = []
    certificates: list[bytes] = []
    for block in _PEM_BLOCK.finditer(pem):
        label = block.group(1)
        if label in _KEY_LABELS:
            keys.append(block.group(0))
        elif label == b"ENCRYPTED PRIVATE KEY":
            raise ConfigError(f"{origin}: the private key is encrypted; gRPC takes an "
                              "unencrypted PEM key")
        elif label == b"CERTIFICATE":
            certificates.append(block.group(0))
    if len(keys) != 1:
        raise ConfigError(f"{origin}: expected one PEM private key, found {len(keys)}")
    if not certificates:
        raise ConfigError(f"{origin}: no PEM certificate (the chain) found")
    return KeyPair(private_key=keys[0],
                   certificate_chain=b"".join(c if c.endswith(b"\n") else c + b"\n"
                                              for c in certificates))


def certificates(pem: bytes, *, origin: str) -> bytes:
    found = [b.group(0) for b in _PEM_BLOCK.finditer(pem) if b.group(1) == b"CERTIFICATE"]
    if not found:
        raise ConfigError(f"{origin}: no PEM certificate found")
    return b"".join(c if c.endswith(b"\n") else c + b"\n" for c in found)


def _read(path: str) -> bytes:
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None


def _file_state(paths: Iterable[str]) -> tuple[tuple[str, int, int, int], ...]:
    states = []
    for path in paths:
        st = os.stat(path)
        states.append((path, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(states)


def load_keypair(ssl: sconfig.SslConfig) -> KeyPair | None:
    if ssl.keystore is None:
        return None
    if ssl.keystore.path is not None:
        return split_keystore(_read(ssl.keystore.path), origin=ssl.keystore.path)
    chain = (ssl.inline_chain or "").encode()
    key = (ssl.inline_key or "").encode()
    pair = split_keystore(key + b"\n" + chain, origin="ssl.keystore.key/certificate.chain")
    return pair


def load_truststore(ssl: sconfig.SslConfig) -> bytes | None:
    if ssl.truststore is None:
        return None
    if ssl.truststore.path is not None:
        return certificates(_read(ssl.truststore.path), origin=ssl.truststore.path)
    return certificates((ssl.truststore.inline or "").encode(),
                        origin="ssl.truststore.certificates")


def _files(ssl: sconfig.SslConfig) -> list[str]:
    return [source.path for source in (ssl.keystore, ssl.truststore)
            if source is not None and source.path is not None]


# -- server ---------------------------------------------------------------------------------------

class ServerTls:
    """One SSL listener's credentials and authentication settings."""

    def __init__(self, ssl: sconfig.SslConfig, *, listener: str) -> None:
        self.ssl = ssl
        self.listener = listener
        self.principal_mapper = ssl.principal_mapper
        self.authenticates = ssl.client_auth is sconfig.ClientAuth.REQUIRED
        self._files = _files(ssl)
        self._state = self._stat()
        self._current = self._load()  # ConfigError at start: refuse to serve
        self._failed_state: object = None
        self.reloads = 0

    def _stat(self) -> tuple[tuple[str, int, int, int], ...]:
        try:
            return _file_state(self._files)
        except OSError as exc:
            raise ConfigError(f"listener {self.listener}: {exc}") from None

    def _load(self) -> Any:
        pair = load_keypair(self.ssl)
        if pair is None:
            raise ConfigError(f"listener {self.listener}: no keystore")
        trusted = load_truststore(self.ssl)
        return grpc.ssl_server_certificate_configuration(
            [(pair.private_key, pair.certificate_chain)], root_certificates=trusted)

    def fetch_certificates(self) -> Any:
        """gRPC's certificate-configuration fetcher: new material when the files changed
        and read whole, else ``None`` (keep serving what we have)."""
        try:
            state = self._stat()
        except ConfigError as exc:
            self._warn_once(("missing", str(exc)), str(exc))
            return None
        if state == self._state:
            return None
        try:
            material = self._load()
        except ConfigError as exc:
            self._warn_once(state, str(exc))
            return None
        self._state = state
        self._current = material
        self.reloads += 1
        logger.info("event=certificates_reloaded listener=%s files=%s", self.listener,
                    ",".join(self._files))
        return material

    def _warn_once(self, state: object, message: str) -> None:
        if state != self._failed_state:
            self._failed_state = state
            logger.warning("event=certificates_reload_failed listener=%s error=%r "
                           "detail='serving the previous certificates'", self.listener,
                           message)

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self._current, self.fetch_certificates,
            require_client_authentication=self.authenticates)


# -- client ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class ClientTls:
    """What a client trusts and, for mTLS, presents."""

    trusted: bytes
    keypair: KeyPair | None = None

    @classmethod
    def from_config(cls, ssl: sconfig.SslConfig) -> ClientTls:
        trusted = load_truststore(ssl)
        if trusted is None:
            raise ConfigError("SSL client without a truststore")
        return cls(trusted=trusted, keypair=load_keypair(ssl))

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.trusted,
            private_key=self.keypair.private_key if self.keypair else None,
            certificate_chain=self.keypair.certificate_chain if self.keypair else None)


def client_tls_from_properties(values: Mapping[str, str], *, what: str) -> ClientTls | None:
    """A Kafka client properties mapping (``security.protocol``, ``ssl.*``) -> TLS or
    ``None`` for PLAINTEXT."""
    get = sconfig.mapping_lookup(values)
    if sconfig.client_protocol(get) is sconfig.Protocol.PLAINTEXT:
        return None
    return ClientTls.from_config(sconfig.client_ssl(get, what=what))


# -- what entry points ask for ----------------------------------------------------------------------

def _protocols(cfg: kconfig.Config) -> dict[str, sconfig.Protocol]:
    return sconfig.parse_protocol_map(cfg.get_list("listener.security.protocol.map"))


def listener_tls(cfg: kconfig.Config, listener: str) -> ServerTls | None:
    """Listener ``listener``'s TLS, ``None`` when it is PLAINTEXT."""
    protocol = sconfig.listener_protocol(_protocols(cfg), listener)
    if protocol is sconfig.Protocol.PLAINTEXT:
        return None
    return ServerTls(sconfig.server_ssl(sconfig.config_lookup(cfg), listener=listener),
                     listener=listener)


def node_client_tls(cfg: kconfig.Config, dialed: Sequence[str]) -> ClientTls | None:
    """The TLS a node dials the other nodes with: the protocol of the listeners it dials
    (``dialed``: e.g. the controller listener and the inter-broker listener), with its own
    keystore as its client certificate. One process dials with one protocol: a mix of SSL
    and PLAINTEXT among ``dialed`` is refused."""
    mapping = _protocols(cfg)
    protocols = {name: sconfig.listener_protocol(mapping, name) for name in dialed}
    if len(set(protocols.values())) > 1:
        raise ConfigError("the listeners this node dials mix protocols ("
                          + ", ".join(f"{n}:{p.value}" for n, p in protocols.items())
                          + "); make them all SSL or all PLAINTEXT")
    if not protocols or next(iter(protocols.values())) is sconfig.Protocol.PLAINTEXT:
        return None
    get = sconfig.config_lookup(cfg)
    return ClientTls.from_config(sconfig.client_ssl(get, what=f"listener {dialed[0]}"))


def identities(cfg: kconfig.Config) -> tuple[principal.NodePrincipal, principal.NodePrincipal]:
    """(broker identity, controller identity) as configured."""
    get = sconfig.config_lookup(cfg)
    return (principal.NodePrincipal.parse(
                get("kraftlog.security.broker.principal")
                or principal.DEFAULT_BROKER_PRINCIPAL,
                key="kraftlog.security.broker.principal"),
            principal.NodePrincipal.parse(
                get("kraftlog.security.controller.principal")
                or principal.DEFAULT_CONTROLLER_PRINCIPAL,
                key="kraftlog.security.controller.principal"))


# -- authentication -------------------------------------------------------------------------------

def peer_from_auth_context(auth: Mapping[str, Sequence[bytes]],
                           mapper: principal.PrincipalMapper) -> principal.Peer | None:
    """The caller from gRPC's auth context; ``None`` when it presented no verified
    certificate or no mapping rule applies to its subject."""
    subjects = auth.get("x509_subject") or ()
    if not subjects:
        return None
    subject = subjects[0].decode("utf-8", "replace")
    names = auth.get("x509_common_name") or ()
    mapped = mapper.principal(subject)
    if mapped is None:
        return None
    return principal.Peer(subject=subject,
                          common_name=names[0].decode("utf-8", "replace") if names else "",
                          principal=mapped)


class AuthenticationInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Maps every caller to a principal before its handler runs; refuses the others."""

    def __init__(self, mapper: principal.PrincipalMapper) -> None:
        self._mapper = mapper

    async def intercept_service(self, continuation: Callable[[Any], Any],
                                handler_call_details: Any) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return _authenticated(handler, self._mapper, handler_call_details.method)


async def _admit(context: Any, mapper: principal.PrincipalMapper, method: str) -> None:
    peer = peer_from_auth_context(context.auth_context(), mapper)
    if peer is None:
        logger.warning("event=authentication_failed method=%s client=%s", method,
                       context.peer())
        await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                            f"{method}: no verified client certificate whose subject "
                            "ssl.principal.mapping.rules maps to a principal")
    set_current_peer(peer)


def _authenticated(handler: grpc.RpcMethodHandler, mapper: principal.PrincipalMapper,
                   method: str) -> grpc.RpcMethodHandler:
    kwargs = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}
    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: Any) -> Any:
            await _admit(context, mapper, method)
            answer = inner_uu(request, context)
            return await answer if inspect.isawaitable(answer) else answer
        return grpc.unary_unary_rpc_method_handler(unary_unary, **kwargs)
    if handler.stream_unary is not None:
        inner_su = handler.stream_unary

        async def stream_unary(requests: Any, context: Any) -> Any:
            await _admit(context, mapper, method)
            answer = inner_su(requests, context)
            return await answer if inspect.isawaitable(answer) else answer
        return grpc.stream_unary_rpc_method_handler(stream_unary, **kwargs)
    inner_stream = handler.unary_stream or handler.stream_stream
    make = (grpc.unary_stream_rpc_method_handler if handler.unary_stream is not None
            else grpc.stream_stream_rpc_method_handler)

    async def streaming(request: Any, context: Any) -> Any:
        await _admit(context, mapper, method)
        answers = inner_stream(request, context)
        if inspect.isawaitable(answers):  # a coroutine that writes with context.write
            await answers
            return
        if hasattr(answers, "__aiter__"):
            async for answer in answers:
                yield answer
        else:
            for answer in answers:
                yield answer
    return make(streaming, **kwargs)
