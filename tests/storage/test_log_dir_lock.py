"""The ``.lock`` in every data dir: a second process on a live node's dirs exits at once, touching nothing.

The scenario guarded against: a second broker started by mistake on broker-101's config recovered the
live broker's logs and rewrote ``keep-0``'s index and leader-epoch checkpoint before it failed
to bind its port. Here the second process is a real ``kraftlog broker`` / ``kraftlog
controller``; the first is a real broker too, or a small process that only holds the lock.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from kraftlog.storage import leader_epoch, log_dir_lock
from kraftlog.storage import log as storage_log
from kraftlog.storage import record_batch as rb
from kraftlog.storage.log_config import LogConfig
from tests.quorum_cluster import free_ports

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
START_TIMEOUT_S = 30.0


def kraftlog(*args: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kraftlog", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def format_dir(directory: pathlib.Path, node_id: int) -> None:
    done = kraftlog("storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", str(node_id),
                    "--data-dir", str(directory))
    assert done.returncode == 0, done.stderr


def broker_config(tmp_path: pathlib.Path, data: pathlib.Path) -> pathlib.Path:
    broker_port, controller_port = free_ports(2)
    path = tmp_path / "broker.properties"
    path.write_text(f"node.id=101\nprocess.roles=broker\n"
                    f"controller.quorum.voters=1@127.0.0.1:{controller_port}\n"
                    f"listeners=PLAINTEXT://127.0.0.1:{broker_port}\nlog.dirs={data}\n")
    return path


def keep_0(data: pathlib.Path) -> pathlib.Path:
    """A partition log with records, an index and a leader-epoch checkpoint, as a live broker has."""
    directory = data / "keep-0"
    directory.mkdir()
    cache = leader_epoch.LeaderEpochFileCache(directory / "leader-epoch-checkpoint")
    log = storage_log.Log.open(directory, LogConfig(index_interval_bytes=1), now_ms=1, epoch_cache=cache)
    for epoch in (0, 1, 2):
        log.append_as_leader(rb.build_batch([rb.RecordInput(value=b"v" * 100)] * 5), leader_epoch=epoch, now_ms=1)
    log.close()
    return directory


def error_line(stderr: str) -> str:
    """The one line a refused process prints (start-up log lines may precede it), no traceback."""
    assert "Traceback" not in stderr, stderr
    [line] = [line for line in stderr.splitlines() if line.startswith("kraftlog: error:")]
    return line


def snapshot(directory: pathlib.Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file() and p.name != log_dir_lock.LOCK_FILE_NAME}


def hold_lock(directory: pathlib.Path) -> subprocess.Popen[str]:
    """A process that takes ``directory``'s lock and keeps it until killed."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import pathlib, sys, time\n"
                               "from kraftlog.storage import log_dir_lock\n"
                               "log_dir_lock.lock_dirs([pathlib.Path(sys.argv[1])])\n"
                               "print('locked', flush=True)\n"
                               "time.sleep(120)\n", str(directory)],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def kill(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def test_a_second_broker_on_a_locked_dir_exits_at_once_and_touches_nothing(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "broker-101"
    format_dir(data, 101)
    keep_0(data)
    config = broker_config(tmp_path, data)
    holder = hold_lock(data)
    try:
        before = snapshot(data)
        time.sleep(0.01)  # a rewrite within the same mtime tick would still change the bytes
        started = time.monotonic()
        done = kraftlog("broker", "--config", str(config))
        elapsed = time.monotonic() - started
        assert done.returncode == 1
        line = error_line(done.stderr)
        assert str(data) in line and f"pid {holder.pid}" in line and "locked" in line
        assert snapshot(data) == before, "the refused broker changed the live node's files"
        assert elapsed < START_TIMEOUT_S
    finally:
        kill(holder)


def test_a_second_controller_on_a_locked_metadata_dir_exits_at_once(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "controller-1"
    format_dir(data, 1)
    (port,) = free_ports(1)
    config = tmp_path / "controller.properties"
    config.write_text(f"node.id=1\nprocess.roles=controller\ncontroller.quorum.voters=1@127.0.0.1:{port}\n"
                      f"listeners=CONTROLLER://127.0.0.1:{port}\nmetadata.log.dir={data}\n")
    holder = hold_lock(data)
    try:
        before = snapshot(data)
        done = kraftlog("controller", "--config", str(config))
        assert done.returncode == 1
        line = error_line(done.stderr)
        assert str(data) in line and f"pid {holder.pid}" in line
        assert snapshot(data) == before
    finally:
        kill(holder)


def test_a_live_broker_holds_its_dirs_lock_until_it_dies(tmp_path: pathlib.Path) -> None:
    """A real broker (no controller is up: it waits, alive, with its logs recovered) keeps the
    lock; a second one is refused naming it; kill -9 frees the dir for the next start."""
    data = tmp_path / "broker-101"
    format_dir(data, 101)
    keep_0(data)
    config = broker_config(tmp_path, data)
    log_file = (tmp_path / "first.log").open("w")
    first = subprocess.Popen([sys.executable, "-m", "kraftlog", "broker", "--config", str(config)],
                             stdout=log_file, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while log_dir_lock.holder_pid(data) != first.pid:
            assert first.poll() is None, (tmp_path / "first.log").read_text()
            assert time.monotonic() < deadline, "the broker never took its lock"
            time.sleep(0.05)
        with pytest.raises(log_dir_lock.LogDirLockedError, match=f"pid {first.pid}"):
            log_dir_lock.lock_dirs([data])
        second = kraftlog("broker", "--config", str(config))
        assert second.returncode == 1 and f"pid {first.pid}" in second.stderr
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        with log_dir_lock.lock_dirs([data]) as locked:  # the kernel dropped the dead broker's lock
            assert locked.directories == [data]
            assert log_dir_lock.holder_pid(data) == os.getpid()
    finally:
        kill(first)
        log_file.close()


def test_kill_9_releases_the_lock(tmp_path: pathlib.Path) -> None:
    holder = hold_lock(tmp_path)
    with pytest.raises(log_dir_lock.LogDirLockedError):
        log_dir_lock.lock_dirs([tmp_path])
    kill(holder)
    log_dir_lock.lock_dirs([tmp_path]).release()


def test_storage_format_refuses_a_locked_dir_and_writes_nothing(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "d"
    data.mkdir()
    holder = hold_lock(data)
    try:
        done = kraftlog("storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "3", "--data-dir", str(data))
        assert done.returncode == 1 and f"pid {holder.pid}" in done.stderr
        assert [p.name for p in data.iterdir()] == [log_dir_lock.LOCK_FILE_NAME]
    finally:
        kill(holder)
    format_dir(data, 3)  # free again: format works, and a dir without a lock file gets none from it
    fresh = tmp_path / "fresh"
    format_dir(fresh, 3)
    assert not (fresh / log_dir_lock.LOCK_FILE_NAME).exists()


def test_one_process_shares_its_own_lock_and_releases_it_with_the_last_holder(tmp_path: pathlib.Path) -> None:
    # Combined mode: the controller and the broker of one process lock the same metadata dir.
    missing = tmp_path / "missing"
    controller = log_dir_lock.lock_dirs([tmp_path, missing])
    broker = log_dir_lock.lock_dirs([tmp_path, tmp_path])
    assert controller.directories == [tmp_path] and broker.directories == [tmp_path]
    assert not missing.exists(), "a missing dir is left to the 'not formatted' checks"
    controller.release()
    probe = [sys.executable, "-c", "import pathlib, sys\nfrom kraftlog.storage import log_dir_lock\n"
                                   "log_dir_lock.lock_dirs([pathlib.Path(sys.argv[1])])", str(tmp_path)]
    assert subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode != 0
    broker.release()
    assert subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0


def test_a_lock_that_fails_part_way_releases_what_it_took(tmp_path: pathlib.Path) -> None:
    free, taken = tmp_path / "a", tmp_path / "b"
    free.mkdir()
    taken.mkdir()
    holder = hold_lock(taken)
    try:
        with pytest.raises(log_dir_lock.LogDirLockedError, match=str(taken)):
            log_dir_lock.lock_dirs([free, taken])
        log_dir_lock.lock_dirs([free]).release()  # not left locked by the failed call
        probe = subprocess.run([sys.executable, "-c", "import pathlib, sys\n"
                                "from kraftlog.storage import log_dir_lock\n"
                                "log_dir_lock.lock_dirs([pathlib.Path(sys.argv[1])])", str(free)],
                               capture_output=True, timeout=30, check=False)
        assert probe.returncode == 0
    finally:
        kill(holder)
