"""kafka-topics ``--describe``'s partition health rules, as plain values (pure).

Owns :class:`HealthFilter` and :func:`matches`, which the AdminService's DescribeTopics
(:mod:`.admin_service`) applies to each partition, and the replication-factor rule
used for a partition under reassignment. The rules are Kafka's ``TopicCommand``
(``PartitionDescription``):

- under-replicated: fewer in-sync replicas than the target replication factor
  (the replicas minus those a reassignment is removing);
- under-min-ISR: no leader (while ``min.insync.replicas`` > 0), or fewer in-sync
  replicas than ``min.insync.replicas``;
- at-min-ISR: exactly ``min.insync.replicas`` in-sync replicas;
- unavailable: no leader, or the leader is not a live broker.

No I/O, no protobuf: callers translate at the edge.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

NO_LEADER = -1


class HealthFilter(enum.Enum):
    """Which partitions a describe returns (the values match ``PartitionHealthFilter``)."""

    ALL = 0
    UNDER_REPLICATED = 1
    UNDER_MIN_ISR = 2
    AT_MIN_ISR = 3
    UNAVAILABLE = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionHealth:
    """What the rules look at for one partition."""

    leader_id: int
    """The leader's broker id, :data:`NO_LEADER` if none."""
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()


def replication_factor(replicas: Sequence[int], removing_replicas: Collection[int]) -> int:
    """The target replication factor: a reassignment's removing replicas do not count."""
    return sum(1 for r in replicas if r not in removing_replicas)


def is_under_replicated(p: PartitionHealth) -> bool:
    return len(p.isr) < replication_factor(p.replicas, p.removing_replicas)


def is_under_min_isr(p: PartitionHealth, min_isr: int) -> bool:
    return (p.leader_id == NO_LEADER and min_isr > 0) or len(p.isr) < min_isr


def is_at_min_isr(p: PartitionHealth, min_isr: int) -> bool:
    return len(p.isr) == min_isr


def is_unavailable(p: PartitionHealth, live_brokers: Collection[int]) -> bool:
    return p.leader_id == NO_LEADER or p.leader_id not in live_brokers


def matches(health_filter: HealthFilter, p: PartitionHealth, *, min_isr: int,
            live_brokers: Collection[int]) -> bool:
    """True when ``p`` passes ``health_filter``."""
    match health_filter:
        case HealthFilter.ALL:
            return True
        case HealthFilter.UNDER_REPLICATED:
            return is_under_replicated(p)
        case HealthFilter.UNDER_MIN_ISR:
            return is_under_min_isr(p, min_isr)
        case HealthFilter.AT_MIN_ISR:
            return is_at_min_isr(p, min_isr)
        case HealthFilter.UNAVAILABLE:
            return is_unavailable(p, live_brokers)
