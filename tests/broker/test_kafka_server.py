"""The Kafka listener over a real socket: framing, pipelining in order, backpressure and the
answers to hostile frames, with a stub in place of the request handlers."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kraftlog.broker import kafka_apis, kafka_server
from kraftlog.error_codes import ErrorCode
from kraftlog.protocol import api_keys, headers, wire
from kraftlog.protocol.generated import api_versions, metadata, produce


class StubApis:
    """Answers Metadata with the topic it was asked about, after ``delay_s[topic]``."""

    def __init__(self, delay_s: dict[str, float] | None = None) -> None:
        self.delay_s = delay_s or {}
        self.started: list[str] = []

    async def handle(self, listener: str, api_key: int, version: int, request: Any) -> object:
        if api_key == api_keys.ApiKey.PRODUCE:
            return kafka_apis.NO_RESPONSE if request.acks == 0 else produce.ProduceResponse()
        if api_key == api_keys.ApiKey.API_VERSIONS:
            return kafka_apis.api_versions_response(ErrorCode.NONE)
        name = request.topics[0].name
        self.started.append(name)
        await asyncio.sleep(self.delay_s.get(name, 0))
        return metadata.MetadataResponse(topics=[metadata.MetadataResponseTopic(name=name)])


def request_frame(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    api = api_keys.SERVED[api_key]
    w = wire.Writer()
    headers.write_request_header(w, headers.RequestHeader(
        api_key=api_key, api_version=version, correlation_id=correlation_id, client_id="t"),
        flexible=api.flexible(version))
    body.write(w, version)
    return b"".join(headers.frame(w.parts()))


def metadata_frame(correlation_id: int, topic: str, version: int = 9) -> bytes:
    return request_frame(3, version, correlation_id, metadata.MetadataRequest(
        topics=[metadata.MetadataRequestTopic(name=topic)]))


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


def run(body: Callable[[kafka_server.KafkaListener, StubApis], Awaitable[None]],
        apis: StubApis | None = None) -> None:
    async def main() -> None:
        stub = apis or StubApis()
        listener = kafka_server.KafkaListener(stub, name="KAFKA", host="127.0.0.1",  # type: ignore[arg-type]
                                              port=0, broker_id=7, max_request_bytes=1 << 20)
        await listener.start()
        try:
            await body(listener, stub)
        finally:
            await listener.stop()
    asyncio.run(asyncio.wait_for(main(), timeout=20))


def test_pipelined_requests_are_answered_in_request_order() -> None:
    # The first request finishes last: its answer still goes first.
    stub = StubApis({"a": 0.3, "b": 0.1, "c": 0.0})

    async def body(listener: kafka_server.KafkaListener, _: StubApis) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(metadata_frame(1, "a") + metadata_frame(2, "b") + metadata_frame(3, "c"))
        answers = []
        for _ in range(3):
            r = wire.Reader(await read_frame(reader))
            correlation_id = headers.read_response_header(r, flexible=True)
            answers.append((correlation_id, metadata.MetadataResponse.read(r, 9).topics[0].name))
        assert answers == [(1, "a"), (2, "b"), (3, "c")]
        assert stub.started == ["a", "b", "c"], "handlers start in request order"
        writer.close()

    run(body, stub)


def test_a_malformed_frame_closes_only_that_connection_with_one_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    async def body(listener: kafka_server.KafkaListener, _: StubApis) -> None:
        good_reader, good_writer = await asyncio.open_connection("127.0.0.1", listener.port)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        frame = bytearray(metadata_frame(5, "t", version=1))[:-2]  # the body cut short
        frame[0:4] = struct.pack(">i", len(frame) - 4)
        with caplog.at_level(logging.WARNING, logger="kraftlog.broker.kafka_server"):
            writer.write(bytes(frame))
            assert await reader.read() == b"", "the connection is closed, nothing answered"
        closed = [r for r in caplog.records if "kafka_connection_closed" in r.getMessage()]
        assert len(closed) == 1 and "malformed api_key=3" in closed[0].getMessage()
        good_writer.write(metadata_frame(6, "u"))
        r = wire.Reader(await read_frame(good_reader))
        assert headers.read_response_header(r, flexible=True) == 6
        good_writer.close()

    run(body)


@pytest.mark.parametrize("frame", [
    struct.pack(">i", -1),                                   # negative size
    struct.pack(">i", (1 << 20) + 1),                        # over socket.request.max.bytes
    struct.pack(">i", 2) + b"\x00\x03",                      # a header cut short
    struct.pack(">ihhi", 8, 45, 0, 1),                       # an API not served
    struct.pack(">ihhi", 8, 0, 2, 1),                        # Produce v2: not served
])
def test_hostile_frames_close_the_connection(frame: bytes) -> None:
    async def body(listener: kafka_server.KafkaListener, _: StubApis) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(frame)
        assert await reader.read() == b""

    run(body)


def test_an_unsupported_api_versions_version_is_answered_at_v0_with_our_list() -> None:
    async def body(listener: kafka_server.KafkaListener, _: StubApis) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        # A future client's ApiVersions v99 (its body unknown to us): header v2.
        writer.write(struct.pack(">ihhih", 12, 18, 99, 41, -1) + b"\x00\x00")
        r = wire.Reader(await read_frame(reader))
        assert headers.read_response_header(r, flexible=False) == 41
        answer = api_versions.ApiVersionsResponse.read(r, 0)
        assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert {(a.api_key, a.min_version, a.max_version) for a in answer.api_keys} == {
            (int(a.key), a.min_version, a.max_version) for a in api_keys.SERVED.values()}
        writer.write(request_frame(18, 3, 42, api_versions.ApiVersionsRequest(
            client_software_name="t", client_software_version="1")))
        r = wire.Reader(await read_frame(reader))
        assert headers.read_response_header(r, flexible=False) == 42  # v0 header at v3 too
        assert api_versions.ApiVersionsResponse.read(r, 3).error_code == 0
        writer.close()

    run(body)


def test_acks_0_produce_gets_no_answer_and_the_next_request_does() -> None:
    async def body(listener: kafka_server.KafkaListener, _: StubApis) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(request_frame(0, 9, 1, produce.ProduceRequest(acks=0))
                     + metadata_frame(2, "x"))
        r = wire.Reader(await read_frame(reader))
        assert headers.read_response_header(r, flexible=True) == 2
        writer.close()

    run(body)


def test_a_connection_with_too_many_requests_open_stops_being_read() -> None:
    stub = StubApis({"slow": 0.5})

    async def body(listener: kafka_server.KafkaListener, _: StubApis) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        count = kafka_server.MAX_IN_FLIGHT + 10
        writer.write(b"".join(metadata_frame(i, "slow") for i in range(count)))
        await asyncio.sleep(0.2)
        assert len(stub.started) == kafka_server.MAX_IN_FLIGHT, "reading paused at the limit"
        for i in range(count):
            r = wire.Reader(await read_frame(reader))
            assert headers.read_response_header(r, flexible=True) == i
        assert len(stub.started) == count
        writer.close()

    run(body, stub)


def test_bytes_after_a_whole_body_are_ignored_as_kafka_ignores_them() -> None:
    # librdkafka 2.16's all-topics Metadata v12, captured: a 4-byte array count (0, 0, 0, 0)
    # where a compact one belongs; Kafka reads null topics and ignores the 3 bytes left.
    sent = bytes.fromhex("0003000c000000030006676f6c64656e0000000000010000")
    stub = StubApis()
    seen: list[Any] = []

    async def handle(listener: str, api_key: int, version: int, request: Any) -> object:
        seen.append(request)
        return metadata.MetadataResponse()

    stub.handle = handle  # type: ignore[method-assign]

    async def body(listener: kafka_server.KafkaListener, _: StubApis) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(struct.pack(">i", len(sent)) + sent)
        r = wire.Reader(await read_frame(reader))
        assert headers.read_response_header(r, flexible=True) == 3
        assert seen[0].topics is None, "every topic, as Kafka reads it"
        writer.close()

    run(body, stub)
