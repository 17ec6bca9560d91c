"""The ``balance`` job's conversation with the AdminService: sample the cluster, run a plan.

Owns :func:`sample_cluster` (brokers with racks, partitions with replicas and
leaders, and two DescribeLogDirs samples ``window_s`` apart, from which the job
derives produce rates) and :func:`execute_plan` (throttles as ``kraftlog reassign
execute --throttle`` sets them, AlterPartitionReassignments, a bounded wait for
completion, throttles removed, a preferred leader election for the partitions whose
first replica changed). Everything returned is plain values; the Spark job turns
them into DataFrames. Runs on the Spark driver. Edge module: asyncio and the
admin client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kraftlog.admin import admin_client as ac
from kraftlog.admin import reassign_plan as rp
from kraftlog.admin import reassign_throttles as rt
from kraftlog.error_codes import ErrorCode
from kraftlog.pipeline.jobs_spark import JobError

POLL_INTERVAL_S = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRow:
    broker_id: int
    rack: str
    fenced: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRow:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaRow:
    """One replica in one DescribeLogDirs sample."""

    sample: int
    """0 or 1: the first or second sample."""
    broker_id: int
    topic: str
    partition: int
    size_bytes: int
    log_end_offset: int
    is_leader: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSample:
    brokers: tuple[BrokerRow, ...]
    partitions: tuple[PartitionRow, ...]
    replicas: tuple[ReplicaRow, ...]
    window_s: float
    """Measured time between the two log-dir samples."""
    warnings: tuple[str, ...]


async def _log_dirs(admin: ac.AdminClient, sample: int, topics: Sequence[str],
                    warnings: list[str]) -> list[ReplicaRow]:
    # Every replica of every broker, filtered here (an empty partition list in the request
    # would mean none of the topic's partitions).
    answer = await admin.describe_log_dirs(check=False)
    wanted = set(topics)
    rows: list[ReplicaRow] = []
    for broker in answer.brokers:
        if broker.error.code != 0:
            warnings.append(f"broker {broker.broker_id}: DescribeLogDirs failed: "
                            f"{ErrorCode(broker.error.code).name} {broker.error.message}")
            continue
        for result in broker.results:
            for topic in result.topics:
                if topic.name not in wanted:
                    continue
                for part in topic.partitions:
                    if part.is_future_key:
                        continue
                    rows.append(ReplicaRow(
                        sample=sample, broker_id=broker.broker_id, topic=topic.name,
                        partition=part.partition_index, size_bytes=part.partition_size,
                        log_end_offset=part.log_end_offset, is_leader=part.is_leader))
    return rows


async def _sample(admin: ac.AdminClient, topics: Sequence[str], window_s: float
                  ) -> ClusterSample:
    warnings: list[str] = []
    cluster = await admin.describe_cluster(include_fenced_brokers=True)
    brokers = tuple(BrokerRow(broker_id=b.broker_id, rack=b.rack,
                              fenced=b.is_fenced or b.in_controlled_shutdown)
                    for b in cluster.brokers)
    described = await admin.describe_topics(list(topics), exclude_internal=not topics)
    partitions = tuple(
        PartitionRow(topic=t.name, partition=p.partition_index, replicas=tuple(p.replicas),
                     leader=p.leader_id, isr=tuple(p.isr))
        for t in described.topics if not t.is_internal or topics for p in t.partitions)
    moving = [f"{t.name}-{p.partition_index}" for t in described.topics for p in t.partitions
              if p.adding_replicas or p.removing_replicas]
    if moving:
        raise JobError(f"reassignments are in progress ({', '.join(moving[:5])}); let them "
                       "finish ('kraftlog reassign list') before balancing")
    names = sorted({p.topic for p in partitions})
    started = time.monotonic()
    first = await _log_dirs(admin, 0, names, warnings)
    await asyncio.sleep(window_s)
    elapsed = time.monotonic() - started
    second = await _log_dirs(admin, 1, names, warnings)
    return ClusterSample(brokers=brokers, partitions=partitions, replicas=(*first, *second),
                         window_s=elapsed, warnings=tuple(dict.fromkeys(warnings)))


def sample_cluster(admin_address: str, *, topics: Sequence[str] = (), window_s: float,
                   timeout_ms: int = ac.DEFAULT_TIMEOUT_MS) -> ClusterSample:
    """Brokers, partitions and two log-dir samples ``window_s`` apart (see the module doc)."""
    async def main() -> ClusterSample:
        async with ac.AdminClient(admin_address, timeout_ms=timeout_ms) as admin:
            return await _sample(admin, topics, window_s)
    return asyncio.run(main())


def check_reachable(admin_address: str, *, timeout_ms: int) -> None:
    """Fail fast, before a Spark session starts (tens of seconds), when the admin service
    or the cluster behind it does not answer: AdminError with one line."""
    async def main() -> None:
        async with ac.AdminClient(admin_address, timeout_ms=timeout_ms) as admin:
            await admin.describe_cluster()
    asyncio.run(main())


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecuteOutcome:
    started: int
    """Partitions whose reassignment was submitted."""
    completed: bool
    elapsed_s: float
    throttled: tuple[str, ...]
    """The brokers and topics that got throttles (removed again at the end)."""
    elected: int
    """Partitions whose preferred leader an election installed."""


async def _set_throttles(admin: ac.AdminClient, plan: rp.Plan,
                         current: Mapping[tuple[str, int], Sequence[int]], rate: int
                         ) -> list[str]:
    """Kafka's KIP-73 throttles, exactly as ``kraftlog reassign execute --throttle`` sets them."""
    changes: dict[ac.ConfigResource, list[ac.ConfigChange]] = {}
    for broker in rt.throttled_brokers(plan, current):
        changes[ac.ConfigResource(type=ac.ResourceType.BROKER, name=str(broker))] = [
            ac.ConfigChange(name=rt.LEADER_RATE, value=str(rate)),
            ac.ConfigChange(name=rt.FOLLOWER_RATE, value=str(rate))]
    for topic, (leaders, followers) in rt.throttled_replicas(plan, current).items():
        changes[ac.ConfigResource(type=ac.ResourceType.TOPIC, name=topic)] = [
            ac.ConfigChange(name=rt.LEADER_REPLICAS, value=leaders),
            ac.ConfigChange(name=rt.FOLLOWER_REPLICAS, value=followers)]
    if changes:
        await admin.incremental_alter_configs(changes)
    return [f"{r.type.name.lower()} {r.name}" for r in changes]


async def _clear_throttles(admin: ac.AdminClient, brokers: Sequence[int],
                           topics: Sequence[str]) -> None:
    changes: dict[ac.ConfigResource, list[ac.ConfigChange]] = {}
    for broker in brokers:
        changes[ac.ConfigResource(type=ac.ResourceType.BROKER, name=str(broker))] = [
            ac.ConfigChange(name=rt.LEADER_RATE, op=ac.ConfigOp.DELETE),
            ac.ConfigChange(name=rt.FOLLOWER_RATE, op=ac.ConfigOp.DELETE)]
    for topic in topics:
        changes[ac.ConfigResource(type=ac.ResourceType.TOPIC, name=topic)] = [
            ac.ConfigChange(name=rt.LEADER_REPLICAS, op=ac.ConfigOp.DELETE),
            ac.ConfigChange(name=rt.FOLLOWER_REPLICAS, op=ac.ConfigOp.DELETE)]
    if changes:
        await admin.incremental_alter_configs(changes)


async def _done(admin: ac.AdminClient, plan: rp.Plan) -> bool:
    partitions = {t: [m.partition for m in plan.partitions if m.topic == t]
                  for t in plan.topics}
    progress = await admin.list_partition_reassignments(partitions)
    if any(t.partitions for t in progress.topics):
        return False
    # Broker metadata trails the controller by a moment: wait until it shows the plan too.
    now = await rt.current_assignment(admin, plan.topics)
    return all(now.get((m.topic, m.partition)) == m.replicas for m in plan.partitions)


async def _execute(admin: ac.AdminClient, plan: rp.Plan, throttle: int | None,
                   timeout_s: float) -> ExecuteOutcome:
    started_at = time.monotonic()
    current = await rt.current_assignment(admin, plan.topics)
    brokers = await rt.brokers_and_racks(admin)
    rp.check_against_cluster(plan, brokers=brokers, partitions=current)
    throttled: list[str] = []
    completed = False
    try:
        if throttle is not None:
            throttled = await _set_throttles(admin, plan, current, throttle)
        answer = await admin.alter_partition_reassignments(
            {(m.topic, m.partition): m.replicas for m in plan.partitions}, check=False)
        failures = ac.item_errors(answer)
        if failures:
            raise JobError(f"AlterPartitionReassignments refused: "
                           f"{ac.describe_failures(failures)}")
        deadline = started_at + timeout_s
        while time.monotonic() < deadline:
            if await _done(admin, plan):
                completed = True
                break
            await asyncio.sleep(POLL_INTERVAL_S)
    finally:
        if throttled:
            await _clear_throttles(admin, rt.throttled_brokers(plan, current), plan.topics)
    elected = 0
    if completed:
        lead_changes: dict[str, list[int]] = {m.topic: [] for m in plan.partitions}
        for m in plan.partitions:
            if current[(m.topic, m.partition)][:1] != m.replicas[:1]:
                lead_changes[m.topic].append(m.partition)
        wanted = {t: p for t, p in lead_changes.items() if p}
        if wanted:
            elections = await admin.elect_leaders(ac.ElectionType.PREFERRED, wanted,
                                                  check=False)
            for result in elections.replica_election_results:
                elected += sum(1 for p in result.partition_result if p.error.code == 0)
    return ExecuteOutcome(started=len(plan.partitions), completed=completed,
                          elapsed_s=time.monotonic() - started_at, throttled=tuple(throttled),
                          elected=elected)


def execute_plan(admin_address: str, plan: rp.Plan, *, throttle: int | None,
                 timeout_s: float, timeout_ms: int = ac.DEFAULT_TIMEOUT_MS) -> ExecuteOutcome:
    """Submit ``plan`` and wait (at most ``timeout_s``) until every move is complete."""
    async def main() -> ExecuteOutcome:
        async with ac.AdminClient(admin_address, timeout_ms=timeout_ms) as admin:
            return await _execute(admin, plan, throttle, timeout_s)
    return asyncio.run(main())


async def _measure(admin: ac.AdminClient, assignment: Mapping[tuple[str, int], Sequence[int]],
                   timeout_s: float) -> list[ReplicaRow]:
    expected = {(b, t, p) for (t, p), brokers in assignment.items() for b in brokers}
    topics = sorted({t for t, _ in assignment})
    deadline = time.monotonic() + timeout_s
    while True:
        rows = [r for r in await _log_dirs(admin, 1, topics, []) if (r.topic, r.partition)
                in assignment]
        if {(r.broker_id, r.topic, r.partition) for r in rows} == expected \
                or time.monotonic() > deadline:
            return [r for r in rows if (r.broker_id, r.topic, r.partition) in expected]
        await asyncio.sleep(POLL_INTERVAL_S)


def measure_log_dirs(admin_address: str, assignment: Mapping[tuple[str, int], Sequence[int]],
                     *, timeout_s: float, timeout_ms: int = ac.DEFAULT_TIMEOUT_MS
                     ) -> list[ReplicaRow]:
    """The replicas of ``assignment`` as DescribeLogDirs reports them, once every broker
    shows exactly its assigned replicas (moved-away ones deleted, new ones created) or
    ``timeout_s`` passed (then only the assigned replicas found are returned)."""
    async def main() -> list[ReplicaRow]:
        async with ac.AdminClient(admin_address, timeout_ms=timeout_ms) as admin:
            return await _measure(admin, assignment, timeout_s)
    return asyncio.run(main())
