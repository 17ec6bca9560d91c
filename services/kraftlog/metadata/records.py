"""The metadata log's records as plain values: what the controller generates and everyone replays.

Owns one frozen dataclass per record of ``protos/kraftlog/v1/metadata.proto``
(field for field, same names), the :data:`MetadataRecord` union of them, and
:class:`Endpoint` / :class:`SupportedFeature`. The controller's managers build
these, the timeline state and :mod:`kraftlog.metadata.image` replay them. The
bytes in the log are the protobuf ``MetadataRecord``; the edge module
:mod:`kraftlog.metadata.record_convert` turns one into the other, so that this
module and its users stay free of protobuf (STYLE.md rule 1).

Presence: in change records, ``None`` means "unchanged" (proto3 ``optional`` /
an unset ``ReplicaList``), and a tuple, even empty, means "replace with this".
Replica lists are tuples of broker ids so records are hashable and immutable.

Must not: do I/O, import protobuf, or validate business rules (the managers do
that before they generate a record; replay trusts committed records).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kraftlog.ids import ZERO_UUID, Uuid


class LeaderRecoveryState(enum.IntEnum):
    """KIP-704, with Kafka's numbers."""

    RECOVERED = 0
    RECOVERING = 1


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type, with Kafka's numbers."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


NO_LEADER = -1
"""``leader`` of a partition that has none (Kafka's ``LeaderConstants.NO_LEADER``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """A listener of a broker or controller."""

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True, kw_only=True)
class SupportedFeature:
    """A feature a node supports, as a closed range of levels."""

    name: str
    min_supported_version: int
    max_supported_version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecord:
    """A broker registered (or re-registered after a restart); replaces an earlier one."""

    broker_id: int
    incarnation_id: Uuid
    broker_epoch: int
    endpoints: tuple[Endpoint, ...] = ()
    features: tuple[SupportedFeature, ...] = ()
    rack: str = ""
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: tuple[Uuid, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRecord:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationChangeRecord:
    """``None`` fields are unchanged."""

    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBrokerRecord:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfenceBrokerRecord:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord:
    name: str
    topic_id: Uuid


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveTopicRecord:
    topic_id: Uuid


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord:
    """The full state of one partition, at creation and in snapshots."""

    topic_id: Uuid
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChangeRecord:
    """Only changed fields are set (``None`` = unchanged).

    Replay (Kafka's ``PartitionRegistration.merge``): every change bumps the
    partition epoch by one; one that sets ``leader``, even to the same broker,
    also bumps the leader epoch by one.
    """

    topic_id: Uuid
    partition_id: int
    leader: int | None = None
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader_recovery_state: LeaderRecoveryState | None = None
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord:
    """A dynamic config set (``value`` a string) or removed (``value`` None)."""

    resource_type: ConfigResourceType
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureLevelRecord:
    """A finalized feature level; 0 removes the feature."""

    name: str
    feature_level: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NoOpRecord:
    """Written by an idle active controller every ``metadata.max.idle.interval.ms``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsRecord:
    broker_id: int
    broker_epoch: int
    next_producer_id: int


MetadataRecord = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | BrokerRegistrationChangeRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | TopicRecord
    | RemoveTopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | ConfigRecord
    | FeatureLevelRecord
    | NoOpRecord
    | ProducerIdsRecord
)
"""Any metadata record value."""

RECORD_TYPES: tuple[type[MetadataRecord], ...] = (
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    UnfenceBrokerRecord,
    TopicRecord,
    RemoveTopicRecord,
    PartitionRecord,
    PartitionChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    NoOpRecord,
    ProducerIdsRecord,
)
"""Every record class, in the order of the proto oneof's field numbers (1..13)."""

__all__ = [
    "NO_LEADER",
    "RECORD_TYPES",
    "ZERO_UUID",
    "BrokerRegistrationChangeRecord",
    "ConfigRecord",
    "ConfigResourceType",
    "Endpoint",
    "FeatureLevelRecord",
    "FenceBrokerRecord",
    "LeaderRecoveryState",
    "MetadataRecord",
    "NoOpRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "RemoveTopicRecord",
    "SupportedFeature",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
]
