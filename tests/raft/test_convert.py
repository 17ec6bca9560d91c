"""Protobuf <-> raft message translation: every message round-trips unchanged (also through
the wire bytes), and malformed protobuf input becomes an Invalid value / error response,
never an exception."""

from __future__ import annotations

import pytest

from kraftlog import ids as uuid
from kraftlog.raft import convert
from kraftlog.raft import messages as m
from kraftlog.raft.error_codes import ErrorCode
from kraftlog.v1 import common_pb2, raft_pb2

OE = m.OffsetAndEpoch
DIR = uuid.parse_uuid("J8aAPcfLQt2bqs1JT_rMgQ")
OTHER_DIR = uuid.parse_uuid("4L6g3nShT-eMCtK--X86sw")

REQUESTS: list[m.RaftRequest] = [
    m.VoteRequest(cluster_id="c", candidate_epoch=5, candidate_id=2, voter_id=3,
                  last_offset_epoch=4, last_offset=17, pre_vote=False),
    m.VoteRequest(cluster_id="c", candidate_epoch=5, candidate_id=2, voter_id=-1,
                  last_offset_epoch=-1, last_offset=0, pre_vote=True),
    m.BeginQuorumEpochRequest(cluster_id="c", leader_id=1, leader_epoch=3, voter_id=2,
                              leader_endpoint="127.0.0.1:9093"),
    m.BeginQuorumEpochRequest(cluster_id="c", leader_id=1, leader_epoch=3, voter_id=2,
                              leader_endpoint="[::1]:9093"),
    m.BeginQuorumEpochRequest(cluster_id="c", leader_id=1, leader_epoch=3, voter_id=2),
    m.EndQuorumEpochRequest(cluster_id="c", leader_id=1, leader_epoch=3,
                            preferred_successors=(3, 2)),
    m.EndQuorumEpochRequest(cluster_id="c", leader_id=1, leader_epoch=3, preferred_successors=()),
    m.FetchRequest(cluster_id="c", replica_id=2, current_leader_epoch=3, fetch_offset=10,
                   last_fetched_epoch=3, max_wait_ms=500, max_bytes=1 << 20),
    m.FetchRequest(cluster_id="c", replica_id=-1, current_leader_epoch=-1, fetch_offset=0,
                   last_fetched_epoch=-1, max_wait_ms=0, max_bytes=0),
    m.FetchSnapshotRequest(cluster_id="c", replica_id=2, current_leader_epoch=3,
                           snapshot_id=OE(offset=100, epoch=2), position=4096, max_bytes=1024),
    m.DescribeQuorumRequest(),
    # KIP-853: directory ids in the voter keys, and the three voter-change requests.
    m.VoteRequest(cluster_id="c", candidate_epoch=5, candidate_id=2, voter_id=3,
                  last_offset_epoch=4, last_offset=17, voter_directory_id=DIR,
                  candidate_directory_id=OTHER_DIR),
    m.FetchRequest(cluster_id="c", replica_id=2, current_leader_epoch=3, fetch_offset=10,
                   last_fetched_epoch=3, max_wait_ms=500, max_bytes=1 << 20,
                   replica_directory_id=DIR),
    m.AddRaftVoterRequest(cluster_id="c", timeout_ms=30_000, voter_id=4, voter_directory_id=DIR,
                          endpoint="controller-3:9093", ack_when_committed=True),
    m.RemoveRaftVoterRequest(cluster_id="c", voter_id=4, voter_directory_id=DIR),
    m.UpdateRaftVoterRequest(cluster_id="c", current_leader_epoch=7, voter_id=4,
                             voter_directory_id=DIR, endpoint="[::1]:9093", min_kraft_version=0,
                             max_kraft_version=1),
]

RESPONSES: list[m.RaftResponse] = [
    m.VoteResponse(error_code=ErrorCode.NONE, leader_epoch=5, leader_id=-1, vote_granted=True),
    m.VoteResponse(error_code=ErrorCode.FENCED_LEADER_EPOCH, leader_epoch=6, leader_id=3,
                   vote_granted=False),
    m.BeginQuorumEpochResponse(error_code=ErrorCode.NONE, leader_epoch=3, leader_id=1),
    m.EndQuorumEpochResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID, leader_epoch=3,
                             leader_id=1),
    m.FetchResponse(error_code=ErrorCode.NONE, leader_epoch=3, leader_id=1, high_watermark=9,
                    log_start_offset=0, records=b"\x00batch-bytes\xff"),
    m.FetchResponse(error_code=ErrorCode.NONE, leader_epoch=3, leader_id=1, high_watermark=9,
                    log_start_offset=0, diverging_epoch=OE(offset=7, epoch=2)),
    m.FetchResponse(error_code=ErrorCode.NONE, leader_epoch=3, leader_id=1, high_watermark=90,
                    log_start_offset=50, snapshot_id=OE(offset=50, epoch=2)),
    m.FetchResponse(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_epoch=3, leader_id=2,
                    error_message="not the leader"),
    m.FetchSnapshotResponse(error_code=ErrorCode.NONE, leader_epoch=3, leader_id=1,
                            snapshot_id=OE(offset=50, epoch=2), size=10000, position=4096,
                            unaligned_records=b"chunk"),
    m.FetchSnapshotResponse(error_code=ErrorCode.SNAPSHOT_NOT_FOUND, leader_epoch=3,
                            leader_id=1, error_message="gone"),
    m.DescribeQuorumResponse(
        error_code=ErrorCode.NONE, leader_id=1, leader_epoch=3, high_watermark=9,
        current_voters=(m.ReplicaDescription(replica_id=1, log_end_offset=9,
                                             last_fetch_timestamp=-1,
                                             last_caught_up_timestamp=1700000000000),
                        m.ReplicaDescription(replica_id=2, log_end_offset=-1,
                                             last_fetch_timestamp=-1,
                                             last_caught_up_timestamp=-1)),
        observers=(m.ReplicaDescription(replica_id=7, log_end_offset=4,
                                        last_fetch_timestamp=1700000000001,
                                        last_caught_up_timestamp=-1),)),
    m.DescribeQuorumResponse(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_id=2,
                             leader_epoch=3),
    m.DescribeQuorumResponse(
        error_code=ErrorCode.NONE, leader_id=1, leader_epoch=3, high_watermark=9,
        current_voters=(m.ReplicaDescription(replica_id=1, log_end_offset=9,
                                             last_fetch_timestamp=-1,
                                             last_caught_up_timestamp=5,
                                             replica_directory_id=DIR),),
        voter_endpoints=((1, "h1:9093"),), kraft_version=1),
    m.FetchResponse(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_epoch=3, leader_id=2,
                    leader_endpoint="h2:9093"),
    m.VoterChangeResponse(error_code=ErrorCode.DUPLICATE_VOTER, leader_epoch=3, leader_id=1,
                          error_message="node 4 is already a voter", leader_endpoint="h1:9093"),
    m.VoterChangeResponse(error_code=ErrorCode.NONE, leader_epoch=3, leader_id=1),
]


def _wire(message: convert.ProtoRequest | convert.ProtoResponse) -> bytes:
    return message.SerializeToString()


@pytest.mark.parametrize("request_value", REQUESTS, ids=lambda r: type(r).__name__)
def test_every_request_round_trips_through_protobuf_and_the_wire(
        request_value: m.RaftRequest) -> None:
    proto = convert.request_to_proto(request_value)
    reparsed = type(proto).FromString(_wire(proto))
    assert convert.request_from_proto(reparsed) == request_value


@pytest.mark.parametrize("response_value", RESPONSES, ids=lambda r: type(r).__name__)
def test_every_response_round_trips_through_protobuf_and_the_wire(
        response_value: m.RaftResponse) -> None:
    proto = convert.response_to_proto(response_value)
    reparsed = type(proto).FromString(_wire(proto))
    assert convert.response_from_proto(reparsed) == response_value


def test_the_kip_1166_fetch_high_watermark_has_no_proto_field_and_arrives_unknown() -> None:
    sent = m.FetchRequest(cluster_id="c", replica_id=2, current_leader_epoch=3, fetch_offset=10,
                          last_fetched_epoch=3, max_wait_ms=5, max_bytes=5, high_watermark=8)
    received = convert.request_from_proto(convert.request_to_proto(sent))
    assert isinstance(received, m.FetchRequest) and received.high_watermark == -1


def test_request_source_names_the_sender() -> None:
    assert [convert.request_source(r) for r in REQUESTS] == [2, 2, 1, 1, 1, 1, 1, 2, -1, 2, -1,
                                                             2, 2, -1, -1, -1]


TP_OTHER = common_pb2.TopicPartition(topic="orders", partition=0)

_LISTENER = [common_pb2.Endpoint(host="h", port=9093, listener_name="CONTROLLER")]
_DIR = convert.uuid_to_proto(DIR)
MALFORMED_REQUESTS: list[tuple[convert.ProtoRequest, str]] = [
    (raft_pb2.VoteRequest(candidate_id=-3, candidate_epoch=1), "candidate_id"),
    (raft_pb2.VoteRequest(candidate_id=1, candidate_epoch=-1), "candidate_epoch"),
    (raft_pb2.VoteRequest(candidate_id=1, candidate_epoch=1, last_offset=-1), "last_offset"),
    (raft_pb2.VoteRequest(candidate_id=1, candidate_epoch=1, last_offset_epoch=-2),
     "last_offset_epoch"),
    (raft_pb2.VoteRequest(candidate_id=1, candidate_epoch=1, last_offset_epoch=4),
     "above candidate_epoch"),
    (raft_pb2.BeginQuorumEpochRequest(leader_id=-1, leader_epoch=1), "leader_id"),
    (raft_pb2.BeginQuorumEpochRequest(leader_id=1, leader_epoch=-4), "leader_epoch"),
    (raft_pb2.EndQuorumEpochRequest(leader_id=1, leader_epoch=1, preferred_candidates=[
        common_pb2.ReplicaKey(id=2), common_pb2.ReplicaKey(id=2)]), "twice"),
    (raft_pb2.EndQuorumEpochRequest(leader_id=1, leader_epoch=1, preferred_candidates=[
        common_pb2.ReplicaKey(id=-2)]), "negative id"),
    (raft_pb2.RaftFetchRequest(replica_id=1, fetch_offset=-1), "fetch_offset"),
    (raft_pb2.RaftFetchRequest(replica_id=-2), "replica_id"),
    (raft_pb2.RaftFetchRequest(replica_id=1, max_wait_ms=-1), "max_wait_ms"),
    (raft_pb2.RaftFetchRequest(replica_id=1, max_bytes=-1), "max_bytes"),
    (raft_pb2.RaftFetchRequest(replica_id=1, last_fetched_epoch=-7), "last_fetched_epoch"),
    (raft_pb2.RaftFetchRequest(replica_id=1, current_leader_epoch=-2), "current_leader_epoch"),
    (raft_pb2.FetchSnapshotRequest(replica_id=1, max_bytes=10), "snapshot_id is missing"),
    (raft_pb2.FetchSnapshotRequest(replica_id=1, max_bytes=10, position=-1,
                                   snapshot_id=common_pb2.SnapshotId(end_offset=5, epoch=1)),
     "position"),
    (raft_pb2.FetchSnapshotRequest(replica_id=1, max_bytes=0,
                                   snapshot_id=common_pb2.SnapshotId(end_offset=5, epoch=1)),
     "max_bytes"),
    (raft_pb2.FetchSnapshotRequest(replica_id=1, max_bytes=10,
                                   snapshot_id=common_pb2.SnapshotId(end_offset=-5, epoch=1)),
     "end_offset"),
    # KIP-853 voter changes: hostile fields never reach the core.
    (raft_pb2.AddRaftVoterRequest(voter_id=-4, timeout_ms=100, listeners=_LISTENER,
                                  voter_directory_id=_DIR), "voter_id"),
    (raft_pb2.AddRaftVoterRequest(voter_id=4, timeout_ms=100, listeners=_LISTENER),
     "voter_directory_id is missing"),
    (raft_pb2.AddRaftVoterRequest(voter_id=4, timeout_ms=100, listeners=_LISTENER,
                                  voter_directory_id=common_pb2.Uuid(least_significant_bits=2)),
     "reserved"),
    (raft_pb2.AddRaftVoterRequest(voter_id=4, timeout_ms=100, voter_directory_id=_DIR),
     "listeners is empty"),
    (raft_pb2.AddRaftVoterRequest(voter_id=4, timeout_ms=100, voter_directory_id=_DIR,
                                  listeners=[common_pb2.Endpoint(host="h", port=70000)]),
     "port outside"),
    (raft_pb2.AddRaftVoterRequest(voter_id=4, timeout_ms=0, voter_directory_id=_DIR,
                                  listeners=_LISTENER), "timeout_ms"),
    (raft_pb2.RemoveRaftVoterRequest(voter_id=-1), "voter_id"),
    (raft_pb2.UpdateRaftVoterRequest(voter_id=4, voter_directory_id=_DIR, listeners=_LISTENER,
                                     current_leader_epoch=1,
                                     kraft_version_feature=common_pb2.SupportedFeature(
                                         name="metadata.version", max_supported_version=1)),
     "kraft_version_feature"),
    (raft_pb2.UpdateRaftVoterRequest(voter_id=4, voter_directory_id=_DIR, listeners=_LISTENER,
                                     current_leader_epoch=1,
                                     kraft_version_feature=common_pb2.SupportedFeature(
                                         name="kraft.version", min_supported_version=2,
                                         max_supported_version=1)), "not a range"),
]


@pytest.mark.parametrize(("proto", "mentions"), MALFORMED_REQUESTS,
                         ids=[f"{type(p).__name__}-{w}" for p, w in MALFORMED_REQUESTS])
def test_malformed_requests_become_invalid_request_error_responses(
        proto: convert.ProtoRequest, mentions: str) -> None:
    result = convert.request_from_proto(proto)
    assert isinstance(result, convert.Invalid)
    assert result.code == common_pb2.INVALID_REQUEST and mentions in result.message
    answer = convert.error_response(type(proto), result, leader_id=2, epoch=7)
    assert answer.error.code == common_pb2.INVALID_REQUEST
    assert mentions in answer.error.message
    if not isinstance(answer, raft_pb2.DescribeQuorumResponse):
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (2, 7)
    # The error response is itself well-formed: the caller's side decodes it.
    assert not isinstance(convert.response_from_proto(answer), convert.Invalid)


@pytest.mark.parametrize("proto_type", [raft_pb2.VoteRequest, raft_pb2.BeginQuorumEpochRequest,
                                        raft_pb2.EndQuorumEpochRequest, raft_pb2.RaftFetchRequest,
                                        raft_pb2.FetchSnapshotRequest,
                                        raft_pb2.DescribeQuorumRequest])
def test_another_partition_is_unknown_topic_or_partition(proto_type: type) -> None:
    proto = proto_type(topic_partition=TP_OTHER)
    result = convert.request_from_proto(proto)
    assert isinstance(result, convert.Invalid)
    assert result.code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION
    assert convert.error_response(proto_type, result).error.code == \
        common_pb2.UNKNOWN_TOPIC_OR_PARTITION


def test_the_metadata_partition_named_explicitly_is_accepted() -> None:
    proto = raft_pb2.DescribeQuorumRequest(topic_partition=common_pb2.TopicPartition(
        topic="__cluster_metadata", partition=0))
    assert convert.request_from_proto(proto) == m.DescribeQuorumRequest()


MALFORMED_RESPONSES: list[tuple[convert.ProtoResponse, str]] = [
    (raft_pb2.VoteResponse(error=common_pb2.Error(code=common_pb2.GROUP_ID_NOT_FOUND)),
     "error code"),
    (raft_pb2.VoteResponse(current_leader=common_pb2.LeaderHint(leader_id=-9)), "leader_id"),
    (raft_pb2.BeginQuorumEpochResponse(current_leader=common_pb2.LeaderHint(leader_epoch=-3)),
     "leader_epoch"),
    (raft_pb2.RaftFetchResponse(diverging_epoch=common_pb2.EpochEndOffset(epoch=1,
                                                                          end_offset=-4)),
     "diverging_epoch"),
    (raft_pb2.RaftFetchResponse(diverging_epoch=common_pb2.EpochEndOffset(epoch=-2,
                                                                          end_offset=4)),
     "diverging_epoch"),
    (raft_pb2.RaftFetchResponse(diverging_epoch=common_pb2.EpochEndOffset(epoch=1, end_offset=4),
                                snapshot_id=common_pb2.SnapshotId(end_offset=4, epoch=1)),
     "both"),
    (raft_pb2.RaftFetchResponse(high_watermark=-5), "high_watermark"),
    (raft_pb2.RaftFetchResponse(current_leader=common_pb2.LeaderHint(leader_id=-9)),
     "leader_id"),
    (raft_pb2.RaftFetchResponse(error=common_pb2.Error(code=common_pb2.GROUP_ID_NOT_FOUND)),
     "error code"),
    (raft_pb2.FetchSnapshotResponse(size=10, position=0), "no snapshot_id"),
    (raft_pb2.FetchSnapshotResponse(snapshot_id=common_pb2.SnapshotId(end_offset=4, epoch=1),
                                    size=10, position=11), "outside"),
]


@pytest.mark.parametrize(("proto", "mentions"), MALFORMED_RESPONSES,
                         ids=[f"{type(p).__name__}-{w}" for p, w in MALFORMED_RESPONSES])
def test_malformed_responses_are_invalid_not_exceptions(proto: convert.ProtoResponse,
                                                        mentions: str) -> None:
    result = convert.response_from_proto(proto)
    assert isinstance(result, convert.Invalid) and mentions in result.message


def test_endpoints_translate_both_ways_and_ignore_garbage() -> None:
    assert convert.endpoint_from_proto(convert.endpoint_to_proto("h:1")) == "h:1"
    assert convert.endpoint_from_proto(convert.endpoint_to_proto("[::1]:9")) == "[::1]:9"
    assert convert.endpoint_to_proto("") == []
    assert convert.endpoint_to_proto("no-port") == []
    assert convert.endpoint_from_proto([common_pb2.Endpoint(host="h", port=0)]) == ""


def test_a_diverging_epoch_before_every_epoch_the_leader_knows_is_valid() -> None:
    """A follower whose last epoch ended before the leader's first (a leader of an epoch
    that never committed anything) is told (log start, -1) and truncates: the answer must
    not be rejected on the way in, or that follower never catches up."""
    response = m.FetchResponse(error_code=ErrorCode.NONE, leader_epoch=2, leader_id=1,
                               high_watermark=0, log_start_offset=0,
                               diverging_epoch=m.OffsetAndEpoch(offset=0, epoch=-1))
    assert convert.response_from_proto(convert.response_to_proto(response)) == response
