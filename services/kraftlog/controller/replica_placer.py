"""Rack-aware striped replica placement for new partitions.

Owns :func:`place`: given the brokers that may take new replicas (unfenced, not
shutting down) and their racks, choose replicas for a run of partitions so that
(1) leaders (first replicas) rotate over the brokers, racks alternating, so
leadership is spread; (2) each partition's replicas sit on distinct racks while
racks remain; (3) followers shift per round so load spreads too. This is the
striping of Kafka's rack-aware assignment (``AdminUtils`` /
``StripedReplicaPlacer``): a rack-alternated broker list, a random start and a
random follower shift.

Called by replication_control for CreateTopics and CreatePartitions. Pure; the
randomness is an injected ``random.Random``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from kraftlog.controller import api
from kraftlog.error_codes import ErrorCode


@dataclass(frozen=True, slots=True, kw_only=True)
class UsableBroker:
    """A broker new replicas may go to; ``rack`` empty when it has none."""

    broker_id: int
    rack: str = ""


def rack_alternated(brokers: Sequence[UsableBroker]) -> list[UsableBroker]:
    """Brokers ordered rack by rack in turn: r1b1, r2b1, r3b1, r1b2, ... (ids sorted per rack)."""
    by_rack: dict[str, list[UsableBroker]] = {}
    for broker in sorted(brokers, key=lambda b: b.broker_id):
        by_rack.setdefault(broker.rack, []).append(broker)
    racks = [by_rack[rack] for rack in sorted(by_rack)]
    ordered: list[UsableBroker] = []
    for index in range(max((len(r) for r in racks), default=0)):
        ordered.extend(rack[index] for rack in racks if index < len(rack))
    return ordered


def place(
    *,
    num_partitions: int,
    replication_factor: int,
    brokers: Sequence[UsableBroker],
    rng: random.Random,
) -> list[tuple[int, ...]]:
    """Replica lists (preferred leader first) for ``num_partitions`` new partitions.

    Raises ``RequestError(INVALID_REPLICATION_FACTOR)`` when fewer usable brokers
    than ``replication_factor`` exist.
    """
    if not brokers:
        raise api.RequestError(
            ErrorCode.INVALID_REPLICATION_FACTOR, "All brokers are currently fenced."
        )
    if replication_factor > len(brokers):
        raise api.RequestError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"The target replication factor of {replication_factor} cannot be reached "
            f"because only {len(brokers)} broker(s) are registered and unfenced.",
        )
    ordered = rack_alternated(brokers)
    count = len(ordered)
    num_racks = len({b.rack for b in ordered})
    start_index = rng.randrange(count)
    shift = rng.randrange(count)
    placements: list[tuple[int, ...]] = []
    for partition in range(num_partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (start_index + partition) % count
        leader = ordered[first]
        replicas = [leader.broker_id]
        racks_used = {leader.rack}
        brokers_used = {leader.broker_id}
        step = 0
        # Walk the other brokers from the leader's position plus the shift; take a
        # broker on an unused rack while some rack is unused, then any unused broker.
        while len(replicas) < replication_factor and step < 2 * count:
            candidate = ordered[(first + 1 + (shift + step) % max(count - 1, 1)) % count]
            step += 1
            if candidate.broker_id in brokers_used:
                continue
            if candidate.rack in racks_used and len(racks_used) < num_racks:
                continue
            replicas.append(candidate.broker_id)
            racks_used.add(candidate.rack)
            brokers_used.add(candidate.broker_id)
        for candidate in ordered:  # never needed with rf <= count; keeps the result total
            if len(replicas) >= replication_factor:
                break
            if candidate.broker_id not in brokers_used:
                replicas.append(candidate.broker_id)
                brokers_used.add(candidate.broker_id)
        placements.append(tuple(replicas))
    return placements
