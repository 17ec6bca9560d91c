"""The leader-epoch cache: which leader epoch wrote which offsets of a partition's log.

Owns :class:`LeaderEpochCache` (the in-memory map epoch -> start offset) and
:class:`LeaderEpochFileCache` (the same, persisted to the partition's
``leader-epoch-checkpoint`` after every change). Kafka added this in KIP-101 so a
follower truncates to the point where its log and the leader's diverge, not to
its high watermark (which can lose acknowledged data or leave the replicas
diverged); KIP-279 refined the lookup. :meth:`LeaderEpochCache.end_offset_for`
answers OffsetsForLeaderEpoch and the raft Fetch's diverging-epoch check
(KIP-595): "where did my epoch E end on your log?".

Called by the segmented log (assign on append as leader/follower, truncation on
truncate/retention), the broker's partition logic and the raft replicated log.
Semantics follow Kafka's ``LeaderEpochFileCache`` method for method. Pure: no
clocks or threads; the owning log serialises calls. Invariant, checked by the
tests: entries are strictly increasing in epoch and in start offset.
"""

from __future__ import annotations

import bisect
import os
import pathlib
from collections.abc import Iterable

from kraftlog.ids import Epoch, Offset
from kraftlog.storage import checkpoint

EpochEntry = checkpoint.EpochEntry

UNDEFINED_EPOCH = -1
"""OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH."""
UNDEFINED_EPOCH_OFFSET = -1
"""OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET."""


class LeaderEpochCache:
    """In-memory epoch -> start offset map with Kafka's update and lookup rules.

    Mutators return the entries they removed (or whether they changed
    anything) so the file-backed cache knows when to persist.
    """

    __slots__ = ("_entries", "_epochs")

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        # Parallel sorted lists: _epochs[i] == _entries[i].epoch, for bisect.
        self._entries: list[EpochEntry] = []
        self._epochs: list[int] = []
        for entry in entries:
            self.assign(entry.epoch, entry.start_offset)

    # --- updates ---------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True when the cache changed.

        Kafka's rule: nothing to do when ``epoch`` is already the latest epoch
        and its recorded start is not above ``start_offset`` (the common case:
        every append of the current leader re-asserts it). Otherwise, first
        remove from the end every entry that would break monotonicity (epoch
        >= ``epoch`` or start offset >= ``start_offset``), then append. That
        removal is what lets a new leader's first append overwrite a stale
        entry a follower had for the same offsets.
        """
        entry = EpochEntry(epoch=Epoch(epoch), start_offset=Offset(start_offset))
        if not self._is_update_needed(entry):
            return False
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch
            or self._entries[-1].start_offset >= entry.start_offset
        ):
            self._entries.pop()
            self._epochs.pop()
        self._entries.append(entry)
        self._epochs.append(entry.epoch)
        return True

    def _is_update_needed(self, entry: EpochEntry) -> bool:
        latest = self.latest_entry()
        if latest is None:
            return True
        return entry.epoch != latest.epoch or entry.start_offset < latest.start_offset

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Remove every entry whose start offset is >= ``end_offset`` (the log was truncated there).

        Returns the removed entries, latest first. A negative ``end_offset`` is
        ignored, as in Kafka.
        """
        removed: list[EpochEntry] = []
        if end_offset < 0:
            return removed
        while self._entries and self._entries[-1].start_offset >= end_offset:
            removed.append(self._entries.pop())
            self._epochs.pop()
        return removed

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """Drop history below the new log start offset ``start_offset``.

        Every entry starting at or below ``start_offset`` is removed, and the last
        of them (the epoch that covers ``start_offset``) is put back starting at
        ``start_offset``: the epoch still owns the surviving offsets. Exclusive,
        as in Kafka: ``truncate_from_start(6)`` keeps an entry starting at 6.
        Returns the removed entries, earliest first.
        """
        count = 0
        while count < len(self._entries) and self._entries[count].start_offset <= start_offset:
            count += 1
        if count == 0:
            return []
        removed = self._entries[:count]
        covering = removed[-1]
        del self._entries[:count]
        del self._epochs[:count]
        self._entries.insert(0, EpochEntry(epoch=covering.epoch, start_offset=Offset(start_offset)))
        self._epochs.insert(0, covering.epoch)
        return removed

    def clear(self) -> bool:
        """Forget every entry; True when there were any."""
        had_entries = bool(self._entries)
        self._entries.clear()
        self._epochs.clear()
        return had_entries

    # --- queries ---------------------------------------------------------------------

    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def latest_epoch(self) -> int | None:
        """The current leader epoch as far as this log knows, None when no entries."""
        return self._entries[-1].epoch if self._entries else None

    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        index = bisect.bisect_left(self._epochs, epoch)
        if index < len(self._epochs) and self._epochs[index] == epoch:
            return self._entries[index]
        return None

    def previous_epoch(self, epoch: int) -> int | None:
        """The largest cached epoch strictly below ``epoch`` (Kafka's ``previousEpoch(epoch)``)."""
        index = bisect.bisect_left(self._epochs, epoch)
        return self._epochs[index - 1] if index > 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        """The smallest cached epoch strictly above ``epoch``."""
        index = bisect.bisect_right(self._epochs, epoch)
        return self._epochs[index] if index < len(self._epochs) else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset``: the entry with the largest start <= ``offset``.

        None below the earliest entry. Beyond the latest start it answers the
        latest epoch (the cache does not know the log end offset).
        """
        starts = [entry.start_offset for entry in self._entries]
        index = bisect.bisect_right(starts, offset)
        return self._entries[index - 1].epoch if index > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` for OffsetsForLeaderEpoch / the diverging-epoch check.

        The epoch is the largest cached epoch <= ``requested_epoch``; the end
        offset is the start offset of the first epoch above it, or
        ``log_end_offset`` when ``requested_epoch`` is the latest epoch (the
        current epoch has not ended). Branches, as in Kafka's ``endOffsetFor``:

        * ``requested_epoch`` undefined (-1), or above every cached epoch, or the
          cache is empty: ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``.
        * ``requested_epoch`` is the latest epoch: ``(requested_epoch, log_end_offset)``.
        * below the earliest cached epoch: ``(requested_epoch, earliest start offset)``:
          the history was deleted by retention, and replicating from the
          leader's start offset is correct (KIP-279).
        * otherwise: ``(largest epoch <= requested, start of the next epoch)``.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            # A bootstrapping follower, or one whose records carry no epoch.
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        latest = self.latest_epoch()
        if latest is not None and latest == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            # Above every known epoch (or empty): we cannot say where it ended.
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        next_start = self._entries[higher].start_offset
        if higher == 0:
            return requested_epoch, next_start
        return self._entries[higher - 1].epoch, next_start


class LeaderEpochFileCache:
    """A :class:`LeaderEpochCache` persisted to ``leader-epoch-checkpoint`` after every change.

    Kafka flushes truncations asynchronously and replays truncation during log
    recovery; we write synchronously (atomically) on every change, so the file
    is never behind the memory. Truncations are rare; appends only write when
    a new epoch starts.
    """

    __slots__ = ("_cache", "_checkpoint")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Load the checkpoint at ``path`` (a missing file is an empty cache).

        ``path`` is the file, normally ``<partition dir>/leader-epoch-checkpoint``.
        A corrupt file raises ``CorruptFileError``.
        """
        self._checkpoint = checkpoint.LeaderEpochCheckpointFile(path)
        self._cache = LeaderEpochCache(self._checkpoint.read())

    @property
    def path(self) -> pathlib.Path:
        return self._checkpoint.path

    def _flush(self) -> None:
        self._checkpoint.write(self._cache.entries())

    def assign(self, epoch: int, start_offset: int) -> bool:
        changed = self._cache.assign(epoch, start_offset)
        if changed:
            self._flush()
        return changed

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        removed = self._cache.truncate_from_end(end_offset)
        if removed:
            self._flush()
        return removed

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        removed = self._cache.truncate_from_start(start_offset)
        if removed:
            self._flush()
        return removed

    def clear(self) -> bool:
        """Forget every entry and write the empty checkpoint (Kafka's ``clearAndFlush``)."""
        changed = self._cache.clear()
        self._flush()
        return changed

    def entries(self) -> tuple[EpochEntry, ...]:
        return self._cache.entries()

    def __len__(self) -> int:
        return len(self._cache)

    def latest_entry(self) -> EpochEntry | None:
        return self._cache.latest_entry()

    def latest_epoch(self) -> int | None:
        return self._cache.latest_epoch()

    def earliest_entry(self) -> EpochEntry | None:
        return self._cache.earliest_entry()

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        return self._cache.epoch_entry(epoch)

    def previous_epoch(self, epoch: int) -> int | None:
        return self._cache.previous_epoch(epoch)

    def next_epoch(self, epoch: int) -> int | None:
        return self._cache.next_epoch(epoch)

    def epoch_for_offset(self, offset: int) -> int | None:
        return self._cache.epoch_for_offset(offset)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        return self._cache.end_offset_for(requested_epoch, log_end_offset)
