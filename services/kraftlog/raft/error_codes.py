"""The error codes of the raft RPCs (KIP-595, KIP-630, KIP-853): Kafka's, from :mod:`kraftlog.error_codes`.

:data:`RAFT_ERROR_CODES` are the ones a raft RPC may answer with; the transport
treats any other code in a raft response as a malformed answer rather than
handing the core an outcome it has no rule for.
"""

from __future__ import annotations

from kraftlog.error_codes import ErrorCode

RAFT_ERROR_CODES = frozenset({
    ErrorCode.NONE,
    ErrorCode.OFFSET_OUT_OF_RANGE,
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.INVALID_REQUEST,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.INCONSISTENT_VOTER_SET,
    ErrorCode.SNAPSHOT_NOT_FOUND,
    ErrorCode.POSITION_OUT_OF_RANGE,
    ErrorCode.INCONSISTENT_CLUSTER_ID,
    ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.INVALID_VOTER_KEY,
    ErrorCode.DUPLICATE_VOTER,
    ErrorCode.VOTER_NOT_FOUND,
})

__all__ = ["RAFT_ERROR_CODES", "ErrorCode"]
