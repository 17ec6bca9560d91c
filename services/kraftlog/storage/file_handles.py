"""Lazily opened segment files under an LRU bound on open descriptors (issue 16).

Owned here: :class:`FileHandleCache`, the set of descriptors open for one
process's logs, bounded by ``max_open``, and :class:`LazyFile`, one segment or
index file that is opened on first use and may be closed again when the cache
needs room. A broker with 10,000 replicas holds 30,000 segment files (``.log``,
``.index``, ``.timeindex``): kept open, as before, they pass a common 20,000
descriptor limit (EMFILE). Kafka avoids part of this with lazy index loading
(KIP-263's ``LazyIndex``: an index is mapped on first use) and otherwise asks
operators for a high ``ulimit -n``; here every segment file is lazy and the
cache closes the least recently used one when ``max_open`` would be passed.

Rules kept here:

* A descriptor in use is never closed under its user. :meth:`LazyFile.acquire`
  pins the file until :meth:`LazyFile.release`; eviction skips pinned files, and
  :meth:`LazyFile.close` of a pinned file closes it at its last release. So the
  bound is soft: pinned files may exceed it for as long as they are pinned.
* Thread-safe when given a lock (``threading.Lock()``, injected: this module
  stays free of threading): it guards the LRU order, the pins and every
  open/close, so logs owned by different threads may share one cache (each
  log itself still has one owner, :mod:`kraftlog.storage.log`). Without one
  the cache is for a single thread.
* Closing a descriptor with unsynced writes loses nothing: ``fsync`` on a
  descriptor opened later flushes the file's dirty pages (they belong to the
  inode, not the descriptor). The caller keeps the "synced" flag per file.
* A reopen never creates a file (no ``O_CREAT``): a segment file that vanished
  underneath us is an I/O error for the log dir, not a new empty file.
  :meth:`LazyFile.create` is the one call that creates or empties a file.
* An ``EMFILE`` / ``ENFILE`` from ``open`` (other code holds descriptors too)
  evicts half of the unpinned files and tries once more.

Callers: :mod:`kraftlog.storage.segment` and :mod:`kraftlog.storage.index`;
the broker's :class:`~kraftlog.broker.log_manager.LocalLogs` makes one bounded cache
for all its logs. No clock, no asyncio.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

from kraftlog.errors import InvariantViolation

_NO_FD = -1


class FileHandleCache:
    """The open descriptors of many :class:`LazyFile` objects, least recently used first.

    ``max_open=None`` never evicts (files still open lazily and stay open once
    used: one log opened by a tool or a test). ``lock`` (a ``threading.Lock``)
    makes it safe to share between threads.
    """

    __slots__ = ("_lock", "_lru", "evictions", "max_open", "opens")

    def __init__(self, *, max_open: int | None, lock: AbstractContextManager[Any] | None = None) -> None:
        if max_open is not None and max_open < 1:
            raise ValueError(f"max_open must be >= 1, got {max_open}")
        self.max_open = max_open
        self._lock: AbstractContextManager[Any] = lock if lock is not None else contextlib.nullcontext()
        # Every file with an open descriptor, least recently acquired first.
        self._lru: collections.OrderedDict[LazyFile, None] = collections.OrderedDict()
        self.opens = 0
        """Descriptors opened since the start (first opens and reopens)."""
        self.evictions = 0
        """Descriptors closed to stay within ``max_open``."""

    @property
    def open_count(self) -> int:
        """Descriptors open now (pinned ones included)."""
        return len(self._lru)

    def _make_room(self, keep: int) -> None:
        """Close least recently used unpinned files until at most ``keep`` remain open. Lock held.

        Walks from the least recently used end only as far as it must (pinned files are
        few: the ones in use right now), so an open costs O(1), not O(open files)."""
        excess = len(self._lru) - keep
        if excess <= 0:
            return
        victims = []
        for file in self._lru:
            if file._pins == 0:
                victims.append(file)
                if len(victims) == excess:
                    break
        for file in victims:
            self._close_locked(file)
        self.evictions += len(victims)

    def _open_locked(self, file: LazyFile, flags: int) -> int:
        if self.max_open is not None:
            self._make_room(self.max_open - 1)
        try:
            fd = os.open(file.path, flags, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            # The process is out of descriptors (sockets, checkpoints, other
            # code): give back half of ours and try once more.
            self._make_room(len(self._lru) // 2)
            fd = os.open(file.path, flags, 0o644)
        file._fd = fd
        self._lru[file] = None
        self.opens += 1
        return fd

    def _close_locked(self, file: LazyFile) -> None:
        fd = file._fd
        if fd == _NO_FD:
            return
        file._fd = _NO_FD
        file._close_pending = False
        del self._lru[file]
        os.close(fd)

    def close_all(self) -> None:
        """Close every unpinned descriptor now (pinned ones close at their last release)."""
        with self._lock:
            for file in list(self._lru):
                if file._pins:
                    file._close_pending = True
                else:
                    self._close_locked(file)


class LazyFile:
    """One file opened on first use through its :class:`FileHandleCache`.

    ``flags`` are the reopen flags (``O_RDWR``; ``O_WRONLY | O_APPEND`` for an
    index); they must not include ``O_CREAT`` or ``O_TRUNC``.
    """

    __slots__ = ("_cache", "_close_pending", "_fd", "_pins", "flags", "path")

    def __init__(self, path: str, *, flags: int, cache: FileHandleCache) -> None:
        if flags & (os.O_CREAT | os.O_TRUNC):
            raise InvariantViolation(f"{path}: reopen flags must not create or truncate")
        self.path = path
        self.flags = flags
        self._cache = cache
        self._fd = _NO_FD
        self._pins = 0
        self._close_pending = False

    @property
    def is_open(self) -> bool:
        return self._fd != _NO_FD

    def create(self) -> None:
        """Create the file, or empty it if it exists, and keep it open (a new segment, a rebuilt index)."""
        cache = self._cache
        with cache._lock:
            if self._fd != _NO_FD:
                if self._pins:
                    raise InvariantViolation(f"{self.path}: create while the file is in use")
                cache._close_locked(self)
            cache._open_locked(self, self.flags | os.O_CREAT | os.O_TRUNC)

    def acquire(self) -> int:
        """The open descriptor, pinned (not closed by the cache) until :meth:`release`."""
        cache = self._cache
        with cache._lock:
            fd = self._fd
            if fd == _NO_FD:
                fd = cache._open_locked(self, self.flags)
            else:
                cache._lru.move_to_end(self)
            self._pins += 1
            return fd

    def release(self) -> None:
        """End one :meth:`acquire`; a close asked for meanwhile happens now."""
        cache = self._cache
        with cache._lock:
            if self._pins <= 0:
                raise InvariantViolation(f"{self.path}: release without acquire")
            self._pins -= 1
            if self._pins == 0 and self._close_pending:
                cache._close_locked(self)

    @contextlib.contextmanager
    def pinned(self) -> Iterator[int]:
        """``with file.pinned() as fd``: :meth:`acquire` / :meth:`release` around a block."""
        fd = self.acquire()
        try:
            yield fd
        finally:
            self.release()

    def close(self) -> None:
        """Close the descriptor now, or at the last release if the file is pinned. A later use reopens it."""
        cache = self._cache
        with cache._lock:
            if self._fd == _NO_FD:
                return
            if self._pins:
                self._close_pending = True
            else:
                cache._close_locked(self)

    def rename(self, new_path: str) -> None:
        """``os.replace`` the file to ``new_path``; an open descriptor stays valid."""
        with self._cache._lock:
            os.replace(self.path, new_path)
            self.path = new_path


UNBOUNDED = FileHandleCache(max_open=None)
"""The cache of logs opened without one of their own (tools, the metadata log, tests):
files open lazily and stay open until their log closes them."""


def max_open_for_limit(open_files_limit: int) -> int:
    """The default bound for a process allowed ``open_files_limit`` descriptors (``RLIMIT_NOFILE``).

    Half of it, at least 64: the other half is for sockets (clients, replica
    fetchers, the controllers), checkpoint writes and the metadata log.
    """
    return max(64, open_files_limit // 2)
