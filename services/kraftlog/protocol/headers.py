"""Kafka's request and response headers and the frames around them.

A frame is an int32 size then that many bytes. A request frame holds a request header
then the request body; a response frame a response header then the body:

* request header v1: api_key int16, api_version int16, correlation_id int32, client_id
  (nullable string, always with an int16 length); v2 (flexible requests) adds a
  tagged-field section after it;
* response header v0: correlation_id int32; v1 (flexible responses) adds a tagged-field
  section. ApiVersions answers with v0 at every version, so that a client which does not
  yet know the broker's versions can read it (KIP-511).

Callers: :mod:`kraftlog.broker.kafka_listener`, the tests' client. Pure.
"""

from __future__ import annotations

import dataclasses
import struct

from kraftlog.protocol import wire

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def read_request_prefix(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the part of every header version that a
    server reads before it knows whether it serves that API version."""
    r = wire.Reader(frame)
    return r.int16(), r.int16(), r.int32()


def read_request_header(r: wire.Reader, *, flexible: bool) -> RequestHeader:
    """Header v1 (``flexible`` False) or v2; ``r`` is left at the start of the body."""
    api_key, api_version, correlation_id = r.int16(), r.int16(), r.int32()
    client_id = r.nullable_string(compact=False)
    if flexible:
        r.tagged_fields()
    return RequestHeader(api_key=api_key, api_version=api_version,
                         correlation_id=correlation_id, client_id=client_id)


def write_request_header(w: wire.Writer, header: RequestHeader, *, flexible: bool) -> None:
    w.int16(header.api_key)
    w.int16(header.api_version)
    w.int32(header.correlation_id)
    w.nullable_string(header.client_id, compact=False)
    if flexible:
        w.tagged_fields([])


def response_header_flexible(api_key: int, *, body_flexible: bool) -> bool:
    """Whether the response header is v1 (tagged fields) rather than v0."""
    return body_flexible and api_key != API_VERSIONS_KEY


def write_response_header(w: wire.Writer, correlation_id: int, *, flexible: bool) -> None:
    w.int32(correlation_id)
    if flexible:
        w.tagged_fields([])


def read_response_header(r: wire.Reader, *, flexible: bool) -> int:
    correlation_id = r.int32()
    if flexible:
        r.tagged_fields()
    return correlation_id


def frame(parts: list[bytes | bytearray | memoryview]) -> list[bytes | bytearray | memoryview]:
    """``parts`` behind their int32 size prefix."""
    return [_SIZE.pack(sum(len(p) for p in parts)), *parts]
