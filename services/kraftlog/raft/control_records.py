"""KRaft control records: LeaderChange (KIP-595), the snapshot header/footer (KIP-630),
KRaftVersion and Voters (KIP-853).

A control record lives in a RecordBatch v2 whose ``is_control`` attribute is set.
Its key is Kafka's control key exactly: ``int16 version (0), int16 type``. Its
value is our own compact big-endian encoding (documented per type below), not
Kafka's flexible-version message bytes; nothing outside kraftlog reads them.

    LEADER_CHANGE   int16 version=0, int32 leader_id,
                    int32 n, n x int32 voters, int32 m, m x int32 granting_voters
    SNAPSHOT_HEADER int16 version=0, int64 last_contained_log_timestamp
    SNAPSHOT_FOOTER int16 version=0
    KRAFT_VERSION   int16 version=0, int16 kraft_version
    KRAFT_VOTERS    int16 version=0, int32 n, n x voter:
                      int32 voter_id, 16 bytes directory_id,
                      int32 e, e x (string name, string host, int32 port),
                      int16 min_supported_kraft_version, int16 max_supported_kraft_version
                    (string = int16 byte length + UTF-8)

Called by the raft client (LeaderChange at the start of every epoch, Voters and
KRaftVersion when the voter set changes), by :mod:`.voter_set` (reading them back) and by
:mod:`.snapshot`; ``kraftlog storage format`` writes the bootstrap pair. Decoding errors raise :class:`kraftlog.errors.CorruptRecordError`
with what was wrong. No I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from kraftlog import ids as uuid
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
class KRaftVersionRecord:
    """The ``kraft.version`` feature level from this offset on (0: static voters, 1: voters
    in the log)."""

    kraft_version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class VoterEndpoint:
    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class VoterRecordEntry:
    voter_id: int
    directory_id: uuid.Uuid
    endpoints: tuple[VoterEndpoint, ...]
    min_supported_kraft_version: int = 0
    max_supported_kraft_version: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class VotersRecord:
    """The whole voter set from this offset on (KIP-853: every change writes all voters)."""

    voters: tuple[VoterRecordEntry, ...]


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


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes is too long for a control record")
    return _I16.pack(len(raw)) + raw


def encode_kraft_version(record: KRaftVersionRecord) -> bytes:
    return _I16.pack(VALUE_VERSION) + _I16.pack(record.kraft_version)


def encode_voters(record: VotersRecord) -> bytes:
    parts = [_I16.pack(VALUE_VERSION), _I32.pack(len(record.voters))]
    for voter in record.voters:
        parts += [_I32.pack(voter.voter_id), voter.directory_id.value,
                  _I32.pack(len(voter.endpoints))]
        for endpoint in voter.endpoints:
            parts += [_string(endpoint.name), _string(endpoint.host), _I32.pack(endpoint.port)]
        parts += [_I16.pack(voter.min_supported_kraft_version),
                  _I16.pack(voter.max_supported_kraft_version)]
    return b"".join(parts)


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

    def raw(self, size: int, field: str) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise CorruptRecordError(f"{self.what} value truncated reading {field} at byte "
                                     f"{self.pos} of {len(self.data)}")
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def string(self, field: str) -> str:
        raw = self.raw(self.take(_I16, f"{field} length"), field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{self.what} {field} is not UTF-8") from exc

    def count(self, field: str, min_item_bytes: int) -> int:
        count = self.take(_I32, f"{field} count")
        if count < 0 or count * min_item_bytes > len(self.data) - self.pos:
            raise CorruptRecordError(f"{self.what} {field} count {count} exceeds the value")
        return count

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


def decode_kraft_version(value: bytes | None) -> KRaftVersionRecord:
    reader = _Reader(value or b"", "KRaftVersion")
    reader.version()
    level = reader.take(_I16, "kraft_version")
    reader.done()
    if level < 0:
        raise CorruptRecordError(f"KRaftVersion level {level} is negative")
    return KRaftVersionRecord(kraft_version=level)


def decode_voters(value: bytes | None) -> VotersRecord:
    reader = _Reader(value or b"", "Voters")
    reader.version()
    voters: list[VoterRecordEntry] = []
    seen: set[int] = set()
    for _ in range(reader.count("voters", 4 + 16 + 4 + 4)):
        voter_id = reader.take(_I32, "voter_id")
        directory = uuid.Uuid(reader.raw(16, "directory_id"))
        endpoints = []
        for _ in range(reader.count("endpoints", 2 + 2 + 4)):
            name = reader.string("endpoint name")
            host = reader.string("endpoint host")
            port = reader.take(_I32, "endpoint port")
            endpoints.append(VoterEndpoint(name=name, host=host, port=port))
        low = reader.take(_I16, "min_supported_kraft_version")
        high = reader.take(_I16, "max_supported_kraft_version")
        if voter_id < 0 or voter_id in seen:
            raise CorruptRecordError(f"Voters lists voter id {voter_id} (negative or twice)")
        seen.add(voter_id)
        voters.append(VoterRecordEntry(voter_id=voter_id, directory_id=directory,
                                       endpoints=tuple(endpoints),
                                       min_supported_kraft_version=low,
                                       max_supported_kraft_version=high))
    reader.done()
    return VotersRecord(voters=tuple(voters))


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
