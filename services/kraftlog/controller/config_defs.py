"""The topic and broker configs the controller accepts, with Kafka's names, types and defaults.

Owns the catalogue (:data:`TOPIC_CONFIGS`, :data:`BROKER_CONFIGS`) and
:func:`validate_value`, which answers a Kafka-style message for a bad value
or None. A topic config names its broker synonym (``retention.ms`` ->
``log.retention.ms``): the cluster-wide default a topic inherits. Only configs
kraftlog's brokers use (or that Kafka operators routinely set) are listed; an
unknown name is INVALID_CONFIG.

Called by configuration_control. Pure data and parsing; no state.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)


class ConfigType(enum.Enum):
    """Kafka's ``ConfigDef.Type`` subset."""

    BOOLEAN = "boolean"
    STRING = "string"
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    LIST = "list"


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigDef:
    """One config: type, default (as Kafka prints it), valid range or values, synonym, doc."""

    name: str
    type: ConfigType
    default: str
    doc: str
    at_least: float | None = None
    at_most: float | None = None
    valid_values: frozenset[str] | None = None
    broker_synonym: str | None = None
    read_only: bool = False


def _d(
    name: str,
    type_: ConfigType,
    default: str,
    doc: str,
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    valid: tuple[str, ...] | None = None,
    synonym: str | None = None,
    read_only: bool = False,
) -> ConfigDef:
    return ConfigDef(
        name=name,
        type=type_,
        default=default,
        doc=doc,
        at_least=at_least,
        at_most=at_most,
        valid_values=None if valid is None else frozenset(valid),
        broker_synonym=synonym,
        read_only=read_only,
    )


_B, _S, _I, _L, _D, _LIST = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
)
_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_TOPIC = (
    _d(
        "cleanup.policy",
        _LIST,
        "delete",
        "Retention policy: delete and/or compact.",
        valid=("delete", "compact"),
        synonym="log.cleanup.policy",
    ),
    _d(
        "compression.type",
        _S,
        "producer",
        "Final compression type for the topic.",
        valid=_COMPRESSION,
        synonym="compression.type",
    ),
    _d(
        "delete.retention.ms",
        _L,
        "86400000",
        "How long delete tombstones are kept (compacted).",
        at_least=0,
        synonym="log.cleaner.delete.retention.ms",
    ),
    _d(
        "file.delete.delay.ms",
        _L,
        "60000",
        "Wait before deleting a file from the filesystem.",
        at_least=0,
        synonym="log.segment.delete.delay.ms",
    ),
    _d(
        "flush.messages",
        _L,
        str(LONG_MAX),
        "Force an fsync after this many messages.",
        at_least=1,
        synonym="log.flush.interval.messages",
    ),
    _d(
        "flush.ms",
        _L,
        str(LONG_MAX),
        "Force an fsync after this much time.",
        at_least=0,
        synonym="log.flush.interval.ms",
    ),
    _d(
        "follower.replication.throttled.replicas",
        _LIST,
        "",
        "Replicas throttled on the follower side: partition:broker entries or *.",
        synonym=None,
    ),
    _d(
        "index.interval.bytes",
        _I,
        "4096",
        "Bytes between offset index entries.",
        at_least=0,
        synonym="log.index.interval.bytes",
    ),
    _d(
        "leader.replication.throttled.replicas",
        _LIST,
        "",
        "Replicas throttled on the leader side: partition:broker entries or *.",
        synonym=None,
    ),
    _d(
        "max.compaction.lag.ms",
        _L,
        str(LONG_MAX),
        "Longest a message stays uncompacted.",
        at_least=1,
        synonym="log.cleaner.max.compaction.lag.ms",
    ),
    _d(
        "max.message.bytes",
        _I,
        "1048588",
        "Largest record batch size allowed.",
        at_least=0,
        synonym="message.max.bytes",
    ),
    _d(
        "message.timestamp.after.max.ms",
        _L,
        str(LONG_MAX),
        "How far after the leader's clock a CreateTime timestamp may lie, ms.",
        at_least=0,
        synonym="log.message.timestamp.after.max.ms",
    ),
    _d(
        "message.timestamp.before.max.ms",
        _L,
        str(LONG_MAX),
        "How far before the leader's clock a CreateTime timestamp may lie, ms.",
        at_least=0,
        synonym="log.message.timestamp.before.max.ms",
    ),
    _d(
        "message.timestamp.type",
        _S,
        "CreateTime",
        "CreateTime or LogAppendTime.",
        valid=("CreateTime", "LogAppendTime"),
        synonym="log.message.timestamp.type",
    ),
    _d(
        "min.cleanable.dirty.ratio",
        _D,
        "0.5",
        "Dirty ratio above which the log is compacted.",
        at_least=0,
        at_most=1,
        synonym="log.cleaner.min.cleanable.ratio",
    ),
    _d(
        "min.compaction.lag.ms",
        _L,
        "0",
        "Shortest a message stays uncompacted.",
        at_least=0,
        synonym="log.cleaner.min.compaction.lag.ms",
    ),
    _d(
        "min.insync.replicas",
        _I,
        "1",
        "Fewest in-sync replicas for acks=all writes; below it ELR tracking starts (KIP-966).",
        at_least=1,
        synonym="min.insync.replicas",
    ),
    _d("preallocate", _B, "false", "Preallocate segment files.", synonym="log.preallocate"),
    _d(
        "retention.bytes",
        _L,
        "-1",
        "Largest partition size before old segments go; -1 none.",
        synonym="log.retention.bytes",
    ),
    _d(
        "retention.ms",
        _L,
        "604800000",
        "Longest a segment is kept; -1 forever.",
        at_least=-1,
        synonym="log.retention.ms",
    ),
    _d(
        "segment.bytes",
        _I,
        "1073741824",
        "Segment file size.",
        at_least=14,
        synonym="log.segment.bytes",
    ),
    _d(
        "segment.index.bytes",
        _I,
        "10485760",
        "Offset index size.",
        at_least=4,
        synonym="log.index.size.max.bytes",
    ),
    _d(
        "segment.jitter.ms",
        _L,
        "0",
        "Random jitter subtracted from segment.ms.",
        at_least=0,
        synonym="log.roll.jitter.ms",
    ),
    _d(
        "segment.ms",
        _L,
        "604800000",
        "Roll a segment after this long.",
        at_least=1,
        synonym="log.roll.ms",
    ),
    _d(
        "unclean.leader.election.enable",
        _B,
        "false",
        "Elect an out-of-sync replica when no in-sync one is available (may lose data).",
        synonym="unclean.leader.election.enable",
    ),
)

_BROKER_DYNAMIC = (
    _d("compression.type", _S, "producer", "Default compression type.", valid=_COMPRESSION),
    _d(
        "follower.replication.throttled.rate",
        _L,
        str(LONG_MAX),
        "Follower replication throttle, bytes/s.",
        at_least=0,
    ),
    _d(
        "leader.replication.throttled.rate",
        _L,
        str(LONG_MAX),
        "Leader replication throttle, bytes/s.",
        at_least=0,
    ),
    _d(
        "log.cleaner.delete.retention.ms",
        _L,
        "86400000",
        "Default delete.retention.ms.",
        at_least=0,
    ),
    _d(
        "log.cleaner.max.compaction.lag.ms",
        _L,
        str(LONG_MAX),
        "Default max.compaction.lag.ms.",
        at_least=1,
    ),
    _d(
        "log.cleaner.min.cleanable.ratio",
        _D,
        "0.5",
        "Default min.cleanable.dirty.ratio.",
        at_least=0,
        at_most=1,
    ),
    _d("log.cleaner.min.compaction.lag.ms", _L, "0", "Default min.compaction.lag.ms.", at_least=0),
    _d(
        "log.cleanup.policy",
        _LIST,
        "delete",
        "Default cleanup.policy.",
        valid=("delete", "compact"),
    ),
    _d("log.flush.interval.messages", _L, str(LONG_MAX), "Default flush.messages.", at_least=1),
    _d("log.flush.interval.ms", _L, str(LONG_MAX), "Default flush.ms.", at_least=0),
    _d("log.index.interval.bytes", _I, "4096", "Default index.interval.bytes.", at_least=0),
    _d("log.index.size.max.bytes", _I, "10485760", "Default segment.index.bytes.", at_least=4),
    _d("log.message.timestamp.after.max.ms", _L, str(LONG_MAX),
       "Default message.timestamp.after.max.ms.", at_least=0),
    _d("log.message.timestamp.before.max.ms", _L, str(LONG_MAX),
       "Default message.timestamp.before.max.ms.", at_least=0),
    _d(
        "log.message.timestamp.type",
        _S,
        "CreateTime",
        "Default message.timestamp.type.",
        valid=("CreateTime", "LogAppendTime"),
    ),
    _d("log.preallocate", _B, "false", "Default preallocate."),
    _d("log.retention.bytes", _L, "-1", "Default retention.bytes."),
    _d("log.retention.ms", _L, "604800000", "Default retention.ms.", at_least=-1),
    _d("log.roll.jitter.ms", _L, "0", "Default segment.jitter.ms.", at_least=0),
    _d("log.roll.ms", _L, "604800000", "Default segment.ms.", at_least=1),
    _d("log.segment.bytes", _I, "1073741824", "Default segment.bytes.", at_least=14),
    _d("log.segment.delete.delay.ms", _L, "60000", "Default file.delete.delay.ms.", at_least=0),
    _d("message.max.bytes", _I, "1048588", "Default max.message.bytes.", at_least=0),
    _d("min.insync.replicas", _I, "1", "Default min.insync.replicas.", at_least=1),
    _d("num.replica.fetchers", _I, "1", "Replica fetcher threads per source broker.", at_least=1),
    _d("unclean.leader.election.enable", _B, "false", "Default unclean.leader.election.enable."),
)

_BROKER_STATIC = (
    _d(
        "auto.leader.rebalance.enable",
        _B,
        "true",
        "Periodic preferred-leader elections.",
        read_only=True,
    ),
    _d("broker.heartbeat.interval.ms", _I, "2000", "Broker heartbeat interval.", read_only=True),
    _d("broker.session.timeout.ms", _I, "9000", "Broker session timeout.", read_only=True),
    _d("default.replication.factor", _I, "1", "Default replication factor.", read_only=True),
    _d(
        "metadata.max.idle.interval.ms", _I, "500", "NoOpRecord interval when idle.", read_only=True
    ),
    _d("num.partitions", _I, "1", "Default number of partitions.", read_only=True),
)

TOPIC_CONFIGS: Mapping[str, ConfigDef] = {d.name: d for d in _TOPIC}
"""Every topic config the controller accepts."""

BROKER_CONFIGS: Mapping[str, ConfigDef] = {d.name: d for d in (*_BROKER_DYNAMIC, *_BROKER_STATIC)}
"""Every broker config the controller describes; the read-only ones cannot be altered."""


def split_list(value: str) -> list[str]:
    """A LIST value's items (comma-separated, blanks dropped), as Kafka parses them."""
    return [item.strip() for item in value.split(",") if item.strip()]


def validate_value(definition: ConfigDef, value: str) -> str | None:
    """None if ``value`` is valid for ``definition``, else why not (Kafka's wording)."""
    name = definition.name
    kind = definition.type
    text = value.strip()
    number: float
    if kind is ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            return f"{_invalid(value, name)}: Expected value to be either true or false"
        return None
    if kind in (ConfigType.INT, ConfigType.LONG):
        try:
            integer = int(text)
        except ValueError:
            return f"{_invalid(value, name)}: Not a number of type {kind.value.upper()}"
        low, high = (INT_MIN, INT_MAX) if kind is ConfigType.INT else (LONG_MIN, LONG_MAX)
        if not low <= integer <= high:
            return f"{_invalid(value, name)}: Not a number of type {kind.value.upper()}"
        number = integer
    elif kind is ConfigType.DOUBLE:
        try:
            number = float(text)
        except ValueError:
            return f"Invalid value {value} for configuration {name}: Not a number of type DOUBLE"
    elif kind is ConfigType.LIST:
        items = split_list(text)
        if definition.valid_values is not None:
            for item in items:
                if item not in definition.valid_values:
                    return (
                        f"Invalid value {item} for configuration {name}: String must be one of: "
                        f"{', '.join(sorted(definition.valid_values))}"
                    )
        elif name.endswith(".throttled.replicas"):
            for item in items:
                if item != "*" and not _is_partition_broker(item):
                    return (
                        f"Invalid value {value} for configuration {name}: must be a list of "
                        "partition:broker entries or *"
                    )
        return None
    else:
        if definition.valid_values is not None and text not in definition.valid_values:
            return (
                f"Invalid value {value} for configuration {name}: String must be one of: "
                f"{', '.join(sorted(definition.valid_values))}"
            )
        return None
    if definition.at_least is not None and number < definition.at_least:
        return f"{_invalid(value, name)}: Value must be at least {_fmt(definition.at_least)}"
    if definition.at_most is not None and number > definition.at_most:
        return f"{_invalid(value, name)}: Value must be no more than {_fmt(definition.at_most)}"
    return None


def _invalid(value: str, name: str) -> str:
    return f"Invalid value {value} for configuration {name}"


def _fmt(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) else str(bound)


def _is_partition_broker(item: str) -> bool:
    partition, sep, broker = item.partition(":")
    return bool(sep) and partition.isdigit() and broker.isdigit()
