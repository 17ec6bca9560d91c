"""KRaft control records: LeaderChange (KIP-595) and the snapshot header/footer (KIP-630).

A control record lives in a RecordBatch v2 whose ``is_control`` attribute is set.
Its key is Kafka's control key exactly: ``int16 version (0), int16 type``. Its
value is our own compact big-endian encoding (documented per type below), not
Kafka's flexible-version message bytes; nothing outside kraftlog reads them.

    LEADER_CHANGE   int16 version=0, int32 leader_id,
                    int32 n, n x int32 voters, int32 m, m x int32 granting_voters
    SNAPSHOT_HEADER int16 version=0, int64 last_contained_log_timestamp
    SNAPSHOT_FOOTER int16 version=0

Called by the raft client (LeaderChange at the start of every epoch) and by
:mod:`.snapshot`. Decoding errors raise :class:`kraftlog.errors.CorruptRecordError`
with what was wrong. No I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from kraftlog.errors import CorruptRecordError
from kraftlog.storage import record_batch as rb

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
VALUE_VERSION = 0


ControlRecordType = rb.ControlRecordType
"""Kafka's ``ControlRecordType`` numbers (owned by ``kraftlog.storage.record_batch``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderChangeMessage:
    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotHeader:
    last_contained_log_timestamp: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotFooter:
    pass


def encode_key(record_type: ControlRecordType) -> bytes:
    return rb.encode_control_record_key(record_type)


def decode_key(key: bytes | None) -> ControlRecordType:
    """The record type; an unknown type id is corruption here (raft writes every type it reads)."""
    record_type = rb.decode_control_record_key(key)
    if record_type is ControlRecordType.UNKNOWN:
        raise CorruptRecordError(f"unknown control record type in key {key!r}")
    return record_type


def _ids(values: Sequence[int]) -> bytes:
    return _I32.pack(len(values)) + b"".join(_I32.pack(v) for v in values)


def encode_leader_change(message: LeaderChangeMessage) -> bytes:
    return (_I16.pack(VALUE_VERSION) + _I32.pack(message.leader_id)
            + _ids(message.voters) + _ids(message.granting_voters))


def encode_snapshot_header(header: SnapshotHeader) -> bytes:
    return _I16.pack(VALUE_VERSION) + _I64.pack(header.last_contained_log_timestamp)


def encode_snapshot_footer() -> bytes:
    return _I16.pack(VALUE_VERSION)


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def take(self, fmt: struct.Struct, field: str) -> int:
        if self.pos + fmt.size > len(self.data):
            raise CorruptRecordError(
                f"{self.what} value truncated reading {field} at byte {self.pos} "
                f"of {len(self.data)}")
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def version(self) -> None:
        version = self.take(_I16, "version")
        if version != VALUE_VERSION:
            raise CorruptRecordError(f"{self.what} has unknown version {version}")

    def ids(self, field: str) -> tuple[int, ...]:
        count = self.take(_I32, f"{field} count")
        if count < 0 or count * _I32.size > len(self.data) - self.pos:
            raise CorruptRecordError(f"{self.what} {field} count {count} exceeds the value")
        return tuple(self.take(_I32, field) for _ in range(count))

    def done(self) -> None:
        if self.pos != len(self.data):
            raise CorruptRecordError(
                f"{self.what} value has {len(self.data) - self.pos} trailing bytes")


def decode_leader_change(value: bytes | None) -> LeaderChangeMessage:
    reader = _Reader(value or b"", "LeaderChange")
    reader.version()
    leader = reader.take(_I32, "leader_id")
    voters = reader.ids("voters")
    granting = reader.ids("granting_voters")
    reader.done()
    return LeaderChangeMessage(leader_id=leader, voters=voters, granting_voters=granting)


def decode_snapshot_header(value: bytes | None) -> SnapshotHeader:
    reader = _Reader(value or b"", "SnapshotHeader")
    reader.version()
    timestamp = reader.take(_I64, "last_contained_log_timestamp")
    reader.done()
    return SnapshotHeader(last_contained_log_timestamp=timestamp)


def decode_snapshot_footer(value: bytes | None) -> SnapshotFooter:
    reader = _Reader(value or b"", "SnapshotFooter")
    reader.version()
    reader.done()
    return SnapshotFooter()
