"""KIP-630 snapshots: file naming, the writer the state machine fills, the reader it loads.

A snapshot of the replicated state up to (not including) offset ``end_offset``,
whose last contained entry has epoch ``epoch``, is stored as
``<20-digit end offset>-<10-digit epoch>.checkpoint`` (Kafka's naming; a
partial one as ``.checkpoint.part``, a deleted one as ``.checkpoint.deleted``).
Its bytes are RecordBatch v2 batches: a control batch holding one
SNAPSHOT_HEADER record, with kraft.version 1 a control batch holding the
KRaftVersion and Voters records of the snapshot's end (KIP-853), the data batches,
and a control batch holding one SNAPSHOT_FOOTER record. Batches are numbered from
offset 0 inside the file.

Callers: the raft client (creates a :class:`SnapshotWriter` for the state
machine, validates fetched snapshots with :func:`read_snapshot_records`), the
listener (``handle_load_snapshot`` receives a :class:`SnapshotReader`), and log
implementations (names). No I/O here: bytes in, bytes out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kraftlog.errors import CorruptRecordError, InvariantViolation
from kraftlog.raft import control_records as cr
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETED_SUFFIX = ".checkpoint.deleted"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
MAX_RECORDS_PER_BATCH = 1000
_VOTER_CONTROL = frozenset({cr.ControlRecordType.KRAFT_VERSION, cr.ControlRecordType.KRAFT_VOTERS})


def snapshot_file_name(snapshot_id: OffsetAndEpoch) -> str:
    if snapshot_id.offset < 0 or snapshot_id.epoch < 0:
        raise ValueError(f"invalid snapshot id {snapshot_id}")
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{SUFFIX}"


def parse_snapshot_file_name(name: str) -> OffsetAndEpoch | None:
    """The id in a complete snapshot's file name, ``None`` for any other file."""
    match = _NAME.match(name)
    if match is None:
        return None
    return OffsetAndEpoch(offset=int(match.group(1)), epoch=int(match.group(2)))


class SnapshotWriter:
    """Collects the state machine's records for ``snapshot_id`` into batches.

    ``append`` may be called many times; ``build`` adds the footer and returns
    the complete bytes (the raft client then stores them through the log).
    """

    def __init__(self, snapshot_id: OffsetAndEpoch, *, last_contained_log_timestamp: int,
                 now_ms: int, control: Sequence[rb.RecordInput] = ()) -> None:
        self.snapshot_id = snapshot_id
        self._now_ms = now_ms
        self._next_offset = 0
        self._parts: list[bytes] = []
        self._built = False
        self._append_control(cr.ControlRecordType.SNAPSHOT_HEADER, cr.encode_snapshot_header(
            cr.SnapshotHeader(last_contained_log_timestamp=last_contained_log_timestamp)))
        if control:
            # KRaftVersion + Voters (KIP-853): a replica that starts from this snapshot
            # learns the voter set from it.
            self._parts.append(rb.build_batch(
                [r._replace(timestamp_ms=now_ms) for r in control],
                base_offset=self._next_offset, partition_leader_epoch=snapshot_id.epoch,
                now_ms=now_ms, is_control=True))
            self._next_offset += len(control)

    def _append_control(self, record_type: cr.ControlRecordType, value: bytes) -> None:
        self._parts.append(rb.build_batch(
            [rb.RecordInput(key=cr.encode_key(record_type), value=value,
                            timestamp_ms=self._now_ms)],
            base_offset=self._next_offset, partition_leader_epoch=self.snapshot_id.epoch,
            now_ms=self._now_ms, is_control=True))
        self._next_offset += 1

    def append(self, records: Sequence[bytes]) -> None:
        if self._built:
            raise InvariantViolation(f"snapshot {self.snapshot_id} appended to after build()")
        for start in range(0, len(records), MAX_RECORDS_PER_BATCH):
            chunk = records[start:start + MAX_RECORDS_PER_BATCH]
            self._parts.append(rb.build_batch(
                [rb.RecordInput(value=value, timestamp_ms=self._now_ms) for value in chunk],
                base_offset=self._next_offset, partition_leader_epoch=self.snapshot_id.epoch,
                now_ms=self._now_ms))
            self._next_offset += len(chunk)

    def build(self) -> bytes:
        if not self._built:
            self._append_control(cr.ControlRecordType.SNAPSHOT_FOOTER, cr.encode_snapshot_footer())
            self._built = True
        return b"".join(self._parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotReader:
    """A validated snapshot: its id, header and data records (values) in order."""

    snapshot_id: OffsetAndEpoch
    last_contained_log_timestamp: int
    records: tuple[bytes, ...]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.records)


def read_snapshot_records(snapshot_id: OffsetAndEpoch, data: bytes) -> SnapshotReader:
    """Check CRCs and the header/footer framing; errors name the snapshot and the batch."""
    where = snapshot_file_name(snapshot_id)
    try:
        batches = rb.decode_batches(data)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"snapshot {where}: {exc}") from exc
    consumed = sum(b.size_in_bytes for b in bh.iter_batches(data))
    if consumed != len(data):
        raise CorruptRecordError(f"snapshot {where}: {len(data) - consumed} trailing bytes "
                                 f"after the last whole batch at byte {consumed}")
    if len(batches) < 2:
        raise CorruptRecordError(f"snapshot {where}: {len(batches)} batches; a header and a "
                                 "footer are required")
    header = _single_control(batches[0], cr.ControlRecordType.SNAPSHOT_HEADER, where, 0)
    _single_control(batches[-1], cr.ControlRecordType.SNAPSHOT_FOOTER, where, len(batches) - 1)
    decoded_header = cr.decode_snapshot_header(header)
    cr.decode_snapshot_footer(batches[-1].records[0].value)
    values: list[bytes] = []
    for index, batch in enumerate(batches[1:-1], start=1):
        if batch.is_control:
            kinds = {cr.decode_key(r.key) for r in batch.records}
            if index != 1 or not kinds <= _VOTER_CONTROL:
                raise CorruptRecordError(f"snapshot {where}: unexpected control batch {index}")
            continue
        values.extend(r.value or b"" for r in batch.records)
    return SnapshotReader(snapshot_id=snapshot_id,
                          last_contained_log_timestamp=decoded_header.last_contained_log_timestamp,
                          records=tuple(values))


def _single_control(batch: rb.DecodedBatch, expected: cr.ControlRecordType, where: str,
                    index: int) -> bytes | None:
    if not batch.is_control or len(batch.records) != 1:
        raise CorruptRecordError(f"snapshot {where}: batch {index} must be one {expected.name} "
                                 "control record")
    found = cr.decode_key(batch.records[0].key)
    if found is not expected:
        raise CorruptRecordError(f"snapshot {where}: batch {index} is {found.name}, expected "
                                 f"{expected.name}")
    return batch.records[0].value
