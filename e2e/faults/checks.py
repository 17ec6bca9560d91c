"""The suite's verdicts: pure functions from :class:`~.evidence.Evidence` to counts and violations.

Owns one function per property (each returns a :class:`CheckResult`: how many things
it looked at, and one line per violation naming the evidence), :func:`run_all`, the
per-fault unavailability (:func:`unavailability`), and the pure decoders the collector
uses to turn file and log bytes into evidence (:func:`split_batches`,
:func:`claims_from_metadata_log`, :func:`claims_from_node_log`,
:func:`claims_from_quorum_state`).

The properties, after Jepsen's Kafka checks:

- ``acknowledged``: every acknowledged record is in the final read, at the partition
  and offset its acknowledgement named (lost or moved otherwise);
- ``no_duplicates``: no value is in the log twice (a retried batch written again);
- ``no_unknown_values``: every value in the log was sent by a producer;
- ``reads_stable``: everything the reader saw during the faults is still there, at the
  same offset, and the reader never saw an offset go back;
- ``replicas_identical``: below the high watermark every replica of a partition holds
  the same batches, byte for byte, and they decode to the final read;
- ``metadata_logs_identical``: below the quorum's high watermark every controller's
  metadata log holds the same batches, byte for byte;
- ``one_raft_leader_per_epoch`` / ``one_partition_leader_per_epoch``: no epoch has two
  leaders in any source (LeaderChange records, quorum-state files, node log lines for
  raft; PartitionRecord/PartitionChangeRecord replay and the brokers' become-leader
  log lines for partitions);
- ``isr_recovered``: every ISR was whole again within the bound after healing.

Called by the CLI after a run, by :mod:`.selftest` and by the unit tests. No I/O, no
clock: the same evidence always gives the same verdicts.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from e2e.faults import evidence as ev
from kraftlog import errors
from kraftlog.metadata import record_convert
from kraftlog.metadata import records as mr
from kraftlog.raft import control_records as cr
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb

MAX_LISTED = 20
"""Violations listed per check; the count says how many there were."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    name: str
    checked: int
    """How many things the check looked at (records, batches, epochs, ...)."""
    what: str
    """What ``checked`` counts."""
    violations: tuple[str, ...]
    violation_count: int

    @property
    def ok(self) -> bool:
        return self.violation_count == 0

    def describe(self) -> str:
        verdict = "ok" if self.ok else f"FAILED ({self.violation_count} violations)"
        return f"{self.name:32} {self.checked:8d} {self.what:28} {verdict}"


def _result(name: str, checked: int, what: str, violations: Sequence[str]) -> CheckResult:
    return CheckResult(name=name, checked=checked, what=what,
                       violations=tuple(violations[:MAX_LISTED]),
                       violation_count=len(violations))


# -- the client's view --------------------------------------------------------------------------

def _final_index(history: ev.History) -> tuple[dict[tuple[int, int], str],
                                                 dict[str, list[tuple[int, int]]]]:
    """(partition, offset) -> value, and value -> every (partition, offset) holding it."""
    at: dict[tuple[int, int], str] = {}
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for partition, records in history.final_read.items():
        for offset, value in records:
            at[(partition, offset)] = value
            where[value].append((partition, offset))
    return at, where


def check_acknowledged(evidence: ev.Evidence) -> CheckResult:
    at, where = _final_index(evidence.history)
    violations: list[str] = []
    for ack in evidence.history.acks:
        found = at.get((ack.partition, ack.offset))
        if found == ack.value:
            continue
        elsewhere = where.get(ack.value)
        if elsewhere:
            violations.append(f"moved: {ack.value} acknowledged at {ack.partition}@{ack.offset} "
                              f"(t={ack.acked_s:.2f}s) is at {elsewhere}; that offset holds "
                              f"{found!r}")
        else:
            violations.append(f"lost: {ack.value} acknowledged at {ack.partition}@{ack.offset} "
                              f"(t={ack.acked_s:.2f}s) is not in the log; that offset holds "
                              f"{found!r}")
    return _result("acknowledged", len(evidence.history.acks), "acknowledged records",
                   violations)


def _writers(evidence: ev.Evidence, places: Iterable[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """(partition, offset) -> ``producer P epoch E seq S`` of the batch holding it, read from
    the lowest-numbered replica's files (to show how a duplicate was written)."""
    wanted = set(places)
    found: dict[tuple[int, int], str] = {}
    replicas = sorted(evidence.replicas, key=lambda r: r.broker)
    for partition in {p for p, _o in wanted}:
        replica = next((r for r in replicas if r.partition == partition), None)
        for batch in replica.batches if replica else ():
            offsets = [(partition, o) for o in range(batch.base_offset, batch.last_offset + 1)
                       if (partition, o) in wanted]
            if not offsets:
                continue
            header = bh.BatchHeader(batch.data)
            for place in offsets:
                found[place] = (f"producer {header.producer_id} epoch {header.producer_epoch} "
                                f"seq {header.base_sequence + place[1] - batch.base_offset}")
    return found


def check_no_duplicates(evidence: ev.Evidence) -> CheckResult:
    _at, where = _final_index(evidence.history)
    acked = {a.value: a for a in evidence.history.acks}
    duplicated = {value: sorted(places) for value, places in where.items() if len(places) > 1}
    writers = _writers(evidence, (p for places in duplicated.values() for p in places))
    violations = []
    for value, places in sorted(duplicated.items()):
        ack = acked.get(value)
        note = (f"acknowledged at {ack.partition}@{ack.offset}" if ack
                else "not acknowledged")
        copies = ", ".join(f"{p}@{o}" + (f" ({writers[(p, o)]})" if (p, o) in writers else "")
                           for p, o in places)
        violations.append(f"duplicate: {value} is in the log {len(places)} times: {copies}; "
                          f"{note}")
    return _result("no_duplicates", sum(len(p) for p in where.values()), "records in the log",
                   violations)


def check_no_unknown_values(evidence: ev.Evidence) -> CheckResult:
    history = evidence.history
    sent = {a.value for a in history.acks} | {i.value for i in history.indeterminate}
    violations = []
    total = 0
    for partition, records in sorted(history.final_read.items()):
        for offset, value in records:
            total += 1
            if value not in sent:
                violations.append(f"unknown: {partition}@{offset} holds {value!r}, which no "
                                  "producer sent (or whose send was never recorded)")
    return _result("no_unknown_values", total, "records in the log", violations)


def check_reads_stable(evidence: ev.Evidence) -> CheckResult:
    at, _where = _final_index(evidence.history)
    violations = []
    last: dict[int, int] = {}
    for seen in evidence.history.observations:
        previous = last.get(seen.partition)
        if previous is not None and seen.offset <= previous:
            violations.append(f"went back: the reader saw {seen.partition}@{seen.offset} "
                              f"after {seen.partition}@{previous} (t={seen.at_s:.2f}s)")
        last[seen.partition] = seen.offset
        found = at.get((seen.partition, seen.offset))
        if found != seen.value:
            violations.append(f"vanished: the reader saw {seen.value} at "
                              f"{seen.partition}@{seen.offset} (t={seen.at_s:.2f}s); the final "
                              f"log holds {found!r} there")
    return _result("reads_stable", len(evidence.history.observations), "records read during faults",
                   violations)


# -- the files ----------------------------------------------------------------------------------

def split_batches(data: bytes) -> tuple[tuple[ev.Batch, ...], str | None]:
    """The valid batches of one segment file's bytes, and why the scan stopped early (a torn
    tail or corruption), None if every byte was read."""
    scan = bh.scan_valid_prefix(data)
    found = tuple(ev.Batch(base_offset=h.base_offset, last_offset=h.last_offset,
                           epoch=h.partition_leader_epoch, data=bytes(h.view))
                  for h in bh.iter_batches(memoryview(data)[:scan.valid_bytes]))
    return found, scan.error


def _below(batches: Iterable[ev.Batch], end_offset: int) -> dict[int, ev.Batch]:
    return {b.base_offset: b for b in batches if b.base_offset < end_offset}


def _covers(batches: Mapping[int, ev.Batch], end_offset: int) -> bool:
    return end_offset <= 0 or any(b.last_offset >= end_offset - 1 for b in batches.values())


def _decoded_values(batches: Iterable[ev.Batch], end_offset: int
                    ) -> tuple[list[tuple[int, str]], list[str]]:
    values: list[tuple[int, str]] = []
    problems: list[str] = []
    for batch in sorted(batches, key=lambda b: b.base_offset):
        try:
            decoded = rb.decode_batches(batch.data)
        except errors.CorruptRecordError as exc:
            problems.append(f"batch at {batch.base_offset}: {exc}")
            continue
        for one in decoded:
            if one.is_control:
                continue
            for record in one.records:
                if record.offset < end_offset:
                    values.append((record.offset, (record.value or b"").decode(
                        "utf-8", "replace")))
    return values, problems


def check_replicas_identical(evidence: ev.Evidence) -> CheckResult:
    by_partition: dict[int, list[ev.ReplicaLog]] = defaultdict(list)
    for replica in evidence.replicas:
        by_partition[replica.partition].append(replica)
    violations: list[str] = []
    compared = 0
    history = evidence.history
    for partition in range(history.partitions):
        replicas = sorted(by_partition.get(partition, []), key=lambda r: r.broker)
        if len(replicas) != evidence.expected_replicas:
            violations.append(f"partition {partition}: found {len(replicas)} replicas "
                              f"({[r.broker for r in replicas]}), expected "
                              f"{evidence.expected_replicas}")
            if not replicas:
                continue
        for replica in replicas:
            violations.extend(f"partition {partition} broker {replica.broker}: {p}"
                              for p in replica.problems)
        final = history.final_read.get(partition, ())
        high_watermark = max([r.high_watermark or 0 for r in replicas]
                             + [final[-1][0] + 1 if final else 0])
        reference = replicas[0]
        reference_batches = _below(reference.batches, high_watermark)
        for replica in replicas:
            mine = _below(replica.batches, high_watermark)
            if not _covers(mine, high_watermark):
                end = max((b.last_offset + 1 for b in mine.values()), default=0)
                violations.append(f"partition {partition} broker {replica.broker}: the log ends "
                                  f"at {end}, below the high watermark {high_watermark}")
            if replica is reference:
                continue
            for base in sorted(set(mine) | set(reference_batches)):
                compared += 1
                a, b = reference_batches.get(base), mine.get(base)
                if a is None or b is None:
                    violations.append(
                        f"partition {partition}: batch at offset {base} is on broker "
                        f"{reference.broker if b is None else replica.broker} only "
                        f"(below the high watermark {high_watermark})")
                elif a.data != b.data:
                    first = next(i for i, (x, y) in enumerate(zip(a.data, b.data, strict=False))
                                 if x != y) if len(a.data) == len(b.data) else -1
                    violations.append(
                        f"partition {partition}: batch at offset {base} differs between brokers "
                        f"{reference.broker} and {replica.broker} (epochs {a.epoch}/{b.epoch}, "
                        f"{len(a.data)}/{len(b.data)} bytes"
                        + (f", first difference at byte {first}" if first >= 0 else "") + ")")
        values, problems = _decoded_values(reference_batches.values(), high_watermark)
        violations.extend(f"partition {partition} broker {reference.broker}: {p}"
                          for p in problems)
        if values != list(final):
            mismatch = next((i for i, (x, y) in enumerate(zip(values, final, strict=False))
                             if x != y), min(len(values), len(final)))
            violations.append(
                f"partition {partition}: broker {reference.broker}'s files below the high "
                f"watermark {high_watermark} hold {len(values)} records, the final read "
                f"{len(final)}; first difference at record {mismatch}: "
                f"{values[mismatch] if mismatch < len(values) else None} vs "
                f"{final[mismatch] if mismatch < len(final) else None}")
    return _result("replicas_identical", compared, "batches compared between replicas",
                   violations)


def check_metadata_logs_identical(evidence: ev.Evidence) -> CheckResult:
    high_watermark = evidence.history.quorum_high_watermark
    logs = sorted(evidence.metadata_logs, key=lambda m: m.node)
    violations: list[str] = []
    if high_watermark is None:
        violations.append("the driver never saw the quorum's high watermark with every voter "
                          "caught up")
        return _result("metadata_logs_identical", 0, "batches compared between controllers",
                       violations)
    if len(logs) < 2:
        violations.append(f"found {len(logs)} controller metadata logs, need at least 2")
        return _result("metadata_logs_identical", 0, "batches compared between controllers",
                       violations)
    for log in logs:
        violations.extend(f"controller {log.node}: {p}" for p in log.problems)
    compared = 0
    reference = logs[0]
    reference_batches = _below(reference.batches, high_watermark)
    for log in logs:
        mine = _below(log.batches, high_watermark)
        if not _covers(mine, high_watermark):
            end = max((b.last_offset + 1 for b in mine.values()), default=0)
            violations.append(f"controller {log.node}: the metadata log ends at {end}, below "
                              f"the quorum high watermark {high_watermark}")
        if log is reference:
            continue
        for base in sorted(set(mine) | set(reference_batches)):
            compared += 1
            a, b = reference_batches.get(base), mine.get(base)
            if a is None or b is None:
                violations.append(f"metadata log: batch at offset {base} is on controller "
                                  f"{reference.node if b is None else log.node} only (below "
                                  f"the high watermark {high_watermark})")
            elif a.data != b.data:
                violations.append(f"metadata log: batch at offset {base} differs between "
                                  f"controllers {reference.node} and {log.node} (epochs "
                                  f"{a.epoch}/{b.epoch})")
    return _result("metadata_logs_identical", compared, "batches compared between controllers",
                   violations)


# -- leaders per epoch ----------------------------------------------------------------------------

def _one_leader_per_epoch(name: str, claims: Iterable[ev.LeaderClaim]) -> CheckResult:
    by_epoch: dict[tuple[str, int], dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for claim in claims:
        by_epoch[(claim.scope, claim.epoch)][claim.leader].append(claim.source)
    violations = []
    for (scope, epoch), leaders in sorted(by_epoch.items()):
        if len(leaders) > 1:
            named = "; ".join(f"{leader} (by {', '.join(sources[:3])})"
                              for leader, sources in sorted(leaders.items()))
            violations.append(f"{scope} epoch {epoch} has {len(leaders)} leaders: {named}")
    return _result(name, len(by_epoch), "epochs with a known leader", violations)


def check_one_raft_leader_per_epoch(evidence: ev.Evidence) -> CheckResult:
    return _one_leader_per_epoch("one_raft_leader_per_epoch",
                                 (c for c in evidence.claims if c.scope == ev.RAFT_SCOPE))


def check_one_partition_leader_per_epoch(evidence: ev.Evidence) -> CheckResult:
    return _one_leader_per_epoch("one_partition_leader_per_epoch",
                                 (c for c in evidence.claims if c.scope != ev.RAFT_SCOPE))


def check_isr_recovered(evidence: ev.Evidence) -> CheckResult:
    after = evidence.history.isr_full_after_s
    violations = []
    if after is None:
        violations.append(f"the ISRs were not whole again after healing (waited past the "
                          f"{evidence.isr_bound_s:g}s bound)")
    elif after > evidence.isr_bound_s:
        violations.append(f"the ISRs were whole {after:.1f}s after healing, over the "
                          f"{evidence.isr_bound_s:g}s bound")
    return _result("isr_recovered", evidence.history.partitions, "partitions", violations)


CHECKS: tuple[Callable[[ev.Evidence], CheckResult], ...] = (
    check_acknowledged, check_no_duplicates, check_no_unknown_values, check_reads_stable,
    check_replicas_identical, check_metadata_logs_identical, check_one_raft_leader_per_epoch,
    check_one_partition_leader_per_epoch, check_isr_recovered)


def run_all(evidence: ev.Evidence) -> tuple[CheckResult, ...]:
    return tuple(check(evidence) for check in CHECKS)


# -- unavailability --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Unavailability:
    fault: ev.FaultWindow
    longest_gap_s: float
    """The longest stretch without any acknowledgement, from the fault's start until the
    next fault starts (or the run ends), counting the window's edges."""


def unavailability(history: ev.History) -> tuple[Unavailability, ...]:
    """Per fault: the longest gap between acknowledgements around it."""
    times = sorted(a.acked_s for a in history.acks)
    faults = sorted(history.faults, key=lambda f: f.start_s)
    out = []
    for index, fault in enumerate(faults):
        end = faults[index + 1].start_s if index + 1 < len(faults) else history.healed_s
        end = max(end, fault.heal_s)
        inside = [t for t in times if fault.start_s <= t <= end]
        edges = [fault.start_s, *inside, end]
        longest = max(b - a for a, b in itertools.pairwise(edges))
        out.append(Unavailability(fault=fault, longest_gap_s=round(longest, 3)))
    return tuple(out)


def unavailability_by_kind(items: Iterable[Unavailability]) -> dict[str, tuple[int, float, float]]:
    """Fault kind -> (count, mean, max) seconds of the longest acknowledgement gap."""
    grouped: dict[str, list[float]] = defaultdict(list)
    for item in items:
        grouped[item.fault.kind].append(item.longest_gap_s)
    return {kind: (len(gaps), sum(gaps) / len(gaps), max(gaps))
            for kind, gaps in sorted(grouped.items())}


# -- decoders for the collector ---------------------------------------------------------------------

def claims_from_metadata_log(log: ev.MetadataLog, topic_names: Mapping[str, str] | None = None
                             ) -> tuple[ev.LeaderClaim, ...]:
    """Leader claims in one controller's metadata log: each LeaderChange control record
    (raft epoch -> leader) and each partition's leader epoch -> leader, replayed from
    PartitionRecord / PartitionChangeRecord (a change that sets ``leader`` bumps the
    leader epoch, Kafka's ``PartitionRegistration.merge``)."""
    names: dict[str, str] = dict(topic_names or {})
    state: dict[tuple[str, int], tuple[int, int]] = {}  # (topic id, partition) -> (leader, epoch)
    claims: list[ev.LeaderClaim] = []
    where = f"controller-{log.node} metadata log"
    for batch in sorted(log.batches, key=lambda b: b.base_offset):
        try:
            decoded = rb.decode_batches(batch.data)
        except errors.CorruptRecordError:
            continue  # the identity check reports bad bytes
        for one in decoded:
            for record in one.records:
                if one.is_control:
                    if cr.decode_key(record.key) is cr.ControlRecordType.LEADER_CHANGE:
                        change = cr.decode_leader_change(record.value)
                        claims.append(ev.LeaderClaim(
                            scope=ev.RAFT_SCOPE, epoch=one.partition_leader_epoch,
                            leader=change.leader_id, source=f"{where} offset {record.offset}"))
                    continue
                if record.value is None:
                    continue
                try:
                    item = record_convert.decode(record.value, offset=record.offset)
                except errors.CorruptRecordError:
                    continue
                if isinstance(item, mr.TopicRecord):
                    names[str(item.topic_id)] = item.name
                elif isinstance(item, mr.PartitionRecord):
                    key = (str(item.topic_id), item.partition_id)
                    state[key] = (item.leader, item.leader_epoch)
                    claims.append(_partition_claim(names, key, item.leader, item.leader_epoch,
                                                   f"{where} offset {record.offset}"))
                elif isinstance(item, mr.PartitionChangeRecord) and item.leader is not None:
                    key = (str(item.topic_id), item.partition_id)
                    if key not in state:
                        continue
                    epoch = state[key][1] + 1
                    state[key] = (item.leader, epoch)
                    claims.append(_partition_claim(names, key, item.leader, epoch,
                                                   f"{where} offset {record.offset}"))
    return tuple(c for c in claims if c.leader >= 0)


def _partition_claim(names: Mapping[str, str], key: tuple[str, int], leader: int, epoch: int,
                     source: str) -> ev.LeaderClaim:
    topic = names.get(key[0], key[0])
    return ev.LeaderClaim(scope=f"{topic}-{key[1]}", epoch=epoch, leader=leader, source=source)


_RAFT_LEADER_LINE = re.compile(r"node=(\d+) epoch=(\d+) from=\S+ to=Leader\b")
_PARTITION_LEADER_LINE = re.compile(
    r"broker=(\d+) partition=(\S+) epoch=(-?\d+) event=become_leader\b")


def claims_from_node_log(name: str, text: str) -> tuple[ev.LeaderClaim, ...]:
    """Leader claims in a node's own log: a controller's ``node=N epoch=E ... to=Leader``
    role change, a broker's ``broker=B partition=T-P epoch=E event=become_leader``."""
    claims = []
    for number, line in enumerate(text.splitlines(), start=1):
        raft = _RAFT_LEADER_LINE.search(line)
        if raft:
            claims.append(ev.LeaderClaim(scope=ev.RAFT_SCOPE, epoch=int(raft.group(2)),
                                         leader=int(raft.group(1)),
                                         source=f"{name} log line {number}"))
            continue
        partition = _PARTITION_LEADER_LINE.search(line)
        if partition:
            claims.append(ev.LeaderClaim(scope=partition.group(2), epoch=int(partition.group(3)),
                                         leader=int(partition.group(1)),
                                         source=f"{name} log line {number}"))
    return tuple(claims)


def claims_from_quorum_state(name: str, text: str) -> tuple[ev.LeaderClaim, ...]:
    """The leader a ``quorum-state`` file names for its epoch (none if it names none)."""
    try:
        state = json.loads(text)
        leader, epoch = int(state["leaderId"]), int(state["leaderEpoch"])
    except (ValueError, KeyError, TypeError):
        return ()
    if leader < 0:
        return ()
    return (ev.LeaderClaim(scope=ev.RAFT_SCOPE, epoch=epoch, leader=leader,
                           source=f"quorum-state of {name}"),)
