"""The raft layer against etcd, in one run: throughput, sequential commit latency, failover.

Three kraftlog quorum members (bench/raft_node.py: the real StorageRaftLog with fsync,
quorum-state file, asyncio driver and gRPC RaftService; records proposed inside the
leader's process, as Kafka's TestRaftServer does) and then three etcd members
(bench/anchors/etcd.py, Debian's etcd-server, defaults), all on loopback, same 2 cores.

Printed as ratios against etcd, with their targets:

- throughput: committed records/s with W records in flight (proposed C at a time, so the
  leader batches them into one append and one fsync) vs etcd puts/s at 256 in flight;
  target >= 10x;
- sequential: one record proposed, wait for its commit, repeat; p50 vs etcd's sequential put
  p50; target <= 1.5x;
- failover: kill -9 the leader -> first record committed by the new leader, with
  controller.quorum.fetch.timeout.ms = etcd's election timeout (1000 ms), median over K kills
  (the killed node restarts on its data dir between kills); target <= 1.0x etcd's median.

    .venv/bin/python bench/raft.py                  # ~2-3 min
    .venv/bin/python bench/raft.py --quick          # ~1 min, fewer samples
    .venv/bin/python bench/raft.py --only seq       # one part (seq, throughput, failover)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import signal
import sys
import tempfile
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import quorum_dirs  # noqa: E402
from anchors import etcd  # noqa: E402

CLUSTER_ID = quorum_dirs.CLUSTER_ID
NODES = quorum_dirs.NODES
PARTS = ("throughput", "seq", "failover")


class RaftCluster:
    """Three bench/raft_node.py processes, driven over their stdin/stdout."""

    def __init__(self, root: pathlib.Path, settings: dict[str, Any]) -> None:
        self.root = root
        self.settings = settings
        self.ports = quorum_dirs.format_quorum(root, settings)
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._answers: dict[int, asyncio.Queue[dict[str, Any]]] = {}
        self._readers: dict[int, asyncio.Task[None]] = {}

    async def start(self, i: int) -> None:
        log = (self.root / f"node-{i}.log").open("ab")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "raft_node.py"), "--config",
            str(self.root / f"node-{i}.properties"), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=log, start_new_session=True)
        log.close()
        self.procs[i] = proc
        self._answers[i] = asyncio.Queue()
        self._readers[i] = asyncio.ensure_future(self._read(i, proc))

    async def _read(self, i: int, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            message = json.loads(line)
            if "event" in message:
                self.events.put_nowait({**message, "node": i})
            else:
                self._answers[i].put_nowait(message)

    async def ask(self, i: int, request: dict[str, Any], timeout_s: float = 120) -> Any:
        proc = self.procs[i]
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(request) + "\n").encode())
        await proc.stdin.drain()
        return await asyncio.wait_for(self._answers[i].get(), timeout_s)

    async def leader(self, timeout_s: float = 30) -> tuple[int, int]:
        """(leader id, epoch) of the live node that says it leads."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i in list(self.procs):
                status = await self.ask(i, {"cmd": "status"})
                if status["role"].lower() == "leader":
                    return i, status["epoch"]
            await asyncio.sleep(0.05)
        raise SystemExit(f"no raft leader within {timeout_s} s; logs in {self.root}")

    def kill(self, i: int) -> None:
        proc = self.procs.pop(i)
        os.kill(proc.pid, signal.SIGKILL)
        self._readers.pop(i).cancel()

    async def stop(self) -> None:
        for i in list(self.procs):
            proc = self.procs.pop(i)
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        for task in self._readers.values():
            task.cancel()


async def failover_once(cluster: RaftCluster) -> float:
    leader, epoch = await cluster.leader()
    for i in cluster.procs:
        await cluster.ask(i, {"cmd": "probe"})
    while not cluster.events.empty():
        cluster.events.get_nowait()
    killed_at_ms = time.time_ns() / 1e6
    cluster.kill(leader)
    while True:
        event = await asyncio.wait_for(cluster.events.get(), 30)
        if event["event"] == "first_commit" and event["epoch"] > epoch:
            break
    elapsed_ms = event["wall_ms"] - killed_at_ms
    await cluster.start(leader)
    # The restarted node must be back in the quorum before the next kill.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = await cluster.ask(leader, {"cmd": "status"})
        if status["leader"] >= 0 and status["committed_end"] >= event["offset"] + 1:
            break
        await asyncio.sleep(0.05)
    return round(elapsed_ms, 1)


async def measure_raft(args: argparse.Namespace) -> dict[str, Any]:
    settings = {
        "controller.quorum.election.timeout.ms": 1000,
        "controller.quorum.fetch.timeout.ms": 1000,
        "controller.quorum.append.linger.ms": args.linger_ms,
        "controller.quorum.request.timeout.ms": 2000,
        "controller.quorum.retry.backoff.ms": 20,
        "controller.quorum.fetch.max.wait.ms": 500,
    }
    with tempfile.TemporaryDirectory(prefix="kraftlog-bench-raft-") as tmp:
        cluster = RaftCluster(pathlib.Path(tmp), settings)
        try:
            for i in NODES:
                await cluster.start(i)
            leader, _ = await cluster.leader()
            result: dict[str, Any] = {"settings": settings}
            if args.seq:
                result["seq"] = await cluster.ask(leader, {"cmd": "seq", "n": args.seq,
                                                           "size": args.size})
            if args.seconds:
                result["load"] = await cluster.ask(leader, {
                    "cmd": "load", "seconds": args.seconds, "window": args.window,
                    "chunk": args.chunk, "size": args.size})
            if args.failovers:
                samples = [await failover_once(cluster) for _ in range(args.failovers)]
                result["failover_ms"] = samples
                result["failover_median_ms"] = sorted(samples)[len(samples) // 2]
            return result
        finally:
            await cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="raft layer vs etcd")
    parser.add_argument("--quick", action="store_true", help="fewer samples (~1 min)")
    parser.add_argument("--seq", type=int, default=2000, help="sequential commits")
    parser.add_argument("--seconds", type=float, default=10, help="throughput run length")
    parser.add_argument("--window", type=int, default=10_000, help="records in flight")
    parser.add_argument("--chunk", type=int, default=100, help="records per propose call")
    parser.add_argument("--size", type=int, default=100, help="record value bytes")
    parser.add_argument("--failovers", type=int, default=5, help="leader kills per system")
    parser.add_argument("--linger-ms", type=int, default=0,
                        help="controller.quorum.append.linger.ms for the kraftlog nodes")
    parser.add_argument("--only", choices=PARTS, action="append",
                        help="measure only this part (repeatable; default: all three)")
    args = parser.parse_args()
    if args.quick:
        args.seq, args.seconds, args.failovers = 500, 5, 3
    parts = set(args.only or PARTS)
    if "seq" not in parts:
        args.seq = 0
    if "throughput" not in parts:
        args.seconds = 0
    if "failover" not in parts:
        args.failovers = 0
    if not (args.seq or args.seconds or args.failovers):
        raise SystemExit("nothing to measure: --seq, --seconds and --failovers are all 0")
    raft = asyncio.run(measure_raft(args))
    anchor = asyncio.run(etcd.measure(seq_n=args.seq, in_flight=256, load_seconds=args.seconds,
                                      size=args.size, failovers=args.failovers))
    rows = []
    ratios: dict[str, float] = {}
    if args.seconds:
        throughput = ratios["throughput"] = (raft["load"]["records_per_s"]
                                             / anchor["load"]["ops_per_s"])
        rows.append(("committed records/s", f"{raft['load']['records_per_s']:,.0f}",
                     f"{anchor['load']['ops_per_s']:,.0f} puts/s @256", throughput, ">= 10",
                     throughput >= 10))
    if args.seq:
        latency = ratios["seq_p50"] = raft["seq"]["p50_ms"] / anchor["seq"]["p50_ms"]
        rows.append(("sequential commit p50 ms", f"{raft['seq']['p50_ms']}",
                     f"{anchor['seq']['p50_ms']}", latency, "<= 1.5", latency <= 1.5))
        ratios["seq_p99"] = raft["seq"]["p99_ms"] / anchor["seq"]["p99_ms"]
        rows.append(("sequential commit p99 ms", f"{raft['seq']['p99_ms']}",
                     f"{anchor['seq']['p99_ms']}", ratios["seq_p99"], "(info)", True))
    if args.failovers:
        failover = ratios["failover_median"] = (raft["failover_median_ms"]
                                                / anchor["failover_median_ms"])
        rows.append(("failover median ms", f"{raft['failover_median_ms']}",
                     f"{anchor['failover_median_ms']}", failover, "<= 1.0", failover <= 1.0))
    print(f"{'metric':26} {'kraftlog':>12} {'etcd':>22} {'ratio':>7}  target")
    for name, ours, theirs, ratio, target, ok in rows:
        print(f"{name:26} {ours:>12} {theirs:>22} {ratio:7.2f}  {target} "
              f"{'PASS' if ok else 'MISS'}")
    print(json.dumps({"bench": "raft", "kraftlog": raft, "etcd": anchor,
                      "ratios": {name: round(value, 2) for name, value in ratios.items()},
                      "pass": all(row[-1] for row in rows)}))


if __name__ == "__main__":
    main()
