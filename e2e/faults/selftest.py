"""``--self-test``: the checks must catch damage done to evidence on purpose. Pure.

Owns :func:`clean_evidence` (a small run's evidence built from real bytes: Kafka v2
record batches for three replicas of two partitions, three controllers' metadata logs
with LeaderChange control records, PartitionRecord and PartitionChangeRecord, node log
lines and quorum-state text parsed by the same decoders a real run uses), the
:data:`DAMAGES` (each a named function that breaks one property, and the check that must
catch it) and :func:`run`, which checks the clean evidence (every check must pass) and
each damaged copy (its check must fail).

A damaged copy may trip other checks too (a lost record also makes the files disagree
with the final read); the self-test only demands that the named one does.

Called by the CLI (``python -m e2e.faults --self-test``) and the unit tests.
``damage_*`` functions also work on a real run's evidence (``self-test --dir``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from e2e.faults import checks
from e2e.faults import evidence as ev
from kraftlog.ids import Uuid
from kraftlog.metadata import record_convert
from kraftlog.metadata import records as mr
from kraftlog.raft import control_records as cr
from kraftlog.storage import record_batch as rb

TOPIC = "faults"
TOPIC_ID = Uuid.from_bits(0x1234, 0x5678)
BROKERS = (4, 5, 6)
CONTROLLERS = (1, 2, 3)
RECORDS_PER_BATCH = 4
BATCHES_PER_PARTITION = 3
PARTITIONS = 2


def _replica_batches(partition: int) -> tuple[list[ev.Batch], list[tuple[int, str]]]:
    batches: list[ev.Batch] = []
    records: list[tuple[int, str]] = []
    offset = 0
    for index in range(BATCHES_PER_PARTITION):
        values = [f"p1-{partition}{index}{n:02d}" for n in range(RECORDS_PER_BATCH)]
        epoch = index // 2  # a leader change after the second batch
        data = rb.build_batch([rb.RecordInput(key=v.encode(), value=v.encode()) for v in values],
                              base_offset=offset, partition_leader_epoch=epoch,
                              now_ms=1_700_000_000_000, producer_id=7, producer_epoch=0,
                              base_sequence=offset)
        batches.append(ev.Batch(base_offset=offset, last_offset=offset + len(values) - 1,
                                epoch=epoch, data=data))
        records.extend((offset + n, v) for n, v in enumerate(values))
        offset += len(values)
    return batches, records


def _metadata_batches() -> list[ev.Batch]:
    def control(offset: int, epoch: int, leader: int) -> ev.Batch:
        change = cr.LeaderChangeMessage(leader_id=leader, voters=CONTROLLERS,
                                        granting_voters=(leader, CONTROLLERS[0]))
        data = rb.build_batch([rb.RecordInput(
            key=cr.encode_key(cr.ControlRecordType.LEADER_CHANGE),
            value=cr.encode_leader_change(change))], base_offset=offset,
            partition_leader_epoch=epoch, is_control=True, now_ms=1_700_000_000_000)
        return ev.Batch(base_offset=offset, last_offset=offset, epoch=epoch, data=data)

    def records(offset: int, epoch: int, items: Sequence[mr.MetadataRecord]) -> ev.Batch:
        data = rb.build_batch([rb.RecordInput(value=record_convert.encode(i)) for i in items],
                              base_offset=offset, partition_leader_epoch=epoch,
                              now_ms=1_700_000_000_000)
        return ev.Batch(base_offset=offset, last_offset=offset + len(items) - 1, epoch=epoch,
                        data=data)

    created: list[mr.MetadataRecord] = [mr.TopicRecord(name=TOPIC, topic_id=TOPIC_ID)]
    created += [mr.PartitionRecord(topic_id=TOPIC_ID, partition_id=p, replicas=BROKERS,
                                   isr=BROKERS, leader=BROKERS[p]) for p in range(PARTITIONS)]
    moved = [mr.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=p,
                                      leader=BROKERS[p + 1], isr=BROKERS[p + 1:])
             for p in range(PARTITIONS)]
    return [control(0, 1, 1), records(1, 1, created), control(4, 2, 2), records(5, 2, moved)]


def clean_evidence() -> ev.Evidence:
    """A small, healthy run's evidence (every check passes on it)."""
    replicas = []
    final: dict[int, tuple[tuple[int, str], ...]] = {}
    acks = []
    observations = []
    for partition in range(PARTITIONS):
        batches, records = _replica_batches(partition)
        final[partition] = tuple(records)
        for offset, value in records:
            acks.append(ev.Ack(producer="p1", value=value, partition=partition, offset=offset,
                               sent_s=1.0 + offset / 10, acked_s=1.05 + offset / 10))
            if offset % 2 == 0:
                observations.append(ev.Observation(partition=partition, offset=offset,
                                                   value=value, at_s=1.2 + offset / 10))
        for broker in BROKERS:
            replicas.append(ev.ReplicaLog(broker=broker, partition=partition,
                                          high_watermark=len(records), batches=tuple(batches)))
    metadata = _metadata_batches()
    logs = tuple(ev.MetadataLog(node=n, batches=tuple(metadata)) for n in CONTROLLERS)
    claims: list[ev.LeaderClaim] = []
    for log in logs:
        claims.extend(checks.claims_from_metadata_log(log))
    claims.extend(checks.claims_from_node_log(
        "controller-2", "12:00:01 INFO node=2 epoch=2 from=Candidate to=Leader leader=2 "
                        "reason='won'\n"))
    claims.extend(checks.claims_from_node_log(
        "broker-5", "12:00:02 INFO broker=5 partition=faults-0 epoch=1 event=become_leader "
                    "new_leader=True partition_epoch=1\n"))
    claims.extend(checks.claims_from_quorum_state(
        "controller-3", '{"clusterId":"","leaderId":2,"leaderEpoch":2,"votedId":-1,'
                        '"appliedOffset":0,"currentVoters":[],"data_version":0}'))
    faults = (ev.FaultWindow(index=0, kind="kill-leader-broker", targets=("broker-4",),
                             start_s=1.5, heal_s=1.9),)
    history = ev.History(
        seed=0, topic=TOPIC, partitions=PARTITIONS, acks=tuple(acks),
        indeterminate=(ev.Indeterminate(producer="p1", value="p1-never-written", error="timeout",
                                        at_s=2.0),),
        unsent=0, observations=tuple(observations), faults=faults, final_read=final,
        healed_s=1.9, isr_full_after_s=2.5, quorum_high_watermark=7, end_s=3.0)
    return ev.Evidence(history=history, replicas=tuple(replicas), metadata_logs=logs,
                       claims=tuple(claims), isr_bound_s=30.0, expected_replicas=len(BROKERS))


# -- damages ----------------------------------------------------------------------------------------

def _with_final(evidence: ev.Evidence, partition: int,
                records: Sequence[tuple[int, str]]) -> ev.Evidence:
    final = dict(evidence.history.final_read)
    final[partition] = tuple(records)
    return dataclasses.replace(evidence, history=dataclasses.replace(evidence.history,
                                                                     final_read=final))


def damage_drop_acked(evidence: ev.Evidence) -> ev.Evidence:
    """An acknowledged record missing from the log."""
    ack = evidence.history.acks[len(evidence.history.acks) // 2]
    records = [r for r in evidence.history.final_read[ack.partition] if r[1] != ack.value]
    return _with_final(evidence, ack.partition, records)


def damage_duplicate(evidence: ev.Evidence) -> ev.Evidence:
    """An acknowledged value written a second time, after the end of its partition."""
    ack = evidence.history.acks[0]
    records = list(evidence.history.final_read[ack.partition])
    next_offset = records[-1][0] + 1 if records else 0
    return _with_final(evidence, ack.partition, [*records, (next_offset, ack.value)])


def damage_move_offset(evidence: ev.Evidence) -> ev.Evidence:
    """Two records of a partition swapped: each acknowledged value at another offset."""
    ack = evidence.history.acks[0]
    records = list(evidence.history.final_read[ack.partition])
    (o1, v1), (o2, v2) = records[0], records[1]
    records[0], records[1] = (o1, v2), (o2, v1)
    return _with_final(evidence, ack.partition, records)


def damage_unknown_value(evidence: ev.Evidence) -> ev.Evidence:
    """A value in the log that no producer sent."""
    records = list(evidence.history.final_read[0])
    next_offset = records[-1][0] + 1 if records else 0
    return _with_final(evidence, 0, [*records, (next_offset, "never-sent")])


def damage_vanished_read(evidence: ev.Evidence) -> ev.Evidence:
    """The reader saw a record that is not in the final log."""
    records = evidence.history.final_read[0]
    seen = ev.Observation(partition=0, offset=records[-1][0] + 1 if records else 0,
                          value="read-then-gone", at_s=2.0)
    history = dataclasses.replace(evidence.history,
                                  observations=(*evidence.history.observations, seen))
    return dataclasses.replace(evidence, history=history)


def _flip(data: bytes, position: int) -> bytes:
    changed = bytearray(data)
    changed[position] ^= 0x01
    return bytes(changed)


def damage_replica_byte(evidence: ev.Evidence) -> ev.Evidence:
    """One byte of one replica's batch flipped (a record value's last byte)."""
    victim = evidence.replicas[-1]
    first = victim.batches[0]
    batches = (dataclasses.replace(first, data=_flip(first.data, len(first.data) - 1)),
               *victim.batches[1:])
    replicas = (*evidence.replicas[:-1], dataclasses.replace(victim, batches=batches))
    return dataclasses.replace(evidence, replicas=replicas)


def damage_replica_short(evidence: ev.Evidence) -> ev.Evidence:
    """One replica lacks its last batch below the high watermark."""
    victim = evidence.replicas[-1]
    replicas = (*evidence.replicas[:-1],
                dataclasses.replace(victim, batches=victim.batches[:-1]))
    return dataclasses.replace(evidence, replicas=replicas)


def damage_metadata_byte(evidence: ev.Evidence) -> ev.Evidence:
    """One controller's metadata log differs below the quorum high watermark."""
    victim = evidence.metadata_logs[-1]
    target = victim.batches[1]
    batches = tuple(dataclasses.replace(b, data=_flip(b.data, len(b.data) - 1))
                    if b is target else b for b in victim.batches)
    logs = (*evidence.metadata_logs[:-1], dataclasses.replace(victim, batches=batches))
    return dataclasses.replace(evidence, metadata_logs=logs)


def damage_two_raft_leaders(evidence: ev.Evidence) -> ev.Evidence:
    """A second controller says it led an epoch that already has a leader."""
    raft = [c for c in evidence.claims if c.scope == ev.RAFT_SCOPE]
    epoch, leader = raft[0].epoch, raft[0].leader
    other = next(n for n in CONTROLLERS if n != leader)
    extra = checks.claims_from_node_log(
        f"controller-{other}", f"node={other} epoch={epoch} from=Candidate to=Leader "
                               f"leader={other} reason='split brain'")
    return dataclasses.replace(evidence, claims=(*evidence.claims, *extra))


def damage_two_partition_leaders(evidence: ev.Evidence) -> ev.Evidence:
    """A second broker says it became leader of a partition epoch that has a leader."""
    claim = next(c for c in evidence.claims if c.scope != ev.RAFT_SCOPE)
    other = next(b for b in BROKERS if b != claim.leader)
    extra = checks.claims_from_node_log(
        f"broker-{other}", f"broker={other} partition={claim.scope} epoch={claim.epoch} "
                           "event=become_leader new_leader=True")
    return dataclasses.replace(evidence, claims=(*evidence.claims, *extra))


def damage_isr_stuck(evidence: ev.Evidence) -> ev.Evidence:
    """The ISRs never became whole again after healing."""
    return dataclasses.replace(evidence, history=dataclasses.replace(
        evidence.history, isr_full_after_s=None))


@dataclass(frozen=True, slots=True, kw_only=True)
class Damage:
    name: str
    apply: Callable[[ev.Evidence], ev.Evidence]
    caught_by: str
    """The check that must fail on the damaged evidence."""


DAMAGES = (
    Damage(name="drop an acknowledged value", apply=damage_drop_acked, caught_by="acknowledged"),
    Damage(name="duplicate a value", apply=damage_duplicate, caught_by="no_duplicates"),
    Damage(name="move an acknowledged offset", apply=damage_move_offset,
           caught_by="acknowledged"),
    Damage(name="a value nobody sent", apply=damage_unknown_value,
           caught_by="no_unknown_values"),
    Damage(name="a read record vanishes", apply=damage_vanished_read, caught_by="reads_stable"),
    Damage(name="flip a byte in one replica", apply=damage_replica_byte,
           caught_by="replicas_identical"),
    Damage(name="one replica short below the HW", apply=damage_replica_short,
           caught_by="replicas_identical"),
    Damage(name="flip a byte in one metadata log", apply=damage_metadata_byte,
           caught_by="metadata_logs_identical"),
    Damage(name="two raft leaders in one epoch", apply=damage_two_raft_leaders,
           caught_by="one_raft_leader_per_epoch"),
    Damage(name="two partition leaders in one epoch", apply=damage_two_partition_leaders,
           caught_by="one_partition_leader_per_epoch"),
    Damage(name="ISR never whole again", apply=damage_isr_stuck, caught_by="isr_recovered"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    damage: Damage
    failed_checks: tuple[str, ...]
    example: str

    @property
    def caught(self) -> bool:
        return self.damage.caught_by in self.failed_checks


def run(evidence: ev.Evidence | None = None
        ) -> tuple[tuple[checks.CheckResult, ...], tuple[Outcome, ...]]:
    """The checks on the clean evidence, then each damage's outcome."""
    base = evidence if evidence is not None else clean_evidence()
    clean = checks.run_all(base)
    outcomes = []
    for damage in DAMAGES:
        results = checks.run_all(damage.apply(base))
        failed = tuple(r.name for r in results if not r.ok)
        example = next((r.violations[0] for r in results
                        if r.name == damage.caught_by and r.violations), "")
        outcomes.append(Outcome(damage=damage, failed_checks=failed, example=example))
    return clean, tuple(outcomes)
