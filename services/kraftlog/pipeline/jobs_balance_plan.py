"""The ``balance`` job's planner: a greedy over per-partition and per-broker aggregates.

Owns :func:`plan_balance`. The Spark job (:mod:`kraftlog.pipeline.balance`) computes
the aggregates as DataFrame operations and collects them; this module decides, on
the driver, which replicas move:

1. **Bytes.** The state is each broker's bytes on disk (the sum of its replicas'
   sizes). A candidate move takes one replica of partition ``p`` (``s`` bytes, the
   size of its largest replica, which is what a new replica copies) from broker
   ``src`` to broker ``dst`` that holds no replica of ``p``, only to live brokers,
   and only when racks allow it (below). The move is useful only if it narrows the
   gap between the two brokers by more than ``min_improvement_ratio`` of the mean
   broker load (so the greedy never chases crumbs, and never overshoots: the gap
   after, ``|B[src] - B[dst] - 2 s|``, must be smaller than the gap before). Of the
   useful moves, the one with the largest drop of the sum of squared broker loads
   (``2 s (B[src] - B[dst] - s)``, the variance, which also lowers max/min when
   several brokers tie at the top) *per byte of cost* wins; the cost of a move is
   ``s + rate * rate_horizon_s``: a partition taking writes costs more to copy, its
   end moves while the copy chases it. The loop stops when no move is useful or
   after ``max_moves``.
2. **Racks.** With racks set on brokers, a move never lowers the number of distinct
   racks of a partition below ``min(replicas, racks in the cluster)``: two replicas
   share a rack only when racks do not allow otherwise. A broker without a rack
   counts as a rack of its own. With no racks at all, the check is off.
3. **Leaders.** Each partition's preferred leader (its first replica, which the
   controller's auto leader rebalance makes the leader) stays first, or the broker
   that took its place does. While the most-leading broker leads two more partitions than the
   least-leading one and some partition it leads has a replica there, that
   partition's preference moves (the coldest such partition first): no data moves,
   the order of ``replicas`` changes, and a preferred election applies it.

The plan lists only partitions whose replica list changes (set or order), in
Kafka's reassignment JSON (:class:`kraftlog.admin.reassign_plan.Plan`). Pure: no
I/O, deterministic for the same input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kraftlog.admin import reassign_plan as rp

DEFAULT_MIN_IMPROVEMENT_RATIO = 0.02
DEFAULT_MAX_MOVES = 1000
DEFAULT_RATE_HORIZON_S = 60.0


class BalanceInputError(rp.PlanError):
    """Aggregates that cannot be planned over (no live broker, a replica on an unknown broker)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionLoad:
    """One partition as the aggregates describe it."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    """In assignment order (first = preferred leader)."""
    leader: int
    """-1 when the partition has no leader."""
    size_bytes: int
    """Its largest replica's bytes on disk (what a new replica copies)."""
    rate_bytes_per_s: float = 0.0
    """Recent produce rate (growth of the leader's log over the sampling window)."""
    replica_bytes: Mapping[int, int] | None = None
    """Each replica's own size (broker -> bytes); ``size_bytes`` for missing ones."""

    def bytes_on(self, broker: int) -> int:
        if self.replica_bytes is None:
            return self.size_bytes
        return self.replica_bytes.get(broker, self.size_bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerInfo:
    broker_id: int
    rack: str = ""
    live: bool = True
    """Fenced or shutting-down brokers receive no replicas."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BalanceSettings:
    min_improvement_ratio: float = DEFAULT_MIN_IMPROVEMENT_RATIO
    """A move must narrow its two brokers' gap by more than this fraction of the mean load."""
    max_moves: int = DEFAULT_MAX_MOVES
    rate_horizon_s: float = DEFAULT_RATE_HORIZON_S
    """Seconds of produce traffic a move is charged for (see the module docstring)."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_improvement_ratio < 1:
            raise BalanceInputError(f"min improvement ratio must be in [0, 1), not "
                                    f"{self.min_improvement_ratio}")
        if self.max_moves < 0:
            raise BalanceInputError(f"max moves must be >= 0, not {self.max_moves}")
        if self.rate_horizon_s < 0:
            raise BalanceInputError(f"rate horizon must be >= 0 s, not {self.rate_horizon_s}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaMove:
    topic: str
    partition: int
    source: int
    destination: int
    bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSummary:
    """Bytes and leaders per broker, and the max/min bytes ratio (inf when a broker is empty)."""

    bytes_by_broker: Mapping[int, int]
    leaders_by_broker: Mapping[int, int]

    @property
    def ratio(self) -> float:
        return bytes_ratio(self.bytes_by_broker)

    @property
    def leader_spread(self) -> int:
        counts = list(self.leaders_by_broker.values())
        return max(counts) - min(counts) if counts else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BalanceResult:
    plan: rp.Plan
    """Partitions whose replicas change (set or order); empty when nothing is worth doing."""
    moves: tuple[ReplicaMove, ...]
    bytes_moved: int
    before: LoadSummary
    after: LoadSummary
    """Projected: every moved replica is the size of the partition's largest replica."""
    assignment: Mapping[tuple[str, int], tuple[int, ...]]
    """Every partition's replicas after the plan."""


def bytes_ratio(bytes_by_broker: Mapping[int, int]) -> float:
    """max / min of the brokers' bytes; inf when the emptiest broker holds nothing (and
    others do), 1.0 for an empty cluster."""
    values = list(bytes_by_broker.values())
    if not values or max(values) == 0:
        return 1.0
    low = min(values)
    return math.inf if low <= 0 else max(values) / low


def _rack_key(broker: int, rack_of: Mapping[int, str]) -> str:
    rack = rack_of.get(broker, "")
    return rack if rack else f"<broker {broker}>"


def _distinct_racks(replicas: Sequence[int], rack_of: Mapping[int, str]) -> int:
    return len({_rack_key(b, rack_of) for b in replicas})


def plan_balance(partitions: Sequence[PartitionLoad], brokers: Sequence[BrokerInfo],
                 settings: BalanceSettings | None = None) -> BalanceResult:
    """The plan described in the module docstring."""
    settings = settings or BalanceSettings()
    known = {b.broker_id: b for b in brokers}
    live = sorted(b.broker_id for b in brokers if b.live)
    if not live:
        raise BalanceInputError("no live broker to balance over")
    for p in partitions:
        unknown = sorted(set(p.replicas) - set(known))
        if unknown:
            raise BalanceInputError(f"{p.topic}-{p.partition}: replica(s) on unknown "
                                    f"broker(s) {unknown}")
    rack_of = {b.broker_id: b.rack for b in brokers}
    racks_on = any(rack_of.values())
    cluster_racks = len({_rack_key(b, rack_of) for b in live})

    load: dict[int, int] = dict.fromkeys(sorted(known), 0)
    for p in partitions:
        for b in p.replicas:
            load[b] += p.bytes_on(b)
    leaders: dict[int, int] = dict.fromkeys(sorted(known), 0)
    for p in partitions:
        if p.leader in leaders:
            leaders[p.leader] += 1
    before = LoadSummary(bytes_by_broker=dict(load), leaders_by_broker=dict(leaders))

    replicas: dict[tuple[str, int], list[int]] = {(p.topic, p.partition): list(p.replicas)
                                                  for p in partitions}
    # A replica moved twice keeps the bytes of the partition's largest replica.
    moved_in: set[tuple[str, int, int]] = set()
    moves: list[ReplicaMove] = []
    ordered = sorted(partitions, key=lambda p: (p.topic, p.partition))

    def size_on(p: PartitionLoad, broker: int) -> int:
        return p.size_bytes if (p.topic, p.partition, broker) in moved_in else p.bytes_on(broker)

    def rack_ok(p: PartitionLoad, current: list[int], src: int, dst: int) -> bool:
        if not racks_on:
            return True
        after = [dst if b == src else b for b in current]
        distinct = _distinct_racks(after, rack_of)
        return distinct >= min(len(after), cluster_racks) or \
            distinct >= _distinct_racks(current, rack_of)

    while len(moves) < settings.max_moves:
        mean = sum(load[b] for b in live) / len(live)
        threshold = settings.min_improvement_ratio * mean
        best: tuple[float, int, int, int, int] | None = None
        best_key: tuple[PartitionLoad, int, int, int] | None = None
        for index, p in enumerate(ordered):
            if p.size_bytes <= 0:
                continue
            current = replicas[(p.topic, p.partition)]
            for src in current:
                for dst in live:
                    if dst in current:
                        continue
                    moving = size_on(p, src)
                    gap = load[src] - load[dst]
                    if gap <= 0:
                        continue
                    # src loses its own replica's bytes, dst gains a full copy.
                    new_gap = abs((load[src] - moving) - (load[dst] + p.size_bytes))
                    if gap - new_gap <= threshold:
                        continue
                    if not rack_ok(p, current, src, dst):
                        continue
                    drop = (load[src] ** 2 + load[dst] ** 2
                            - (load[src] - moving) ** 2 - (load[dst] + p.size_bytes) ** 2)
                    cost = p.size_bytes + p.rate_bytes_per_s * settings.rate_horizon_s
                    score = drop / max(cost, 1.0)
                    # Best score; then the larger move; then a stable order.
                    key = (score, drop, -index, -src, -dst)
                    if best is None or key > best:
                        best = key
                        best_key = (p, src, dst, moving)
        if best_key is None:
            break
        p, src, dst, moving = best_key
        current = replicas[(p.topic, p.partition)]
        current[current.index(src)] = dst
        load[src] -= moving
        load[dst] += p.size_bytes
        moved_in.add((p.topic, p.partition, dst))
        moves.append(ReplicaMove(topic=p.topic, partition=p.partition, source=src,
                                 destination=dst, bytes=p.size_bytes))

    final = _balance_leaders(ordered, replicas, live)
    after_leaders: dict[int, int] = dict.fromkeys(sorted(known), 0)
    for chosen in final.values():
        after_leaders[chosen[0]] += 1
    after = LoadSummary(bytes_by_broker=dict(load), leaders_by_broker=after_leaders)
    changed = tuple(rp.PartitionMove(topic=p.topic, partition=p.partition,
                                     replicas=tuple(final[(p.topic, p.partition)]))
                    for p in ordered if tuple(final[(p.topic, p.partition)]) != p.replicas)
    # The bytes a move really copies: a replica moved on from a broker it was moved to
    # copies once, to its final broker.
    copied = 0
    for p in ordered:
        added = set(final[(p.topic, p.partition)]) - set(p.replicas)
        copied += p.size_bytes * len(added)
    return BalanceResult(plan=rp.Plan(partitions=changed), moves=tuple(moves),
                         bytes_moved=copied, before=before, after=after,
                         assignment={k: tuple(v) for k, v in final.items()})


def _balance_leaders(partitions: Sequence[PartitionLoad],
                     replicas: Mapping[tuple[str, int], list[int]],
                     live: Sequence[int]) -> dict[tuple[str, int], list[int]]:
    """Replica lists with the preferred leader first (see the module docstring, step 3)."""
    # A moved replica's replacement sits at its index: the first replica stays first.
    preferred = {(p.topic, p.partition): replicas[(p.topic, p.partition)][0]
                 for p in partitions if replicas[(p.topic, p.partition)]}
    live_set = set(live)
    counts = dict.fromkeys(live, 0)
    for leader in preferred.values():
        if leader in counts:
            counts[leader] += 1
    rate = {(p.topic, p.partition): p.rate_bytes_per_s for p in partitions}
    for _ in range(len(partitions) + 1):
        busiest = max(counts, key=lambda b: (counts[b], -b))
        options: list[tuple[float, tuple[str, int], int]] = []
        for key, leader in sorted(preferred.items()):
            if leader != busiest:
                continue
            for other in replicas[key]:
                if other in live_set and counts[other] + 1 < counts[busiest]:
                    options.append((rate[key], key, other))
        if not options:
            break
        # The coldest partition moves first; to the broker leading the fewest.
        _, key, other = min(options, key=lambda o: (o[0], counts[o[2]], o[1], o[2]))
        preferred[key] = other
        counts[busiest] -= 1
        counts[other] += 1
    result: dict[tuple[str, int], list[int]] = {}
    for p in partitions:
        key = (p.topic, p.partition)
        leader = preferred[key]
        result[key] = [leader] + [b for b in replicas[key] if b != leader]
    return result
