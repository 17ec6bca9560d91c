"""What the producer and consumer raise, and which broker error codes are worth a retry.

A small tree under :class:`kraftlog.errors.KraftlogError` (after httpx's
``_exceptions``), so the CLI prints any of them as one line::

    KraftlogError
    └── ClientError                  anything the client library raises on purpose
        ├── KafkaApiError            a broker answered an error code; ``.code`` is the ErrorCode
        │   ├── UnknownTopicError    UNKNOWN_TOPIC_OR_PARTITION that outlived the wait
        │   ├── OffsetOutOfRangeError OFFSET_OUT_OF_RANGE with auto.offset.reset=none
        │   └── CorruptRecordBatchError a fetched batch does not decode (CORRUPT_MESSAGE); names
        │                            the partition and offset the consumer stopped at
        ├── BrokersUnavailableError  no broker answered; ``.addresses`` names what was tried
        ├── ClientTimeoutError       a deadline passed (max.block.ms, delivery.timeout.ms, ...)
        └── ClientClosedError        the producer or consumer was used after close()

The messages start with Kafka's error name (``NOT_ENOUGH_REPLICAS: ...``) so an
operator can look them up. Pure module: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from kraftlog.error_codes import ErrorCode
from kraftlog.errors import KraftlogError
from kraftlog.ids import TopicPartition

RETRIABLE_CODES: frozenset[ErrorCode] = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.CORRUPT_MESSAGE,
})
"""Kafka's ``RetriableException`` subclasses among the codes brokers answer here.

CORRUPT_MESSAGE is retriable in Kafka too (the bytes may have been damaged in
transit); MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD and
INVALID_REQUIRED_ACKS are not: resending the same bytes cannot help."""

NOT_APPENDED_CODES: frozenset[ErrorCode] = frozenset({
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ErrorCode.UNKNOWN_PRODUCER_ID,
    ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.INVALID_RECORD,
    ErrorCode.INVALID_TIMESTAMP,
    ErrorCode.MESSAGE_TOO_LARGE,
    ErrorCode.RECORD_LIST_TOO_LARGE,
    ErrorCode.INVALID_REQUIRED_ACKS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
})
"""Codes with which a broker refuses a produced batch *before* appending it: after one
of these the batch is not in any log. Every other outcome (another code, a transport
failure) may come after the append: NOT_ENOUGH_REPLICAS_AFTER_APPEND and
REQUEST_TIMED_OUT always do, and NOT_LEADER_OR_FOLLOWER does when the leader lost its
leadership while the batch waited for its replicas (the next leader may keep it)."""

METADATA_REFRESH_CODES: frozenset[ErrorCode] = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.NETWORK_EXCEPTION,
})
"""Codes after which the client's idea of the partition's leader is probably stale."""


def is_retriable(code: ErrorCode) -> bool:
    """True when sending the same request again (maybe elsewhere) may succeed."""
    return code in RETRIABLE_CODES


def was_not_appended(code: ErrorCode) -> bool:
    """True when a Produce answered ``code`` left its batch out of the log for certain."""
    return code in NOT_APPENDED_CODES


def needs_metadata_refresh(code: ErrorCode) -> bool:
    """True when the error says the leader moved or is not known yet."""
    return code in METADATA_REFRESH_CODES


def code_of(value: int) -> ErrorCode:
    """The ErrorCode for a wire value; UNKNOWN_SERVER_ERROR for a number Kafka never defined."""
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class ClientError(KraftlogError):
    """Base of everything the client library raises on purpose."""


class KafkaApiError(ClientError):
    """A broker answered ``code``; the message starts with its Kafka name."""

    def __init__(self, code: ErrorCode, message: str = "", *, context: str = "") -> None:
        text = code.name
        if context:
            text += f" ({context})"
        if message and message != code.name:
            text += f": {message}"
        super().__init__(text)
        self.code = code
        self.retriable = is_retriable(code)


class UnknownTopicError(KafkaApiError):
    """The topic (or partition) does not exist, still, after waiting for it."""

    def __init__(self, topic: str, message: str = "", *, context: str = "") -> None:
        super().__init__(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         message or f"topic {topic!r} does not exist", context=context)
        self.topic = topic


class OffsetOutOfRangeError(KafkaApiError):
    """A fetch position is outside the log and auto.offset.reset is ``none``."""

    def __init__(self, message: str, *, offsets: Mapping[object, int]) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)
        self.offsets = dict(offsets)


class CorruptRecordBatchError(KafkaApiError):
    """A fetched batch fails its CRC or does not decode (Kafka's consumer raises a
    KafkaException wrapping CorruptRecordException, "please seek past the record").

    ``topic_partition`` and ``offset`` name where the consumer stopped: every record
    before ``offset`` was delivered, and its position stays there until the application
    seeks. ``next_offset`` is the offset past the bad batch (``seek(tp, next_offset)``
    skips it), None when the batch's header is too damaged to say. Polling again raises
    again: the same bytes come back, so it is not retriable.
    """

    def __init__(self, topic_partition: TopicPartition, offset: int, next_offset: int | None,
                 cause: str) -> None:
        skip = (f"seek to offset {next_offset} to skip the batch" if next_offset is not None
                else "seek past the batch to skip it")
        super().__init__(ErrorCode.CORRUPT_MESSAGE,
                         f"{topic_partition} at offset {offset}: {cause}; every record before "
                         f"offset {offset} was delivered; {skip}")
        self.topic_partition = topic_partition
        self.offset = offset
        self.next_offset = next_offset
        self.retriable = False


class BrokersUnavailableError(ClientError):
    """No broker could be reached. ``addresses`` maps each address tried to why it failed."""

    def __init__(self, addresses: Mapping[str, str], what: str = "") -> None:
        tried = ", ".join(f"{address} ({why})" for address, why in addresses.items())
        prefix = f"{what}: " if what else ""
        super().__init__(f"{prefix}no broker reachable: {tried or 'no address to try'}")
        self.addresses = dict(addresses)


class ClientTimeoutError(ClientError):
    """A deadline passed before the operation completed."""


class ClientClosedError(ClientError):
    """The producer or consumer was used after ``close()``."""


def error_for(code: ErrorCode, message: str = "", *, topic: str = "",
              context: str = "") -> KafkaApiError:
    """The exception for a broker's error answer (UnknownTopicError for unknown topics)."""
    if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and topic:
        return UnknownTopicError(topic, message, context=context)
    return KafkaApiError(code, message, context=context)
