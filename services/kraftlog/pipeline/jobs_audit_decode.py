"""The ``metadata-audit`` job's executor side: one metadata-log file -> raw record rows.

Owns :data:`RAW_DDL` (the schema of the raw rows), :class:`MetadataFile` (one
file to read: the latest snapshot or a log segment, with the first offset wanted)
and :func:`decode_file` / :func:`decode_bytes`, which turn a file's batches into
one row per record: the batch's offset, timestamp and raft epoch, the record
type and the fields of the record that the audit classifies (topic id and name,
partition, leader, ISR, replicas, broker, ...). Fields a record does not set
are None (for PartitionChangeRecord: unchanged).

Rows carry no interpretation that needs another record: whether an ISR change
shrinks or grows the ISR, or which leader epoch a change produces, depends on the
partition's earlier records, and :mod:`kraftlog.pipeline.audit` works that out in
Spark with window functions over all files. Snapshot rows (``source`` =
"snapshot") give each partition its state at the snapshot; their ``offset`` is
the snapshot's end offset - 1 and ``record_index`` orders them.

A torn or corrupt tail ends the file's scan with one ``Warning`` row (recovery
would truncate there); it never raises. Runs inside Spark tasks (the function
is pickled by reference, so it lives here and not in the job's ``__main__``).
Edge module: it decodes protobuf through :mod:`kraftlog.metadata.record_convert`.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kraftlog import errors
from kraftlog.metadata import record_convert
from kraftlog.metadata import records as r
from kraftlog.raft import control_records as cr
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb

RAW_DDL = ("source string, file string, offset long, record_index int, timestamp_ms long, "
           "raft_epoch int, record_type string, topic_id string, topic_name string, "
           "partition int, leader int, isr array<int>, replicas array<int>, "
           "adding_replicas array<int>, removing_replicas array<int>, leader_epoch int, "
           "broker int, rack string, fenced boolean, controlled_shutdown boolean, "
           "voters array<int>, detail string")
"""One row per record (see the module docstring)."""

SNAPSHOT = "snapshot"
LOG = "log"
WARNING = "Warning"
LEADER_CHANGE = "LeaderChange"


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataFile:
    """One file of ``__cluster_metadata-0`` for one Spark task."""

    path: str
    source: str
    """:data:`SNAPSHOT` or :data:`LOG`."""
    min_offset: int = 0
    """Log records below this offset are in the snapshot already: skipped."""
    snapshot_end_offset: int = 0
    """For a snapshot: its end offset (the id's offset)."""
    snapshot_epoch: int = 0


_FIELDS = tuple(name.strip().split(" ")[0] for name in RAW_DDL.split(", "))


def _row(**values: Any) -> tuple[Any, ...]:
    return tuple(values.get(name) for name in _FIELDS)


def _record_fields(record: r.MetadataRecord) -> dict[str, Any]:
    """The columns one metadata record sets."""
    kind = type(record).__name__
    out: dict[str, Any] = {"record_type": kind}
    if isinstance(record, r.TopicRecord):
        out.update(topic_id=str(record.topic_id), topic_name=record.name)
    elif isinstance(record, r.RemoveTopicRecord):
        out.update(topic_id=str(record.topic_id))
    elif isinstance(record, r.PartitionRecord):
        out.update(topic_id=str(record.topic_id), partition=record.partition_id,
                   leader=record.leader, isr=list(record.isr), replicas=list(record.replicas),
                   adding_replicas=list(record.adding_replicas),
                   removing_replicas=list(record.removing_replicas),
                   leader_epoch=record.leader_epoch)
    elif isinstance(record, r.PartitionChangeRecord):
        out.update(topic_id=str(record.topic_id), partition=record.partition_id,
                   leader=record.leader,
                   isr=None if record.isr is None else list(record.isr),
                   replicas=None if record.replicas is None else list(record.replicas),
                   adding_replicas=(None if record.adding_replicas is None
                                    else list(record.adding_replicas)),
                   removing_replicas=(None if record.removing_replicas is None
                                      else list(record.removing_replicas)))
    elif isinstance(record, r.RegisterBrokerRecord):
        out.update(broker=record.broker_id, rack=record.rack, fenced=record.fenced,
                   controlled_shutdown=record.in_controlled_shutdown)
    elif isinstance(record, r.BrokerRegistrationChangeRecord):
        out.update(broker=record.broker_id, fenced=record.fenced,
                   controlled_shutdown=record.in_controlled_shutdown)
    elif isinstance(record, r.FenceBrokerRecord | r.UnfenceBrokerRecord
                    | r.UnregisterBrokerRecord | r.ProducerIdsRecord):
        out.update(broker=record.broker_id)
    elif isinstance(record, r.ConfigRecord):
        out.update(detail=f"{record.resource_type.name.lower()} {record.resource_name!r}: "
                          f"{record.name}=" + ("<removed>" if record.value is None
                                               else record.value))
    elif isinstance(record, r.FeatureLevelRecord):
        out.update(detail=f"{record.name}={record.feature_level}")
    return out


def decode_bytes(data: bytes, file: MetadataFile) -> Iterator[tuple[Any, ...]]:
    """Rows of every record in ``data`` (the bytes of ``file``); see the module docstring."""
    name = pathlib.PurePath(file.path).name
    scan = bh.scan_valid_prefix(data)
    view = memoryview(data)[:scan.valid_bytes]
    index = 0
    try:
        for header in bh.iter_batches(view):
            if file.source == LOG and header.last_offset < file.min_offset:
                continue
            batch = rb.decode_batches(header.view)[0]
            for record in batch.records:
                if file.source == LOG and record.offset < file.min_offset:
                    continue
                offset = file.snapshot_end_offset - 1 if file.source == SNAPSHOT \
                    else record.offset
                common = {"source": file.source, "file": name, "offset": offset,
                          "record_index": index, "timestamp_ms": batch.max_timestamp,
                          "raft_epoch": batch.partition_leader_epoch}
                index += 1
                if batch.is_control:
                    if cr.decode_key(record.key) is cr.ControlRecordType.LEADER_CHANGE:
                        change = cr.decode_leader_change(record.value)
                        yield _row(**common, record_type=LEADER_CHANGE,
                                   broker=change.leader_id,
                                   leader_epoch=batch.partition_leader_epoch,
                                   voters=list(change.voters))
                    continue
                if record.value is None:
                    raise errors.CorruptRecordError(f"record at offset {record.offset} has "
                                                    "no value")
                decoded = record_convert.decode(record.value, offset=record.offset)
                yield _row(**common, **_record_fields(decoded))
    except errors.CorruptRecordError as exc:
        yield _row(source=file.source, file=name, offset=-1, record_index=index,
                   record_type=WARNING, detail=f"{name}: {exc}; the rest is not read")
        return
    if scan.error is not None:
        yield _row(source=file.source, file=name, offset=-1, record_index=index,
                   record_type=WARNING,
                   detail=f"{name}: {scan.error}; the rest is not read (recovery truncates "
                          "a log there)")


def decode_file(file: MetadataFile) -> Iterator[tuple[Any, ...]]:
    """:func:`decode_bytes` of the file at ``file.path`` (read in the Spark task)."""
    try:
        data = pathlib.Path(file.path).read_bytes()
    except OSError as exc:
        yield _row(source=file.source, file=file.path, offset=-1, record_index=0,
                   record_type=WARNING, detail=f"cannot read {file.path}: {exc}")
        return
    yield from decode_bytes(data, file)
