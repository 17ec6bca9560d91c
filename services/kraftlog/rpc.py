"""Every gRPC channel and listening port of kraftlog: options, credentials, binding.

Owns the gRPC settings every process shares (message-size limits, the HTTP/2 window,
reconnect pacing: :func:`channel_options`, :func:`server_options`), the creation of
channels (:func:`aio_channel`, :func:`sync_channel`) and servers (:func:`create_server`,
:func:`bind`). TLS is a setting here, not a concern of the callers: a channel dials with
:class:`kraftlog.security.tls.ClientTls` when it is given one, else with the process
default that the entry point set once at start (:func:`configure_client`: a node's own
certificate for its calls to the other nodes, or the CLI's ``--command-config``), else in
plaintext; a server binds with the listener's :class:`~kraftlog.security.tls.ServerTls`
(certificates reloaded from their files on change) and, when the listener authenticates,
puts :class:`kraftlog.security.tls.AuthenticationInterceptor` in front of every method.

Callers: every server (controller, broker, admin) and every client of ours (raft peers,
the broker's controller and replica channels, the admin service, the client library, the
CLI). It must not hold kraftlog logic: which listener is SSL is
:mod:`kraftlog.security.config`'s decision, who may call what is the services'.
Edge module: grpc.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio

from kraftlog import errors
from kraftlog.security import tls

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest gRPC message sent or received, in bytes (gRPC's default is 4 MiB)."""
STREAM_WINDOW_BYTES = 4 * 1024 * 1024
"""HTTP/2 flow-control window each gRPC stream starts with (``grpc.http2.lookahead_bytes``).

gRPC's 64 KiB default makes a 256 KiB-1 MiB message (a Produce, a Fetch answer) wait for
window updates from the receiver several times on its way: on loopback, with 256 KiB
messages, a 4 MiB window cut the CPU per call by ~12% on the sending side and ~10% on the
receiving side (grpc.aio echo, malloc tuned as the brokers do)."""
DEFAULT_MAX_RECONNECT_BACKOFF_MS = 1000

_default_client_tls: tls.ClientTls | None = None


def server_options() -> list[tuple[str, Any]]:
    return [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES),
            ("grpc.so_reuseport", 0)]


def channel_options(*, retry_backoff_ms: int = 50,
                    max_reconnect_backoff_ms: int = DEFAULT_MAX_RECONNECT_BACKOFF_MS,
                    ) -> list[tuple[str, Any]]:
    """Message limits as the servers', and reconnects paced from ``retry_backoff_ms`` up to
    a low ceiling, so a restarted peer is reached again within about a second rather than
    gRPC's default two minutes. gRPC's own retries are off: ours decide."""
    ceiling = max(retry_backoff_ms, max_reconnect_backoff_ms)
    return [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES),
            ("grpc.initial_reconnect_backoff_ms", retry_backoff_ms),
            ("grpc.min_reconnect_backoff_ms", retry_backoff_ms),
            ("grpc.max_reconnect_backoff_ms", ceiling),
            ("grpc.enable_retries", 0)]


# -- clients --------------------------------------------------------------------------------------

def configure_client(client_tls: tls.ClientTls | None) -> None:
    """Set the TLS every channel of this process dials with when its caller names none
    (``None``: plaintext). Called once by an entry point before any channel exists."""
    global _default_client_tls
    _default_client_tls = client_tls


def default_client_tls() -> tls.ClientTls | None:
    return _default_client_tls


def _credentials(client_tls: tls.ClientTls | None) -> grpc.ChannelCredentials | None:
    chosen = client_tls if client_tls is not None else _default_client_tls
    return None if chosen is None else chosen.channel_credentials()


def aio_channel(target: str, *, options: Sequence[tuple[str, Any]] | None = None,
                interceptors: Sequence[Any] | None = None,
                client_tls: tls.ClientTls | None = None) -> grpc.aio.Channel:
    """A grpc.aio channel to ``host:port`` (TLS per the module docstring)."""
    opts = list(options) if options is not None else channel_options()
    chosen = list(interceptors) if interceptors else None
    credentials = _credentials(client_tls)
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=opts, interceptors=chosen)
    return grpc.aio.secure_channel(target, credentials, options=opts, interceptors=chosen)


def sync_channel(target: str, *, options: Sequence[tuple[str, Any]] | None = None,
                 client_tls: tls.ClientTls | None = None) -> grpc.Channel:
    """A blocking grpc channel to ``host:port`` (TLS per the module docstring)."""
    opts = list(options) if options is not None else channel_options()
    credentials = _credentials(client_tls)
    if credentials is None:
        return grpc.insecure_channel(target, options=opts)
    return grpc.secure_channel(target, credentials, options=opts)


# -- servers --------------------------------------------------------------------------------------

def create_server(*, interceptors: Sequence[Any] = (),
                  server_tls: tls.ServerTls | None = None) -> Any:
    """A grpc.aio server with our options; when ``server_tls`` authenticates its clients,
    the authentication interceptor runs first, before tracing or any handler."""
    chain = list(interceptors)
    if server_tls is not None and server_tls.authenticates:
        chain.insert(0, tls.AuthenticationInterceptor(server_tls.principal_mapper))
    return grpc.aio.server(options=server_options(), interceptors=chain or None)


def bind(server: Any, listen: str, *, server_tls: tls.ServerTls | None = None) -> int:
    """Bind ``host:port`` (TLS when ``server_tls`` is given); the port bound. A port that
    cannot be bound is a ConfigError naming it, never a traceback."""
    try:
        if server_tls is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, server_tls.server_credentials())
    except RuntimeError as exc:
        raise errors.ConfigError(f"cannot listen on {listen}: {exc}") from None
    if port == 0:
        raise errors.ConfigError(f"cannot listen on {listen}")
    return int(port)
