"""Replication throttles of a reassignment (KIP-73) and the cluster reads a plan needs.

Shared by ``kraftlog reassign`` (:mod:`kraftlog.tools.reassign_commands`) and the
balance job (:mod:`kraftlog.pipeline.jobs_admin_client`): Kafka's four throttle config
names, which replicas and brokers a plan throttles (pure), and the current assignment
and broker racks read through an :class:`~kraftlog.admin.admin_client.AdminClient`.
It prints nothing and parses no command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kraftlog.admin import admin_client as ac
from kraftlog.admin import reassign_plan as rp

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

Assignment = dict[tuple[str, int], tuple[int, ...]]


def throttled_replicas(plan: rp.Plan, current: Mapping[tuple[str, int], Sequence[int]],
                       ) -> dict[str, tuple[str, str]]:
    """Per topic, the (leader, follower) throttled-replicas config values of a plan:
    current replicas are throttled as leaders, replicas being added as followers."""
    result: dict[str, tuple[list[str], list[str]]] = {}
    for move in plan.partitions:
        old = list(current.get((move.topic, move.partition), ()))
        adding = [b for b in move.replicas if b not in old]
        if not adding and list(move.replicas) == old:
            continue
        leaders, followers = result.setdefault(move.topic, ([], []))
        leaders += [f"{move.partition}:{b}" for b in old]
        followers += [f"{move.partition}:{b}" for b in adding]
    return {t: (",".join(lead), ",".join(follow)) for t, (lead, follow) in result.items()}


def throttled_brokers(plan: rp.Plan, current: Mapping[tuple[str, int], Sequence[int]],
                      ) -> list[int]:
    """Every broker that sends or receives a moving partition's data."""
    brokers: set[int] = set()
    for move in plan.partitions:
        old = tuple(current.get((move.topic, move.partition), ()))
        if old != move.replicas:
            brokers |= set(old) | set(move.replicas)
    return sorted(brokers)


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


async def current_assignment(admin: ac.AdminClient, topics: Sequence[str] = ()) -> Assignment:
    """(topic, partition) -> replicas, for ``topics`` (all when empty); unknown topics fail."""
    described = await admin.describe_topics(list(topics))
    return {(t.name, p.partition_index): tuple(p.replicas)
            for t in described.topics for p in t.partitions}


async def brokers_and_racks(admin: ac.AdminClient) -> dict[int, str]:
    cluster = await admin.describe_cluster(include_fenced_brokers=True)
    return {b.broker_id: b.rack for b in cluster.brokers}
