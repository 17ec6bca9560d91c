"""An idle cluster with many partitions: what the brokers cost while nothing happens (issue 16).

For each ``--partitions`` count (default 1,000 and 3,000): a ``kraftlog dev`` cluster on
loopback (3 controllers, 3 brokers, the admin service; tests/dev_cluster.py), then topics of
``--topic-partitions`` partitions each (RF 3) created through the AdminService, then no
traffic at all. Measured, in the same run:

- ``create_s``: CreateTopics calls through the admin service until every topic exists;
  ``settle_s``: from the first call until no partition is under-replicated (every ISR full);
- ``idle_broker_cpu_cores``: the three brokers' utime+stime (``/proc/PID/stat``) over the
  ``--idle-s`` window divided by its wall time (so other tenants of the machine count
  little: only the brokers' own CPU is read), and the controllers' the same way;
- ``health_p50_ms`` / ``health_p99_ms`` / ``health_max_ms``: gRPC health Check latency of
  every broker, ``--health-hz`` checks per second per broker during the idle window (an
  event-loop stall shows here first);
- ``fencings``: brokers the active controller fenced for missed heartbeats
  (``event=brokers_fenced`` lines in the controllers' logs, from the first CreateTopics to
  the end of the window);
- ``urp_after``: under-replicated partitions (DescribeTopics, under-replicated filter) after
  the window; ``rss_mib``: each broker's resident set size after the window.

Issue 16's targets: idle <= 0.10 core at 10,000 partitions, fencings 0, URP 0, health
p99 <= 100 ms. ``--profile-dir DIR`` also records a py-spy profile (raw collapsed stacks)
of broker 101 over the idle window (py-spy in the venv; sampling costs that broker some CPU).

Prints one line per count and one JSON line (``{"bench": "scale", ...}``). Every wait is
bounded; every process of the dev cluster is SIGKILLed (its pid files) in a ``finally``.

    .venv/bin/python bench/scale.py                          # 1,000 and 3,000: ~4 min
    .venv/bin/python bench/scale.py --partitions 10000 --idle-s 60
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import io
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from dev_cluster import DevCluster  # noqa: E402

from kraftlog.admin import admin_client, topic_health  # noqa: E402
from kraftlog.dev import process as dev_process  # noqa: E402
from kraftlog.storage import record_batch as rb  # noqa: E402
from kraftlog.tools import cli as kraftlog_cli  # noqa: E402
from kraftlog.v1 import broker_pb2, broker_pb2_grpc  # noqa: E402

# bench/broker.py by path: its CPU meter, percentiles and cluster kill (the name "broker"
# would be shadowed by tests/broker when tests/ is on the path).
_SPEC = importlib.util.spec_from_file_location("bench_broker", HERE / "broker.py")
assert _SPEC is not None and _SPEC.loader is not None
bb = importlib.util.module_from_spec(_SPEC)
sys.modules["bench_broker"] = bb
_SPEC.loader.exec_module(bb)

BROKER_IDS = (101, 102, 103)
CONTROLLER_IDS = (1, 2, 3)
FENCE_EVENT = "event=brokers_fenced"


def format_with_admin(cluster: DevCluster) -> None:
    """The dev cluster's layout with the admin service, its six data dirs formatted here."""
    layout = dev_process.create_or_load(cluster.directory, controllers=len(CONTROLLER_IDS),
                                        brokers=len(BROKER_IDS), base_port=cluster.base_port,
                                        with_admin=True)
    for node in layout.nodes:
        if node.node_id < 0:
            continue  # the admin service has no data dir
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = kraftlog_cli.main(["storage", "format", "--cluster-id", layout.cluster_id,
                                      "--node-id", str(node.node_id),
                                      "--data-dir", str(layout.data_dir(node))])
        if code != 0:
            raise SystemExit(f"formatting {layout.data_dir(node)} failed: {out.getvalue()}")


def start_cluster(root: pathlib.Path, name: str) -> DevCluster:
    for attempt in range(1, 4):
        cluster = DevCluster(root / f"{name}-{attempt}")
        try:
            format_with_admin(cluster)
            up = cluster.dev("up", "--base-port", str(cluster.base_port), "--timeout-s", "90",
                             timeout_s=150)
        except BaseException:
            bb.kill_dev_cluster(cluster)
            raise
        if up.returncode == 0:
            return cluster
        bb.kill_dev_cluster(cluster)
        output = up.stdout + up.stderr
        if attempt == 3 or not any(s in output.lower() for s in ("in use", "failed to bind")):
            raise SystemExit(f"kraftlog dev up failed:\n{output}")
    raise AssertionError("unreachable")


def pids_of(cluster: DevCluster, prefix: str) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in sorted(cluster.directory.glob(f"{prefix}*.pid"))}


def rss_mib(pid: int) -> float:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return float("nan")


def open_fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def heartbeat_lateness_ms(cluster: DevCluster) -> float:
    """The largest ``event=heartbeat_late lateness_ms=N`` in the brokers' logs (0: none was
    later than the threshold the brokers log at, HEARTBEAT_LATE_MS)."""
    worst = 0.0
    for log in sorted(cluster.directory.glob("broker-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if "event=heartbeat_late" in line:
                for field in line.split():
                    if field.startswith("lateness_ms="):
                        worst = max(worst, float(field.split("=", 1)[1]))
    return worst


def fence_count(cluster: DevCluster, offsets: dict[str, int] | None = None) -> tuple[int, dict[str, int]]:
    """``event=brokers_fenced`` lines in the controllers' logs past ``offsets`` (bytes)."""
    count = 0
    ends: dict[str, int] = {}
    for log in sorted(cluster.directory.glob("controller-*.log")):
        data = log.read_bytes()
        ends[log.name] = len(data)
        start = (offsets or {}).get(log.name, 0)
        count += data[start:].count(FENCE_EVENT.encode())
    return count, ends


async def create_partitions(admin: str, partitions: int, per_topic: int) -> float:
    """Topics of ``per_topic`` partitions (RF 3) until ``partitions`` exist; seconds taken."""
    started = time.monotonic()
    topics = []
    left = partitions
    index = 0
    while left > 0:
        count = min(per_topic, left)
        topics.append(admin_client.NewTopic(name=f"scale-{index:04d}", num_partitions=count,
                                            replication_factor=3))
        left -= count
        index += 1
    async with admin_client.AdminClient(admin) as client:
        for start in range(0, len(topics), 10):  # ten topics per CreateTopics call
            await client.create_topics(topics[start:start + 10], timeout_ms=60_000)
    return time.monotonic() - started


async def under_replicated(admin: str) -> int:
    """Under-replicated partitions, or -1 when the admin service could not say (a broker
    or the controller did not answer in time)."""
    try:
        async with admin_client.AdminClient(admin) as client:
            answer = await client.describe_topics(
                health_filter=topic_health.HealthFilter.UNDER_REPLICATED, exclude_internal=True,
                timeout_ms=30_000)
    except admin_client.AdminError as exc:
        bb.step(f"DescribeTopics failed: {exc}")
        return -1
    return sum(len(t.partitions) for t in answer.topics)


class HealthProber:
    """gRPC health Check of each broker at ``hz`` per second, in a thread, while running."""

    def __init__(self, targets: list[str], hz: float) -> None:
        self.targets = targets
        self.period_s = 1.0 / hz
        self.samples_s: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _probe(self, target: str) -> None:
        with grpc.insecure_channel(target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            next_at = time.monotonic()
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
                    self.samples_s.append(time.perf_counter() - started)
                except grpc.RpcError:
                    self.failures += 1
                next_at += self.period_s
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> None:
        for target in self.targets:
            thread = threading.Thread(target=self._probe, args=(target,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)
        ordered = sorted(self.samples_s)
        return {"health_n": len(ordered), "health_failures": self.failures,
                "health_p50_ms": round(bb.percentile(ordered, 50) * 1e3, 2),
                "health_p99_ms": round(bb.percentile(ordered, 99) * 1e3, 2),
                "health_max_ms": round(ordered[-1] * 1e3, 2) if ordered else float("nan")}


def hosted_replicas(target: str) -> int:
    """Replicas a broker hosts now (its DescribeLogDirs), -1 when it does not answer in time:
    the metadata says an ISR is full before the brokers have created every replica."""
    try:
        with grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 1 << 28)]) as channel:
            answer = broker_pb2_grpc.BrokerServiceStub(channel).DescribeLogDirs(
                broker_pb2.DescribeLogDirsRequest(), timeout=20)
    except grpc.RpcError:
        return -1
    return sum(len(t.partitions) for r in answer.results for t in r.topics)


def cpu_s(pids: list[int]) -> float:
    return sum(bb._proc_cpu_s(p) for p in pids)


class AllPartitionsWriter:
    """An acks=all writer of one small record to every partition per round, in a thread.

    It speaks BrokerService directly, as a producer's sender does: one Produce per leader
    per round carrying all that leader's partitions, leaders from one Metadata answer,
    refreshed when a partition answers an error or a leader stops answering (the client
    library's producer refreshes its metadata per topic, 100 Metadata calls for 100 topics,
    which at 10,000 partitions took minutes on this machine). After :meth:`mark` it records
    which partitions had a record sent after the mark acknowledged; :attr:`resumed_at` is the
    moment the last one did.
    """

    def __init__(self, brokers: dict[int, str], partitions: list[tuple[str, int]],
                 round_s: float) -> None:
        self.brokers = brokers
        self.partitions = partitions
        self.round_s = round_s
        self._lock = threading.Lock()
        self._mark = time.monotonic()
        self._acked: set[tuple[str, int]] = set()
        self.resumed_at: float | None = None
        self.errors = 0
        self.sent = 0
        self._leaders: dict[tuple[str, int], int] = {}
        self._channels: dict[int, grpc.Channel] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="all-partitions-writer")

    def mark(self) -> float:
        """From now on, count only acknowledgements of records sent after this moment."""
        with self._lock:
            self._mark = time.monotonic()
            self._acked = set()
            self.resumed_at = None
            return self._mark

    @property
    def acked_since_mark(self) -> int:
        return len(self._acked)

    def _stub(self, broker: int) -> broker_pb2_grpc.BrokerServiceStub:
        channel = self._channels.get(broker)
        if channel is None:
            channel = self._channels[broker] = grpc.insecure_channel(
                self.brokers[broker], options=[("grpc.max_receive_message_length", 1 << 28)])
        return broker_pb2_grpc.BrokerServiceStub(channel)

    def _refresh(self) -> None:
        for broker in self.brokers:
            try:
                answer = self._stub(broker).Metadata(broker_pb2.MetadataRequest(), timeout=20)
            except grpc.RpcError:
                continue
            self._leaders = {(t.name, p.partition_index): p.leader_id
                             for t in answer.topics for p in t.partitions}
            return

    def _round(self) -> None:
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in self.partitions:
            leader = self._leaders.get(tp, -1)
            if leader in self.brokers:
                by_leader.setdefault(leader, []).append(tp)
        batch = rb.build_batch([rb.RecordInput(value=b"x" * 32)], now_ms=int(time.time() * 1000))
        stale = len(by_leader) == 0
        for leader, tps in by_leader.items():
            topics: dict[str, list[int]] = {}
            for topic, index in tps:
                topics.setdefault(topic, []).append(index)
            request = broker_pb2.ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[
                broker_pb2.ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    broker_pb2.ProduceRequest.PartitionProduceData(index=i, records=batch)
                    for i in indexes]) for topic, indexes in topics.items()])
            sent_at = time.monotonic()
            self.sent += len(tps)
            try:
                answer = self._stub(leader).Produce(request, timeout=15)
            except grpc.RpcError:
                self.errors += len(tps)
                stale = True
                continue
            with self._lock:
                for topic in answer.responses:
                    for part in topic.partition_responses:
                        if part.error.code != 0:
                            self.errors += 1
                            stale = True
                        elif sent_at >= self._mark and self.resumed_at is None:
                            self._acked.add((topic.name, part.index))
                if self.resumed_at is None and len(self._acked) == len(self.partitions):
                    self.resumed_at = time.monotonic()
        if stale:
            self._refresh()

    def _run(self) -> None:
        self._refresh()
        while not self._stop.is_set():
            started = time.monotonic()
            self._round()
            self._stop.wait(max(0.0, self.round_s - (time.monotonic() - started)))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        for channel in self._channels.values():
            channel.close()


async def describe_all(admin: str) -> list[tuple[str, Any]] | None:
    """(topic, PartitionDescription) of every partition, or None when the admin service
    could not say in time."""
    try:
        async with admin_client.AdminClient(admin) as client:
            answer = await client.describe_topics(exclude_internal=True, timeout_ms=20_000)
    except admin_client.AdminError as exc:
        bb.step(f"DescribeTopics failed: {exc}")
        return None
    return [(t.name, p) for t in answer.topics for p in t.partitions]


def without_leader(described: list[tuple[str, Any]], gone: int) -> int:
    """Partitions whose leader is none, ``gone``, or not in their ISR."""
    return sum(1 for _, p in described
               if p.leader_id < 0 or p.leader_id == gone or p.leader_id not in p.isr)


def led_by(described: list[tuple[str, Any]], broker: int) -> int:
    return sum(1 for _, p in described if p.leader_id == broker)


def wait_for(what: str, predicate: Any, timeout_s: float, period_s: float = 0.5) -> float | None:
    """Seconds until ``predicate()`` is true (checked every ``period_s``), None on timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if predicate():
            return time.monotonic() - started
        time.sleep(period_s)
    bb.step(f"{what}: not within {timeout_s:.0f} s")
    return None


def logs_recovered_ms(cluster: DevCluster, broker: int, after: int) -> float | None:
    """``elapsed_ms`` of the last ``event=logs_recovered`` line past byte ``after`` of the
    broker's log (its log recovery at start)."""
    data = (cluster.directory / f"broker-{broker}.log").read_bytes()[after:]
    found = None
    for line in data.decode(errors="replace").splitlines():
        if "event=logs_recovered" in line:
            for field in line.split():
                if field.startswith("elapsed_ms="):
                    found = float(field.split("=", 1)[1])
    return found


def faults(cluster: DevCluster, partitions: int, args: argparse.Namespace) -> dict[str, Any]:
    """kill -9 of a broker under an acks=all writer; then a controlled shutdown and restart."""
    out: dict[str, Any] = {}
    described = asyncio.run(describe_all(cluster.admin)) or []
    victim, target = BROKER_IDS[1], BROKER_IDS[2]
    out["victim_leads"] = led_by(described, victim)
    tps = sorted((topic, p.partition_index) for topic, p in described)
    bb.step(f"failover: writer on {len(tps)} partitions (acks=all); broker {victim} leads "
            f"{out['victim_leads']}")
    writer = AllPartitionsWriter({b: cluster.broker(b) for b in BROKER_IDS}, tps, args.writer_round_s)
    writer.start()
    try:
        writer.mark()
        warm = wait_for("writer warm-up", lambda: writer.resumed_at is not None, 180, 0.25)
        out["writer_warmup_s"] = None if warm is None else round(warm, 2)
        killed_at = writer.mark()
        os.kill(pids_of(cluster, f"broker-{victim}")[f"broker-{victim}"], signal.SIGKILL)
        bb.step(f"failover: broker {victim} killed (SIGKILL)")
        leaders_s: float | None = None
        while time.monotonic() - killed_at < args.fault_timeout_s:
            now = asyncio.run(describe_all(cluster.admin))
            if now is not None and len(now) == len(tps) and without_leader(now, victim) == 0:
                leaders_s = time.monotonic() - killed_at
                break
            time.sleep(0.25)
        wait_for("writer resumes", lambda: writer.resumed_at is not None,
                 max(1.0, args.fault_timeout_s - (time.monotonic() - killed_at)), 0.1)
        out["failover_leaders_s"] = None if leaders_s is None else round(leaders_s, 2)
        out["failover_writer_resumed_s"] = (None if writer.resumed_at is None
                                            else round(writer.resumed_at - killed_at, 2))
        out["failover_writer_acked"] = writer.acked_since_mark
    finally:
        writer.stop()
    out["writer_sent"], out["writer_errors"] = writer.sent, writer.errors
    bb.step(f"failover: leaders {out['failover_leaders_s']} s, writer resumed "
            f"{out['failover_writer_resumed_s']} s; restarting broker {victim}")
    log_size = (cluster.directory / f"broker-{victim}.log").stat().st_size
    started = time.monotonic()
    cluster.dev("restart", f"broker-{victim}", "--timeout-s", str(int(args.fault_timeout_s)),
                timeout_s=args.fault_timeout_s + 30)
    out["unclean_restart_serving_s"] = round(time.monotonic() - started, 2)
    out["unclean_restart_log_recovery_ms"] = logs_recovered_ms(cluster, victim, log_size)
    rejoined = wait_for("ISRs whole after the unclean restart",
                        lambda: asyncio.run(under_replicated(cluster.admin)) == 0, 300, 1.0)
    out["unclean_restart_isr_s"] = None if rejoined is None else round(
        time.monotonic() - started, 2)

    bb.step(f"controlled shutdown of broker {target}")
    described = asyncio.run(describe_all(cluster.admin)) or []
    out["shutdown_broker_led"] = led_by(described, target)
    pid = pids_of(cluster, f"broker-{target}")[f"broker-{target}"]
    started = time.monotonic()
    os.kill(pid, signal.SIGTERM)

    def moved() -> bool:
        now = asyncio.run(describe_all(cluster.admin))
        return now is not None and len(now) == len(described) and led_by(now, target) == 0

    took = wait_for("leaders moved away", moved, args.fault_timeout_s, 0.25)
    out["shutdown_leaders_moved_s"] = None if took is None else round(took, 2)
    wait_for("process exit", lambda: not bb._alive(pid), 120, 0.2)
    out["shutdown_exit_s"] = round(time.monotonic() - started, 2)
    log_size = (cluster.directory / f"broker-{target}.log").stat().st_size
    started = time.monotonic()
    cluster.dev("restart", f"broker-{target}", "--timeout-s", str(int(args.fault_timeout_s)),
                timeout_s=args.fault_timeout_s + 30)
    out["restart_serving_s"] = round(time.monotonic() - started, 2)
    out["restart_log_recovery_ms"] = logs_recovered_ms(cluster, target, log_size)
    rejoined = wait_for("ISRs whole after the restart",
                        lambda: asyncio.run(under_replicated(cluster.admin)) == 0, 300, 1.0)
    out["restart_isr_s"] = None if rejoined is None else round(time.monotonic() - started, 2)
    bb.step(f"faults: {out}")
    return out


def measure(root: pathlib.Path, partitions: int, args: argparse.Namespace) -> dict[str, Any]:
    bb.step(f"{partitions} partitions: dev up (3 controllers, 3 brokers, admin)")
    cluster = start_cluster(root, f"scale-{partitions}")
    try:
        brokers = pids_of(cluster, "broker-")
        controllers = pids_of(cluster, "controller-")
        broker_pids = list(brokers.values())
        _fences_before, offsets = fence_count(cluster)
        bb.step(f"{partitions} partitions: create through the admin service")
        created_at = time.monotonic()
        create_s = asyncio.run(create_partitions(cluster.admin, partitions, args.topic_partitions))
        bb.step(f"{partitions} partitions: created in {create_s:.1f} s; waiting for full ISRs")
        urp = -1
        hosted: list[int] = []
        deadline = created_at + args.settle_timeout_s
        # Settled: every broker hosts its share (RF 3 on 3 brokers: every partition; the
        # metadata shows full ISRs before the brokers have created every replica), then no
        # partition under-replicated.
        while time.monotonic() < deadline:
            hosted = [hosted_replicas(cluster.broker(b)) for b in BROKER_IDS]
            if all(h >= partitions for h in hosted):
                urp = asyncio.run(under_replicated(cluster.admin))
                if urp == 0:
                    break
            time.sleep(1.0)
        settle_s = time.monotonic() - created_at
        bb.step(f"{partitions} partitions: every broker hosts {hosted}; "
                f"URP {urp} after {settle_s:.1f} s; "
                f"quiet {args.settle_s} s, then idle {args.idle_s} s")
        time.sleep(args.settle_s)
        prober = HealthProber([cluster.broker(b) for b in BROKER_IDS], args.health_hz)
        profiler: subprocess.Popen[bytes] | None = None
        if args.profile_dir:
            py_spy = shutil.which("py-spy", path=str(pathlib.Path(sys.executable).parent)) \
                or shutil.which("py-spy")
            if py_spy is None:
                raise SystemExit("--profile-dir needs py-spy (.venv/bin/pip install py-spy)")
            out = pathlib.Path(args.profile_dir) / f"broker-101-{partitions}.txt"
            out.parent.mkdir(parents=True, exist_ok=True)
            profiler = subprocess.Popen(
                [py_spy, "record", "--pid", str(brokers["broker-101"]), "--duration",
                 str(int(args.idle_s)), "--rate", "50", "--format", "raw", "--output", str(out),
                 "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        load0 = os.getloadavg()[0]
        wall0 = time.monotonic()
        brokers0 = {name: bb._proc_cpu_s(pid) for name, pid in brokers.items()}
        controllers0 = cpu_s(list(controllers.values()))
        prober.start()
        time.sleep(args.idle_s)
        health = prober.stop()
        wall = time.monotonic() - wall0
        per_broker = {name: round((bb._proc_cpu_s(pid) - brokers0[name]) / wall, 3)
                      for name, pid in brokers.items()}
        controllers_cores = (cpu_s(list(controllers.values())) - controllers0) / wall
        if profiler is not None:
            try:
                profiler.wait(timeout=30)
            except subprocess.TimeoutExpired:
                profiler.kill()
                profiler.wait()
        fences, _ = fence_count(cluster, offsets)
        urp_after = -1
        for _ in range(3):
            urp_after = asyncio.run(under_replicated(cluster.admin))
            if urp_after >= 0:
                break
        alive = all(bb._alive(p) for p in broker_pids)
        rss = {name: rss_mib(pid) for name, pid in brokers.items()}
        open_fds = {name: open_fd_count(pid) for name, pid in brokers.items()}
        bb.step(f"idle: brokers {sum(per_broker.values()):.3f} cores {per_broker}, {health}, "
                f"fencings {fences}, URP after {urp_after}, RSS {rss}, fds {open_fds}")
        fault_figures = faults(cluster, partitions, args) if args.faults else {}
        return {"partitions": partitions, "replicas": partitions * 3,
                "create_s": round(create_s, 2), "settle_s": round(settle_s, 2),
                "urp_settled": urp, "idle_s": round(wall, 1),
                "idle_broker_cpu_cores": round(sum(per_broker.values()), 3),
                "idle_broker_cpu_cores_each": per_broker,
                "idle_controller_cpu_cores": round(controllers_cores, 3),
                "machine_load_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
                **health, "fencings": fences, "urp_after": urp_after,
                "rss_mib": rss, "open_fds": open_fds,
                "brokers_alive": alive,
                "max_heartbeat_lateness_ms": heartbeat_lateness_ms(cluster), **fault_figures}
    finally:
        bb.step(f"{partitions} partitions: stop")
        bb.kill_dev_cluster(cluster)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", default="1000,3000",
                        help="comma-separated partition counts, one cluster each")
    parser.add_argument("--topic-partitions", type=int, default=100)
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--settle-s", type=float, default=10.0,
                        help="quiet time after the ISRs are full, before the idle window")
    parser.add_argument("--settle-timeout-s", type=float, default=180.0,
                        help="bound on the wait for full ISRs; the idle window starts anyway")
    parser.add_argument("--health-hz", type=float, default=5.0)
    parser.add_argument("--profile-dir", default=None)
    parser.add_argument("--keep-dir", default=None, help="run in this directory and keep it")
    parser.add_argument("--faults", action="store_true",
                        help="after the idle window: kill -9 of a broker under an acks=all writer "
                             "to every partition, its restart, then a controlled shutdown and "
                             "restart of another broker")
    parser.add_argument("--writer-round-s", type=float, default=1.0,
                        help="the writer sends to every partition once per this many seconds")
    parser.add_argument("--fault-timeout-s", type=float, default=120.0)
    args = parser.parse_args()
    counts = [int(c) for c in args.partitions.split(",") if c.strip()]
    results = []
    with contextlib.ExitStack() as stack:
        if args.keep_dir:
            root = pathlib.Path(args.keep_dir)
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kraftlog-scale-")))
        for count in counts:
            result = measure(root, count, args)
            results.append(result)
            print(f"partitions={count} create_s={result['create_s']} settle_s={result['settle_s']} "
                  f"idle_broker_cpu_cores={result['idle_broker_cpu_cores']} "
                  f"controllers={result['idle_controller_cpu_cores']} "
                  f"health_p50_ms={result['health_p50_ms']} health_p99_ms={result['health_p99_ms']} "
                  f"health_max_ms={result['health_max_ms']} fencings={result['fencings']} "
                  f"urp_after={result['urp_after']} rss_mib={result['rss_mib']} "
                  f"load_1m={result['machine_load_1m']} "
                  f"max_heartbeat_lateness_ms={result['max_heartbeat_lateness_ms']} "
                  f"open_fds={result['open_fds']}", flush=True)
            if args.faults:
                print(" ".join(f"{key}={result.get(key)}" for key in (
                    "victim_leads", "failover_leaders_s", "failover_writer_resumed_s",
                    "unclean_restart_serving_s", "unclean_restart_log_recovery_ms",
                    "unclean_restart_isr_s", "shutdown_broker_led", "shutdown_leaders_moved_s",
                    "shutdown_exit_s", "restart_serving_s", "restart_log_recovery_ms",
                    "restart_isr_s")), flush=True)
    print(json.dumps({"bench": "scale", "load_avg_1m": round(os.getloadavg()[0], 2),
                      "results": results}))


if __name__ == "__main__":
    main()
