"""Request and response values of every ControllerService RPC, mirroring ``controller.proto``.

Owns one frozen dataclass per proto message (nested messages flattened with
the parent's name where Kafka's would clash), field for field, so that the
gRPC server (an edge module) converts them one to one; plus :class:`ApiError`
(an error code and message, the proto ``Error``), :class:`RequestError` (how
the managers abort one item), and the enums of ``common.proto`` that the
records module does not already define. ``active_controller`` is left out:
the server fills it in.

Called by :mod:`kraftlog.controller.state` and the server. Must not import
protobuf or validate anything (the managers do).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kraftlog.error_codes import ErrorCode
from kraftlog.errors import KraftlogError
from kraftlog.ids import ZERO_UUID, Uuid
from kraftlog.metadata.records import (
    ConfigResourceType,
    Endpoint,
    LeaderRecoveryState,
    SupportedFeature,
)

__all__ = [
    "ApiError",
    "ConfigOperation",
    "ConfigResourceType",
    "ConfigSource",
    "ElectionType",
    "Endpoint",
    "LeaderRecoveryState",
    "RequestError",
    "SupportedFeature",
]


class ElectionType(enum.IntEnum):
    """Kafka's ElectionType (KIP-460)."""

    PREFERRED = 0
    UNCLEAN = 1


class ConfigOperation(enum.IntEnum):
    """Kafka's AlterConfigOp.OpType (KIP-339)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigs ConfigSource."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiError:
    """The proto ``Error``: a Kafka error code and a message naming the offending value."""

    code: ErrorCode = ErrorCode.NONE
    message: str = ""

    @property
    def is_success(self) -> bool:
        return self.code == ErrorCode.NONE


NONE = ApiError()
"""Success."""


class RequestError(KraftlogError):
    """Raised inside a manager to answer one item (or a whole request) with an error code.

    Expected outcomes, not bugs: callers catch it per item and put ``error`` in the response.
    """

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.error = ApiError(code=code, message=message)


# -- BrokerRegistration ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationRequest:
    broker_id: int
    cluster_id: str
    incarnation_id: Uuid
    listeners: tuple[Endpoint, ...] = ()
    features: tuple[SupportedFeature, ...] = ()
    rack: str = ""
    log_dirs: tuple[Uuid, ...] = ()
    previous_broker_epoch: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationResponse:
    error: ApiError = NONE
    broker_epoch: int = -1


# -- BrokerHeartbeat --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False
    offline_log_dirs: tuple[Uuid, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerHeartbeatResponse:
    error: ApiError = NONE
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


# -- UnregisterBroker -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRequest:
    broker_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerResponse:
    error: ApiError = NONE


# -- AlterPartition ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerState:
    """An ISR member with its broker epoch as the leader saw it (-1 unknown; KIP-903)."""

    broker_id: int
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionPartitionData:
    partition_index: int
    leader_epoch: int
    new_isr_with_epochs: tuple[BrokerState, ...]
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionTopicData:
    topic_id: Uuid
    partitions: tuple[AlterPartitionPartitionData, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    topics: tuple[AlterPartitionTopicData, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionPartitionResult:
    partition_index: int
    error: ApiError = NONE
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    partition_epoch: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionTopicResult:
    topic_id: Uuid
    partitions: tuple[AlterPartitionPartitionResult, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionResponse:
    error: ApiError = NONE
    topics: tuple[AlterPartitionTopicResult, ...] = ()


# -- CreateTopics -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopicConfig:
    name: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableReplicaAssignment:
    partition_index: int
    broker_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: tuple[CreatableReplicaAssignment, ...] = ()
    configs: tuple[CreatableTopicConfig, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicsRequest:
    topics: tuple[CreatableTopic, ...] = ()
    timeout_ms: int = 0
    validate_only: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopicResult:
    name: str
    topic_id: Uuid = ZERO_UUID
    error: ApiError = NONE
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicsResponse:
    error: ApiError = NONE
    topics: tuple[CreatableTopicResult, ...] = ()


# -- DeleteTopics -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicState:
    """By name (``topic_id`` ZERO_UUID) or by id (``name`` empty), exactly one."""

    name: str = ""
    topic_id: Uuid = ZERO_UUID


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicsRequest:
    topics: tuple[DeleteTopicState, ...] = ()
    timeout_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletableTopicResult:
    name: str = ""
    topic_id: Uuid = ZERO_UUID
    error: ApiError = NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicsResponse:
    error: ApiError = NONE
    responses: tuple[DeletableTopicResult, ...] = ()


# -- CreatePartitions -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitionsAssignment:
    broker_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitionsTopic:
    name: str
    count: int
    assignments: tuple[CreatePartitionsAssignment, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitionsRequest:
    topics: tuple[CreatePartitionsTopic, ...] = ()
    timeout_ms: int = 0
    validate_only: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitionsTopicResult:
    name: str
    error: ApiError = NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitionsResponse:
    error: ApiError = NONE
    results: tuple[CreatePartitionsTopicResult, ...] = ()


# -- AlterPartitionReassignments / ListPartitionReassignments ---------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignablePartition:
    """``replicas`` None cancels the reassignment in progress; a tuple is the target."""

    partition_index: int
    replicas: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignableTopic:
    name: str
    partitions: tuple[ReassignablePartition, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionReassignmentsRequest:
    timeout_ms: int = 0
    allow_replication_factor_change: bool = True
    topics: tuple[ReassignableTopic, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignablePartitionResponse:
    partition_index: int
    error: ApiError = NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignableTopicResponse:
    name: str
    partitions: tuple[ReassignablePartitionResponse, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionReassignmentsResponse:
    error: ApiError = NONE
    responses: tuple[ReassignableTopicResponse, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPartitions:
    """common.proto ``TopicPartitions``: empty ``partitions`` means all of the topic's."""

    topic: str
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ListPartitionReassignmentsRequest:
    timeout_ms: int = 0
    topics: tuple[TopicPartitions, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class OngoingPartitionReassignment:
    partition_index: int
    replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class OngoingTopicReassignment:
    name: str
    partitions: tuple[OngoingPartitionReassignment, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ListPartitionReassignmentsResponse:
    error: ApiError = NONE
    topics: tuple[OngoingTopicReassignment, ...] = ()


# -- ElectLeaders -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectLeadersRequest:
    election_type: ElectionType = ElectionType.PREFERRED
    topic_partitions: tuple[TopicPartitions, ...] = ()
    timeout_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionResult:
    partition_id: int
    error: ApiError = NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaElectionResult:
    topic: str
    partition_result: tuple[PartitionResult, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectLeadersResponse:
    error: ApiError = NONE
    replica_election_results: tuple[ReplicaElectionResult, ...] = ()


# -- IncrementalAlterConfigs / DescribeConfigs ------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterableConfig:
    name: str
    config_operation: ConfigOperation = ConfigOperation.SET
    value: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterConfigsResource:
    resource_type: ConfigResourceType
    resource_name: str
    configs: tuple[AlterableConfig, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class IncrementalAlterConfigsRequest:
    resources: tuple[AlterConfigsResource, ...] = ()
    validate_only: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterConfigsResourceResponse:
    resource_type: ConfigResourceType
    resource_name: str
    error: ApiError = NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class IncrementalAlterConfigsResponse:
    error: ApiError = NONE
    responses: tuple[AlterConfigsResourceResponse, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResource:
    resource_type: ConfigResourceType
    resource_name: str
    configuration_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsRequest:
    resources: tuple[DescribeConfigsResource, ...] = ()
    include_synonyms: bool = False
    include_documentation: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResourceResult:
    name: str
    value: str | None
    read_only: bool = False
    config_source: ConfigSource = ConfigSource.DEFAULT_CONFIG
    is_sensitive: bool = False
    synonyms: tuple[DescribeConfigsSynonym, ...] = ()
    documentation: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResult:
    resource_type: ConfigResourceType
    resource_name: str
    error: ApiError = NONE
    configs: tuple[DescribeConfigsResourceResult, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResponse:
    error: ApiError = NONE
    results: tuple[DescribeConfigsResult, ...] = ()


# -- DescribeCluster --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterRequest:
    include_fenced_brokers: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterBroker:
    broker_id: int
    endpoints: tuple[Endpoint, ...] = ()
    rack: str = ""
    is_fenced: bool = False
    in_controlled_shutdown: bool = False
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterResponse:
    error: ApiError = NONE
    cluster_id: str = ""
    controller_id: int = -1
    brokers: tuple[DescribeClusterBroker, ...] = ()


# -- AllocateProducerIds ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocateProducerIdsRequest:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocateProducerIdsResponse:
    error: ApiError = NONE
    producer_id_start: int = -1
    producer_id_len: int = 0
