"""glibc malloc settings for processes that move records in bulk (brokers, busy clients).

With glibc's defaults every buffer of 128 KiB or more (a Fetch answer's records, a
protobuf copy, a serialized message) is a fresh ``mmap`` whose pages fault in one by one
and are unmapped again on free. A process that allocates such buffers many times a second
spends much of its time there: ~0.8 ms of a broker's ~1 ms per 1 MiB consumer Fetch, and
~15% of a consumer's throughput (bench/README.md). :func:`tune` raises the thresholds so
those buffers come from the heap and their pages are reused.
"""

from __future__ import annotations

import ctypes
import os

DEFAULT_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
"""glibc's ``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit: every buffer up to it comes from the heap."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune(mmap_threshold_bytes: int = DEFAULT_MMAP_THRESHOLD_BYTES) -> bool:
    """Keep buffers up to ``mmap_threshold_bytes`` on the heap; True if glibc took it.

    A freed buffer's pages stay mapped (trim threshold 4x the mmap threshold) so the next one
    reuses them: the process holds up to that much freed memory, as a JVM keeps its heap.
    Nothing happens for 0, when the operator tuned malloc already (``MALLOC_*_`` or
    ``GLIBC_TUNABLES`` in the environment), or without glibc's ``mallopt``. It applies to the
    whole process, so call it from the program, not from a library.
    """
    if mmap_threshold_bytes <= 0 or "GLIBC_TUNABLES" in os.environ or any(
            name.startswith("MALLOC_") and name.endswith("_") for name in os.environ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    trim_bytes = min(4 * mmap_threshold_bytes, 2**31 - 1)
    return (bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold_bytes))
            and bool(mallopt(_M_TRIM_THRESHOLD, trim_bytes)))
