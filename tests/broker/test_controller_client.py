"""ControllerClient: finds the active controller among fake ones (hints, dead nodes, no leader)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from kraftlog.broker import controller_client
from kraftlog.error_codes import ErrorCode
from kraftlog.v1 import common_pb2, controller_pb2, controller_pb2_grpc


class FakeController(controller_pb2_grpc.ControllerServiceServicer):
    """Answers DescribeCluster as the active controller, or NOT_CONTROLLER naming ``leader``."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.active = False
        self.leader = -1
        self.calls = 0
        self.lock = threading.Lock()

    def DescribeCluster(self, request: Any, context: Any) -> Any:
        with self.lock:
            self.calls += 1
        if self.active:
            return controller_pb2.DescribeClusterResponse(controller_id=self.node_id)
        return controller_pb2.DescribeClusterResponse(
            error=common_pb2.Error(code=ErrorCode.NOT_CONTROLLER),
            active_controller=common_pb2.LeaderHint(leader_id=self.leader))


@pytest.fixture
def controllers() -> Iterator[dict[int, tuple[FakeController, str]]]:
    out: dict[int, tuple[FakeController, str]] = {}
    servers = []
    for node_id in (1, 2, 3):
        fake = FakeController(node_id)
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(fake, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        out[node_id] = fake, f"127.0.0.1:{port}"
    try:
        yield out
    finally:
        for server in servers:
            server.stop(None)


def _dead_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # nobody listens once closed


def _call(client: controller_client.ControllerClient, timeout_s: float) -> Any:
    async def run() -> Any:
        try:
            return await client.call("DescribeCluster", controller_pb2.DescribeClusterRequest(),
                                     deadline_s=time.monotonic() + timeout_s)
        finally:
            await client.close()
    return asyncio.run(run())


def test_follows_a_not_controller_hint(controllers: dict[int, tuple[FakeController, str]]) -> None:
    for node_id, (fake, _) in controllers.items():
        fake.active, fake.leader = node_id == 3, 3
    client = controller_client.ControllerClient(
        {n: a for n, (_, a) in controllers.items()}, raft_leader=lambda: 1,
        request_timeout_ms=2000)
    assert _call(client, 5).controller_id == 3
    assert [controllers[n][0].calls for n in (1, 2, 3)] == [1, 0, 1]
    assert _call(client, 5).controller_id == 3  # straight to the one that answered
    assert [controllers[n][0].calls for n in (1, 2, 3)] == [1, 0, 2]


def test_a_dead_raft_leader_does_not_hide_the_other_voters(
        controllers: dict[int, tuple[FakeController, str]]) -> None:
    controllers[2][0].active = True
    voters = {1: _dead_address(), 2: controllers[2][1], 3: controllers[3][1]}
    client = controller_client.ControllerClient(voters, raft_leader=lambda: 1,
                                                request_timeout_ms=500)
    assert _call(client, 3).controller_id == 2


def test_no_active_controller_answers_the_last_reply_after_pausing_between_rounds(
        controllers: dict[int, tuple[FakeController, str]]) -> None:
    client = controller_client.ControllerClient(
        {n: a for n, (_, a) in controllers.items()}, raft_leader=lambda: -1,
        request_timeout_ms=500)
    started = time.monotonic()
    answer = _call(client, 0.5)
    assert answer.error.code == ErrorCode.NOT_CONTROLLER
    assert time.monotonic() - started >= 0.5
    calls = [controllers[n][0].calls for n in (1, 2, 3)]
    rounds = 0.5 / controller_client.RETRY_BACKOFF_S + 1
    assert all(c >= 1 for c in calls) and sum(calls) <= 3 * rounds, calls


def test_a_voter_named_later_by_the_metadata_log_is_reached(
        controllers: dict[int, tuple[FakeController, str]]) -> None:
    controllers[3][0].active = True
    known = controller_client.KnownControllers({})
    named: dict[int, str] = {}
    known.bind(lambda: named)
    client = controller_client.ControllerClient(known, raft_leader=lambda: -1,
                                                request_timeout_ms=500)

    async def run() -> Any:
        call = asyncio.create_task(client.call(
            "DescribeCluster", controller_pb2.DescribeClusterRequest(),
            deadline_s=time.monotonic() + 5))
        await asyncio.sleep(0.3)
        assert not call.done()
        named[3] = controllers[3][1]
        try:
            return await call
        finally:
            await client.close()
    assert asyncio.run(run()).controller_id == 3
