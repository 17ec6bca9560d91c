"""The Kafka listener: Kafka's binary protocol on a TCP port, beside the gRPC one.

Owns :class:`KafkaListener` (one asyncio server per listener endpoint named in
``kraftlog.kafka.listener.names``) and its per-connection :class:`KafkaConnection`, an
``asyncio.Protocol`` (no thread or task per connection):

* frames are an int32 size then the request (``socket.request.max.bytes`` at most, as in
  Kafka); a connection may send many requests without waiting (pipelining); each is
  decoded and handed to :class:`~kraftlog.broker.kafka_apis.KafkaApis` at once, in its own
  task, and the answers go back in request order, whatever order they finish in;
* at most :data:`MAX_IN_FLIGHT` requests per connection are open; past that, and while the
  socket's write buffer is full, the connection stops reading (backpressure);
* a request for an API or version not served closes the connection, except ApiVersions,
  which answers UNSUPPORTED_VERSION with the served list at version 0 (KIP-511), so the
  client can retry at a version we serve;
* a malformed frame (a size out of range, a header or body that does not decode at its
  version) closes that connection with one log line and touches nothing else; so does a
  handler failure (a bug: logged with its traceback). Bytes after a whole body are
  ignored, as Kafka ignores them (librdkafka relies on it, see ``_handle_frame``).

Callers: :mod:`kraftlog.server.broker_server` (wiring: start after the gRPC server, stop
before the data plane). Edge module: asyncio sockets.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any

from kraftlog import config as kconfig
from kraftlog.broker import kafka_apis
from kraftlog.error_codes import ErrorCode
from kraftlog.protocol import api_keys, headers, wire

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024
"""Kafka's ``socket.request.max.bytes`` default: a larger frame closes the connection."""
MAX_IN_FLIGHT = 64
"""Requests one connection may have open before the listener stops reading from it."""
LISTENER_NAMES = "kraftlog.kafka.listener.names"
CONFIG_KEYS = (
    kconfig.ConfigKey(name=LISTENER_NAMES, type=kconfig.ConfigType.LIST, default=["KAFKA"],
                      doc="the listeners (names in listeners) that speak Kafka's binary "
                          "protocol instead of gRPC; advertised to Kafka clients in Metadata"),
    kconfig.ConfigKey(name="socket.request.max.bytes", type=kconfig.ConfigType.INT,
                      default=DEFAULT_MAX_REQUEST_BYTES, validator=kconfig.at_least(1),
                      doc="largest Kafka request frame, bytes; a larger one closes the connection"),
)


class KafkaConnection(asyncio.Protocol):
    """One client connection. See the module docstring."""

    def __init__(self, listener: KafkaListener) -> None:
        self._listener = listener
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._peer = "?"
        # (correlation id, api, version, task) in request order
        self._pending: collections.deque[tuple[int, api_keys.Api, int, asyncio.Future[object]]] = (
            collections.deque())
        self._closed = False
        self._reading_paused = False
        self._writing_paused = False
        self._processing = False

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._listener.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._listener.connections.discard(self)
        for _, _, _, task in self._pending:
            task.cancel()
        self._pending.clear()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._buffer += data
        self._process_buffer()

    def _process_buffer(self) -> None:
        """Hand every whole frame buffered to the handlers, up to MAX_IN_FLIGHT open."""
        if self._processing:
            return  # an answer written while a frame is handled: the outer loop goes on
        self._processing = True
        try:
            self._process_frames()
        finally:
            self._processing = False

    def _process_frames(self) -> None:
        buffer = self._buffer
        start = 0
        limit = self._listener.max_request_bytes
        while len(buffer) - start >= 4 and len(self._pending) < MAX_IN_FLIGHT:
            size = int.from_bytes(buffer[start:start + 4], "big", signed=True)
            if size < 0 or size > limit:
                self.close(f"frame of {size} bytes (socket.request.max.bytes={limit})")
                return
            if len(buffer) - start - 4 < size:
                break
            frame = bytes(buffer[start + 4:start + 4 + size])
            start += 4 + size
            self._handle_frame(frame)
            if self._closed:
                return
        if start:
            del buffer[:start]
        self._update_reading()

    # -- requests --------------------------------------------------------------------------------

    def _handle_frame(self, frame: bytes) -> None:
        try:
            api_key, version, correlation_id = headers.read_request_prefix(frame)
        except wire.MalformedMessage as exc:
            self.close(f"undecodable request header: {exc}")
            return
        api = api_keys.SERVED.get(api_key)
        if api is None or not api.supports(version):
            if api_key == headers.API_VERSIONS_KEY:
                # KIP-511: a newer client's ApiVersions gets our list at version 0.
                self._answer_now(correlation_id, api_keys.SERVED[api_key], 0,
                                 kafka_apis.api_versions_response(ErrorCode.UNSUPPORTED_VERSION))
                return
            self.close(f"api_key={api_key} api_version={version} is not served "
                       f"(correlation_id={correlation_id})")
            return
        try:
            reader = wire.Reader(frame)
            header = headers.read_request_header(reader, flexible=api.flexible(version))
            request = api.request.read(reader, version)
            # Bytes after the body are ignored, as Kafka's broker ignores them: librdkafka
            # 2.x sends its all-topics Metadata (v9+) with a 4-byte array count where a
            # 1-byte compact one belongs, and Kafka reads it as null topics and stops.
        except wire.MalformedMessage as exc:
            self.close(f"malformed api_key={api_key} api_version={version} "
                       f"correlation_id={correlation_id}: {exc}")
            return
        del header  # client id: not used yet (quotas, logs)
        task = asyncio.get_running_loop().create_task(
            self._listener.apis.handle(self._listener.name, api_key, version, request))
        self._pending.append((correlation_id, api, version, task))
        task.add_done_callback(self._on_done)

    def _answer_now(self, correlation_id: int, api: api_keys.Api, version: int,
                    response: Any) -> None:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        future.set_result(response)
        self._pending.append((correlation_id, api, version, future))
        self._flush()

    def _on_done(self, task: asyncio.Future[object]) -> None:
        self._flush()

    def _flush(self) -> None:
        """Write every finished answer at the head of the queue, in request order."""
        while self._pending and self._pending[0][3].done() and not self._closed:
            correlation_id, api, version, task = self._pending.popleft()
            if task.cancelled():
                self.close("request cancelled")
                return
            failure = task.exception()
            if failure is not None:
                logger.error("broker=%d event=kafka_request_failed listener=%s peer=%s "
                             "api_key=%d api_version=%d correlation_id=%d",
                             self._listener.broker_id, self._listener.name, self._peer,
                             api.key, version, correlation_id, exc_info=failure)
                self.close("the request failed on the broker")
                return
            response = task.result()
            if response is kafka_apis.NO_RESPONSE:
                continue
            if response is kafka_apis.CLOSE_CONNECTION:
                self.close("acks=0 produce failed: the producer refreshes its metadata")
                return
            assert isinstance(response, api_keys.Message), response
            body_flexible = api.flexible(version)
            w = wire.Writer()
            headers.write_response_header(w, correlation_id, flexible=headers.response_header_flexible(
                api.key, body_flexible=body_flexible))
            response.write(w, version)
            assert self._transport is not None
            self._transport.writelines(headers.frame(w.parts()))
        if not self._closed and self._buffer and len(self._pending) < MAX_IN_FLIGHT:
            self._process_buffer()  # frames held back at the in-flight limit
        else:
            self._update_reading()

    def _update_reading(self) -> None:
        if self._transport is None or self._closed:
            return
        pause = self._writing_paused or len(self._pending) >= MAX_IN_FLIGHT
        if pause and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        elif not pause and self._reading_paused:
            self._transport.resume_reading()
            self._reading_paused = False

    def close(self, reason: str) -> None:
        """Close the connection (one log line when ``reason`` is a fault of the peer's)."""
        if self._closed:
            return
        self._closed = True
        logger.warning("broker=%d event=kafka_connection_closed listener=%s peer=%s reason=%r",
                       self._listener.broker_id, self._listener.name, self._peer, reason)
        for _, _, _, task in self._pending:
            task.cancel()
        self._pending.clear()
        if self._transport is not None:
            self._transport.close()

    def shutdown(self) -> None:
        """Close without a log line (the broker stops)."""
        self._closed = True
        for _, _, _, task in self._pending:
            task.cancel()
        self._pending.clear()
        if self._transport is not None:
            self._transport.close()


class KafkaListener:
    """A Kafka-protocol server on one endpoint. See the module docstring."""

    def __init__(self, apis: kafka_apis.KafkaApis, *, name: str, host: str, port: int,
                 broker_id: int, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.apis = apis
        self.name = name
        self.host = host
        self.port = port
        self.broker_id = broker_id
        self.max_request_bytes = max_request_bytes
        self.connections: set[KafkaConnection] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Bind and serve; OSError when the address cannot be bound."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: KafkaConnection(self),
                                                self.host or None, self.port)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        logger.info("broker=%d event=kafka_listener_started listener=%s address=%s:%d",
                    self.broker_id, self.name, self.host or "0.0.0.0", self.port)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for connection in list(self.connections):
            connection.shutdown()
        started = time.monotonic()
        await self._server.wait_closed()
        logger.info("broker=%d event=kafka_listener_stopped listener=%s wait_ms=%d",
                    self.broker_id, self.name, int((time.monotonic() - started) * 1000))
        self._server = None
