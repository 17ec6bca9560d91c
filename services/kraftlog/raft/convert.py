"""Translation between ``kraftlog.v1`` raft protobuf messages and :mod:`.messages` values.

Owns both directions for every RaftService message (Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch, FetchSnapshot, DescribeQuorum; requests and responses),
and the validation of protobuf input: a request that the core must not see
(negative offsets, a missing snapshot id, another partition, ...) becomes an
:class:`Invalid` value, from which :func:`error_response` builds the protobuf
error response (INVALID_REQUEST or UNKNOWN_TOPIC_OR_PARTITION) that the server
returns. Nothing here raises on bad input, so no exception escapes into gRPC.

Also AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter (KIP-853): a voter id below 0, a
missing or reserved directory id, a missing or malformed endpoint, a timeout or a
kraft.version range out of bounds is INVALID_REQUEST before the core sees it.

Callers: :mod:`.transport` (server and client side). An edge module: it may
import protobuf, but holds no I/O, no clock and no raft logic. Fields the proto
has and the core does not (replica epoch, log start offset of a fetcher, KIP-853
endpoints beyond the first) are dropped on the way in and filled with Kafka's
sentinels on the way out; the core's KIP-1166 ``FetchRequest.high_watermark`` has
no proto field yet and travels as -1.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraftlog import ids as uuid
from kraftlog.raft import messages as m
from kraftlog.raft.error_codes import RAFT_ERROR_CODES, ErrorCode
from kraftlog.v1 import common_pb2, raft_pb2

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
CONTROLLER_LISTENER = "CONTROLLER"

ProtoVoterChangeRequest = (raft_pb2.AddRaftVoterRequest | raft_pb2.RemoveRaftVoterRequest
                           | raft_pb2.UpdateRaftVoterRequest)
ProtoVoterChangeResponse = (raft_pb2.AddRaftVoterResponse | raft_pb2.RemoveRaftVoterResponse
                            | raft_pb2.UpdateRaftVoterResponse)
ProtoRequest = (raft_pb2.VoteRequest | raft_pb2.BeginQuorumEpochRequest
                | raft_pb2.EndQuorumEpochRequest | raft_pb2.RaftFetchRequest
                | raft_pb2.FetchSnapshotRequest | raft_pb2.DescribeQuorumRequest
                | ProtoVoterChangeRequest)
ProtoResponse = (raft_pb2.VoteResponse | raft_pb2.BeginQuorumEpochResponse
                 | raft_pb2.EndQuorumEpochResponse | raft_pb2.RaftFetchResponse
                 | raft_pb2.FetchSnapshotResponse | raft_pb2.DescribeQuorumResponse
                 | ProtoVoterChangeResponse)
KRAFT_VERSION_FEATURE = "kraft.version"

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Invalid:
    """Why a protobuf message cannot be handed to the core; ``code`` is a Kafka error code."""

    code: int
    message: str


def _invalid(message: str) -> Invalid:
    return Invalid(code=common_pb2.INVALID_REQUEST, message=message)


# -- small shared pieces -------------------------------------------------------------------------

def _topic_partition() -> common_pb2.TopicPartition:
    return common_pb2.TopicPartition(topic=METADATA_TOPIC, partition=METADATA_PARTITION)


def _check_partition(tp: common_pb2.TopicPartition, present: bool) -> Invalid | None:
    """An unset partition means the one raft partition; any other names a partition we lack."""
    if not present:
        return None
    if tp.topic == METADATA_TOPIC and tp.partition == METADATA_PARTITION:
        return None
    return Invalid(code=common_pb2.UNKNOWN_TOPIC_OR_PARTITION,
                   message=f"unknown raft partition {tp.topic}-{tp.partition}; "
                           f"only {METADATA_TOPIC}-{METADATA_PARTITION} exists")


def _hint(leader_id: int, epoch: int, endpoint: str = "") -> common_pb2.LeaderHint:
    hint = common_pb2.LeaderHint(leader_id=leader_id, leader_epoch=epoch)
    if endpoint:
        listeners = endpoint_to_proto(endpoint)
        if listeners:
            hint.endpoint.CopyFrom(listeners[0])
    return hint


def uuid_to_proto(value: uuid.Uuid) -> common_pb2.Uuid:
    return common_pb2.Uuid(most_significant_bits=int.from_bytes(value.value[:8], "big"),
                           least_significant_bits=int.from_bytes(value.value[8:], "big"))


def uuid_from_proto(p: common_pb2.Uuid) -> uuid.Uuid:
    return uuid.Uuid.from_bits(p.most_significant_bits, p.least_significant_bits)


def _error(code: ErrorCode, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=int(code), message=message)  # type: ignore[arg-type]


_ERROR_CODES: dict[int, ErrorCode] = {int(c): ErrorCode(c) for c in RAFT_ERROR_CODES}


def _error_code(error: common_pb2.Error) -> ErrorCode | Invalid:
    code = _ERROR_CODES.get(int(error.code))
    if code is None:
        return _invalid(f"error code {error.code} is not one the raft core knows")
    return code


def endpoint_to_proto(endpoint: str) -> list[common_pb2.Endpoint]:
    """``"host:port"`` (``[v6]:port``) -> one CONTROLLER endpoint; "" or garbage -> none."""
    host, sep, port_text = endpoint.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        return []
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return [common_pb2.Endpoint(host=host, port=int(port_text), listener_name=CONTROLLER_LISTENER)]


def endpoint_from_proto(endpoints: list[common_pb2.Endpoint]) -> str:
    for endpoint in endpoints:
        if endpoint.host and 0 < endpoint.port < 65536:
            host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
            return f"{host}:{endpoint.port}"
    return ""


def _check(conditions: list[tuple[bool, str]]) -> Invalid | None:
    for ok, message in conditions:
        if not ok:
            return _invalid(message)
    return None


# -- requests: core -> proto ---------------------------------------------------------------------

def request_to_proto(request: m.RaftRequest) -> ProtoRequest:
    if isinstance(request, m.FetchRequest):  # by far the most frequent
        return raft_pb2.RaftFetchRequest(
            cluster_id=request.cluster_id, topic_partition=_topic_partition(),
            replica_id=request.replica_id, replica_epoch=-1,
            current_leader_epoch=request.current_leader_epoch,
            fetch_offset=request.fetch_offset, last_fetched_epoch=request.last_fetched_epoch,
            log_start_offset=-1, max_wait_ms=min(request.max_wait_ms, _INT32_MAX),
            max_bytes=min(request.max_bytes, _INT32_MAX),
            replica_directory_id=uuid_to_proto(request.replica_directory_id))
    if isinstance(request, m.VoteRequest):
        return raft_pb2.VoteRequest(
            cluster_id=request.cluster_id, topic_partition=_topic_partition(),
            voter_id=request.voter_id, candidate_epoch=request.candidate_epoch,
            candidate_id=request.candidate_id, last_offset_epoch=request.last_offset_epoch,
            last_offset=request.last_offset, pre_vote=request.pre_vote,
            voter_directory_id=uuid_to_proto(request.voter_directory_id),
            candidate_directory_id=uuid_to_proto(request.candidate_directory_id))
    if isinstance(request, m.AddRaftVoterRequest):
        return raft_pb2.AddRaftVoterRequest(
            cluster_id=request.cluster_id, timeout_ms=min(request.timeout_ms, _INT32_MAX),
            voter_id=request.voter_id,
            voter_directory_id=uuid_to_proto(request.voter_directory_id),
            listeners=endpoint_to_proto(request.endpoint),
            ack_when_committed=request.ack_when_committed)
    if isinstance(request, m.RemoveRaftVoterRequest):
        return raft_pb2.RemoveRaftVoterRequest(
            cluster_id=request.cluster_id, voter_id=request.voter_id,
            voter_directory_id=uuid_to_proto(request.voter_directory_id))
    if isinstance(request, m.UpdateRaftVoterRequest):
        return raft_pb2.UpdateRaftVoterRequest(
            cluster_id=request.cluster_id, current_leader_epoch=request.current_leader_epoch,
            voter_id=request.voter_id,
            voter_directory_id=uuid_to_proto(request.voter_directory_id),
            listeners=endpoint_to_proto(request.endpoint),
            kraft_version_feature=common_pb2.SupportedFeature(
                name=KRAFT_VERSION_FEATURE, min_supported_version=request.min_kraft_version,
                max_supported_version=request.max_kraft_version))
    if isinstance(request, m.BeginQuorumEpochRequest):
        return raft_pb2.BeginQuorumEpochRequest(
            cluster_id=request.cluster_id, topic_partition=_topic_partition(),
            voter_id=request.voter_id, leader_id=request.leader_id,
            leader_epoch=request.leader_epoch,
            leader_endpoints=endpoint_to_proto(request.leader_endpoint))
    if isinstance(request, m.EndQuorumEpochRequest):
        return raft_pb2.EndQuorumEpochRequest(
            cluster_id=request.cluster_id, topic_partition=_topic_partition(),
            leader_id=request.leader_id, leader_epoch=request.leader_epoch,
            preferred_candidates=[common_pb2.ReplicaKey(id=i)
                                  for i in request.preferred_successors])
    if isinstance(request, m.FetchSnapshotRequest):
        return raft_pb2.FetchSnapshotRequest(
            cluster_id=request.cluster_id, topic_partition=_topic_partition(),
            replica_id=request.replica_id, current_leader_epoch=request.current_leader_epoch,
            snapshot_id=common_pb2.SnapshotId(end_offset=request.snapshot_id.offset,
                                              epoch=request.snapshot_id.epoch),
            position=request.position, max_bytes=min(request.max_bytes, _INT32_MAX))
    return raft_pb2.DescribeQuorumRequest(topic_partition=_topic_partition())


# -- requests: proto -> core (validated) ---------------------------------------------------------

def vote_request_from_proto(p: raft_pb2.VoteRequest) -> m.VoteRequest | Invalid:
    bad = _check_partition(p.topic_partition, p.HasField("topic_partition")) or _check([
        (p.candidate_id >= 0, f"candidate_id {p.candidate_id} is negative"),
        (p.candidate_epoch >= 0, f"candidate_epoch {p.candidate_epoch} is negative"),
        (p.voter_id >= -1, f"voter_id {p.voter_id} is below -1"),
        (p.last_offset_epoch >= -1, f"last_offset_epoch {p.last_offset_epoch} is below -1"),
        (p.last_offset >= 0, f"last_offset {p.last_offset} is negative"),
        (p.last_offset_epoch <= p.candidate_epoch,
         f"last_offset_epoch {p.last_offset_epoch} is above candidate_epoch {p.candidate_epoch}"),
    ])
    if bad is not None:
        return bad
    return m.VoteRequest(cluster_id=p.cluster_id, candidate_epoch=p.candidate_epoch,
                         candidate_id=p.candidate_id, voter_id=p.voter_id,
                         last_offset_epoch=p.last_offset_epoch, last_offset=p.last_offset,
                         pre_vote=p.pre_vote,
                         voter_directory_id=uuid_from_proto(p.voter_directory_id),
                         candidate_directory_id=uuid_from_proto(p.candidate_directory_id))


def begin_quorum_epoch_request_from_proto(
        p: raft_pb2.BeginQuorumEpochRequest) -> m.BeginQuorumEpochRequest | Invalid:
    bad = _check_partition(p.topic_partition, p.HasField("topic_partition")) or _check([
        (p.leader_id >= 0, f"leader_id {p.leader_id} is negative"),
        (p.leader_epoch >= 0, f"leader_epoch {p.leader_epoch} is negative"),
        (p.voter_id >= -1, f"voter_id {p.voter_id} is below -1"),
    ])
    if bad is not None:
        return bad
    return m.BeginQuorumEpochRequest(cluster_id=p.cluster_id, leader_id=p.leader_id,
                                     leader_epoch=p.leader_epoch, voter_id=p.voter_id,
                                     leader_endpoint=endpoint_from_proto(list(p.leader_endpoints)))


def end_quorum_epoch_request_from_proto(
        p: raft_pb2.EndQuorumEpochRequest) -> m.EndQuorumEpochRequest | Invalid:
    successors = tuple(key.id for key in p.preferred_candidates)
    bad = _check_partition(p.topic_partition, p.HasField("topic_partition")) or _check([
        (p.leader_id >= 0, f"leader_id {p.leader_id} is negative"),
        (p.leader_epoch >= 0, f"leader_epoch {p.leader_epoch} is negative"),
        (all(i >= 0 for i in successors), f"preferred_candidates {successors} has a negative id"),
        (len(set(successors)) == len(successors),
         f"preferred_candidates {successors} names a replica twice"),
    ])
    if bad is not None:
        return bad
    return m.EndQuorumEpochRequest(cluster_id=p.cluster_id, leader_id=p.leader_id,
                                   leader_epoch=p.leader_epoch, preferred_successors=successors)


def fetch_request_from_proto(p: raft_pb2.RaftFetchRequest) -> m.FetchRequest | Invalid:
    # The hot path (every follower fetch): one pass over the fields; the messages below are
    # built only for a request that fails.
    replica_id, leader_epoch = p.replica_id, p.current_leader_epoch
    fetch_offset, last_epoch = p.fetch_offset, p.last_fetched_epoch
    max_wait_ms, max_bytes = p.max_wait_ms, p.max_bytes
    if (replica_id >= -1 and leader_epoch >= -1 and fetch_offset >= 0 and last_epoch >= -1
            and max_wait_ms >= 0 and max_bytes >= 0 and (
                not p.HasField("topic_partition")
                or (p.topic_partition.topic == METADATA_TOPIC
                    and p.topic_partition.partition == METADATA_PARTITION))):
        return m.FetchRequest(cluster_id=p.cluster_id, replica_id=replica_id,
                              current_leader_epoch=leader_epoch, fetch_offset=fetch_offset,
                              last_fetched_epoch=last_epoch, max_wait_ms=max_wait_ms,
                              max_bytes=max_bytes,
                              replica_directory_id=uuid_from_proto(p.replica_directory_id)
                              if p.HasField("replica_directory_id") else m.NO_DIRECTORY)
    bad = _check_partition(p.topic_partition, p.HasField("topic_partition")) or _check([
        (p.replica_id >= -1, f"replica_id {p.replica_id} is below -1"),
        (p.current_leader_epoch >= -1,
         f"current_leader_epoch {p.current_leader_epoch} is below -1"),
        (p.fetch_offset >= 0, f"fetch_offset {p.fetch_offset} is negative"),
        (p.last_fetched_epoch >= -1, f"last_fetched_epoch {p.last_fetched_epoch} is below -1"),
        (p.max_wait_ms >= 0, f"max_wait_ms {p.max_wait_ms} is negative"),
        (p.max_bytes >= 0, f"max_bytes {p.max_bytes} is negative"),
    ])
    if bad is not None:
        return bad
    return m.FetchRequest(cluster_id=p.cluster_id, replica_id=p.replica_id,
                          current_leader_epoch=p.current_leader_epoch,
                          fetch_offset=p.fetch_offset, last_fetched_epoch=p.last_fetched_epoch,
                          max_wait_ms=p.max_wait_ms, max_bytes=p.max_bytes)


def fetch_snapshot_request_from_proto(
        p: raft_pb2.FetchSnapshotRequest) -> m.FetchSnapshotRequest | Invalid:
    bad = _check_partition(p.topic_partition, p.HasField("topic_partition")) or _check([
        (p.HasField("snapshot_id"), "snapshot_id is missing"),
        (p.snapshot_id.end_offset >= 0, f"snapshot end_offset {p.snapshot_id.end_offset} "
                                        "is negative"),
        (p.snapshot_id.epoch >= 0, f"snapshot epoch {p.snapshot_id.epoch} is negative"),
        (p.replica_id >= -1, f"replica_id {p.replica_id} is below -1"),
        (p.current_leader_epoch >= -1,
         f"current_leader_epoch {p.current_leader_epoch} is below -1"),
        (p.position >= 0, f"position {p.position} is negative"),
        (p.max_bytes > 0, f"max_bytes {p.max_bytes} is not positive"),
    ])
    if bad is not None:
        return bad
    return m.FetchSnapshotRequest(
        cluster_id=p.cluster_id, replica_id=p.replica_id,
        current_leader_epoch=p.current_leader_epoch,
        snapshot_id=m.OffsetAndEpoch(offset=p.snapshot_id.end_offset, epoch=p.snapshot_id.epoch),
        position=p.position, max_bytes=p.max_bytes)


def _voter_key_checks(voter_id: int, directory: uuid.Uuid, *, required: bool
                      ) -> list[tuple[bool, str]]:
    return [(voter_id >= 0, f"voter_id {voter_id} is negative"),
            (not required or directory != m.NO_DIRECTORY, "voter_directory_id is missing"),
            (directory == m.NO_DIRECTORY or directory not in uuid.RESERVED_DIRECTORY_IDS,
             f"voter_directory_id {directory} is reserved")]


def _endpoint_checks(listeners: list[common_pb2.Endpoint]) -> tuple[str, list[tuple[bool, str]]]:
    endpoint = endpoint_from_proto(listeners)
    return endpoint, [(bool(listeners), "listeners is empty: the voter's endpoint is needed"),
                      (bool(endpoint) and all(0 < e.port < 65536 and e.host for e in listeners),
                       "a listener has no host or a port outside 1..65535")]


def voter_change_request_from_proto(p: ProtoVoterChangeRequest
                                    ) -> m.VoterChangeRequest | Invalid:
    directory = uuid_from_proto(p.voter_directory_id)
    if isinstance(p, raft_pb2.RemoveRaftVoterRequest):
        bad = _check(_voter_key_checks(p.voter_id, directory, required=False))
        return bad or m.RemoveRaftVoterRequest(cluster_id=p.cluster_id, voter_id=p.voter_id,
                                               voter_directory_id=directory)
    endpoint, endpoint_checks = _endpoint_checks(list(p.listeners))
    if isinstance(p, raft_pb2.AddRaftVoterRequest):
        bad = _check([*_voter_key_checks(p.voter_id, directory, required=True),
                      *endpoint_checks,
                      (p.timeout_ms > 0, f"timeout_ms {p.timeout_ms} is not positive")])
        return bad or m.AddRaftVoterRequest(
            cluster_id=p.cluster_id, timeout_ms=p.timeout_ms, voter_id=p.voter_id,
            voter_directory_id=directory, endpoint=endpoint,
            ack_when_committed=p.ack_when_committed)
    feature = p.kraft_version_feature
    bad = _check([*_voter_key_checks(p.voter_id, directory, required=True), *endpoint_checks,
                  (p.current_leader_epoch >= 0,
                   f"current_leader_epoch {p.current_leader_epoch} is negative"),
                  (feature.name == KRAFT_VERSION_FEATURE,
                   f"kraft_version_feature names {feature.name!r}, not {KRAFT_VERSION_FEATURE}"),
                  (0 <= feature.min_supported_version <= feature.max_supported_version <= 32767,
                   f"kraft.version range {feature.min_supported_version}.."
                   f"{feature.max_supported_version} is not a range")])
    return bad or m.UpdateRaftVoterRequest(
        cluster_id=p.cluster_id, current_leader_epoch=p.current_leader_epoch,
        voter_id=p.voter_id, voter_directory_id=directory, endpoint=endpoint,
        min_kraft_version=feature.min_supported_version,
        max_kraft_version=feature.max_supported_version)


def describe_quorum_request_from_proto(
        p: raft_pb2.DescribeQuorumRequest) -> m.DescribeQuorumRequest | Invalid:
    bad = _check_partition(p.topic_partition, p.HasField("topic_partition"))
    return bad if bad is not None else m.DescribeQuorumRequest()


def request_from_proto(p: ProtoRequest) -> m.RaftRequest | Invalid:
    if isinstance(p, raft_pb2.RaftFetchRequest):  # by far the most frequent
        return fetch_request_from_proto(p)
    if isinstance(p, raft_pb2.VoteRequest):
        return vote_request_from_proto(p)
    if isinstance(p, raft_pb2.BeginQuorumEpochRequest):
        return begin_quorum_epoch_request_from_proto(p)
    if isinstance(p, raft_pb2.EndQuorumEpochRequest):
        return end_quorum_epoch_request_from_proto(p)
    if isinstance(p, raft_pb2.FetchSnapshotRequest):
        return fetch_snapshot_request_from_proto(p)
    if isinstance(p, raft_pb2.AddRaftVoterRequest | raft_pb2.RemoveRaftVoterRequest
                  | raft_pb2.UpdateRaftVoterRequest):
        return voter_change_request_from_proto(p)
    return describe_quorum_request_from_proto(p)


def request_source(request: m.RaftRequest) -> int:
    """The node a request comes from, as the core's ``handle_request`` wants it."""
    if isinstance(request, m.VoteRequest):
        return request.candidate_id
    if isinstance(request, m.BeginQuorumEpochRequest | m.EndQuorumEpochRequest):
        return request.leader_id
    if isinstance(request, m.FetchRequest | m.FetchSnapshotRequest):
        return request.replica_id
    return m.NO_ID


# -- responses: core -> proto --------------------------------------------------------------------

def _replica_to_proto(r: m.ReplicaDescription) -> raft_pb2.DescribeQuorumResponse.ReplicaState:
    return raft_pb2.DescribeQuorumResponse.ReplicaState(
        replica_id=r.replica_id, log_end_offset=r.log_end_offset,
        replica_directory_id=uuid_to_proto(r.replica_directory_id),
        last_fetch_timestamp=r.last_fetch_timestamp,
        last_caught_up_timestamp=r.last_caught_up_timestamp)


def response_to_proto(response: m.RaftResponse) -> ProtoResponse:
    if isinstance(response, m.FetchResponse):  # by far the most frequent
        fetch = raft_pb2.RaftFetchResponse(
            error=_error(response.error_code, response.error_message),
            high_watermark=response.high_watermark, log_start_offset=response.log_start_offset,
            current_leader=_hint(response.leader_id, response.leader_epoch,
                                 response.leader_endpoint),
            records=response.records)
        if response.diverging_epoch is not None:
            fetch.diverging_epoch.CopyFrom(common_pb2.EpochEndOffset(
                epoch=response.diverging_epoch.epoch,
                end_offset=response.diverging_epoch.offset))
        if response.snapshot_id is not None:
            fetch.snapshot_id.CopyFrom(common_pb2.SnapshotId(
                end_offset=response.snapshot_id.offset, epoch=response.snapshot_id.epoch))
        return fetch
    if isinstance(response, m.VoteResponse):
        return raft_pb2.VoteResponse(error=_error(response.error_code),
                                     vote_granted=response.vote_granted,
                                     current_leader=_hint(response.leader_id,
                                                          response.leader_epoch))
    if isinstance(response, m.BeginQuorumEpochResponse):
        return raft_pb2.BeginQuorumEpochResponse(
            error=_error(response.error_code),
            current_leader=_hint(response.leader_id, response.leader_epoch))
    if isinstance(response, m.EndQuorumEpochResponse):
        return raft_pb2.EndQuorumEpochResponse(
            error=_error(response.error_code),
            current_leader=_hint(response.leader_id, response.leader_epoch))
    if isinstance(response, m.FetchSnapshotResponse):
        chunk = raft_pb2.FetchSnapshotResponse(
            error=_error(response.error_code, response.error_message),
            current_leader=_hint(response.leader_id, response.leader_epoch),
            size=response.size, position=response.position,
            unaligned_records=response.unaligned_records)
        if response.snapshot_id is not None:
            chunk.snapshot_id.CopyFrom(common_pb2.SnapshotId(
                end_offset=response.snapshot_id.offset, epoch=response.snapshot_id.epoch))
        return chunk
    if isinstance(response, m.VoterChangeResponse):
        return voter_change_response_to_proto(raft_pb2.AddRaftVoterRequest, response)
    return raft_pb2.DescribeQuorumResponse(
        error=_error(response.error_code, response.error_message),
        topic_partition=_topic_partition(), leader_id=response.leader_id,
        leader_epoch=response.leader_epoch, high_watermark=response.high_watermark,
        high_watermark_update_time_ms=-1,
        current_voters=[_replica_to_proto(r) for r in response.current_voters],
        observers=[_replica_to_proto(r) for r in response.observers],
        nodes=[raft_pb2.DescribeQuorumResponse.Node(node_id=node, listeners=endpoint_to_proto(e))
               for node, e in response.voter_endpoints],
        kraft_version=response.kraft_version)


_VOTER_CHANGE_RESPONSES: dict[type, type[ProtoVoterChangeResponse]] = {
    raft_pb2.AddRaftVoterRequest: raft_pb2.AddRaftVoterResponse,
    raft_pb2.RemoveRaftVoterRequest: raft_pb2.RemoveRaftVoterResponse,
    raft_pb2.UpdateRaftVoterRequest: raft_pb2.UpdateRaftVoterResponse,
}


def voter_change_response_to_proto(request_type: type, response: m.VoterChangeResponse
                                   ) -> ProtoVoterChangeResponse:
    """The answer to an Add/Remove/UpdateRaftVoter request of ``request_type``."""
    return _VOTER_CHANGE_RESPONSES[request_type](
        error=_error(response.error_code, response.error_message),
        current_leader=_hint(response.leader_id, response.leader_epoch,
                             response.leader_endpoint))


def error_response(request_type: type[ProtoRequest], invalid: Invalid, *,
                   leader_id: int = m.NO_ID, epoch: int = m.NO_EPOCH) -> ProtoResponse:
    """The protobuf answer to a request that failed validation (never reaches the core)."""
    error = common_pb2.Error(code=invalid.code,  # type: ignore[arg-type]
                             message=invalid.message)
    hint = _hint(leader_id, epoch)
    if request_type is raft_pb2.VoteRequest:
        return raft_pb2.VoteResponse(error=error, vote_granted=False, current_leader=hint)
    if request_type is raft_pb2.BeginQuorumEpochRequest:
        return raft_pb2.BeginQuorumEpochResponse(error=error, current_leader=hint)
    if request_type is raft_pb2.EndQuorumEpochRequest:
        return raft_pb2.EndQuorumEpochResponse(error=error, current_leader=hint)
    if request_type is raft_pb2.RaftFetchRequest:
        return raft_pb2.RaftFetchResponse(error=error, current_leader=hint, high_watermark=-1,
                                          log_start_offset=-1)
    if request_type is raft_pb2.FetchSnapshotRequest:
        return raft_pb2.FetchSnapshotResponse(error=error, current_leader=hint, size=-1,
                                              position=-1)
    if request_type in _VOTER_CHANGE_RESPONSES:
        return _VOTER_CHANGE_RESPONSES[request_type](error=error, current_leader=hint)
    return raft_pb2.DescribeQuorumResponse(error=error, topic_partition=_topic_partition(),
                                           leader_id=leader_id, leader_epoch=epoch,
                                           high_watermark=-1, high_watermark_update_time_ms=-1)


# -- responses: proto -> core (validated) --------------------------------------------------------

def _replica_from_proto(r: raft_pb2.DescribeQuorumResponse.ReplicaState) -> m.ReplicaDescription:
    return m.ReplicaDescription(replica_id=r.replica_id, log_end_offset=r.log_end_offset,
                                last_fetch_timestamp=r.last_fetch_timestamp,
                                last_caught_up_timestamp=r.last_caught_up_timestamp,
                                replica_directory_id=uuid_from_proto(r.replica_directory_id))


def _check_hint(hint: common_pb2.LeaderHint) -> Invalid | None:
    return _check([(hint.leader_id >= -1, f"leader_id {hint.leader_id} is below -1"),
                   (hint.leader_epoch >= -1, f"leader_epoch {hint.leader_epoch} is below -1")])


def response_from_proto(p: ProtoResponse) -> m.RaftResponse | Invalid:
    """A peer's answer as a core value; a malformed one is :class:`Invalid` (the transport
    then reports a send failure, as Kafka treats an unparsable response)."""
    code = _error_code(p.error)
    if isinstance(code, Invalid):
        return code
    if isinstance(p, raft_pb2.DescribeQuorumResponse):
        return m.DescribeQuorumResponse(
            error_code=code, leader_id=p.leader_id, leader_epoch=p.leader_epoch,
            high_watermark=p.high_watermark,
            current_voters=tuple(_replica_from_proto(r) for r in p.current_voters),
            observers=tuple(_replica_from_proto(r) for r in p.observers),
            error_message=p.error.message,
            voter_endpoints=tuple((n.node_id, endpoint_from_proto(list(n.listeners)))
                                  for n in p.nodes if endpoint_from_proto(list(n.listeners))),
            kraft_version=p.kraft_version)
    hint = p.current_leader
    leader_id, epoch = hint.leader_id, hint.leader_epoch
    if leader_id < -1 or epoch < -1:
        return _check_hint(hint) or _invalid(f"bad leader hint {hint}")
    if isinstance(p, raft_pb2.RaftFetchResponse) and p.high_watermark >= -1 \
            and not p.HasField("diverging_epoch") and not p.HasField("snapshot_id"):
        # The hot path (every fetch answer that carries records or only waits).
        return m.FetchResponse(error_code=code, leader_epoch=epoch, leader_id=leader_id,
                               high_watermark=p.high_watermark,
                               log_start_offset=p.log_start_offset, records=p.records,
                               error_message=p.error.message,
                               leader_endpoint=endpoint_from_proto([hint.endpoint])
                               if hint.HasField("endpoint") else "")
    if isinstance(p, raft_pb2.AddRaftVoterResponse | raft_pb2.RemoveRaftVoterResponse
                  | raft_pb2.UpdateRaftVoterResponse):
        return m.VoterChangeResponse(error_code=code, leader_epoch=epoch, leader_id=leader_id,
                                     error_message=p.error.message,
                                     leader_endpoint=endpoint_from_proto([hint.endpoint])
                                     if hint.HasField("endpoint") else "")
    if isinstance(p, raft_pb2.VoteResponse):
        return m.VoteResponse(error_code=code, leader_epoch=epoch, leader_id=leader_id,
                              vote_granted=p.vote_granted)
    if isinstance(p, raft_pb2.BeginQuorumEpochResponse):
        return m.BeginQuorumEpochResponse(error_code=code, leader_epoch=epoch,
                                          leader_id=leader_id)
    if isinstance(p, raft_pb2.EndQuorumEpochResponse):
        return m.EndQuorumEpochResponse(error_code=code, leader_epoch=epoch, leader_id=leader_id)
    if isinstance(p, raft_pb2.RaftFetchResponse):
        diverging = (m.OffsetAndEpoch(offset=p.diverging_epoch.end_offset,
                                      epoch=p.diverging_epoch.epoch)
                     if p.HasField("diverging_epoch") else None)
        snapshot_id = (m.OffsetAndEpoch(offset=p.snapshot_id.end_offset,
                                        epoch=p.snapshot_id.epoch)
                       if p.HasField("snapshot_id") else None)
        bad = _check([
            # Epoch -1: the leader knows no epoch at or below the follower's last one (the
            # core's end_offset_for_epoch answers (log start, -1)); the follower truncates.
            (diverging is None or (diverging.offset >= 0 and diverging.epoch >= -1),
             f"diverging_epoch {diverging} has a negative field"),
            (snapshot_id is None or (snapshot_id.offset >= 0 and snapshot_id.epoch >= 0),
             f"snapshot_id {snapshot_id} has a negative field"),
            (not (diverging is not None and snapshot_id is not None),
             "both diverging_epoch and snapshot_id are set"),
            (p.high_watermark >= -1, f"high_watermark {p.high_watermark} is below -1"),
        ])
        if bad is not None:
            return bad
        return m.FetchResponse(error_code=code, leader_epoch=epoch, leader_id=leader_id,
                               high_watermark=p.high_watermark,
                               log_start_offset=p.log_start_offset, records=p.records,
                               diverging_epoch=diverging, snapshot_id=snapshot_id,
                               error_message=p.error.message,
                               leader_endpoint=endpoint_from_proto([hint.endpoint])
                               if hint.HasField("endpoint") else "")
    snapshot = (m.OffsetAndEpoch(offset=p.snapshot_id.end_offset, epoch=p.snapshot_id.epoch)
                if p.HasField("snapshot_id") else None)
    bad = _check([
        (code is not ErrorCode.NONE or snapshot is not None,
         "a successful FetchSnapshot response has no snapshot_id"),
        (code is not ErrorCode.NONE or (0 <= p.position <= p.size),
         f"chunk position {p.position} is outside the snapshot size {p.size}"),
    ])
    if bad is not None:
        return bad
    return m.FetchSnapshotResponse(error_code=code, leader_epoch=epoch, leader_id=leader_id,
                                   snapshot_id=snapshot, size=p.size, position=p.position,
                                   unaligned_records=p.unaligned_records,
                                   error_message=p.error.message)
