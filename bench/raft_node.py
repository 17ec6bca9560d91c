"""One raft quorum member that generates load itself when it leads (bench/raft.py's worker).

Kafka measures its raft layer the same way (``TestRaftServer``: the records are
proposed inside the leader's process, so what is timed is replication, fsync and
commit, not a client protocol). This process runs the real pieces of
``kraftlog controller``: ``StorageRaftLog`` on a formatted data dir, the
``FileQuorumStateStore``, the asyncio ``RaftDriver`` and the gRPC RaftService,
with a state machine that only notes which offsets committed.

Control: one JSON object per line on stdin, one answer per line on stdout.

- ``{"cmd": "status"}`` -> ``{"role", "epoch", "leader", "committed_end"}``
- ``{"cmd": "seq", "n": N, "size": B}`` -> propose one record, wait for its commit, N times;
  answers latency percentiles (ms).
- ``{"cmd": "load", "seconds": S, "window": W, "chunk": C, "size": B}`` -> keep W records
  in flight, proposed C at a time, for S seconds (bounded by count too); answers records/s.
- ``{"cmd": "probe"}`` -> from now on, whenever this node becomes leader, propose one
  record at once and print ``{"event": "first_commit", "wall_ms", "epoch"}`` when it
  commits (the failover measurement's end).

Usage: python bench/raft_node.py --config FILE (the same properties as kraftlog controller)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from kraftlog import config as kconfig
from kraftlog import errors
from kraftlog.raft import consensus, driver, transport
from kraftlog.raft import quorum_state_store as qss
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.raft_config import parse_voters
from kraftlog.raft.snapshot import SnapshotReader
from kraftlog.raft.storage_log import StorageRaftLog
from kraftlog.server import controller_server as commands
from kraftlog.server import shared_server

MAX_LOAD_RECORDS = 20_000_000


class CommitTracker:
    """The state machine: remembers the end of the committed log and wakes waiters."""

    def __init__(self) -> None:
        self.committed_end = 0
        self.changed = asyncio.Event()

    def handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        if batches:
            self.committed_end = batches[-1].last_offset + 1
            self.changed.set()

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        pass

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        pass

    async def wait_beyond(self, offset: int) -> None:
        while self.committed_end <= offset:
            self.changed.clear()
            await self.changed.wait()


def percentiles_ms(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000, 3)

    return {"p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": pct(1.0)}


class Node:
    def __init__(self, raft: driver.RaftDriver, tracker: CommitTracker,
                 status_changed: asyncio.Event) -> None:
        self.raft = raft
        self.tracker = tracker
        self.probing = False
        self.probed_epoch = -1
        self.status_changed = status_changed

    async def seq(self, n: int, size: int) -> dict[str, Any]:
        value = b"x" * size
        latencies: list[float] = []
        started = time.perf_counter()
        for _ in range(n):
            t0 = time.perf_counter()
            offset = await self.raft.propose([value])
            await self.tracker.wait_beyond(offset)
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - started
        return {"records": n, "seconds": round(elapsed, 3), "ops_per_s": round(n / elapsed, 1),
                **percentiles_ms(latencies[min(20, n // 10):])}

    async def load(self, seconds: float, window: int, chunk: int, size: int) -> dict[str, Any]:
        chunk_values = [b"y" * size] * chunk
        start_end = self.tracker.committed_end
        proposed_last = start_end - 1
        t0 = time.perf_counter()
        deadline = t0 + seconds
        proposed = 0
        while time.perf_counter() < deadline and proposed < MAX_LOAD_RECORDS:
            room = window - (proposed_last + 1 - self.tracker.committed_end)
            if room >= chunk:
                # All calls reach the driver's inbox before it polls again, so they share
                # one batch and one fsync (with linger 0 nothing else would group them).
                offsets = await asyncio.gather(*(self.raft.propose(chunk_values)
                                                 for _ in range(room // chunk)))
                proposed_last = max(offsets)
                proposed += chunk * len(offsets)
            else:
                await self.tracker.wait_beyond(self.tracker.committed_end)
        committed_at_deadline = self.tracker.committed_end
        elapsed = time.perf_counter() - t0
        await self.tracker.wait_beyond(proposed_last)
        records = committed_at_deadline - start_end
        return {"records": records, "seconds": round(elapsed, 3),
                "records_per_s": round(records / elapsed, 1), "window": window, "chunk": chunk}

    async def probe_loop(self) -> None:
        """Propose one record as soon as this node leads a new epoch; report its commit.

        Woken by the driver's status changes (not a timer: a polling loop would cost every
        node CPU during the latency measurements)."""
        while True:
            self.status_changed.clear()
            status = self.raft.status
            if (self.probing and status.role is Role.LEADER
                    and status.epoch > self.probed_epoch):
                self.probed_epoch = status.epoch
                try:
                    offset = await self.raft.propose([b"probe"])
                    await self.tracker.wait_beyond(offset)
                    emit({"event": "first_commit", "wall_ms": time.time_ns() // 1_000_000,
                          "epoch": status.epoch, "offset": offset})
                except errors.NotLeaderError:
                    pass
                continue
            await self.status_changed.wait()


def emit(answer: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


async def control(node: Node) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        request = json.loads(line)
        cmd = request.get("cmd")
        try:
            if cmd == "status":
                status = node.raft.status
                emit({"role": status.role.value, "epoch": status.epoch,
                      "leader": status.leader_id, "committed_end": node.tracker.committed_end})
            elif cmd == "seq":
                emit(await node.seq(int(request["n"]), int(request["size"])))
            elif cmd == "load":
                emit(await node.load(float(request["seconds"]), int(request["window"]),
                                     int(request["chunk"]), int(request["size"])))
            elif cmd == "probe":
                node.probing = True
                node.probed_epoch = node.raft.status.epoch
                node.status_changed.set()
                emit({"probing": True})
            else:
                emit({"error": f"unknown command {cmd!r}"})
        except errors.KraftlogError as exc:
            emit({"error": f"{type(exc).__name__}: {exc}"})


async def main_async(cfg: kconfig.Config) -> None:
    node_id = cfg.get_int("node.id")
    voters = parse_voters(cfg.get_str("controller.quorum.voters"))
    directory = shared_server.metadata_dir(cfg)
    cluster_id = shared_server.check_storage(directory, node_id)
    partition_dir = directory / commands.METADATA_PARTITION_DIR
    store = qss.FileQuorumStateStore(partition_dir / qss.QUORUM_STATE_FILE_NAME,
                                     cluster_id=cluster_id)
    log = StorageRaftLog.open(partition_dir, clock_ms=lambda: time.time_ns() // 1_000_000)
    tracker = CommitTracker()
    servicer = transport.RaftServicer()
    server: Any = transport.create_server(servicer)
    server.add_insecure_port(commands.controller_listener(cfg))
    status_changed = asyncio.Event()
    raft = driver.RaftDriver(node_id=node_id, voters=voters, cluster_id=cluster_id,
                             config=shared_server.raft_config(cfg), log=log, store=store,
                             listener=tracker, on_status=lambda _: status_changed.set())
    servicer.handler = raft
    await server.start()
    raft.start()
    node = Node(raft, tracker, status_changed)
    probe = asyncio.get_running_loop().create_task(node.probe_loop())
    try:
        await control(node)
    finally:
        probe.cancel()
        await raft.stop(graceful=False)
        await server.stop(0)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    cfg = kconfig.load(commands.CONTROLLER_CONFIG, args.config, ())
    asyncio.run(main_async(cfg))


if __name__ == "__main__":
    main()
