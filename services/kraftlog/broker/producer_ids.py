"""The broker's producer id blocks for InitProducerId (KIP-730; Kafka's ``RPCProducerIdManager``).

Owns the block of producer ids the active controller handed this broker
(AllocateProducerIds, a ProducerIdsRecord in the metadata log, so no two
brokers ever get the same id) and at most one prefetched next block. Ids are
handed out in order; once :data:`PREFETCH_THRESHOLD` of the current block is
used the owner is told to fetch the next one, so InitProducerId rarely waits
for the controller.

Callers: :class:`kraftlog.broker.controller_client.ProducerIdAllocator` (which
talks to the controller). Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraftlog.errors import InvariantViolation

PREFETCH_THRESHOLD = 0.9
"""Kafka's ``RPCProducerIdManager.PID_PREFETCH_THRESHOLD``: fetch the next block at 90 % use."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsBlock:
    """``size`` ids from ``first_producer_id`` (Kafka's ProducerIdsBlock)."""

    first_producer_id: int
    size: int

    def __post_init__(self) -> None:
        if self.first_producer_id < 0 or self.size <= 0:
            raise ValueError(f"invalid producer id block: first {self.first_producer_id}, size {self.size}")

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


class ProducerIdBlocks:
    """The current block, the next id in it, and a prefetched block. See the module docstring.

    Invariant: ids handed out strictly increase; a new block starts at or after
    the end of every block seen before.
    """

    def __init__(self) -> None:
        self._current: ProducerIdsBlock | None = None
        self._next_id = -1
        self._prefetched: ProducerIdsBlock | None = None
        self._highest_end = 0

    def next_producer_id(self) -> int | None:
        """The next unused id, or None when every block is used up (fetch one first)."""
        if self._current is None or self._next_id >= self._current.next_block_first_id:
            if self._prefetched is None:
                self._current = None
                return None
            self._current, self._prefetched = self._prefetched, None
            self._next_id = self._current.first_producer_id
        producer_id = self._next_id
        self._next_id += 1
        return producer_id

    def wants_block(self) -> bool:
        """True when a block should be fetched now (none left, or the current one is 90 % used)."""
        if self._prefetched is not None:
            return False
        current = self._current
        if current is None or self._next_id >= current.next_block_first_id:
            return True
        return self._next_id - current.first_producer_id >= PREFETCH_THRESHOLD * current.size

    def add_block(self, block: ProducerIdsBlock) -> None:
        """Take a block from the controller; raises InvariantViolation if it overlaps an earlier one."""
        if block.first_producer_id < self._highest_end:
            raise InvariantViolation(
                f"producer id block [{block.first_producer_id}, {block.next_block_first_id}) overlaps ids "
                f"below {self._highest_end} that this broker already had")
        self._highest_end = block.next_block_first_id
        if self._current is None or self._next_id >= self._current.next_block_first_id:
            self._current, self._next_id = block, block.first_producer_id
        else:
            self._prefetched = block
