"""The LRU bound on segment file descriptors (storage/file_handles.py) and logs that share one.

Unit tests pin the cache's rules (least recently used goes first, a pinned file
is never closed under its user, a reopen never creates a file, EMFILE gives
descriptors back); a hypothesis state machine runs the Log model of
test_log_stateful with every log's files behind a cache of two descriptors
shared with a second log that is written between steps; a threaded test runs
several logs on one small cache from several threads at once.
"""

from __future__ import annotations

import errno
import os
import pathlib
import shutil
import threading

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import invariant, rule

from kraftlog.errors import InvariantViolation
from kraftlog.storage import file_handles
from kraftlog.storage import record_batch as rb
from kraftlog.storage.log import Log
from kraftlog.storage.log_config import LogConfig
from tests.storage import test_log_stateful as stateful


def _fds_under(directory: pathlib.Path) -> int:
    """Descriptors of this process open on files below ``directory``."""
    count = 0
    prefix = str(directory) + os.sep
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(prefix):
            count += 1
    return count


def _read_all(log: Log) -> bytes:
    """Every batch from the log start (a read stops at a segment's end)."""
    out = bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 10**6)
        out += data.records
        offset = data.next_offset
    return bytes(out)


def _files(tmp_path: pathlib.Path, cache: file_handles.FileHandleCache, n: int) -> list[file_handles.LazyFile]:
    files = []
    for i in range(n):
        path = tmp_path / f"f{i}"
        path.write_bytes(b"x%d" % i)
        files.append(file_handles.LazyFile(str(path), flags=os.O_RDWR, cache=cache))
    return files


def test_files_open_on_first_use_and_the_least_recently_used_is_closed_first(tmp_path: pathlib.Path) -> None:
    cache = file_handles.FileHandleCache(max_open=2)
    a, b, c = _files(tmp_path, cache, 3)
    assert cache.open_count == 0 and not a.is_open
    for f in (a, b):
        with f.pinned() as fd:
            assert os.pread(fd, 2, 0) in (b"x0", b"x1")
    with a.pinned():
        pass  # a is now the most recently used
    with c.pinned() as fd:
        assert os.pread(fd, 2, 0) == b"x2"
    assert (a.is_open, b.is_open, c.is_open) == (True, False, True)
    assert cache.open_count == 2 == _fds_under(tmp_path)
    assert cache.evictions == 1
    with b.pinned() as fd:  # reopened on demand
        assert os.pread(fd, 2, 0) == b"x1"
    assert (a.is_open, b.is_open, c.is_open) == (False, True, True)


def test_a_pinned_file_is_never_closed_and_the_bound_gives_way_while_pinned(tmp_path: pathlib.Path) -> None:
    cache = file_handles.FileHandleCache(max_open=1)
    a, b = _files(tmp_path, cache, 2)
    fd_a = a.acquire()
    fd_b = b.acquire()
    assert a.is_open and b.is_open and cache.open_count == 2
    assert os.pread(fd_a, 2, 0) == b"x0" and os.pread(fd_b, 2, 0) == b"x1"
    a.release()
    assert a.is_open  # over the bound until an open makes room: release closes nothing by itself
    b.release()
    # Back within the bound at the next open.
    c = _files(tmp_path, cache, 3)[2]
    with c.pinned():
        assert cache.open_count == 1


def test_close_of_a_pinned_file_waits_for_its_last_release(tmp_path: pathlib.Path) -> None:
    cache = file_handles.FileHandleCache(max_open=4)
    (a,) = _files(tmp_path, cache, 1)
    fd = a.acquire()
    a.close()
    os.unlink(a.path)  # a delete meanwhile: the reader's descriptor stays valid
    assert os.pread(fd, 2, 0) == b"x0"
    a.release()
    assert not a.is_open and cache.open_count == 0
    with pytest.raises(FileNotFoundError):  # a reopen never creates the file again
        a.acquire()
    assert cache.open_count == 0
    with pytest.raises(InvariantViolation):
        a.release()


def test_create_empties_the_file_and_reopen_flags_may_not_create(tmp_path: pathlib.Path) -> None:
    cache = file_handles.FileHandleCache(max_open=4)
    (a,) = _files(tmp_path, cache, 1)
    a.create()
    assert os.path.getsize(a.path) == 0 and a.is_open
    with pytest.raises(InvariantViolation):
        file_handles.LazyFile(str(tmp_path / "g"), flags=os.O_RDWR | os.O_CREAT, cache=cache)
    with pytest.raises(ValueError, match="max_open"):
        file_handles.FileHandleCache(max_open=0)


def test_out_of_descriptors_gives_back_half_and_retries_once(tmp_path: pathlib.Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cache = file_handles.FileHandleCache(max_open=10)
    files = _files(tmp_path, cache, 5)
    for f in files[:4]:
        with f.pinned():
            pass
    real_open = os.open
    calls = []

    def failing_once(path: str, flags: int, mode: int = 0o777) -> int:
        calls.append(path)
        if len(calls) == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", failing_once)
    with files[4].pinned() as fd:
        assert os.pread(fd, 2, 0) == b"x4"
    assert len(calls) == 2 and cache.open_count == 3  # 4 open, 2 given back, 1 opened


def test_logs_sharing_a_small_cache_stay_within_it_and_read_back_what_they_wrote(tmp_path: pathlib.Path) -> None:
    cache = file_handles.FileHandleCache(max_open=3)
    config = LogConfig(segment_bytes=600, segment_index_bytes=48, index_interval_bytes=100)
    logs = [Log.open(tmp_path / f"t-{i}", config, now_ms=0, handles=cache) for i in range(20)]
    written: list[list[bytes]] = [[] for _ in logs]
    for round_ in range(15):
        for i, log in enumerate(logs):
            batch = rb.build_batch([rb.RecordInput(value=b"v%d-%d" % (i, round_) * 20)], base_offset=0)
            log.append_as_leader(batch, leader_epoch=1, now_ms=round_)
            written[i].append(log.read(log.log_end_offset - 1, 10_000).records)
            assert cache.open_count <= 3 and _fds_under(tmp_path) <= 3
    for i, log in enumerate(logs):
        assert len(log.segments) > 1  # rolls happened while files were evicted
        assert _read_all(log) == b"".join(written[i])
        log.truncate_to(7)
        assert log.log_end_offset == 7
        log.flush()
        assert _fds_under(tmp_path) <= 3
    assert cache.evictions > 100
    for log in logs:
        log.close()
    assert cache.open_count == 0 == _fds_under(tmp_path)
    reopened = Log.open(tmp_path / "t-5", config, now_ms=0, recovery_point=7, handles=cache)
    assert _read_all(reopened) == b"".join(written[5][:7])
    reopened.close()


def test_logs_on_several_threads_share_one_cache(tmp_path: pathlib.Path) -> None:
    """Each thread owns its logs; the cache they share evicts other threads' files, never one in use."""
    cache = file_handles.FileHandleCache(max_open=4, lock=threading.Lock())
    config = LogConfig(segment_bytes=2000, segment_index_bytes=80, index_interval_bytes=200)
    failures: list[BaseException] = []
    over_bound: list[int] = []

    def run(worker: int) -> None:
        try:
            logs = [Log.open(tmp_path / f"w{worker}-{i}", config, now_ms=0, handles=cache) for i in range(3)]
            expected: list[list[bytes]] = [[] for _ in logs]
            for round_ in range(60):
                for i, log in enumerate(logs):
                    batch = rb.build_batch([rb.RecordInput(value=b"%d.%d.%d" % (worker, i, round_) * 30)],
                                           base_offset=0)
                    log.append_as_leader(batch, leader_epoch=1, now_ms=round_)
                    expected[i].append(log.read(log.log_end_offset - 1, 10_000).records)
                    if round_ % 20 == 19:
                        log.truncate_to(log.log_end_offset - 5)
                        del expected[i][-5:]
                    if round_ % 25 == 24:
                        log.roll(round_)
                    assert _read_all(log) == b"".join(expected[i])
                    # Pins last one call: four workers may hold at most one each.
                    if cache.open_count > 4 + 4:
                        over_bound.append(cache.open_count)
            for log in logs:
                log.close()
        except BaseException as exc:  # handed to the main thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    assert not over_bound
    assert cache.open_count == 0 == _fds_under(tmp_path)
    assert cache.evictions > 0


class SharedTinyCacheLogMachine(stateful.LogMachine):
    """test_log_stateful's model, every file behind two descriptors shared with a neighbour log."""

    def __init__(self) -> None:
        self.handles = file_handles.FileHandleCache(max_open=2)
        super().__init__()
        self.neighbour = Log.open(self.dir.with_name(self.dir.name + "-n"), stateful.CONFIG, now_ms=0,
                                  handles=self.handles)
        self.neighbour_batches: list[bytes] = []

    def teardown(self) -> None:
        neighbour_dir = pathlib.Path(self.neighbour.directory)
        self.neighbour.close_handlers()
        super().teardown()
        shutil.rmtree(neighbour_dir, ignore_errors=True)

    @rule(value=st.binary(min_size=1, max_size=80))
    def neighbour_appends_and_reads(self, value: bytes) -> None:
        batch = rb.build_batch([rb.RecordInput(value=value)], base_offset=self.neighbour.log_end_offset)
        self.neighbour.append_as_follower(batch, now_ms=0)
        self.neighbour_batches.append(batch)
        assert _read_all(self.neighbour) == b"".join(self.neighbour_batches)

    @invariant()
    def descriptors_stay_within_the_bound(self) -> None:
        assert self.handles.open_count <= 2
        assert _fds_under(self.dir) + _fds_under(pathlib.Path(self.neighbour.directory)) <= 2


SharedTinyCacheLogMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=40, deadline=None)
TestLogWithSharedTinyCache = SharedTinyCacheLogMachine.TestCase
