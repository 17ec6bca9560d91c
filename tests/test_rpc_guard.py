"""rpc_guard on a real in-process grpc.aio server (RaftService over a fake driver).

Random bytes as a request get INVALID_ARGUMENT with a concise, rate-limited log line; a
handler's unexpected exception gets INTERNAL with a fixed text (no server path) and one
logged traceback per interval; stop_server ends calls still open with UNAVAILABLE and
grpc logs nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import grpc
import grpc.aio
import pytest

from kraftlog import rpc_guard
from kraftlog.raft import messages as m
from kraftlog.raft import transport
from kraftlog.raft.error_codes import ErrorCode
from kraftlog.v1 import raft_pb2

UNARY_METHODS = ("Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "Fetch", "FetchSnapshot",
                 "DescribeQuorum", "AddRaftVoter", "RemoveRaftVoter", "UpdateRaftVoter")
GARBAGE = b"\xff\xff\xff\xff\x0f\x01garbage"  # an over-long varint: never a valid message


class FakeDriver:
    """Answers Fetch at once (parks replica 3's forever, and FetchSnapshot), fails Vote with
    a path in its message."""

    def __init__(self) -> None:
        self.requests: list[m.RaftRequest] = []

    async def handle_request(self, source: int, request: m.RaftRequest) -> m.RaftResponse:
        self.requests.append(request)
        if isinstance(request, m.VoteRequest):
            raise RuntimeError("cannot open /var/lib/kraftlog/secret/quorum-state")
        if isinstance(request, m.FetchSnapshotRequest) or (
                isinstance(request, m.FetchRequest) and request.replica_id == 3):
            await asyncio.Event().wait()
        return m.FetchResponse(error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1,
                               high_watermark=0, log_start_offset=0)

    def leader_and_epoch(self) -> tuple[int, int]:
        return 1, 1


async def _serve(driver: FakeDriver) -> tuple[Any, int]:
    server = transport.create_server(transport.RaftServicer(driver))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def _raw(channel: grpc.aio.Channel, method: str) -> Any:
    return channel.unary_unary(f"/kraftlog.v1.RaftService/{method}")


async def _code_of(call: Any) -> tuple[grpc.StatusCode, str]:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def test_public_message_drops_directories() -> None:
    text = "meta.properties: bad line in /data/k1/meta.properties (see /tmp/x/y.log:3)"
    assert rpc_guard.public_message(text) == \
        "meta.properties: bad line in meta.properties (see y.log:3)"
    assert rpc_guard.public_message("topic a/b is 1/2 done") == "topic a/b is 1/2 done"


def test_rate_limited_log_counts_what_it_left_out() -> None:
    now = [0.0]
    log = rpc_guard.RateLimitedLog(interval_s=10, clock=lambda: now[0])
    assert log.admit("a") == 0
    assert [log.admit("a") for _ in range(5)] == [None] * 5
    assert log.admit("b") == 0
    now[0] = 10.0
    assert log.admit("a") == 5 and log.admit("a") is None


def test_undecodable_requests_get_invalid_argument_and_few_log_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    asyncio.run(_test_undecodable_requests_get_invalid_argument_and_few_log_lines(caplog))


async def _test_undecodable_requests_get_invalid_argument_and_few_log_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    driver = FakeDriver()
    server, port = await _serve(driver)
    caplog.set_level(logging.INFO)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            rng = random.Random(17)
            for method in UNARY_METHODS:
                for payload in [GARBAGE] + [b"\xff" + rng.randbytes(rng.randrange(1, 64))
                                            for _ in range(20)]:
                    code, details = await _code_of(_raw(channel, method)(payload, timeout=5))
                    if code is grpc.StatusCode.OK:
                        continue  # some random bytes are a valid message (unknown fields)
                    assert code is grpc.StatusCode.INVALID_ARGUMENT, (method, details)
                    assert "is not a valid kraftlog.v1." in details
            stream = channel.stream_stream("/kraftlog.v1.RaftService/FetchStream")()
            await stream.write(raft_pb2.RaftFetchRequest(replica_id=2, max_bytes=1)
                               .SerializeToString())
            assert await stream.read() != grpc.aio.EOF
            await stream.write(GARBAGE)
            code, details = await _code_of(stream.read())
            assert code is grpc.StatusCode.INVALID_ARGUMENT, details
    finally:
        await rpc_guard.stop_server(server, 0.5)
    assert not any(isinstance(r, m.VoteRequest) for r in driver.requests)
    lines = [r for r in caplog.records if "undecodable_request" in r.getMessage()]
    # One line per method in this 10 s interval, whatever the number of bad requests.
    assert 1 <= len(lines) <= len(UNARY_METHODS) + 1, [r.getMessage() for r in lines]
    assert not any(r.exc_info for r in lines)
    assert not any(r.name.startswith("grpc") for r in caplog.records if r.levelno >= logging.ERROR)


def test_an_unexpected_error_answers_internal_without_server_paths(
        caplog: pytest.LogCaptureFixture) -> None:
    asyncio.run(_test_an_unexpected_error_answers_internal_without_server_paths(caplog))


async def _test_an_unexpected_error_answers_internal_without_server_paths(
        caplog: pytest.LogCaptureFixture) -> None:
    server, port = await _serve(FakeDriver())
    caplog.set_level(logging.INFO)
    vote = raft_pb2.VoteRequest(cluster_id="c", candidate_id=2, candidate_epoch=3, voter_id=1,
                                last_offset_epoch=0, last_offset=0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            for _ in range(30):
                code, details = await _code_of(_raw(channel, "Vote")(vote.SerializeToString(),
                                                                     timeout=5))
                assert code is grpc.StatusCode.INTERNAL
                assert details == ("/kraftlog.v1.RaftService/Vote: internal server error "
                                   "(logged by the server)")
    finally:
        await rpc_guard.stop_server(server, 0.5)
    failed = [r for r in caplog.records if "handler_failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None  # once per interval
    assert not any(r.name.startswith("grpc") for r in caplog.records if r.levelno >= logging.ERROR)


def test_stop_server_ends_open_calls_without_grpc_errors(
        caplog: pytest.LogCaptureFixture) -> None:
    asyncio.run(_test_stop_server_ends_open_calls_without_grpc_errors(caplog))
    # grpc.aio leaves the calls it cancelled pending; their tracebacks come when the loop
    # closes (in a process: at exit), so the check is after asyncio.run.
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


async def _test_stop_server_ends_open_calls_without_grpc_errors(
        caplog: pytest.LogCaptureFixture) -> None:
    server, port = await _serve(FakeDriver())
    caplog.set_level(logging.INFO)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        idle = channel.stream_stream("/kraftlog.v1.RaftService/FetchStream")()
        await idle.write(raft_pb2.RaftFetchRequest(replica_id=2, max_bytes=1).SerializeToString())
        assert await idle.read() != grpc.aio.EOF
        snapshot = raft_pb2.FetchSnapshotRequest(
            replica_id=2, max_bytes=1, snapshot_id={"end_offset": 1, "epoch": 1})
        parked = _raw(channel, "FetchSnapshot")(snapshot.SerializeToString(), timeout=30)
        parked_stream = channel.stream_stream("/kraftlog.v1.RaftService/FetchStream")()
        await parked_stream.write(raft_pb2.RaftFetchRequest(replica_id=3, max_bytes=1)
                                  .SerializeToString())
        await asyncio.sleep(0.2)
        await rpc_guard.stop_server(server, 0.3)
        for call in (parked, idle.read(), parked_stream.read()):
            code, details = await _code_of(call)
            assert code is grpc.StatusCode.UNAVAILABLE, details
