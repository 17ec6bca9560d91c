"""A broker's log dir fills up for real; the dir goes offline and the cluster moves on.

Three ``kraftlog controller`` and three ``kraftlog broker`` processes on loopback. Broker 6
has two log dirs: the first, which its replica of the topic lands in, is a 3 MiB tmpfs
mounted by the test (root only: the test skips, saying so, where ``mount`` is refused);
the second holds its metadata log. Records produced with acks=all to the leader (broker
4) fill the tmpfs: broker 6's follower append fails with ENOSPC, the dir goes offline
(DescribeLogDirs answers KAFKA_STORAGE_ERROR for it, the other dir stays online), its
heartbeat asks to be fenced, the controller drops it from the ISR, and producing goes
on with ISR {4, 5} (min.insync.replicas=2). Every acknowledged record is read back.
Every wait is bounded; every child is killed and the tmpfs unmounted in ``finally``.
"""

from __future__ import annotations

import pathlib
import subprocess
import time

import grpc
import pytest

from kraftlog.v1 import broker_pb2, common_pb2
from tests.quorum_cluster import (
    CLUSTER_ID,
    Brokers,
    RunningCluster,
    Topic,
    consume,
    format_in_process,
    partition_state,
    produce,
    running_cluster,
    wait_for,
)

TOPIC = "filling"
SMALL = 6


def mount_tmpfs(path: pathlib.Path, size: str) -> None:
    path.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {done.stderr.strip()}")


def log_dir_errors(brokers: Brokers, broker: int) -> dict[str, int] | None:
    try:
        answer = brokers.stub(broker).DescribeLogDirs(broker_pb2.DescribeLogDirsRequest(),
                                                      timeout=2)
    except grpc.RpcError:
        return None
    return {r.log_dir: r.error.code for r in answer.results}


def test_a_full_disk_takes_the_dir_offline_and_the_broker_out_of_the_isr(
        tmp_path: pathlib.Path) -> None:
    small = tmp_path / "small"
    mount_tmpfs(small, "3m")
    big = tmp_path / f"broker-{SMALL}"

    def two_log_dirs(running: RunningCluster) -> None:
        """Broker 6 formatted again with the tmpfs as its first log dir."""
        formatted = format_in_process(
            "storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", str(SMALL),
            "--data-dir", str(small), "--data-dir", str(big), "--metadata-dir", str(big),
            "--ignore-formatted")
        assert formatted.returncode == 0
        config = running.brokers.config(SMALL)
        config.write_text(config.read_text().replace(
            f"log.dirs={big}\n", f"log.dirs={small},{big}\nmetadata.log.dir={big}\n"))

    try:
        with running_cluster(tmp_path, prepare=two_log_dirs, serving_timeout_s=30, topics=[
                Topic(name=TOPIC, min_insync_replicas=2, assignments=[[4, 5, SMALL]])],
                ) as running:
            cluster, brokers = running.controllers, running.brokers
            wait_for(lambda: True if partition_state(brokers, 4, TOPIC) == (4, 0, (4, 5, SMALL))
                     else None, timeout_s=10, what="the topic led by 4 with a full ISR")
            # Broker 4's view says nothing about when broker 6 replays the record: wait for it.
            wait_for(lambda: True if (small / f"{TOPIC}-0").is_dir() else None, timeout_s=10,
                     what="broker 6's replica in its first log dir")
            assert not (big / f"{TOPIC}-0").exists(), "the replica went to the first log dir only"

            # 64 KiB batches until the 3 MiB dir is full and offline (bounded: 200 batches).
            acked: list[bytes] = []
            deadline = time.monotonic() + 60
            for n in range(200):
                values = [b"%06d-" % n + bytes(1017) for _ in range(64)]
                code = produce(brokers, 4, values, TOPIC).responses[0].partition_responses[0].error.code
                if code == common_pb2.NONE:
                    acked.extend(values)
                assert code in (common_pb2.NONE, common_pb2.REQUEST_TIMED_OUT), code
                errors = log_dir_errors(brokers, SMALL)
                if errors is not None and errors.get(str(small)) == common_pb2.KAFKA_STORAGE_ERROR:
                    break
                assert time.monotonic() < deadline, "the tmpfs did not fill within 60 s"
            else:
                raise AssertionError("the tmpfs never filled")
            assert log_dir_errors(brokers, SMALL) == {str(small): common_pb2.KAFKA_STORAGE_ERROR,
                                                      str(big): common_pb2.NONE}
            assert brokers.procs[SMALL].poll() is None, "one dir is still online: it keeps running"

            # Fenced at its own request: out of the ISR, and acks=all works on with {4, 5}.
            def isr_without_6() -> bool | None:
                state = partition_state(brokers, 4, TOPIC)
                return True if state is not None and state[0] == 4 and state[2] == (4, 5) else None

            wait_for(isr_without_6, timeout_s=15, what="broker 6 out of the ISR")
            more = [b"after-%03d" % i for i in range(50)]
            answer = produce(brokers, 4, more, TOPIC).responses[0].partition_responses[0]
            assert answer.error.code == common_pb2.NONE, answer
            acked.extend(more)
            assert consume(brokers, 4, TOPIC) == acked
            text = (tmp_path / f"broker-{SMALL}.log").read_text()
            assert "event=log_dir_offline" in text and "No space left" in text, text[-3000:]
            assert "event=log_dirs_offline" in cluster.logs(), cluster.logs()
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True, check=False)
