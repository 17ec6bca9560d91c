"""Topic-partition keys and Kafka's topic-name rules.

Owns :class:`TopicPartition` (the key of offset checkpoints, of a broker's
replicas and of a partition directory ``<topic>-<partition>``) and
:func:`validate_topic_name`. Used by checkpoints, the segmented log's
directory layout, the broker and the admin service (CreateTopics validation).

Pure value code: no I/O. An illegal topic name or partition directory name
raises :class:`kraftlog.errors.InvalidTopicError` (a ``ValueError`` too) naming the
bad value; file readers wrap it into a ``CorruptFileError`` naming the file and
line, RPC handlers answer INVALID_TOPIC_EXCEPTION.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kraftlog.errors import InvalidTopicError

METADATA_PARTITION_DIR = "__cluster_metadata-0"
"""The KRaft metadata log's partition directory (topic ``__cluster_metadata``, partition 0)."""

MAX_TOPIC_NAME_LENGTH = 249
"""Kafka's limit (``Topic.MAX_NAME_LENGTH``): 255 minus room for ``-<partition>``
and the ``.<uuid>-delete`` suffix a deleted partition directory gets."""

MAX_PARTITION = 2**31 - 1
"""Partition ids are int32 on the wire."""

_LEGAL_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION_DIGITS = re.compile(r"0|[1-9][0-9]*")


def validate_topic_name(topic: str) -> None:
    """Raise InvalidTopicError unless ``topic`` is a legal Kafka topic name.

    The rules are Kafka's ``Topic.validate``: non-empty, not ``.`` or ``..``
    (they would name the log directory's parent), at most 249 characters, and
    only ASCII letters, digits, ``.``, ``_`` and ``-``.
    """
    if not topic:
        raise InvalidTopicError("topic name is illegal, it can't be empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {topic!r}")
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name {topic[:40]!r}... is illegal, it can't be longer than "
            f"{MAX_TOPIC_NAME_LENGTH} characters (it has {len(topic)})"
        )
    if not _LEGAL_TOPIC_CHARS.fullmatch(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class TopicPartition:
    """One partition of one topic. Ordered by (topic, partition) for stable output."""

    topic: str
    partition: int

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        if isinstance(self.partition, bool) or not isinstance(self.partition, int):
            raise ValueError(f"partition of {self.topic!r} must be an int, got {self.partition!r}")
        if not 0 <= self.partition <= MAX_PARTITION:
            raise ValueError(
                f"partition of {self.topic!r} must be in [0, {MAX_PARTITION}], got {self.partition}"
            )

    @property
    def dir_name(self) -> str:
        """The partition's log directory name, ``<topic>-<partition>`` (Kafka's layout)."""
        return f"{self.topic}-{self.partition}"

    def __str__(self) -> str:
        return self.dir_name


def parse_dir_name(name: str) -> TopicPartition:
    """Parse a partition directory name ``<topic>-<partition>`` back to its key.

    The topic may itself contain ``-``; the partition is what follows the last
    one. Raises InvalidTopicError naming the directory for anything else, as
    Kafka's ``UnifiedLog.parseTopicPartitionName`` refuses it (``-delete`` /
    ``-future`` / ``-stray`` directories are not partition logs).
    """
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic:
        raise InvalidTopicError(f"directory name {name!r} is not of the form <topic>-<partition>")
    if not _PARTITION_DIGITS.fullmatch(partition):
        raise InvalidTopicError(
            f"directory name {name!r} is not of the form <topic>-<partition>: "
            f"{partition!r} is not a partition number"
        )
    try:
        return TopicPartition(topic=topic, partition=int(partition))
    except ValueError as exc:
        raise InvalidTopicError(f"directory name {name!r}: {exc}") from None
