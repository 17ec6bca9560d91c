"""Kafka protocol error codes used by the raft RPCs (KIP-595, KIP-630).

Expected outcomes of Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch,
FetchSnapshot and DescribeQuorum travel as these codes in responses (STYLE.md
rule 7); the numbers are Kafka's ``Errors`` codes so the gRPC transport and any
tooling can map them one to one. Used by :mod:`.messages` and the raft client
core; holds no logic.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    INCONSISTENT_VOTER_SET = 94
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    INCONSISTENT_CLUSTER_ID = 104
