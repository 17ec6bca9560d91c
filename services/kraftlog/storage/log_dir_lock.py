"""The ``.lock`` file in every data directory: one process per log dir (Kafka's ``FileLock``).

Owns the exclusive lock a controller, a broker and ``kraftlog storage format`` take on each
log dir and on the metadata log dir before they read anything in it (Kafka's LogManager
locks every ``log.dirs`` entry first, in ``lockLogDirs``). Without it a second process
started on the same config recovers the live process's logs and rewrites its indexes and
checkpoints before it fails on something else (a port in use).

The lock is ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<dir>/.lock``; after taking it the
holder writes its pid into the file, so a refused process can name it. The kernel drops
the lock when the holder's file descriptor closes, which includes any death (kill -9):
there is never a stale lock to clean up, and the pid left in the file means nothing once
the lock is free. The descriptor is close-on-exec, so a child process never inherits it.

Within one process the locks are counted per directory (``kraftlog server`` runs a
controller and a broker on the same metadata dir): the second acquisition by the same
process shares the first, and the file is unlocked when the last holder releases it.

Called by the controller's and the broker's ``serve`` (through :func:`lock_dirs`, around
everything they do) and by ``kraftlog storage format`` (which creates no lock file). Must not: create a directory (a
missing one is left to the "not formatted" checks that follow), or touch anything in the
directory but ``.lock``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pathlib
from collections.abc import Iterable
from types import TracebackType

from kraftlog.errors import StorageError

LOCK_FILE_NAME = ".lock"


class LogDirLockedError(StorageError):
    """Another process holds a log dir's lock: this one must touch nothing and exit."""

    def __init__(self, directory: pathlib.Path, holder_pid: int | None) -> None:
        holder = f"pid {holder_pid}" if holder_pid is not None else "a process whose pid it has not written yet"
        super().__init__(f"log dir {directory} is locked by another kraftlog process ({holder}; "
                         f"{directory / LOCK_FILE_NAME}); refusing to start on it")
        self.directory = directory
        self.holder_pid = holder_pid


class _Held:
    """One locked directory in this process: the open descriptor and how many hold it."""

    __slots__ = ("count", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.count = 1


_held: dict[str, _Held] = {}
"""This process's locked directories, by real path."""


def _key(directory: pathlib.Path) -> str:
    return os.path.realpath(directory)


def holder_pid(directory: pathlib.Path) -> int | None:
    """The pid written in ``directory``'s lock file, or None (no file, empty, not a number)."""
    try:
        text = (directory / LOCK_FILE_NAME).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _acquire(directory: pathlib.Path, create: bool) -> bool:
    """Lock ``directory`` for this process; False when it does not exist (nothing to guard),
    or, unless ``create``, has no lock file (no process ever ran on it)."""
    key = _key(directory)
    held = _held.get(key)
    if held is not None:
        held.count += 1
        return True
    if not directory.is_dir():
        return False
    flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    try:
        fd = os.open(directory / LOCK_FILE_NAME, flags, 0o644)
    except FileNotFoundError:
        if create:
            raise
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise LogDirLockedError(directory, holder_pid(directory)) from None
        raise
    try:
        pid = f"{os.getpid()}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, pid, 0)
    except OSError:
        os.close(fd)  # unlocks
        raise
    _held[key] = _Held(fd)
    return True


def _release(directory: pathlib.Path) -> None:
    key = _key(directory)
    held = _held.get(key)
    if held is None:
        return
    held.count -= 1
    if held.count == 0:
        del _held[key]
        os.close(held.fd)  # the kernel drops the flock with the last descriptor


class LockedDirs:
    """The directories one caller locked; :meth:`release` (or leaving the ``with``) unlocks them."""

    def __init__(self, directories: list[pathlib.Path]) -> None:
        self.directories = directories

    def release(self) -> None:
        while self.directories:
            _release(self.directories.pop())

    def __enter__(self) -> LockedDirs:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def lock_dirs(directories: Iterable[pathlib.Path], *, create: bool = True) -> LockedDirs:
    """Lock every existing directory of ``directories`` (duplicates once), all or none.

    ``create=False`` (``kraftlog storage format``) locks only directories that have a lock
    file: one without it was never a running node's, and stays untouched.

    Raises :class:`LogDirLockedError` naming the first directory another process holds, after
    releasing the ones this call had locked; OSError when a lock file cannot be made.
    """
    locked: list[pathlib.Path] = []
    seen: set[str] = set()
    try:
        for directory in directories:
            key = _key(directory)
            if key in seen:
                continue
            seen.add(key)
            if _acquire(directory, create):
                locked.append(directory)
    except BaseException:
        LockedDirs(locked).release()
        raise
    return LockedDirs(locked)
