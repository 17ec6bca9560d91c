"""Crash-safe replacement of small files (write temp, fsync, rename, fsync dir).

A file a crash can tear (quorum-state, checkpoints, meta.properties) is written
to a temporary sibling, fsynced, renamed over the target, and the directory is
fsynced so the rename itself survives a power loss. A reader therefore sees the
old content or the new one, never a mix.
"""

from __future__ import annotations

import os
import pathlib

TMP_SUFFIX = ".tmp"


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a directory's entries (creations, renames, deletions) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file whole."""
    target = pathlib.Path(path)
    tmp = target.with_name(target.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    fsync_dir(target.parent)


def write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """``write_atomically`` for UTF-8 text."""
    write_atomically(path, text.encode("utf-8"))
