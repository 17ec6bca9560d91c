"""The kraftlog exception tree.

Shallow on purpose (after httpx's ``_exceptions``): callers catch
``KraftlogError`` for anything the system raises deliberately, or one of the
few leaves below when they can act on it. Expected outcomes of RPCs travel as
error codes in responses, not as exceptions; these are for local failures and
invariant violations.

    KraftlogError
    ├── ConfigError             bad configuration value or file
    ├── StorageError            something on disk is wrong
    │   ├── CorruptRecordError  a record batch fails its size/CRC/format checks
    │   │   └── UnsupportedCompressionTypeError  a batch names a codec id kraftlog cannot handle
    │   ├── CorruptFileError    a checkpoint / meta.properties / quorum-state file is unreadable
    │   └── InconsistentStorageError  a data dir belongs to another cluster or node
    ├── InvalidTopicError       an illegal topic name (also a ValueError)
    ├── OffsetOutOfRangeError   a read or truncation names an offset the log does not hold
    │   └── UnexpectedAppendOffsetError  a follower append does not start at the log end
    ├── NotLeaderError          this node is not the leader; carries a hint
    ├── StaleEpochError         a request carries an epoch older than ours
    └── InvariantViolation      a bug: state that must never happen (fatal, never swallowed)
"""

from __future__ import annotations


class KraftlogError(Exception):
    """Base class of every error kraftlog raises on purpose."""


class ConfigError(KraftlogError):
    """A configuration value or file is missing or invalid."""


class StorageError(KraftlogError):
    """Something on disk is not as it should be."""


class CorruptRecordError(StorageError):
    """A record batch fails its size, magic or CRC checks.

    ``path`` and ``position`` name where, when known.
    """

    def __init__(self, message: str, *, path: str | None = None, position: int | None = None):
        where = ""
        if path is not None:
            where = f" in {path}"
            if position is not None:
                where += f" at byte {position}"
        super().__init__(message + where)
        self.path = path
        self.position = position


class UnsupportedCompressionTypeError(CorruptRecordError):
    """A batch's attributes name a compression codec that cannot be used here.

    Codec ids 5-7 do not exist in Kafka; SNAPPY (2) is a Kafka codec that kraftlog
    cannot decompress. Kafka's error code UNSUPPORTED_COMPRESSION_TYPE (76).
    """


class CorruptFileError(StorageError):
    """A small metadata file (checkpoint, meta.properties, quorum-state) is unreadable."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class InconsistentStorageError(StorageError):
    """A data directory was formatted for a different cluster or node."""


class InvalidTopicError(KraftlogError, ValueError):
    """A topic name breaks Kafka's rules, or a directory name is not ``<topic>-<partition>``.

    Kafka's InvalidTopicException, error code INVALID_TOPIC_EXCEPTION (17). Also
    a ``ValueError``, which is what name validation raised before it existed.
    """


class OffsetOutOfRangeError(KraftlogError):
    """An offset lies outside [log start offset, log end offset]."""


class UnexpectedAppendOffsetError(OffsetOutOfRangeError):
    """A follower append's first batch does not start at the log end offset.

    Kafka's UnexpectedAppendOffsetException.
    ``first_offset`` and ``last_offset`` are the append's; ``log_end_offset`` the log's.
    The replica fetcher treats it as a reason to truncate or refetch, not as corruption.
    """

    def __init__(self, message: str, *, first_offset: int, last_offset: int, log_end_offset: int):
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_end_offset = log_end_offset


class NotLeaderError(KraftlogError):
    """This node is not the leader. ``leader_id`` is a hint, -1 when unknown."""

    def __init__(self, message: str, *, leader_id: int = -1, leader_endpoint: str = ""):
        super().__init__(message)
        self.leader_id = leader_id
        self.leader_endpoint = leader_endpoint


class StaleEpochError(KraftlogError):
    """A request carries an epoch older than the one we know."""


class InvariantViolation(KraftlogError):
    """A condition that must never hold did. Fatal: log it and stop, never swallow it."""
