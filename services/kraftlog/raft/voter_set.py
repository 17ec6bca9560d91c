"""The controller quorum's voter set and its history in the log (KIP-853).

Owns :class:`VoterNode` (a voter: node id, metadata log directory id, controller
endpoint, supported ``kraft.version`` range), :class:`VoterSet` (an immutable set of
them with the one-change-at-a-time rules) and :class:`VoterSetHistory`, Kafka's
``KRaftControlRecordStateMachine``: the VotersRecord and KRaftVersionRecord control
records of the log and the latest snapshot, by offset, *uncommitted ones included*.
The raft core uses the latest entry as its voter set (a leader counts the new
majority as soon as it appends a change, a follower as soon as it fetches one) and
drops entries a truncation removed, so the voter set reverts with the log.

``kraft.version`` 0 means static voters (``controller.quorum.voters``, no directory
ids, the history holds nothing); 1 means the voters live in the log. A voter is
identified by (id, directory id): a node whose metadata disk was replaced has a new
directory id and is not the old voter (it may only fetch, as an observer, until it
is added again).

Called by :mod:`.consensus` (and by ``kraftlog storage format``, which writes the
bootstrap snapshot's records). Pure: no I/O, no clock, no protobuf.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kraftlog import ids as uuid
from kraftlog.errors import CorruptRecordError, InvariantViolation
from kraftlog.raft import control_records as cr
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb

KRAFT_VERSION_STATIC = 0
"""``kraft.version`` 0: the voter set is ``controller.quorum.voters`` (no VotersRecord)."""
KRAFT_VERSION_DYNAMIC = 1
"""``kraft.version`` 1: the voter set is the latest VotersRecord (KIP-853)."""
SUPPORTED_KRAFT_VERSIONS = (KRAFT_VERSION_STATIC, KRAFT_VERSION_DYNAMIC)
CONTROLLER_LISTENER = "CONTROLLER"
NO_DIRECTORY = uuid.ZERO_UUID
"""The directory id of a static voter, or of a request that does not name one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VoterNode:
    """One voter. ``endpoint`` is ``host:port`` of its controller listener ("" unknown)."""

    voter_id: int
    directory_id: uuid.Uuid = NO_DIRECTORY
    endpoint: str = ""
    min_kraft_version: int = KRAFT_VERSION_STATIC
    max_kraft_version: int = KRAFT_VERSION_DYNAMIC

    def matches(self, voter_id: int, directory_id: uuid.Uuid) -> bool:
        """Kafka's ``isVoter(ReplicaKey)``: same id, and the same directory unless one side
        names none (static voters, or an old peer)."""
        return voter_id == self.voter_id and (
            directory_id == NO_DIRECTORY or self.directory_id == NO_DIRECTORY
            or directory_id == self.directory_id)

    def describe(self) -> str:
        directory = "" if self.directory_id == NO_DIRECTORY else f":{self.directory_id}"
        return f"{self.voter_id}@{self.endpoint}{directory}"


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); ValueError when malformed."""
    host, colon, port = endpoint.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"endpoint {endpoint!r} is not host:port")
    return host, int(port)


def join_endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class VoterSet:
    """An immutable voter set, by node id (a node id votes at most once in a set)."""

    __slots__ = ("_voters",)

    def __init__(self, voters: Iterable[VoterNode]) -> None:
        mapping: dict[int, VoterNode] = {}
        for voter in voters:
            if voter.voter_id in mapping:
                raise ValueError(f"voter id {voter.voter_id} appears twice in a voter set")
            if voter.voter_id < 0:
                raise ValueError(f"voter id {voter.voter_id} is negative")
            mapping[voter.voter_id] = voter
        self._voters = dict(sorted(mapping.items()))

    @classmethod
    def static(cls, endpoints: Mapping[int, str]) -> VoterSet:
        """``controller.quorum.voters``: no directory ids."""
        return cls(VoterNode(voter_id=v, endpoint=e) for v, e in endpoints.items())

    @classmethod
    def from_record(cls, record: cr.VotersRecord) -> VoterSet:
        nodes = []
        for entry in record.voters:
            endpoint = next((e for e in entry.endpoints if e.name == CONTROLLER_LISTENER),
                            entry.endpoints[0] if entry.endpoints else None)
            nodes.append(VoterNode(
                voter_id=entry.voter_id, directory_id=entry.directory_id,
                endpoint="" if endpoint is None else join_endpoint(endpoint.host, endpoint.port),
                min_kraft_version=entry.min_supported_kraft_version,
                max_kraft_version=entry.max_supported_kraft_version))
        try:
            return cls(nodes)
        except ValueError as exc:
            raise CorruptRecordError(f"VotersRecord: {exc}") from exc

    def to_record(self) -> cr.VotersRecord:
        entries = []
        for voter in self._voters.values():
            endpoints: tuple[cr.VoterEndpoint, ...] = ()
            if voter.endpoint:
                host, port = split_endpoint(voter.endpoint)
                endpoints = (cr.VoterEndpoint(name=CONTROLLER_LISTENER, host=host, port=port),)
            entries.append(cr.VoterRecordEntry(
                voter_id=voter.voter_id, directory_id=voter.directory_id, endpoints=endpoints,
                min_supported_kraft_version=voter.min_kraft_version,
                max_supported_kraft_version=voter.max_kraft_version))
        return cr.VotersRecord(voters=tuple(entries))

    # -- queries ---------------------------------------------------------------------------

    def ids(self) -> frozenset[int]:
        return frozenset(self._voters)

    def nodes(self) -> tuple[VoterNode, ...]:
        return tuple(self._voters.values())

    def get(self, voter_id: int) -> VoterNode | None:
        return self._voters.get(voter_id)

    def is_voter(self, voter_id: int, directory_id: uuid.Uuid = NO_DIRECTORY) -> bool:
        voter = self._voters.get(voter_id)
        return voter is not None and voter.matches(voter_id, directory_id)

    def endpoints(self) -> dict[int, str]:
        return {v.voter_id: v.endpoint for v in self._voters.values() if v.endpoint}

    def __len__(self) -> int:
        return len(self._voters)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VoterSet) and self._voters == other._voters

    def __hash__(self) -> int:
        return hash(tuple(self._voters.values()))

    def describe(self) -> str:
        return "[" + ",".join(v.describe() for v in self._voters.values()) + "]"

    # -- changes (KIP-853: one voter at a time) ------------------------------------------------

    def with_voter(self, voter: VoterNode) -> VoterSet | None:
        """This set plus ``voter``; None when its id already votes (DUPLICATE_VOTER)."""
        if voter.voter_id in self._voters:
            return None
        return VoterSet([*self._voters.values(), voter])

    def without_voter(self, voter_id: int, directory_id: uuid.Uuid) -> VoterSet | None:
        """This set minus the voter (id, directory); None when no such voter (VOTER_NOT_FOUND)."""
        if not self.is_voter(voter_id, directory_id):
            return None
        return VoterSet(v for v in self._voters.values() if v.voter_id != voter_id)

    def with_updated(self, voter: VoterNode) -> VoterSet | None:
        """``voter`` replacing the entry with its id and directory; None if there is none."""
        current = self._voters.get(voter.voter_id)
        if current is None or current.directory_id != voter.directory_id:
            return None
        return VoterSet(voter if v.voter_id == voter.voter_id else v
                        for v in self._voters.values())

    def has_overlapping_majority(self, other: VoterSet) -> bool:
        """Any majority of one set meets any majority of the other: true when the two differ
        by at most one voter (added or removed), the only changes KIP-853 allows, so two
        leaders can never be elected by disjoint majorities of consecutive sets."""
        mine = {(v.voter_id, v.directory_id) for v in self._voters.values()}
        theirs = {(v.voter_id, v.directory_id) for v in other._voters.values()}
        return len(mine ^ theirs) <= 1


# -- the history of the log's control records -------------------------------------------------

class VoterSetHistory:
    """Voter sets and ``kraft.version`` levels by the offset of their record.

    ``static`` is the fallback before any VotersRecord (kraft.version 0), empty for a node
    formatted with ``--no-initial-controllers`` that still has to learn the set. A set
    read from a snapshot ending at S is recorded at S - 1. Invariant: offsets increase.
    """

    def __init__(self, static: VoterSet) -> None:
        self.static = static
        self._offsets: list[int] = []
        self._sets: list[VoterSet] = []
        self._version_offsets: list[int] = []
        self._versions: list[int] = []
        self.next_offset = 0
        """The log offset up to which control records have been read."""

    def latest(self) -> VoterSet:
        return self._sets[-1] if self._sets else self.static

    def latest_offset(self) -> int | None:
        """Offset of the record the latest set came from; None when it is the static set."""
        return self._offsets[-1] if self._offsets else None

    def value_at_or_before(self, offset: int) -> VoterSet:
        index = bisect.bisect_right(self._offsets, offset)
        return self._sets[index - 1] if index else self.static

    def kraft_version(self) -> int:
        if self._versions:
            return self._versions[-1]
        return KRAFT_VERSION_DYNAMIC if self._sets else KRAFT_VERSION_STATIC

    def kraft_version_at_or_before(self, offset: int) -> int:
        index = bisect.bisect_right(self._version_offsets, offset)
        if index:
            return self._versions[index - 1]
        return KRAFT_VERSION_DYNAMIC if self.value_at_or_before(offset) is not self.static \
            else KRAFT_VERSION_STATIC

    def add_voters(self, offset: int, voters: VoterSet) -> None:
        if self._offsets and offset <= self._offsets[-1]:
            raise InvariantViolation(f"VotersRecord at {offset} after one at {self._offsets[-1]}")
        self._offsets.append(offset)
        self._sets.append(voters)

    def add_kraft_version(self, offset: int, level: int) -> None:
        if self._version_offsets and offset <= self._version_offsets[-1]:
            raise InvariantViolation(
                f"KRaftVersionRecord at {offset} after one at {self._version_offsets[-1]}")
        if level not in SUPPORTED_KRAFT_VERSIONS:
            raise CorruptRecordError(f"kraft.version {level} is not supported "
                                     f"(known: {list(SUPPORTED_KRAFT_VERSIONS)})")
        self._version_offsets.append(offset)
        self._versions.append(level)

    def truncate_new_entries(self, end_offset: int) -> bool:
        """Forget records at or after ``end_offset`` (the log was truncated there); True when
        the latest voter set changed."""
        before = self.latest()
        cut = bisect.bisect_left(self._offsets, end_offset)
        del self._offsets[cut:], self._sets[cut:]
        cut = bisect.bisect_left(self._version_offsets, end_offset)
        del self._version_offsets[cut:], self._versions[cut:]
        self.next_offset = min(self.next_offset, end_offset)
        return self.latest() != before

    def reset(self) -> None:
        """Forget everything read (the log was replaced by a snapshot)."""
        self._offsets.clear()
        self._sets.clear()
        self._version_offsets.clear()
        self._versions.clear()
        self.next_offset = 0

    def load_snapshot(self, end_offset: int, data: bytes | bytearray | memoryview) -> None:
        """The log now starts at a snapshot ending at ``end_offset``: forget what was read and
        take the snapshot's KRaftVersion and Voters, as of offset ``end_offset - 1`` (-1 for
        the bootstrap snapshot ``kraftlog storage format`` writes)."""
        self.reset()
        found = VoterSetHistory(self.static)
        found.scan(data)
        if found._versions:
            self._version_offsets.append(end_offset - 1)
            self._versions.append(found._versions[-1])
        if found._sets:
            self._offsets.append(end_offset - 1)
            self._sets.append(found._sets[-1])
        self.next_offset = end_offset

    def scan(self, data: bytes | bytearray | memoryview, *, offset_shift: int = 0,
             min_offset: int = 0) -> bool:
        """Read the control records of ``data`` (whole batches, headers only unless a batch is
        a control batch) at or after ``min_offset``; ``offset_shift`` moves the batches'
        offsets (a snapshot numbers its batches from 0). True when the latest set changed.
        CorruptRecordError for a record that does not decode: nothing is taken then."""
        records, end_offset = read_control_records(data, offset_shift=offset_shift,
                                                   min_offset=min_offset)
        changed = self.apply(records)
        self.next_offset = max(self.next_offset, end_offset)
        return changed

    def apply(self, records: list[tuple[int, VoterSet | int]]) -> bool:
        """Take what :func:`read_control_records` found (voter sets, kraft.version levels);
        True when the latest set changed."""
        before = self.latest()
        for offset, value in records:
            if isinstance(value, VoterSet):
                self.add_voters(offset, value)
            else:
                self.add_kraft_version(offset, value)
            self.next_offset = max(self.next_offset, offset + 1)
        return self.latest() != before


def read_control_records(data: bytes | bytearray | memoryview, *, offset_shift: int = 0,
                         min_offset: int = 0) -> tuple[list[tuple[int, VoterSet | int]], int]:
    """The Voters (as :class:`VoterSet`) and KRaftVersion (as the level) records of ``data``
    by offset, validated, and the offset after its last batch; CorruptRecordError names
    what does not decode (a leader's bytes are checked before a follower appends them)."""
    found: list[tuple[int, VoterSet | int]] = []
    end_offset = min_offset
    for header in bh.iter_batches(data):
        end_offset = max(end_offset, header.last_offset + offset_shift + 1)
        if not header.is_control or header.last_offset + offset_shift < min_offset:
            continue
        (batch,) = rb.decode_batches(header.view)
        for record in batch.records:
            offset = record.offset + offset_shift
            if offset < min_offset:
                continue
            kind = rb.decode_control_record_key(record.key)
            if kind is rb.ControlRecordType.KRAFT_VOTERS:
                found.append((offset, VoterSet.from_record(cr.decode_voters(record.value))))
            elif kind is rb.ControlRecordType.KRAFT_VERSION:
                level = cr.decode_kraft_version(record.value).kraft_version
                if level not in SUPPORTED_KRAFT_VERSIONS:
                    raise CorruptRecordError(f"kraft.version {level} at offset {offset} is not "
                                             f"supported (known: {list(SUPPORTED_KRAFT_VERSIONS)})")
                found.append((offset, level))
    return found, end_offset


def control_batch_records(voters: VoterSet | None, kraft_version: int | None
                          ) -> list[rb.RecordInput]:
    """The KRaftVersion and Voters records to write (a change, a snapshot, a bootstrap)."""
    records = []
    if kraft_version is not None:
        records.append(rb.RecordInput(
            key=cr.encode_key(cr.ControlRecordType.KRAFT_VERSION),
            value=cr.encode_kraft_version(cr.KRaftVersionRecord(kraft_version=kraft_version))))
    if voters is not None:
        records.append(rb.RecordInput(key=cr.encode_key(cr.ControlRecordType.KRAFT_VOTERS),
                                      value=cr.encode_voters(voters.to_record())))
    return records
