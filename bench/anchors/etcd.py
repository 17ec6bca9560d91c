"""etcd as the anchor of the raft and controller benchmarks: a 3-member cluster on loopback.

Owns: installing Debian's ``etcd-server`` when the binary is missing (root + apt-get),
starting three members with fresh data dirs, a grpc.aio client for ``KV.Put`` and
``Maintenance.Status`` (stubs compiled at run time from ``etcd_kv.proto``), and the three
measurements the issues compare against: sequential put latency, puts/s with N in flight,
and kill -9 leader -> first successful put through a survivor.

etcd runs with its defaults (heartbeat 100 ms, election timeout 1000 ms, WAL fsync per
batch) unless the caller passes extra flags. Every loop is bounded by time and count; only
the PIDs started here are ever signalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import grpc

HERE = pathlib.Path(__file__).resolve().parent
PROTO = HERE / "etcd_kv.proto"


def ensure_etcd() -> str:
    """Path of the etcd binary, installing Debian's etcd-server if needed."""
    found = shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise SystemExit("etcd is not installed and cannot be (needs root and apt-get): "
                         "apt-get install etcd-server")
    print("==> installing etcd-server with apt-get", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["apt-get", "install", "-y", "-q", "etcd-server"], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
        done = subprocess.run(["apt-get", "install", "-y", "-q", "etcd-server"], env=env,
                              capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"apt-get install etcd-server failed:\n{done.stderr[-2000:]}")
    found = shutil.which("etcd") or "/usr/bin/etcd"
    # The package's own service must not run beside the benchmark (no systemd here anyway).
    return found


def compile_stubs(out_dir: pathlib.Path) -> tuple[ModuleType, ModuleType]:
    from grpc_tools import protoc  # the test extra has grpcio-tools

    out_dir.mkdir(parents=True, exist_ok=True)
    code = protoc.main(["protoc", f"-I{HERE}", f"--python_out={out_dir}",
                        f"--grpc_python_out={out_dir}", str(PROTO)])
    if code != 0:
        raise SystemExit(f"protoc failed on {PROTO}")
    sys.path.insert(0, str(out_dir))
    return importlib.import_module("etcd_kv_pb2"), importlib.import_module("etcd_kv_pb2_grpc")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class EtcdCluster:
    base: pathlib.Path
    binary: str
    extra_flags: Sequence[str] = ()
    size: int = 3
    client_ports: list[int] = field(default_factory=list)
    peer_ports: list[int] = field(default_factory=list)
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ports = free_ports(2 * self.size)
        self.client_ports, self.peer_ports = ports[:self.size], ports[self.size:]

    def _cmd(self, i: int) -> list[str]:
        cluster = ",".join(f"m{j}=http://127.0.0.1:{self.peer_ports[j]}"
                           for j in range(self.size))
        return [self.binary, "--name", f"m{i}", "--data-dir", str(self.base / f"m{i}"),
                "--listen-client-urls", f"http://127.0.0.1:{self.client_ports[i]}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.client_ports[i]}",
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", "kraftlog-bench", *self.extra_flags]

    def start_member(self, i: int) -> None:
        with (self.base / f"m{i}.log").open("ab") as log:
            self.procs[i] = subprocess.Popen(self._cmd(i), stdout=log, stderr=log,
                                             start_new_session=True)

    def start(self) -> None:
        for i in range(self.size):
            shutil.rmtree(self.base / f"m{i}", ignore_errors=True)
            self.start_member(i)

    def kill(self, i: int) -> None:
        proc = self.procs.pop(i)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        for i in list(self.procs):
            proc = self.procs.pop(i)
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def endpoint(self, i: int) -> str:
        return f"127.0.0.1:{self.client_ports[i]}"


class EtcdClient:
    """grpc.aio stubs per member, a few connections each (like etcd_bench's client)."""

    def __init__(self, cluster: EtcdCluster, pb: ModuleType, pbg: ModuleType,
                 connections: int = 4) -> None:
        self.cluster, self.pb, self.pbg = cluster, pb, pbg
        self.connections = connections
        self._channels: dict[tuple[int, int], Any] = {}

    def _channel(self, i: int, tag: int) -> Any:
        key = (i, tag)
        if key not in self._channels:
            # A distinct option per tag keeps grpc from sharing one subchannel.
            self._channels[key] = grpc.aio.insecure_channel(
                self.cluster.endpoint(i), options=[("grpc.kraftlog_bench_tag", tag)])
        return self._channels[key]

    def kv(self, i: int, tag: int = 0) -> Any:
        return self.pbg.KVStub(self._channel(i, tag))

    async def drop(self, i: int) -> None:
        for key in [k for k in self._channels if k[0] == i]:
            await self._channels.pop(key).close()

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    async def leader_index(self, alive: Sequence[int], timeout_s: float = 20.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ids: dict[int, int] = {}
            leader = 0
            for i in alive:
                try:
                    status = await self.pbg.MaintenanceStub(self._channel(i, 0)).Status(
                        self.pb.StatusRequest(), timeout=1.0)
                except grpc.aio.AioRpcError:
                    continue
                ids[status.header.member_id] = i
                leader = status.leader or leader
            if leader in ids:
                return ids[leader]
            await asyncio.sleep(0.05)
        raise SystemExit("etcd elected no leader in time")

    async def wait_put_ok(self, i: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                await self.kv(i).Put(self.pb.PutRequest(key=b"warm", value=b"1"), timeout=2.0)
                return
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.05)
        raise SystemExit(f"etcd member {i} accepted no put in {timeout_s} s")


def latency_summary(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000, 3)

    return {"p50_ms": pct(0.5), "p99_ms": pct(0.99)}


async def sequential_puts(client: EtcdClient, leader: int, n: int, size: int) -> dict[str, Any]:
    value = b"v" * size
    stub = client.kv(leader)
    samples: list[float] = []
    started = time.perf_counter()
    for k in range(n):
        t0 = time.perf_counter()
        await stub.Put(client.pb.PutRequest(key=b"seq/%d" % k, value=value), timeout=5.0)
        samples.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    return {"ops": n, "ops_per_s": round(n / elapsed, 1), **latency_summary(samples[20:])}


async def concurrent_puts(client: EtcdClient, leader: int, in_flight: int, seconds: float,
                          size: int, max_ops: int = 5_000_000) -> dict[str, Any]:
    value = b"v" * size
    stubs = [client.kv(leader, tag) for tag in range(client.connections)]
    done = 0
    stop_at = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        nonlocal done
        stub = stubs[w % len(stubs)]
        k = 0
        while time.perf_counter() < stop_at and done < max_ops:
            await stub.Put(client.pb.PutRequest(key=b"load/%d/%d" % (w, k), value=value),
                           timeout=10.0)
            k += 1
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(in_flight)))
    elapsed = time.perf_counter() - started
    return {"in_flight": in_flight, "ops": done, "ops_per_s": round(done / elapsed, 1)}


async def failover_once(client: EtcdClient, cluster: EtcdCluster,
                        probe_interval_s: float = 0.01, cap_s: float = 30.0) -> float:
    """kill -9 the leader, then put through every survivor every 10 ms; ms to the first OK."""
    alive = sorted(cluster.procs)
    leader = await client.leader_index(alive)
    survivors = [i for i in alive if i != leader]
    await client.drop(leader)
    killed_at = time.perf_counter()
    cluster.kill(leader)
    ok = asyncio.Event()

    async def attempt(i: int) -> None:
        try:
            await client.kv(i).Put(client.pb.PutRequest(key=b"failover", value=b"1"),
                                   timeout=2.0)
            ok.set()
        except grpc.aio.AioRpcError:
            pass

    pending: set[asyncio.Task[None]] = set()
    while not ok.is_set() and time.perf_counter() - killed_at < cap_s:
        for i in survivors:
            task = asyncio.ensure_future(attempt(i))
            pending.add(task)
            task.add_done_callback(pending.discard)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ok.wait(), probe_interval_s)
    elapsed_ms = (time.perf_counter() - killed_at) * 1000
    for task in pending:
        task.cancel()
    cluster.start_member(leader)
    await client.wait_put_ok(leader)
    return round(elapsed_ms, 1)


async def measure(*, seq_n: int, in_flight: int, load_seconds: float, size: int,
                  failovers: int, extra_flags: Sequence[str] = ()) -> dict[str, Any]:
    """Everything the benchmarks compare against, from one fresh cluster."""
    binary = ensure_etcd()
    with tempfile.TemporaryDirectory(prefix="kraftlog-etcd-") as tmp:
        base = pathlib.Path(tmp)
        pb, pbg = compile_stubs(base / "stubs")
        cluster = EtcdCluster(base, binary, extra_flags)
        cluster.start()
        client = EtcdClient(cluster, pb, pbg)
        try:
            leader = await client.leader_index(range(cluster.size))
            await client.wait_put_ok(leader)
            result: dict[str, Any] = {}
            if seq_n:
                result["seq"] = await sequential_puts(client, leader, seq_n, size)
            if load_seconds:
                result["load"] = await concurrent_puts(client, leader, in_flight, load_seconds,
                                                       size)
            if failovers:
                samples = [await failover_once(client, cluster) for _ in range(failovers)]
                result["failover_ms"] = samples
                result["failover_median_ms"] = sorted(samples)[len(samples) // 2]
            return result
        finally:
            await client.close()
            cluster.stop()


if __name__ == "__main__":
    print(asyncio.run(measure(seq_n=500, in_flight=256, load_seconds=5, size=100,
                              failovers=int(sys.argv[1]) if len(sys.argv) > 1 else 1)))
