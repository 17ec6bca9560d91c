"""Kafka's text checkpoint files: a version line, an entry-count line, one entry per line.

Owns the generic reader/writer (:class:`CheckpointFile` with an
:class:`EntryFormatter`) and the two typed files a data directory holds:

* offset checkpoints, ``topic partition offset`` per line, one file per log dir:
  ``replication-offset-checkpoint`` (high watermarks),
  ``recovery-point-offset-checkpoint`` (flushed offsets, where recovery starts),
  ``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``;
* epoch checkpoints, ``epoch startOffset`` per line, one ``leader-epoch-checkpoint``
  per partition directory (the persistent half of the leader-epoch cache).

Called by the log manager, the leader-epoch cache (:mod:`kraftlog.storage.leader_epoch`)
and ``kraftlog log dump``. Writes are atomic (temp, fsync, rename, fsync dir,
via :mod:`kraftlog.storage.atomic_file`), so a crash leaves the old or the new
file. Reads trust nothing: every departure from the format is a
``CorruptFileError`` naming the file and the line; a missing file reads as
empty (a fresh log dir has none yet). This module must not guess: it never
skips a bad line or returns part of a file.
"""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from kraftlog import errors
from kraftlog import ids as topic_partition
from kraftlog.ids import Epoch, Offset
from kraftlog.storage import atomic_file

CURRENT_VERSION = 0
"""The only version Kafka has ever written for these files."""

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

OFFSET_CHECKPOINT_FILES = (
    REPLICATION_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT,
)

MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1

_INTEGER = re.compile(r"-?[0-9]+")
_FIRST_LINE = 1
_FIRST_ENTRY_LINE = 3  # line 1 is the version, line 2 the count

T = TypeVar("T")


def parse_int(text: str, field: str, *, minimum: int, maximum: int) -> int:
    """A strict decimal integer in [minimum, maximum]; ``ValueError`` naming ``field`` otherwise.

    Stricter than ``int()``: no ``+``, ``_`` or surrounding spaces, which Kafka never writes.
    """
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"{field} {text!r} is not an integer")
    value = int(text)
    if not minimum <= value <= maximum:
        if value < 0 <= minimum:
            raise ValueError(f"{field} {value} is negative")
        raise ValueError(f"{field} {value} is out of range [{minimum}, {maximum}]")
    return value


class EntryFormatter(Protocol[T]):
    """Turns one entry into one line and back (Kafka's ``EntryFormatter``)."""

    def to_line(self, entry: T) -> str:
        """The entry as one line, without the newline."""
        ...

    def from_line(self, line: str) -> T:
        """Parse one line; raise ``ValueError`` with a reason (no file/line: the reader adds them)."""
        ...


def format_checkpoint(entries: Sequence[T], formatter: EntryFormatter[T], *,
                      version: int = CURRENT_VERSION) -> str:
    """The file's text: version, count, then the entries, each line ending in ``\\n``."""
    lines = [str(version), str(len(entries))]
    lines.extend(formatter.to_line(entry) for entry in entries)
    return "\n".join(lines) + "\n"


def _snippet(line: str) -> str:
    return repr(line if len(line) <= 80 else line[:80] + "...")


def parse_checkpoint(data: bytes, formatter: EntryFormatter[T], *, path: str,
                     version: int = CURRENT_VERSION) -> list[T]:
    """Parse a checkpoint file's bytes; any defect is a ``CorruptFileError(path, "line N: ...")``.

    Entry ``i`` (0-based) is on line ``i + 3``; typed readers use that to name
    the line of a whole-file defect such as a duplicate.
    """
    if not data:
        raise errors.CorruptFileError(path, "line 1: file is empty, expected the version line")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        raise errors.CorruptFileError(
            path,
            f"line {line_no}: not UTF-8 text (byte 0x{data[exc.start]:02x} at file offset {exc.start})",
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":
        # The normal case: the last line ends with a newline. A missing final
        # newline is accepted (a hand-edited file), a missing line is not.
        lines.pop()
    # Java's readLine also ends a line at "\r"; accept CRLF files the same way.
    lines = [line.removesuffix("\r") for line in lines]

    try:
        read_version = parse_int(lines[0], "version", minimum=-MAX_INT32 - 1, maximum=MAX_INT32)
    except ValueError as exc:
        raise errors.CorruptFileError(path, f"line {_FIRST_LINE}: {exc}") from None
    if read_version != version:
        raise errors.CorruptFileError(
            path, f"line 1: unrecognised checkpoint version {read_version}, expected {version}"
        )
    if len(lines) < 2:
        raise errors.CorruptFileError(
            path, "line 2: file ends after the version line, expected the entry count"
        )
    try:
        expected = parse_int(lines[1], "entry count", minimum=0, maximum=MAX_INT32)
    except ValueError as exc:
        raise errors.CorruptFileError(path, f"line 2: {exc}") from None

    body = lines[2:]
    if len(body) < expected:
        raise errors.CorruptFileError(
            path,
            f"line {_FIRST_ENTRY_LINE + len(body)}: file ends after {len(body)} entries, "
            f"the count line promised {expected}",
        )
    if len(body) > expected:
        extra_line = _FIRST_ENTRY_LINE + expected
        raise errors.CorruptFileError(
            path,
            f"line {extra_line}: unexpected data after the {expected} entries the count line "
            f"promised: {_snippet(body[expected])}",
        )
    entries: list[T] = []
    for index, line in enumerate(body):
        try:
            entries.append(formatter.from_line(line))
        except ValueError as exc:
            raise errors.CorruptFileError(
                path, f"line {_FIRST_ENTRY_LINE + index}: {exc}: {_snippet(line)}"
            ) from None
    return entries


class CheckpointFile(Generic[T]):
    """One checkpoint file on disk: atomic ``write``, validating ``read``."""

    def __init__(self, path: str | os.PathLike[str], formatter: EntryFormatter[T], *,
                 version: int = CURRENT_VERSION) -> None:
        self._path = pathlib.Path(path)
        self._formatter = formatter
        self._version = version

    @property
    def path(self) -> pathlib.Path:
        return self._path

    def write(self, entries: Iterable[T]) -> None:
        """Replace the file with ``entries`` (crash-safe: old or new content survives)."""
        text = format_checkpoint(list(entries), self._formatter, version=self._version)
        atomic_file.write_text_atomically(self._path, text)

    def read_bytes(self) -> bytes | None:
        """The raw content, ``None`` when the file does not exist."""
        try:
            return self._path.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise errors.CorruptFileError(str(self._path), "is a directory, not a checkpoint file") from None

    def read(self) -> list[T]:
        """The entries; ``[]`` when the file does not exist; ``CorruptFileError`` when it is bad."""
        data = self.read_bytes()
        if data is None:
            return []
        return parse_checkpoint(data, self._formatter, path=str(self._path), version=self._version)


# --- offset checkpoints ----------------------------------------------------------------


class OffsetEntryFormatter:
    """``topic partition offset``, space separated (Kafka's ``OffsetCheckpointFile.Formatter``)."""

    def to_line(self, entry: tuple[topic_partition.TopicPartition, int]) -> str:
        tp, offset = entry
        return f"{tp.topic} {tp.partition} {offset}"

    def from_line(self, line: str) -> tuple[topic_partition.TopicPartition, int]:
        fields = line.split()
        if len(fields) != 3:
            raise ValueError(f"expected 3 fields 'topic partition offset', found {len(fields)}")
        topic, partition_text, offset_text = fields
        partition = parse_int(partition_text, "partition", minimum=0, maximum=MAX_INT32)
        offset = parse_int(offset_text, "offset", minimum=0, maximum=MAX_INT64)
        tp = topic_partition.TopicPartition(topic=topic, partition=partition)
        return tp, offset


class OffsetCheckpointFile:
    """A per-log-dir map TopicPartition -> offset (high watermarks, recovery points, log starts)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file: CheckpointFile[tuple[topic_partition.TopicPartition, int]] = CheckpointFile(
            path, OffsetEntryFormatter()
        )

    @property
    def path(self) -> pathlib.Path:
        return self._file.path

    def write(self, offsets: Mapping[topic_partition.TopicPartition, int]) -> None:
        """Replace the file; entries sorted by (topic, partition) so equal maps give equal bytes."""
        for tp, offset in offsets.items():
            if not 0 <= offset <= MAX_INT64:
                raise ValueError(f"{self.path}: offset {offset} of {tp} is not a valid offset")
        self._file.write(sorted(offsets.items()))

    def read(self) -> dict[topic_partition.TopicPartition, int]:
        """The map; ``{}`` for a missing file; ``CorruptFileError`` names file and line of any defect."""
        entries = self._file.read()
        result: dict[topic_partition.TopicPartition, int] = {}
        for index, (tp, offset) in enumerate(entries):
            if tp in result:
                raise errors.CorruptFileError(
                    str(self.path),
                    f"line {_FIRST_ENTRY_LINE + index}: duplicate entry for partition {tp}",
                )
            result[tp] = offset
        return result


# --- epoch checkpoints -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class EpochEntry:
    """A leader epoch and the offset of the first record written in it (Kafka's ``EpochEntry``)."""

    epoch: Epoch
    start_offset: Offset

    def __post_init__(self) -> None:
        if not 0 <= self.epoch <= MAX_INT32:
            raise ValueError(f"leader epoch {self.epoch} is not in [0, {MAX_INT32}]")
        if not 0 <= self.start_offset <= MAX_INT64:
            raise ValueError(f"start offset {self.start_offset} of epoch {self.epoch} is negative "
                             "or too large")


class EpochEntryFormatter:
    """``epoch startOffset``, space separated (Kafka's ``LeaderEpochCheckpointFile`` formatter)."""

    def to_line(self, entry: EpochEntry) -> str:
        return f"{entry.epoch} {entry.start_offset}"

    def from_line(self, line: str) -> EpochEntry:
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"expected 2 fields 'epoch startOffset', found {len(fields)}")
        epoch = parse_int(fields[0], "epoch", minimum=0, maximum=MAX_INT32)
        start_offset = parse_int(fields[1], "start offset", minimum=0, maximum=MAX_INT64)
        return EpochEntry(epoch=Epoch(epoch), start_offset=Offset(start_offset))


class LeaderEpochCheckpointFile:
    """A partition's ``leader-epoch-checkpoint``: epoch entries, strictly increasing in both fields."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(path, EpochEntryFormatter())

    @property
    def path(self) -> pathlib.Path:
        return self._file.path

    def write(self, entries: Iterable[EpochEntry]) -> None:
        self._file.write(entries)

    def read(self) -> list[EpochEntry]:
        """The entries; ``[]`` for a missing file. Non-monotonic entries are corruption.

        The cache only ever writes strictly increasing epochs and start offsets,
        so anything else did not come from it.
        """
        entries = self._file.read()
        for index in range(1, len(entries)):
            previous, current = entries[index - 1], entries[index]
            if current.epoch <= previous.epoch or current.start_offset <= previous.start_offset:
                raise errors.CorruptFileError(
                    str(self.path),
                    f"line {_FIRST_ENTRY_LINE + index}: entry (epoch {current.epoch}, start offset "
                    f"{current.start_offset}) does not follow (epoch {previous.epoch}, start offset "
                    f"{previous.start_offset}): epochs and start offsets must strictly increase",
                )
        return entries
