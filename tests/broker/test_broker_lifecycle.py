"""BrokerLifecycle: heartbeats leave on time even while the broker's event loop is blocked.

A fake ControllerService (a threaded sync gRPC server, so the blocked loop cannot hold it
up) registers the broker and records when each BrokerHeartbeat arrives; the test blocks
the event loop that started the lifecycle for several heartbeat intervals (as a metadata
burst over thousands of partitions did, issue 16) and checks the heartbeats kept coming.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from kraftlog.broker import controller_client
from kraftlog.ids import random_uuid
from kraftlog.v1 import common_pb2, controller_pb2, controller_pb2_grpc

INTERVAL_MS = 100
BLOCK_S = 1.0


class FakeController(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(self) -> None:
        self.heartbeats: list[float] = []
        self.lock = threading.Lock()

    def BrokerRegistration(self, request: Any, context: Any) -> Any:
        return controller_pb2.BrokerRegistrationResponse(broker_epoch=7)

    def BrokerHeartbeat(self, request: Any, context: Any) -> Any:
        with self.lock:
            self.heartbeats.append(time.monotonic())
        return controller_pb2.BrokerHeartbeatResponse(is_fenced=False, is_caught_up=True)


@pytest.fixture
def controller() -> Iterator[tuple[FakeController, str]]:
    fake = FakeController()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    controller_pb2_grpc.add_ControllerServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield fake, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def test_heartbeats_keep_their_schedule_while_the_event_loop_is_blocked(
        controller: tuple[FakeController, str]) -> None:
    fake, address = controller

    async def scenario() -> tuple[list[float], float, float, controller_client.BrokerLifecycle, int]:
        changes: list[int] = []
        client = controller_client.ControllerClient({1: address}, raft_leader=lambda: 1,
                                                    request_timeout_ms=2000)
        lifecycle = controller_client.BrokerLifecycle(
            client, broker_id=101, cluster_id="c", incarnation_id=random_uuid(),
            listeners=[common_pb2.Endpoint(host="127.0.0.1", port=1, listener_name="PLAINTEXT")],
            rack="", log_dir_ids=[], heartbeat_interval_ms=INTERVAL_MS,
            metadata_offset=lambda: 5, on_change=lambda: changes.append(1))
        lifecycle.start()
        try:
            deadline = time.monotonic() + 10
            while not lifecycle.ready and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert lifecycle.ready
            await asyncio.sleep(0.3)
            blocked_from = time.monotonic()
            time.sleep(BLOCK_S)  # the broker's loop does nothing else meanwhile
            blocked_to = time.monotonic()
            seen_changes = len(changes)
            await asyncio.sleep(0)  # the loop runs what the lifecycle scheduled on it
            return fake.heartbeats, blocked_from, blocked_to, lifecycle, seen_changes
        finally:
            await lifecycle.stop()
            await client.close()

    beats, blocked_from, blocked_to, lifecycle, _ = asyncio.run(scenario())
    during = [t for t in beats if blocked_from <= t <= blocked_to]
    # ~10 intervals fit in the block; allow for a loaded 2-core machine.
    assert len(during) >= BLOCK_S * 1000 / INTERVAL_MS * 0.6, (len(during), beats)
    gaps = [b - a for a, b in itertools.pairwise(during)]
    assert max(gaps) < 3 * INTERVAL_MS / 1000, gaps
    assert lifecycle.heartbeats_sent >= len(beats)
    assert lifecycle.max_heartbeat_lateness_ms < 3 * INTERVAL_MS


def test_on_change_runs_on_the_loop_that_started_the_lifecycle(
        controller: tuple[FakeController, str]) -> None:
    _fake, address = controller

    async def scenario() -> set[int]:
        threads: set[int] = set()
        client = controller_client.ControllerClient({1: address}, raft_leader=lambda: 1,
                                                    request_timeout_ms=2000)
        lifecycle = controller_client.BrokerLifecycle(
            client, broker_id=101, cluster_id="c", incarnation_id=random_uuid(), listeners=[],
            rack="", log_dir_ids=[], heartbeat_interval_ms=INTERVAL_MS, metadata_offset=lambda: 0,
            on_change=lambda: threads.add(threading.get_ident()))
        lifecycle.start()
        try:
            deadline = time.monotonic() + 10
            while not lifecycle.ready and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            assert await lifecycle.controlled_shutdown(0.01) is False  # the fake never says so
        finally:
            await lifecycle.stop()
            await client.close()
        return threads

    assert asyncio.run(scenario()) == {threading.get_ident()}
