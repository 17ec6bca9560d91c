"""``kraftlog quorum history``'s core: the raft epochs a metadata log remembers, as a timeline.

Owns :func:`build_history`, which turns the bytes of a ``__cluster_metadata-0``
directory's ``*.log`` segments and ``*.checkpoint`` snapshots into a
:class:`QuorumHistory`, and the text and JSON renderings of it.
Every epoch a leader won starts with a LeaderChange control record (KIP-595):
it names the leader, the voters and the voters that granted the vote, and its
batch timestamp says when the leader took over. The batches that follow carry
the epoch in their header, so the last of them says when the epoch was last
heard of; the *leaderless gap* before epoch N+1 is the time from the last batch
of the epoch before it to N+1's LeaderChange. An active controller writes a
NoOpRecord every ``metadata.max.idle.interval.ms``, so the gap is exact to
within that interval (it is an upper bound on the time nobody led).

Epochs whose LeaderChange is gone (the log start moved past it when a snapshot
was taken) still appear, from their batches, with the leader unknown; the
snapshots' ids and headers are listed as well.

Timestamps are what the leader's raft log stamped on the batch (CreateTime, wall
clock, ms since the Unix epoch). Values below :data:`WALL_CLOCK_FLOOR_MS` cannot be
wall time (logs written by the simulator, or before the raft driver stamped wall
time); they are shown raw.

Called by :mod:`.quorum_commands` (which reads the files) and by tests. Read-only
and I/O-free: it decodes bytes it is given and never raises for bad bytes — a
torn or corrupt tail ends the scan of that segment with a warning, as recovery
would truncate there.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from kraftlog import errors
from kraftlog.raft import control_records as cr
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb

WALL_CLOCK_FLOOR_MS = 10**12
"""2001-09-09 in Unix-epoch ms: smaller timestamps come from a monotonic clock."""
NO_TIMESTAMP = -1


class EpochSource(enum.Enum):
    """Where an epoch's leader came from."""

    LEADER_CHANGE = "leader_change"
    """Its LeaderChange control record is in the log."""
    BATCHES_ONLY = "batches_only"
    """Only batches of the epoch remain (the LeaderChange was truncated into a snapshot)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEntry:
    """One raft epoch as the log shows it. Offsets are log offsets; times are ms."""

    epoch: int
    leader_id: int
    """-1 when the LeaderChange record is not in the log."""
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]
    source: EpochSource
    start_offset: int
    """The offset of the LeaderChange record (or of the epoch's first remaining batch)."""
    start_timestamp_ms: int
    """The LeaderChange batch's timestamp: when the leader took over."""
    last_offset: int
    last_timestamp_ms: int
    """The timestamp of the epoch's last batch in the log."""
    previous_epoch: int | None
    """The epoch before this one in the log (epochs whose elections failed leave no trace)."""
    leaderless_ms: int | None
    """Last batch of ``previous_epoch`` to this epoch's LeaderChange; None if unknown."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotEntry:
    snapshot_id: OffsetAndEpoch
    last_contained_log_timestamp_ms: int
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QuorumHistory:
    epochs: tuple[EpochEntry, ...]
    snapshots: tuple[SnapshotEntry, ...]
    warnings: tuple[str, ...]
    log_start_offset: int | None
    """The first offset found in the segments, None for an empty log."""
    log_end_offset: int | None
    """One past the last valid offset, None for an empty log."""


@dataclass(slots=True, kw_only=True)
class _Building:
    """An epoch being accumulated while batches stream by (mutable)."""

    epoch: int
    start_offset: int
    start_timestamp_ms: int
    last_offset: int
    last_timestamp_ms: int
    leader_change: cr.LeaderChangeMessage | None = None
    extra_leader_changes: list[int] = field(default_factory=list)


def _leader_change_of(header: bh.BatchHeader) -> cr.LeaderChangeMessage | None:
    """The LeaderChange in a control batch; None for other control records."""
    for batch in rb.decode_batches(header.view):
        for record in batch.records:
            if cr.decode_key(record.key) is cr.ControlRecordType.LEADER_CHANGE:
                return cr.decode_leader_change(record.value)
    return None


def snapshot_entry(snapshot_id: OffsetAndEpoch, data: bytes) -> SnapshotEntry:
    """The id and header of one snapshot; only its first batch is decoded."""
    try:
        first = next(bh.iter_batches(data), None)
        if first is None:
            raise errors.CorruptRecordError("no whole batch")
        first.validate()
        batch = rb.decode_batches(first.view)[0]
        if not batch.is_control or len(batch.records) != 1 or \
                cr.decode_key(batch.records[0].key) is not cr.ControlRecordType.SNAPSHOT_HEADER:
            raise errors.CorruptRecordError("the first batch is not a SnapshotHeader")
        header = cr.decode_snapshot_header(batch.records[0].value)
    except errors.CorruptRecordError as exc:
        return SnapshotEntry(snapshot_id=snapshot_id, last_contained_log_timestamp_ms=-1,
                             error=str(exc))
    return SnapshotEntry(snapshot_id=snapshot_id,
                         last_contained_log_timestamp_ms=header.last_contained_log_timestamp)


def build_history(segments: Sequence[tuple[str, bytes]],
                  snapshots: Sequence[tuple[OffsetAndEpoch, bytes]] = ()) -> QuorumHistory:
    """The timeline of ``segments`` (``(name, bytes)`` in base-offset order) and ``snapshots``."""
    warnings: list[str] = []
    built: list[_Building] = []
    next_offset: int | None = None
    start_offset: int | None = None
    for name, data in segments:
        scan = bh.scan_valid_prefix(data)
        if scan.error is not None:
            warnings.append(f"{name}: {scan.error}; the rest of this segment is not read "
                            "(recovery truncates a log there)")
        try:
            for header in bh.iter_batches(memoryview(data)[:scan.valid_bytes]):
                if next_offset is not None and header.base_offset < next_offset:
                    warnings.append(f"{name}: batch at offset {header.base_offset} overlaps the "
                                    f"previous one (expected >= {next_offset}); skipped")
                    continue
                if start_offset is None:
                    start_offset = header.base_offset
                next_offset = header.last_offset + 1
                _add_batch(built, header, warnings, name)
        except errors.CorruptRecordError as exc:
            warnings.append(f"{name}: {exc}; the rest of this segment is not read")
    epochs: list[EpochEntry] = []
    previous: _Building | None = None
    for b in built:
        leader_change = b.leader_change
        gap: int | None = None
        if previous is not None and leader_change is not None \
                and b.start_timestamp_ms >= 0 and previous.last_timestamp_ms >= 0:
            gap = max(0, b.start_timestamp_ms - previous.last_timestamp_ms)
        epochs.append(EpochEntry(
            epoch=b.epoch,
            leader_id=leader_change.leader_id if leader_change else -1,
            voters=leader_change.voters if leader_change else (),
            granting_voters=leader_change.granting_voters if leader_change else (),
            source=EpochSource.LEADER_CHANGE if leader_change else EpochSource.BATCHES_ONLY,
            start_offset=b.start_offset, start_timestamp_ms=b.start_timestamp_ms,
            last_offset=b.last_offset, last_timestamp_ms=b.last_timestamp_ms,
            previous_epoch=previous.epoch if previous else None, leaderless_ms=gap))
        previous = b
    return QuorumHistory(
        epochs=tuple(epochs),
        snapshots=tuple(snapshot_entry(sid, data) for sid, data in
                        sorted(snapshots, key=lambda s: (s[0].offset, s[0].epoch))),
        warnings=tuple(warnings), log_start_offset=start_offset, log_end_offset=next_offset)


def _add_batch(built: list[_Building], header: bh.BatchHeader, warnings: list[str],
               name: str) -> None:
    epoch = header.partition_leader_epoch
    timestamp_ms = header.max_timestamp
    leader_change: cr.LeaderChangeMessage | None = None
    if header.is_control:
        try:
            leader_change = _leader_change_of(header)
        except errors.CorruptRecordError as exc:
            warnings.append(f"{name}: control batch at offset {header.base_offset}: {exc}")
    current = built[-1] if built else None
    if current is None or epoch != current.epoch:
        if current is not None and epoch < current.epoch:
            warnings.append(f"{name}: batch at offset {header.base_offset} has epoch {epoch} "
                            f"below the previous epoch {current.epoch}")
        current = _Building(epoch=epoch, start_offset=header.base_offset,
                            start_timestamp_ms=timestamp_ms, last_offset=header.last_offset,
                            last_timestamp_ms=timestamp_ms)
        built.append(current)
    if leader_change is not None:
        if current.leader_change is None and current.start_offset == header.base_offset:
            current.leader_change = leader_change
        else:
            # A leader writes exactly one, first; another one means a tool wrote this log.
            current.extra_leader_changes.append(header.base_offset)
            warnings.append(f"{name}: LeaderChange at offset {header.base_offset} is not the "
                            f"first batch of epoch {epoch}")
    current.last_offset = header.last_offset
    current.last_timestamp_ms = max(current.last_timestamp_ms, timestamp_ms)


# -- rendering ------------------------------------------------------------------------------------

def format_timestamp(timestamp_ms: int) -> str:
    """ISO-8601 UTC for Unix-epoch ms; raw ms (monotonic clock) otherwise; ``-`` for none."""
    if timestamp_ms < 0:
        return "-"
    if timestamp_ms < WALL_CLOCK_FLOOR_MS:
        return f"{timestamp_ms}ms(mono)"
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{timestamp_ms % 1000:03d}Z"


def _ids(ids: Sequence[int]) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i])
              for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in (header, *rows)]


def format_text(history: QuorumHistory) -> list[str]:
    """The timeline as aligned text lines (snapshots, epochs, then warnings)."""
    lines: list[str] = []
    for s in history.snapshots:
        detail = (f"error: {s.error}" if s.error else
                  f"LastContainedLogTimestamp: "
                  f"{format_timestamp(s.last_contained_log_timestamp_ms)}")
        lines.append(f"Snapshot  EndOffset: {s.snapshot_id.offset}  "
                     f"Epoch: {s.snapshot_id.epoch}  {detail}")
    if history.log_start_offset is None:
        lines.append("The metadata log holds no batches.")
    else:
        lines.append(f"Log offsets {history.log_start_offset}..{history.log_end_offset} "
                     f"(end exclusive), {len(history.epochs)} epochs")
        header = ("Epoch", "Leader", "Voters", "GrantingVoters", "StartOffset", "LeaderSince",
                  "LeaderlessMs", "LastOffset", "LastBatchTime")
        rows = [(str(e.epoch), str(e.leader_id) if e.leader_id >= 0 else "?",
                 _ids(e.voters) if e.voters else "?",
                 _ids(e.granting_voters) if e.source is EpochSource.LEADER_CHANGE else "?",
                 str(e.start_offset), format_timestamp(e.start_timestamp_ms),
                 "-" if e.leaderless_ms is None else str(e.leaderless_ms),
                 str(e.last_offset), format_timestamp(e.last_timestamp_ms))
                for e in history.epochs]
        lines.extend(_table(header, rows))
        gaps = [e for e in history.epochs if e.leaderless_ms is not None]
        if gaps:
            worst = max(gaps, key=lambda e: e.leaderless_ms or 0)
            lines.append(f"Leader changes: {len(gaps)}; longest leaderless gap: "
                         f"{worst.leaderless_ms} ms (before epoch {worst.epoch})")
    lines.extend(f"Warning: {w}" for w in history.warnings)
    return lines


def to_json(history: QuorumHistory) -> dict[str, object]:
    """A JSON-ready dict; camelCase keys as Kafka's tools print."""
    return {
        "logStartOffset": history.log_start_offset,
        "logEndOffset": history.log_end_offset,
        "snapshots": [{"endOffset": s.snapshot_id.offset, "epoch": s.snapshot_id.epoch,
                       "lastContainedLogTimestamp": s.last_contained_log_timestamp_ms,
                       **({"error": s.error} if s.error else {})}
                      for s in history.snapshots],
        "epochs": [{"epoch": e.epoch, "leaderId": e.leader_id, "voters": list(e.voters),
                    "grantingVoters": list(e.granting_voters), "source": e.source.value,
                    "startOffset": e.start_offset, "leaderSinceTimestamp": e.start_timestamp_ms,
                    "lastOffset": e.last_offset, "lastBatchTimestamp": e.last_timestamp_ms,
                    "previousEpoch": e.previous_epoch, "leaderlessMs": e.leaderless_ms}
                   for e in history.epochs],
        "warnings": list(history.warnings),
    }
