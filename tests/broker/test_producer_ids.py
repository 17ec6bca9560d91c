"""Producer id blocks (KIP-730) and the broker's allocator against a fake controller."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kraftlog.broker import controller_client, producer_ids
from kraftlog.broker.producer_ids import ProducerIdBlocks, ProducerIdsBlock
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import InvariantViolation
from kraftlog.v1 import common_pb2, controller_pb2


def test_ids_come_in_order_and_the_next_block_is_wanted_at_ninety_percent() -> None:
    blocks = ProducerIdBlocks()
    assert blocks.next_producer_id() is None and blocks.wants_block()
    blocks.add_block(ProducerIdsBlock(first_producer_id=100, size=10))
    ids = []
    for _ in range(9):
        assert not blocks.wants_block()
        ids.append(blocks.next_producer_id())
    assert ids == list(range(100, 109))
    assert blocks.wants_block(), "90 % used"
    blocks.add_block(ProducerIdsBlock(first_producer_id=500, size=2))
    assert not blocks.wants_block()
    assert [blocks.next_producer_id() for _ in range(3)] == [109, 500, 501]
    assert blocks.next_producer_id() is None and blocks.wants_block()


def test_an_overlapping_or_empty_block_is_refused() -> None:
    blocks = ProducerIdBlocks()
    blocks.add_block(ProducerIdsBlock(first_producer_id=0, size=1000))
    with pytest.raises(InvariantViolation, match="overlaps"):
        blocks.add_block(ProducerIdsBlock(first_producer_id=999, size=1000))
    with pytest.raises(ValueError, match="invalid producer id block"):
        ProducerIdsBlock(first_producer_id=5, size=0)
    assert producer_ids.PREFETCH_THRESHOLD == 0.9


class FakeClient:
    """Answers AllocateProducerIds like the active controller: blocks of ``size`` from 0."""

    def __init__(self, size: int, error: ErrorCode = ErrorCode.NONE) -> None:
        self.size = size
        self.error = error
        self.calls = 0
        self.request_timeout_ms = 1000

    async def call(self, method: str, request: Any, *, deadline_s: float) -> Any:
        assert method == "AllocateProducerIds" and request.broker_epoch == 7
        start = self.calls * self.size
        self.calls += 1
        await asyncio.sleep(0)
        return controller_pb2.AllocateProducerIdsResponse(
            error=common_pb2.Error(code=int(self.error), message="no"),  # type: ignore[arg-type]
            producer_id_start=start, producer_id_len=self.size)


class FakeLifecycle:
    broker_id = 4
    broker_epoch = 7


def allocator(client: FakeClient, lifecycle: object = None) -> controller_client.ProducerIdAllocator:
    return controller_client.ProducerIdAllocator(client, lifecycle or FakeLifecycle())  # type: ignore[arg-type]


def test_the_allocator_fetches_blocks_as_they_run_out() -> None:
    async def run() -> list[int]:
        client = FakeClient(size=3)
        alloc = allocator(client)
        got = []
        for _ in range(7):
            code, pid, _message = await alloc.allocate(deadline_s=time.monotonic() + 2)
            assert code is ErrorCode.NONE
            got.append(pid)
        await alloc.close()
        return got

    assert asyncio.run(run()) == [0, 1, 2, 3, 4, 5, 6]


def test_the_allocator_answers_retriable_or_fatal_errors_by_the_deadline() -> None:
    async def run(error: ErrorCode, lifecycle: object = None) -> tuple[ErrorCode, int, str]:
        alloc = allocator(FakeClient(size=3, error=error), lifecycle)
        try:
            return await alloc.allocate(deadline_s=time.monotonic() + 0.3)
        finally:
            await alloc.close()

    code, pid, message = asyncio.run(run(ErrorCode.STALE_BROKER_EPOCH))
    assert (code, pid) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1) and "STALE_BROKER_EPOCH" in message
    code, _pid, message = asyncio.run(run(ErrorCode.UNKNOWN_SERVER_ERROR))
    assert code is ErrorCode.UNKNOWN_SERVER_ERROR

    class Unregistered:
        broker_id = 4
        broker_epoch = -1

    code, _pid, message = asyncio.run(run(ErrorCode.NONE, Unregistered()))
    assert code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and "not registered" in message
