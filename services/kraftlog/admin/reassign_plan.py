"""Kafka's partition reassignment plan JSON, and proposing a plan (``reassign generate``).

The plan format is kafka-reassign-partitions' own::

    {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3],
                                "log_dirs":["any","any","any"]}]}

``log_dirs`` is optional; only ``"any"`` is accepted (kraftlog does not move replicas
between the log dirs of one broker). The topics-to-move file of ``generate`` is
``{"version":1,"topics":[{"topic":"t"}]}``.

:func:`propose` spreads each topic's replicas over the chosen brokers, moving as
little as it can: a current replica stays where it is while its broker is on the list
and under its fair share (ceil of replicas / brokers); the rest go to the least-loaded
brokers, on racks the partition does not use yet when possible; and the preferred
leader (first replica) of each partition is picked so leadership spreads too. Pure:
no I/O, deterministic for the same input.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kraftlog import errors

PLAN_VERSION = 1
ANY_LOG_DIR = "any"


class PlanError(errors.KraftlogError):
    """A plan or topics file that cannot be used; the message names the bad part."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMove:
    """The replicas one partition should have (first = preferred leader)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    partitions: tuple[PartitionMove, ...]

    def to_json(self) -> str:
        """Kafka's compact plan JSON (what ``execute`` reads and ``generate`` prints)."""
        return json.dumps({"version": PLAN_VERSION, "partitions": [
            {"topic": p.topic, "partition": p.partition, "replicas": list(p.replicas),
             "log_dirs": [ANY_LOG_DIR] * len(p.replicas)} for p in self.partitions]},
            separators=(",", ":"))

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({p.topic for p in self.partitions}))


def _load(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{what}: not valid JSON: {exc.msg} at line {exc.lineno} "
                        f"column {exc.colno}") from None


def _require(condition: bool, what: str, message: str) -> None:
    if not condition:
        raise PlanError(f"{what}: {message}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_plan(text: str, *, source: str = "plan") -> Plan:
    """Parse and check a plan; errors name the JSON path (``partitions[2].replicas``)."""
    data = _load(text, source)
    _require(isinstance(data, dict), source, "expected a JSON object with \"version\" and "
                                             "\"partitions\"")
    _require(data.get("version") == PLAN_VERSION, source,
             f"\"version\" must be {PLAN_VERSION}, not {data.get('version')!r}")
    entries = data.get("partitions")
    _require(isinstance(entries, list), source, "\"partitions\" must be a list")
    _require(bool(entries), source, "\"partitions\" is empty: nothing to reassign")
    moves: list[PartitionMove] = []
    seen: set[tuple[str, int]] = set()
    for index, entry in enumerate(entries):
        where = f"{source}: partitions[{index}]"
        _require(isinstance(entry, dict), where, "expected an object")
        unknown = set(entry) - {"topic", "partition", "replicas", "log_dirs"}
        _require(not unknown, where, f"unknown field(s) {sorted(unknown)}")
        topic = entry.get("topic")
        _require(isinstance(topic, str) and bool(topic), f"{where}.topic",
                 "must be a non-empty string")
        partition = entry.get("partition")
        _require(_is_int(partition) and partition >= 0, f"{where}.partition",
                 f"must be an integer >= 0, not {partition!r}")
        replicas = entry.get("replicas")
        _require(isinstance(replicas, list) and bool(replicas), f"{where}.replicas",
                 "must be a non-empty list of broker ids")
        for broker in replicas:
            _require(_is_int(broker) and broker >= 0, f"{where}.replicas",
                     f"{broker!r} is not a broker id")
        duplicates = sorted({b for b in replicas if replicas.count(b) > 1})
        _require(not duplicates, f"{where}.replicas", f"duplicate broker(s) {duplicates}")
        if "log_dirs" in entry:
            dirs = entry["log_dirs"]
            _require(isinstance(dirs, list) and len(dirs) == len(replicas),
                     f"{where}.log_dirs", "must list one entry per replica")
            _require(all(d == ANY_LOG_DIR for d in dirs), f"{where}.log_dirs",
                     "only \"any\" is supported (moves between the log dirs of one broker "
                     "are not)")
        key = (topic, partition)
        _require(key not in seen, where, f"{topic}-{partition} appears twice")
        seen.add(key)
        moves.append(PartitionMove(topic=topic, partition=partition, replicas=tuple(replicas)))
    return Plan(partitions=tuple(moves))


def parse_topics_to_move(text: str, *, source: str = "topics file") -> tuple[str, ...]:
    """The topic names of a ``{"version":1,"topics":[{"topic":"t"}]}`` file."""
    data = _load(text, source)
    _require(isinstance(data, dict) and isinstance(data.get("topics"), list), source,
             "expected {\"version\":1,\"topics\":[{\"topic\":\"name\"},...]}")
    names: list[str] = []
    for index, entry in enumerate(data["topics"]):
        _require(isinstance(entry, dict) and isinstance(entry.get("topic"), str)
                 and bool(entry["topic"]), f"{source}: topics[{index}]",
                 "expected {\"topic\": \"name\"}")
        names.append(entry["topic"])
    _require(bool(names), source, "no topics listed")
    return tuple(dict.fromkeys(names))


def check_against_cluster(plan: Plan, *, brokers: Iterable[int],
                          partitions: Mapping[tuple[str, int], Sequence[int]]) -> None:
    """Refuse a plan naming unknown brokers or partitions, or changing replication
    factor beyond the broker count (before anything is sent to the controller)."""
    known = set(brokers)
    for move in plan.partitions:
        name = f"{move.topic}-{move.partition}"
        if (move.topic, move.partition) not in partitions:
            if not any(topic == move.topic for topic, _ in partitions):
                raise PlanError(f"{name}: unknown topic {move.topic!r}")
            raise PlanError(f"{name}: the topic has no partition {move.partition}")
        missing = sorted(set(move.replicas) - known)
        if missing:
            raise PlanError(f"{name}: broker(s) {missing} do not exist (brokers: "
                            f"{sorted(known)})")


def propose(current: Mapping[tuple[str, int], Sequence[int]], *, brokers: Sequence[int],
            racks: Mapping[int, str] | None = None) -> Plan:
    """A plan putting every partition of ``current`` on ``brokers`` (see module doc)."""
    targets = sorted(dict.fromkeys(brokers))
    if not targets:
        raise PlanError("no brokers to move to")
    rack_of = {b: (racks or {}).get(b, "") for b in targets}
    by_topic: dict[str, list[tuple[int, Sequence[int]]]] = {}
    for (topic, partition), replicas in sorted(current.items()):
        by_topic.setdefault(topic, []).append((partition, replicas))
    moves: list[PartitionMove] = []
    for topic, parts in sorted(by_topic.items()):
        factor = max(len(r) for _, r in parts)
        if factor > len(targets):
            raise PlanError(f"topic {topic!r} has replication factor {factor} but only "
                            f"{len(targets)} broker(s) were given: {targets}")
        moves += _spread_topic(topic, parts, targets, rack_of)
    return Plan(partitions=tuple(moves))


def _spread_topic(topic: str, parts: list[tuple[int, Sequence[int]]], targets: list[int],
                  rack_of: Mapping[int, str]) -> list[PartitionMove]:
    total = sum(len(r) for _, r in parts)
    # Fair shares: every broker takes floor(total / n) replicas of the topic and
    # total % n of them one more; loads never differ by more than one.
    floor, extra = divmod(total, len(targets))
    load = dict.fromkeys(targets, 0)
    kept: dict[int, list[int]] = {p: [] for p, _ in parts}
    # Keep what may stay, in partition order: first up to the floor everywhere, then
    # the brokers allowed one more.
    for share in (floor, floor + 1):
        for partition, replicas in parts:
            for broker in replicas:
                if broker not in load or broker in kept[partition] or load[broker] >= share:
                    continue
                if share > floor:
                    if extra == 0:
                        break
                    extra -= 1
                kept[partition].append(broker)
                load[broker] += 1
    chosen_of: dict[int, list[int]] = {}
    for partition, replicas in parts:
        chosen = kept[partition]
        while len(chosen) < len(replicas):
            used_racks = {rack_of[b] for b in chosen}
            candidates = [b for b in targets if b not in chosen]
            fresh = [b for b in candidates if rack_of[b] not in used_racks] or candidates
            best = min(fresh, key=lambda b: (load[b], b))
            chosen.append(best)
            load[best] += 1
        chosen_of[partition] = chosen
    _even_out(chosen_of, load, rack_of)
    # Preferred leaders: the current leader if it stays and does not lead more than its
    # share, else the chosen replica that leads the fewest partitions so far.
    leaders = dict.fromkeys(targets, 0)
    leader_cap = -(-len(parts) // len(targets))
    moves = []
    for partition, replicas in parts:
        chosen = chosen_of[partition]
        first = replicas[0] if replicas and replicas[0] in chosen else None
        if first is None or leaders[first] >= leader_cap:
            first = min(chosen, key=lambda b: (leaders[b], chosen.index(b)))
        leaders[first] += 1
        ordered = (first, *[b for b in _keep_order(chosen, replicas) if b != first])
        moves.append(PartitionMove(topic=topic, partition=partition, replicas=ordered))
    return moves


def _even_out(chosen_of: dict[int, list[int]], load: dict[int, int],
              rack_of: Mapping[int, str]) -> None:
    """Move single replicas from the most to the least loaded broker until loads differ
    by at most one. One always can: the busier broker holds a replica of some partition
    the idler one does not. Prefers moves that keep the partition's racks distinct."""
    while True:
        busiest = max(load, key=lambda b: (load[b], -b))
        idlest = min(load, key=lambda b: (load[b], b))
        if load[busiest] - load[idlest] <= 1:
            return
        options = [p for p, chosen in sorted(chosen_of.items())
                   if busiest in chosen and idlest not in chosen]
        rack_safe = [p for p in options
                     if rack_of[idlest] not in {rack_of[b] for b in chosen_of[p] if b != busiest}]
        partition = (rack_safe or options)[0]
        chosen = chosen_of[partition]
        chosen[chosen.index(busiest)] = idlest
        load[busiest] -= 1
        load[idlest] += 1


def _keep_order(chosen: list[int], current: Sequence[int]) -> list[int]:
    """``chosen`` with the brokers that already held a replica in their old order first."""
    old = [b for b in current if b in chosen]
    return old + [b for b in chosen if b not in old]


def propose_decommission(current: Mapping[tuple[str, int], Sequence[int]], *, broker: int,
                         brokers: Sequence[int],
                         racks: Mapping[int, str] | None = None) -> Plan:
    """A plan taking every replica off ``broker`` (``kraftlog cluster decommission``).

    Only partitions with a replica on ``broker`` move, and only that replica: it is
    replaced in place (a preferred leader's place goes to its replacement) by one of
    ``brokers`` that holds no replica of the partition, preferring a rack the partition's
    other replicas do not use, then the broker with the fewest replicas (counting the
    moves already planned), then the lowest id. PlanError when a partition has more
    replicas than the other brokers can hold.
    """
    targets = sorted(set(brokers) - {broker})
    rack_of = {b: (racks or {}).get(b, "") for b in targets}
    load = dict.fromkeys(targets, 0)
    for replicas in current.values():
        for b in replicas:
            if b in load:
                load[b] += 1
    moves: list[PartitionMove] = []
    for (topic, partition), replicas in sorted(current.items()):
        if broker not in replicas:
            continue
        others = [b for b in replicas if b != broker]
        candidates = [b for b in targets if b not in others]
        if not candidates:
            raise PlanError(f"{topic}-{partition} has {len(replicas)} replicas and the other "
                            f"brokers {targets} cannot hold them all without broker {broker}")
        used_racks = {rack_of.get(b, "") for b in others}
        fresh = [b for b in candidates if rack_of[b] not in used_racks] or candidates
        best = min(fresh, key=lambda b: (load[b], b))
        load[best] += 1
        moves.append(PartitionMove(topic=topic, partition=partition, replicas=tuple(
            best if b == broker else b for b in replicas)))
    return Plan(partitions=tuple(moves))


def current_plan(current: Mapping[tuple[str, int], Sequence[int]]) -> Plan:
    """The plan that describes today's assignment (printed as the rollback plan)."""
    return Plan(partitions=tuple(PartitionMove(topic=t, partition=p, replicas=tuple(r))
                                 for (t, p), r in sorted(current.items())))
