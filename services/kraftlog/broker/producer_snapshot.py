"""Producer state snapshots: ``<offset>.snapshot`` files in a partition directory (Kafka's producer snapshots).

A snapshot at offset ``S`` holds the producer state of the log below ``S``
(:class:`kraftlog.broker.producer_state.ProducerStateManager`), so a broker
that restarts replays batch headers from ``S`` instead of from the log start.
The file name is Kafka's (20-digit offset, ``.snapshot``); the bytes are
kraftlog's, because each producer keeps its last five batches rather than
Kafka's last one. Big-endian::

    version      int16 = 1
    crc          uint32     CRC-32C of everything after this field
    count        int32      producers
    count x      producerId int64, producerEpoch int16, batches int8 (1..5),
                 batches x (firstSequence int32, lastSequence int32,
                            firstOffset int64, lastOffset int64)

Rules (callers: :mod:`kraftlog.broker.partition`):

* a snapshot is written only at an offset the log has fsynced (at or below its
  recovery point), atomically (temp file, fsync, rename), so a crash cannot
  leave one that describes data the log lost;
* snapshots above a truncation point are deleted *before* the log is cut;
* on load, snapshots above the log end or below the log start are deleted,
  and an unreadable one is deleted and logged: it is only a cache, the log
  can always be replayed instead.

No clock, no asyncio: plain file I/O like :mod:`kraftlog.storage`.
"""

from __future__ import annotations

import logging
import os
import struct

import crc32c

from kraftlog.broker import producer_state as ps
from kraftlog.errors import CorruptFileError
from kraftlog.storage import atomic_file

logger = logging.getLogger(__name__)

SUFFIX = ".snapshot"
VERSION = 1
KEEP = 2
"""Snapshots kept per partition (the newest ones)."""

_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhb")
_BATCH = struct.Struct(">iiqq")


def file_name(offset: int) -> str:
    return f"{offset:020d}{SUFFIX}"


def list_offsets(directory: str) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    offsets = []
    for name in os.listdir(directory):
        stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else ""
        if len(stem) == 20 and stem.isdigit():
            offsets.append(int(stem))
    return sorted(offsets)


def encode(producers: list[ps.ProducerEntry]) -> bytes:
    body = bytearray(_COUNT.pack(len(producers)))
    for entry in producers:
        body += _PRODUCER.pack(entry.producer_id, entry.producer_epoch, len(entry.batches))
        for b in entry.batches:
            body += _BATCH.pack(b.first_sequence, b.last_sequence, b.first_offset, b.last_offset)
    return _HEAD.pack(VERSION, crc32c.crc32c(body)) + bytes(body)


def decode(path: str, data: bytes) -> list[ps.ProducerEntry]:
    """The producers of a snapshot file; CorruptFileError for a bad version, CRC or length."""
    try:
        version, crc = _HEAD.unpack_from(data, 0)
        if version != VERSION:
            raise CorruptFileError(path, f"unsupported producer snapshot version {version}")
        body = memoryview(data)[_HEAD.size:]
        if crc32c.crc32c(body) != crc:
            raise CorruptFileError(path, "producer snapshot fails its CRC")
        (count,) = _COUNT.unpack_from(body, 0)
        pos = _COUNT.size
        out: list[ps.ProducerEntry] = []
        for _ in range(count):
            producer_id, epoch, batch_count = _PRODUCER.unpack_from(body, pos)
            pos += _PRODUCER.size
            if not 1 <= batch_count <= ps.NUM_BATCHES_TO_RETAIN:
                raise CorruptFileError(path, f"producer {producer_id} has {batch_count} batches")
            batches = []
            for _ in range(batch_count):
                first_seq, last_seq, first_offset, last_offset = _BATCH.unpack_from(body, pos)
                pos += _BATCH.size
                batches.append(ps.BatchMetadata(first_sequence=first_seq, last_sequence=last_seq,
                                                first_offset=first_offset, last_offset=last_offset))
            out.append(ps.ProducerEntry(producer_id=producer_id, producer_epoch=epoch, batches=tuple(batches)))
        if pos != len(body):
            raise CorruptFileError(path, f"{len(body) - pos} trailing bytes")
        return out
    except struct.error as exc:
        raise CorruptFileError(path, f"truncated producer snapshot: {exc}") from None


def write(directory: str, offset: int, producers: list[ps.ProducerEntry]) -> None:
    """Write ``<offset>.snapshot`` atomically and keep only the newest :data:`KEEP` snapshots."""
    atomic_file.write_atomically(os.path.join(directory, file_name(offset)), encode(producers))
    for old in list_offsets(directory)[:-KEEP]:
        _delete(directory, old, reason="superseded")


def delete_above(directory: str, offset: int) -> None:
    """Delete snapshots at offsets above ``offset`` (before the log is cut there)."""
    for found in list_offsets(directory):
        if found > offset:
            _delete(directory, found, reason=f"above truncation offset {offset}")


def load_latest(directory: str, *, log_start_offset: int, log_end_offset: int
                ) -> tuple[int, list[ps.ProducerEntry]] | None:
    """``(offset, producers)`` of the newest usable snapshot in [log start, log end], None if none.

    Deletes snapshots outside that range and unreadable ones (logged).
    """
    for offset in reversed(list_offsets(directory)):
        if offset > log_end_offset or offset < log_start_offset:
            _delete(directory, offset, reason=f"outside the log [{log_start_offset}, {log_end_offset}]")
            continue
        path = os.path.join(directory, file_name(offset))
        try:
            with open(path, "rb") as f:
                return offset, decode(path, f.read())
        except (OSError, CorruptFileError) as exc:
            logger.warning("dir=%s event=producer_snapshot_unreadable offset=%d reason=%r", directory, offset,
                           str(exc))
            _delete(directory, offset, reason="unreadable")
    return None


def _delete(directory: str, offset: int, *, reason: str) -> None:
    try:
        os.unlink(os.path.join(directory, file_name(offset)))
    except FileNotFoundError:
        return
    logger.info("dir=%s event=producer_snapshot_deleted offset=%d reason=%r", directory, offset, reason)
