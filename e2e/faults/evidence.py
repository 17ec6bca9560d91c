"""What a fault-injection run leaves behind, as plain values the checks read. Pure.

Owns the evidence dataclasses and the JSON form of the client history:

- the *history* the driver records in the client namespace (:class:`History`): every
  acknowledged record with its partition and offset (:class:`Ack`), every send whose
  outcome is unknown (:class:`Indeterminate`: an error or a timeout, so it may or may
  not be in the log), what the reader saw while the faults ran (:class:`Observation`),
  the fault windows as they happened (:class:`FaultWindow`), the final read of every
  partition after healing, the quorum's high watermark before the clean stop, and when
  every ISR was whole again;
- what the files say after the clean stop (:class:`Evidence` adds them): every
  replica's batches with its checkpointed high watermark (:class:`ReplicaLog`), every
  controller's metadata-log batches (:class:`MetadataLog`), and the leader claims found
  in metadata logs, quorum-state files and node logs (:class:`LeaderClaim`).

Times are seconds on the driver's monotonic clock from the workload's start. Record
values are the producers' unique strings (``p1-0000042``).

Written by :mod:`.driver` (history) and :mod:`.collect` (files); read by :mod:`.checks`
and damaged on purpose by :mod:`.selftest`. No I/O here: ``to_json``/``from_json``
work on dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

RAFT_SCOPE = "__cluster_metadata-0"
"""The :attr:`LeaderClaim.scope` of controller-quorum (raft) leadership."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """A record the cluster acknowledged (acks=all): it must stay at this offset."""

    producer: str
    value: str
    partition: int
    offset: int
    sent_s: float
    acked_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Indeterminate:
    """A send that ended in an error or was still open at the end: maybe written."""

    producer: str
    value: str
    error: str
    at_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """One record the reader returned while the faults ran."""

    partition: int
    offset: int
    value: str
    at_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultWindow:
    """One fault as the driver applied it: which nodes, from when until healed."""

    index: int
    kind: str
    targets: tuple[str, ...]
    start_s: float
    heal_s: float
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    """Everything the driver recorded (the client side of the evidence)."""

    seed: int
    topic: str
    partitions: int
    acks: tuple[Ack, ...]
    indeterminate: tuple[Indeterminate, ...]
    unsent: int
    """Sends refused at once by ``send()`` (no metadata, full buffer): never written."""
    observations: tuple[Observation, ...]
    faults: tuple[FaultWindow, ...]
    final_read: Mapping[int, tuple[tuple[int, str], ...]]
    """Partition -> (offset, value) of every record read back after healing, in order."""
    healed_s: float
    """When the last fault was healed."""
    isr_full_after_s: float | None
    """Seconds from ``healed_s`` until every partition's ISR held every replica again;
    None if it did not within the driver's wait."""
    quorum_high_watermark: int | None
    """The controller quorum's high watermark once every voter had caught up, taken
    after the brokers stopped and before the controllers did; None if never seen."""
    end_s: float
    notes: tuple[str, ...] = ()
    """Things the driver noticed (a node that needed SIGKILL to stop, ...)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed, "topic": self.topic, "partitions": self.partitions,
            "acks": [[a.producer, a.value, a.partition, a.offset, a.sent_s, a.acked_s]
                     for a in self.acks],
            "indeterminate": [[i.producer, i.value, i.error, i.at_s]
                              for i in self.indeterminate],
            "unsent": self.unsent,
            "observations": [[o.partition, o.offset, o.value, o.at_s]
                             for o in self.observations],
            "faults": [{"index": f.index, "kind": f.kind, "targets": list(f.targets),
                        "start_s": f.start_s, "heal_s": f.heal_s, "detail": f.detail}
                       for f in self.faults],
            "final_read": {str(p): [[o, v] for o, v in records]
                           for p, records in self.final_read.items()},
            "healed_s": self.healed_s, "isr_full_after_s": self.isr_full_after_s,
            "quorum_high_watermark": self.quorum_high_watermark, "end_s": self.end_s,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> History:
        """The inverse of :meth:`to_json`; KeyError/TypeError/ValueError for a bad file."""
        return cls(
            seed=int(data["seed"]), topic=str(data["topic"]),
            partitions=int(data["partitions"]),
            acks=tuple(Ack(producer=str(p), value=str(v), partition=int(part),
                           offset=int(o), sent_s=float(s), acked_s=float(a))
                       for p, v, part, o, s, a in data["acks"]),
            indeterminate=tuple(Indeterminate(producer=str(p), value=str(v), error=str(e),
                                              at_s=float(t))
                                for p, v, e, t in data["indeterminate"]),
            unsent=int(data["unsent"]),
            observations=tuple(Observation(partition=int(p), offset=int(o), value=str(v),
                                           at_s=float(t))
                               for p, o, v, t in data["observations"]),
            faults=tuple(FaultWindow(index=int(f["index"]), kind=str(f["kind"]),
                                     targets=tuple(str(t) for t in f["targets"]),
                                     start_s=float(f["start_s"]), heal_s=float(f["heal_s"]),
                                     detail=str(f.get("detail", "")))
                         for f in data["faults"]),
            final_read={int(p): tuple((int(o), str(v)) for o, v in records)
                        for p, records in data["final_read"].items()},
            healed_s=float(data["healed_s"]),
            isr_full_after_s=(None if data["isr_full_after_s"] is None
                              else float(data["isr_full_after_s"])),
            quorum_high_watermark=(None if data["quorum_high_watermark"] is None
                                   else int(data["quorum_high_watermark"])),
            end_s=float(data["end_s"]), notes=tuple(str(n) for n in data.get("notes", ())))


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """One record batch as a log file holds it (bytes exactly as on disk)."""

    base_offset: int
    last_offset: int
    epoch: int
    """The batch header's partition leader epoch (the raft epoch in the metadata log)."""
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaLog:
    """One broker's replica of one partition after the clean stop."""

    broker: int
    partition: int
    high_watermark: int | None
    """From the broker's ``replication-offset-checkpoint``; None if it has no entry."""
    batches: tuple[Batch, ...]
    problems: tuple[str, ...] = ()
    """A torn tail or an unreadable file, as the collector found it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataLog:
    """One controller's ``__cluster_metadata-0`` log after the clean stop."""

    node: int
    batches: tuple[Batch, ...]
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderClaim:
    """Somebody's statement that ``leader`` led ``scope`` in ``epoch``.

    ``scope`` is :data:`RAFT_SCOPE` for the controller quorum, else ``topic-partition``.
    ``source`` says where it was found (``controller-2 metadata log offset 17``,
    ``broker-5 log line 310``, ``quorum-state of controller-1``).
    """

    scope: str
    epoch: int
    leader: int
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """The history plus what the files said."""

    history: History
    replicas: tuple[ReplicaLog, ...]
    metadata_logs: tuple[MetadataLog, ...]
    claims: tuple[LeaderClaim, ...]
    isr_bound_s: float
    """How soon after healing every ISR must be whole again."""
    expected_replicas: int = 3
    """Replicas per partition (the replication factor)."""
    notes: tuple[str, ...] = field(default=())
