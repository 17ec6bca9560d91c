"""The raft RPCs as plain values (KIP-595 Vote/BeginQuorumEpoch/EndQuorumEpoch/Fetch,
KIP-630 FetchSnapshot, DescribeQuorum; KIP-996 pre-vote; KIP-853 Add/Remove/UpdateRaftVoter
and the directory ids that make a voter's key).

Field names follow Kafka's JSON message definitions, in snake case. The core
consumes and produces only these; the gRPC transport (an edge module) maps them
to and from ``kraftlog.v1`` protobuf messages, and the simulator passes them as
they are. Records travel as Kafka RecordBatch v2 bytes, never decoded here.

Also defines the two protocols the core talks through: :class:`MessageSink`
(outbound requests and completions of parked requests) and the ``PENDING``
marker returned by ``handle_request`` for a long-polling Fetch. No logic, no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from kraftlog import ids as uuid
from kraftlog.raft.error_codes import ErrorCode

NO_ID = -1
NO_DIRECTORY = uuid.ZERO_UUID
"""A directory id that names none (static voters, peers before KIP-853)."""
NO_EPOCH = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetAndEpoch:
    """An end offset (exclusive) and the epoch of the entry before it; also a snapshot id."""

    offset: int
    epoch: int

    def __lt__(self, other: OffsetAndEpoch) -> bool:
        return (self.epoch, self.offset) < (other.epoch, other.offset)


# -- Vote (KIP-595, pre_vote from KIP-996) ------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class VoteRequest:
    cluster_id: str
    candidate_epoch: int
    candidate_id: int
    voter_id: int
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False
    voter_directory_id: uuid.Uuid = NO_DIRECTORY
    candidate_directory_id: uuid.Uuid = NO_DIRECTORY


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteResponse:
    error_code: ErrorCode
    leader_epoch: int
    leader_id: int
    vote_granted: bool


# -- BeginQuorumEpoch / EndQuorumEpoch ------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class BeginQuorumEpochRequest:
    cluster_id: str
    leader_id: int
    leader_epoch: int
    voter_id: int
    leader_endpoint: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginQuorumEpochResponse:
    error_code: ErrorCode
    leader_epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EndQuorumEpochRequest:
    cluster_id: str
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class EndQuorumEpochResponse:
    error_code: ErrorCode
    leader_epoch: int
    leader_id: int


# -- Fetch --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequest:
    cluster_id: str
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int
    max_bytes: int
    high_watermark: int = -1
    """The fetcher's known HW (KIP-1166): a leader with a newer HW answers at once instead of
    parking the fetch, so followers learn commits one round trip sooner. -1: unknown."""
    replica_directory_id: uuid.Uuid = NO_DIRECTORY
    """The fetcher's metadata log directory id (KIP-853): its progress counts for a voter
    only when this is the voter's directory."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponse:
    error_code: ErrorCode
    leader_epoch: int
    leader_id: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging_epoch: OffsetAndEpoch | None = None
    snapshot_id: OffsetAndEpoch | None = None
    error_message: str = ""
    leader_endpoint: str = ""
    """``host:port`` of the leader named in ``leader_id`` (KIP-853 NodeEndpoints), "" unknown:
    an observer that learned the leader from a bootstrap server fetches from it next."""


# -- FetchSnapshot (KIP-630) ----------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSnapshotRequest:
    cluster_id: str
    replica_id: int
    current_leader_epoch: int
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSnapshotResponse:
    error_code: ErrorCode
    leader_epoch: int
    leader_id: int
    snapshot_id: OffsetAndEpoch | None = None
    size: int = -1
    position: int = -1
    unaligned_records: bytes = b""
    error_message: str = ""


# -- DescribeQuorum ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumRequest:
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaDescription:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int
    replica_directory_id: uuid.Uuid = NO_DIRECTORY


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int = -1
    current_voters: tuple[ReplicaDescription, ...] = ()
    observers: tuple[ReplicaDescription, ...] = ()
    error_message: str = ""
    voter_endpoints: tuple[tuple[int, str], ...] = ()
    """(voter id, ``host:port``) of the voters whose endpoint is known (KIP-853 Nodes)."""
    kraft_version: int = 0
    """The leader's ``kraft.version``: 0 static voters, 1 voters in the log."""


# -- Add/Remove/UpdateRaftVoter (KIP-853) -------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class AddRaftVoterRequest:
    cluster_id: str
    timeout_ms: int
    voter_id: int
    voter_directory_id: uuid.Uuid
    endpoint: str
    """``host:port`` of the new voter's controller listener."""
    ack_when_committed: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveRaftVoterRequest:
    cluster_id: str
    voter_id: int
    voter_directory_id: uuid.Uuid


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateRaftVoterRequest:
    cluster_id: str
    current_leader_epoch: int
    voter_id: int
    voter_directory_id: uuid.Uuid
    endpoint: str
    min_kraft_version: int
    max_kraft_version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class VoterChangeResponse:
    """The answer to AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter (the same fields)."""

    error_code: ErrorCode
    leader_epoch: int
    leader_id: int
    error_message: str = ""
    leader_endpoint: str = ""


VoterChangeRequest = AddRaftVoterRequest | RemoveRaftVoterRequest | UpdateRaftVoterRequest

RaftRequest = (VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
               | FetchSnapshotRequest | DescribeQuorumRequest | AddRaftVoterRequest
               | RemoveRaftVoterRequest | UpdateRaftVoterRequest)
RaftResponse = (VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
                | FetchSnapshotResponse | DescribeQuorumResponse | VoterChangeResponse)


class Pending(enum.Enum):
    """Returned by ``handle_request`` when the answer comes later via ``MessageSink.complete``."""

    PENDING = "pending"


PENDING = Pending.PENDING


class MessageSink(Protocol):
    """Where the core's outbound traffic goes; the driver/transport implements it.

    ``send`` must not call back into the core. A transport failure or timeout is
    reported back with ``RaftClient.handle_send_failure``. ``complete`` answers a
    request for which ``handle_request`` returned ``PENDING``.
    """

    def send(self, destination: int, request: RaftRequest) -> None: ...

    def complete(self, request_id: int, response: RaftResponse) -> None: ...
