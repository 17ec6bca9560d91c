"""The broker data plane against NATS JetStream, in one run.

Starts a ``kraftlog dev`` cluster on loopback (3 controllers, 3 brokers, no admin
service; tests/dev_cluster.py) with one topic (``--partitions`` partitions,
replication factor 3, min.insync.replicas=2), measures it with the client library,
kills it (the data is thrown away), then does the same against three ``nats-server`` processes (Debian's
package, JetStream on, clustered) with one R3 file stream, and finally a plain
gRPC anchor. Everything shares the same cores; the phases run one after another
so neither system's idle processes tax the other's numbers.

- produce: ``--records`` 1 KiB records through :class:`kraftlog.client.Producer`
  (acks=all, idempotent, ``linger.ms`` / ``batch.size`` batching, sticky
  partitioner over the partitions; ``batch.size`` defaults to 1 MiB, Kafka's
  ``max.request.size``: a gRPC call costs ~0.5 ms of CPU on the two ends whatever
  it carries, so records per call matter more here than in Kafka's wire protocol;
  ``--batch-size 262144`` gives the earlier runs' setting) as fast as ``send`` goes, until every one is
  acknowledged; vs the same count through nats-py ``publish_async`` with
  ``--nats-window`` acks outstanding. Ratio of msgs/s, target >= 5. ``--records``
  defaults to 300,000 (100,000 until session 7): at ~100k/s a 100,000-record phase
  lasts ~1 s, and what does not scale with the count (a fresh cluster's first
  appends, the pipeline filling, the last request's replication round trip) took
  ~0.35 s of it, the time of ~45,000 records.
- latency: records paced at half our measured max rate for ``--latency-seconds``;
  each record's latency runs from its *scheduled* send time to its
  acknowledgement (so a client that falls behind the schedule pays for it: no
  coordinated omission); the first second is warm-up. NATS at the same rate, same
  way. Ratio NATS p99 / our p99, target >= 1.
- latency at rest: ``--rest-rate`` (1,000) records/s for ``--rest-seconds`` from a
  producer with ``linger.ms`` 0, so each record travels alone (client, leader append,
  follower fetches, high watermark, answer); NATS at the same rate. Target: our p50
  <= 2 ms; NATS's p50 printed beside it.
- consume: everything produced, read back from the beginning by
  :class:`kraftlog.client.Consumer` (every record's value touched) vs a NATS pull
  consumer (``--nats-fetch-batch`` per fetch, AckPolicy none). Ratio of MB/s,
  target >= 10.
- gRPC anchor: 1 MiB unary calls (``--grpc-in-flight`` outstanding) to a trivial
  grpc.aio server in a child process: MB/s; produce MB/s is printed as a fraction
  of it (information, no target).

Each phase also records the CPU it cost: this process (the client), the servers'
processes (from /proc) and everything else on the machine (other tenants).

Prints a table and one JSON line (``{"bench": "broker", "<ratio>": ..., "pass":
{...}}``). Every loop is bounded by a count and a time; every child process is
stopped (then SIGKILLed) in a ``finally``; only PIDs started here are signalled.

    .venv/bin/python bench/broker.py                 # ~3 min
    .venv/bin/python bench/broker.py --records 20000 --latency-seconds 3   # quicker

Needs ``nats-server`` (installed with apt-get when missing and run as root) and
nats-py (``.venv/bin/pip install nats-py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import dataclasses
import functools
import io
import json
import math
import os
import pathlib
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from dev_cluster import DevCluster  # noqa: E402

from kraftlog import client, rpc  # noqa: E402
from kraftlog.dev import process as dev_process  # noqa: E402
from kraftlog.tools import cli as kraftlog_cli  # noqa: E402
from kraftlog.v1 import common_pb2, controller_pb2, controller_pb2_grpc  # noqa: E402

BROKER_IDS = (101, 102, 103)
CONTROLLER_IDS = (1, 2, 3)
WARMUP_S = 1.0
"""The first second of each latency phase is not counted."""
REST_P50_TARGET_MS = 2.0
"""Latency at rest (issue 19 target 3): a single record's trip, p50, at ``--rest-rate``."""
DRAIN_BOUND_S = 30.0
"""How long outstanding acknowledgements may take after a phase stops sending."""
SINK_METHOD = "/kraftlog.bench.Sink/Put"


# -- measuring ---------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of an already sorted list."""
    if not sorted_values:
        return float("nan")
    rank = math.ceil(p / 100 * len(sorted_values))
    return sorted_values[max(0, min(len(sorted_values), rank) - 1)]


def latency_summary(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)
    return {"n": len(ordered), "p50_ms": round(percentile(ordered, 50) * 1e3, 3),
            "p99_ms": round(percentile(ordered, 99) * 1e3, 3),
            "max_ms": round(ordered[-1] * 1e3, 3) if ordered else float("nan")}


def _proc_cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class CpuMeter:
    """CPU cores used between start and stop by: this process, the servers, everyone else."""

    server_pids: Sequence[int]
    _t0: float = 0.0
    _self0: float = 0.0
    _servers0: float = 0.0
    _busy0: float = 0.0

    def start(self) -> CpuMeter:
        self._t0 = time.perf_counter()
        self._self0 = _self_cpu_s()
        self._servers0 = sum(_proc_cpu_s(p) for p in self.server_pids)
        self._busy0 = _machine_busy_s()
        return self

    def stop(self) -> dict[str, float]:
        wall = max(time.perf_counter() - self._t0, 1e-9)
        own = _self_cpu_s() - self._self0
        servers = sum(_proc_cpu_s(p) for p in self.server_pids) - self._servers0
        busy = _machine_busy_s() - self._busy0
        return {"client_cpu_cores": round(own / wall, 3),
                "servers_cpu_cores": round(servers / wall, 3),
                "other_cpu_cores": round(max(0.0, busy - own - servers) / wall, 3)}


_T0 = time.monotonic()


def step(what: str) -> None:
    """One progress line on stderr, with the seconds since the start."""
    print(f"==> {time.monotonic() - _T0:6.1f} s  {what}", file=sys.stderr, flush=True)


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free right now (all bound at once, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def wait_port(port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _die_with_parent() -> None:
    """In a child before exec: SIGKILL it when this process dies (Linux PR_SET_PDEATHSIG),
    so a benchmark killed with -9 leaves no nats-server or gRPC sink behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def stop_child(proc: subprocess.Popen[bytes] | None, grace_s: float = 5.0) -> None:
    """SIGTERM exactly this child, SIGKILL after ``grace_s``, and reap it."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


# -- kraftlog ----------------------------------------------------------------------------------


def create_topic(controllers: Sequence[str], name: str, partitions: int,
                 problems: list[str]) -> bool | None:
    """CreateTopics (RF 3, min.insync.replicas=2) at whichever controller is active; None
    (the answer appended to ``problems``) while no controller creates it: a broker may
    still be fenced in the active controller's view just after ``dev up``."""
    request = controller_pb2.CreateTopicsRequest(topics=[
        controller_pb2.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=3,
            configs=[controller_pb2.CreateTopicsRequest.CreatableTopicConfig(
                name="min.insync.replicas", value="2")])], timeout_ms=5000)
    for target in controllers:
        try:
            with rpc.sync_channel(target) as channel:  # TLS when the process is set to
                answer = controller_pb2_grpc.ControllerServiceStub(channel).CreateTopics(
                    request, timeout=5)
        except grpc.RpcError:
            continue
        if answer.error.code == common_pb2.NONE:
            error = answer.topics[0].error
            if error.code in (common_pb2.NONE, common_pb2.TOPIC_ALREADY_EXISTS):
                return True
            problems.append(f"{common_pb2.ErrorCode.Name(error.code)} {error.message}")
    return None


def wait_until(probe: Callable[[], bool | None], timeout_s: float, what: str,
               last: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            detail = last()
            raise SystemExit(f"timed out after {timeout_s} s waiting for {what}"
                             + (f" (last: {detail})" if detail else ""))
        time.sleep(0.1)


def wait_full_isr(bootstrap: tuple[str, ...], topic: str, partitions: int) -> None:
    config = client.ProducerConfig(bootstrap_servers=bootstrap, max_block_ms=5000)
    with client.Producer(config) as producer:
        def ready() -> bool:
            producer.metadata.request_update()
            try:
                parts = producer.partitions_for(topic, timeout_ms=2000)
            except client.ClientError:
                return False
            return len(parts) == partitions and all(
                len(p.isr) == 3 and p.leader_id >= 0 for p in parts)
        wait_until(ready, 30, f"{topic}: {partitions} partitions with a full ISR")


def producer_config(bootstrap: tuple[str, ...], args: argparse.Namespace
                    ) -> client.ProducerConfig:
    return client.ProducerConfig(
        bootstrap_servers=bootstrap, acks=client.Acks.ALL, linger_ms=args.linger_ms,
        batch_size=args.batch_size, buffer_memory=128 * 1024 * 1024,
        request_timeout_ms=30_000, delivery_timeout_ms=120_000)


def kraftlog_produce_max(producer: client.Producer, topic: str, args: argparse.Namespace,
                         meter: CpuMeter) -> dict[str, Any]:
    """``args.records`` records as fast as send() goes; until the last one is acknowledged."""
    value = b"x" * args.record_bytes
    deadline = time.monotonic() + args.phase_seconds
    futures: list[client.RecordFuture] = []
    send = producer.send
    meter.start()
    started = time.perf_counter()
    spread = args.partitioner == "round-robin"
    while len(futures) < args.records and time.monotonic() < deadline:
        futures.append(send(topic, value, partition=len(futures) % args.partitions)
                       if spread else send(topic, value))
    producer.flush(int(DRAIN_BOUND_S * 1000))
    elapsed = time.perf_counter() - started
    cpu = meter.stop()
    failed = sum(1 for f in futures if f.exception(timeout=0) is not None)
    if failed:
        raise SystemExit(f"kraftlog: {failed} of {len(futures)} records failed, e.g. "
                         f"{next(f.exception() for f in futures if f.exception())}")
    n = len(futures)
    return {"records": n, "seconds": round(elapsed, 3), "msgs_per_s": round(n / elapsed, 1),
            "mb_per_s": round(n * args.record_bytes / elapsed / 1e6, 2), **cpu}


def kraftlog_produce_paced(producer: client.Producer, topic: str, rate: float,
                           args: argparse.Namespace, meter: CpuMeter,
                           seconds: float | None = None) -> dict[str, Any]:
    """Records at ``rate``/s for ``seconds`` (default ``args.latency_seconds``); latency
    from the scheduled time."""
    value = b"x" * args.record_bytes
    seconds = args.latency_seconds if seconds is None else seconds
    total = max(1, int(rate * seconds))
    samples: list[float] = []
    errors: list[BaseException] = []
    pc = time.perf_counter
    send = producer.send
    meter.start()
    t0 = pc()
    measure_from = t0 + WARMUP_S
    hard_stop = t0 + seconds + args.phase_seconds
    sent = 0
    spread = args.partitioner == "round-robin"

    def on_done(future: client.RecordFuture, scheduled: float) -> None:
        error = future.exception(timeout=0)
        if error is not None:
            errors.append(error)
        elif scheduled >= measure_from:
            samples.append(pc() - scheduled)

    while sent < total:
        now = pc()
        if now > hard_stop:
            break
        due = min(total, int((now - t0) * rate) + 1)
        if due <= sent:
            time.sleep(min(0.001, max(0.0, sent / rate - (now - t0))))
            continue
        while sent < due:
            scheduled = t0 + sent / rate
            partition = sent % args.partitions if spread else None
            send(topic, value, partition=partition).add_done_callback(
                functools.partial(on_done, scheduled=scheduled))
            sent += 1
    send_seconds = pc() - t0
    producer.flush(int(DRAIN_BOUND_S * 1000))
    cpu = meter.stop()
    if errors:
        raise SystemExit(f"kraftlog: {len(errors)} paced records failed, e.g. {errors[0]}")
    return {"target_rate": round(rate, 1), "records": sent,
            "achieved_rate": round(sent / send_seconds, 1), **latency_summary(samples), **cpu}


def kraftlog_consume(bootstrap: tuple[str, ...], topic: str, expected: int,
                     args: argparse.Namespace, meter: CpuMeter) -> dict[str, Any]:
    config = client.ConsumerConfig(bootstrap_servers=bootstrap,
                                   auto_offset_reset=client.OffsetReset.EARLIEST,
                                   max_partition_fetch_bytes=args.partition_fetch_bytes)
    with client.Consumer(config) as consumer:
        consumer.assign_topic(topic)
        consumer.seek_to_beginning()
        for tp in consumer.assignment():
            consumer.position(tp)
        deadline = time.monotonic() + args.phase_seconds
        count = payload = 0
        meter.start()
        started = time.perf_counter()
        while count < expected and time.monotonic() < deadline:
            records = consumer.poll(max_records=10_000, timeout_ms=1000)
            for record in records:
                payload += len(record.value or b"")
            count += len(records)
        elapsed = time.perf_counter() - started
        cpu = meter.stop()
    return {"records": count, "complete": count >= expected, "seconds": round(elapsed, 3),
            "msgs_per_s": round(count / elapsed, 1), "mb_per_s": round(payload / elapsed / 1e6, 2),
            **cpu}


def kill_dev_cluster(cluster: DevCluster, timeout_s: float = 10.0) -> None:
    """SIGKILL every process of the dev cluster (its pid files) and wait until they are gone.

    Not ``dev down``: its controlled shutdown takes seconds and the data is thrown away.
    """
    pids = []
    for pid_file in cluster.directory.glob("*.pid"):
        with contextlib.suppress(ValueError, OSError):
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGKILL)
            pids.append(pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def format_in_process(cluster: DevCluster) -> None:
    """Create the dev cluster's layout and format its six data dirs in this process.

    ``dev up`` would run ``kraftlog storage format`` once per node, one interpreter
    after another (2-3 s each on a loaded 2-core box); it skips nodes already formatted.
    """
    layout = dev_process.create_or_load(cluster.directory, controllers=len(CONTROLLER_IDS),
                                        brokers=len(BROKER_IDS), base_port=cluster.base_port,
                                        with_admin=False)
    for node in layout.nodes:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = kraftlog_cli.main(["storage", "format", "--cluster-id", layout.cluster_id,
                                      "--node-id", str(node.node_id),
                                      "--data-dir", str(layout.data_dir(node))])
        if code != 0:
            raise SystemExit(f"formatting {layout.data_dir(node)} failed: {out.getvalue()}")


def start_dev_cluster(root: pathlib.Path, attempts: int = 3) -> DevCluster:
    """``kraftlog dev up`` on a free port range; another range when one of its ports was
    taken between the check and the start (other tests pick ports too)."""
    for attempt in range(1, attempts + 1):
        cluster = DevCluster(root / f"kraftlog-{attempt}")
        try:
            format_in_process(cluster)
            up = cluster.dev("up", "--base-port", str(cluster.base_port), "--no-admin",
                             "--timeout-s", "90", timeout_s=150)
        except BaseException:
            kill_dev_cluster(cluster)
            raise
        if up.returncode == 0:
            return cluster
        kill_dev_cluster(cluster)
        output = up.stdout + up.stderr
        port_taken = any(sign in output.lower() for sign in ("in use", "failed to bind"))
        if not port_taken or attempt == attempts:
            raise SystemExit(f"kraftlog dev up failed:\n{output}")
        step(f"kraftlog: a port near {cluster.base_port} was taken meanwhile; another range")
    raise AssertionError("unreachable")


def measure_kraftlog(root: pathlib.Path, args: argparse.Namespace) -> dict[str, Any]:
    step("kraftlog: dev up (3 controllers, 3 brokers)")
    cluster = start_dev_cluster(root)
    try:
        pids = [int(p.read_text()) for p in cluster.directory.glob("*.pid")]
        bootstrap = tuple(cluster.broker(b) for b in BROKER_IDS)
        controllers = [cluster.controller(c) for c in CONTROLLER_IDS]
        topic = "bench-broker"
        problems: list[str] = []
        wait_until(lambda: create_topic(controllers, topic, args.partitions, problems), 30,
                   "topic created", lambda: problems[-1] if problems else "no controller")
        wait_full_isr(bootstrap, topic, args.partitions)
        step(f"kraftlog: produce {args.records} records at max rate")
        meter = CpuMeter(pids)
        result: dict[str, Any] = {"partitions": args.partitions, "linger_ms": args.linger_ms,
                                  "batch_size": args.batch_size}
        with client.Producer(producer_config(bootstrap, args)) as producer:
            for _ in range(10):  # warm up: metadata, channels, producer id
                producer.send(topic, b"x" * args.record_bytes).result(timeout=30)
            result["produce"] = kraftlog_produce_max(producer, topic, args, meter)
            rate = result["produce"]["msgs_per_s"] / 2
            step(f"kraftlog: paced produce at {rate:,.0f}/s for {args.latency_seconds} s")
            result["latency"] = kraftlog_produce_paced(producer, topic, rate, args, meter)
        step(f"kraftlog: at rest, {args.rest_rate:,.0f}/s with linger.ms=0 for {args.rest_seconds} s")
        with client.Producer(dataclasses.replace(producer_config(bootstrap, args),
                                                 linger_ms=0)) as producer:
            result["rest"] = kraftlog_produce_paced(producer, topic, args.rest_rate, args, meter,
                                                    seconds=args.rest_seconds)
        expected = (10 + result["produce"]["records"] + result["latency"]["records"]
                    + result["rest"]["records"])
        step(f"kraftlog: consume {expected} records")
        result["consume"] = kraftlog_consume(bootstrap, topic, expected, args, meter)
        return result
    finally:
        step("kraftlog: stop")
        kill_dev_cluster(cluster)


# -- NATS JetStream ----------------------------------------------------------------------------


def ensure_nats_server() -> str:
    """Path of nats-server, installing Debian's package when missing (root + apt-get)."""
    found = shutil.which("nats-server") or (
        "/usr/sbin/nats-server" if os.path.exists("/usr/sbin/nats-server") else None)
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise SystemExit("nats-server is not installed and cannot be (needs root and "
                         "apt-get): apt-get install nats-server")
    print("==> installing nats-server with apt-get", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "nats-server"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False,
                          timeout=600)
    if done.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False,
                       timeout=600)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False,
                              timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"apt-get install nats-server failed:\n{done.stderr[-2000:]}")
    return shutil.which("nats-server") or "/usr/sbin/nats-server"


@dataclass
class NatsCluster:
    """Three clustered nats-server processes with JetStream (file store) on loopback."""

    base: pathlib.Path
    binary: str
    size: int = 3
    client_ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        ports = free_ports(2 * self.size)
        self.client_ports, route_ports = ports[:self.size], ports[self.size:]
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in route_ports)
        for i in range(self.size):
            conf = self.base / f"n{i}.conf"
            conf.write_text(f"""server_name: n{i}
listen: 127.0.0.1:{self.client_ports[i]}
jetstream {{
  store_dir: "{self.base / f'n{i}'}"
}}
cluster {{
  name: kraftlog_bench
  listen: 127.0.0.1:{route_ports[i]}
  routes: [{routes}]
}}
""")
            with (self.base / f"n{i}.log").open("ab") as log:
                self.procs.append(subprocess.Popen(
                    [self.binary, "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                    preexec_fn=_die_with_parent))
        for i, port in enumerate(self.client_ports):
            if not wait_port(port, 30):
                raise SystemExit(f"nats-server n{i} did not listen; see {self.base}/n{i}.log")

    def stop(self) -> None:
        for proc in self.procs:
            stop_child(proc)

    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.client_ports]

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


async def nats_make_stream(js: Any, name: str, subjects: list[str]) -> None:
    from nats.js.api import StorageType, StreamConfig

    deadline = time.monotonic() + 60
    while True:  # the JetStream meta leader is elected a moment after boot
        try:
            await js.add_stream(StreamConfig(name=name, subjects=subjects, num_replicas=3,
                                             storage=StorageType.FILE))
            return
        except Exception as exc:  # nats-py raises several kinds while JetStream boots
            if time.monotonic() > deadline:
                raise SystemExit(f"nats: no R3 stream within 60 s: {exc!r}") from None
            await asyncio.sleep(0.5)


async def nats_produce_max(js: Any, subject: str, count: int, args: argparse.Namespace,
                           meter: CpuMeter) -> dict[str, Any]:
    payload = b"x" * args.record_bytes
    errors = [0]

    def on_done(future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            errors[0] += 1

    deadline = time.monotonic() + args.phase_seconds
    sent = 0
    meter.start()
    started = time.perf_counter()
    while sent < count and time.monotonic() < deadline:
        (await js.publish_async(subject, payload)).add_done_callback(on_done)
        sent += 1
    await asyncio.wait_for(js.publish_async_completed(), DRAIN_BOUND_S)
    elapsed = time.perf_counter() - started
    cpu = meter.stop()
    if errors[0]:
        raise SystemExit(f"nats: {errors[0]} of {sent} publishes failed")
    return {"records": sent, "seconds": round(elapsed, 3), "msgs_per_s": round(sent / elapsed, 1),
            "mb_per_s": round(sent * args.record_bytes / elapsed / 1e6, 2),
            "window": args.nats_window, **cpu}


async def nats_produce_paced(js: Any, subject: str, rate: float, args: argparse.Namespace,
                             meter: CpuMeter, seconds: float | None = None) -> dict[str, Any]:
    payload = b"x" * args.record_bytes
    seconds = args.latency_seconds if seconds is None else seconds
    total = max(1, int(rate * seconds))
    samples: list[float] = []
    errors = [0]
    pc = time.perf_counter
    meter.start()
    t0 = pc()
    measure_from = t0 + WARMUP_S
    hard_stop = t0 + seconds + args.phase_seconds
    sent = 0

    def on_done(future: asyncio.Future[Any], scheduled: float) -> None:
        if future.cancelled() or future.exception() is not None:
            errors[0] += 1
        elif scheduled >= measure_from:
            samples.append(pc() - scheduled)

    while sent < total:
        now = pc()
        if now > hard_stop:
            break
        due = min(total, int((now - t0) * rate) + 1)
        if due <= sent:
            await asyncio.sleep(min(0.001, max(0.0, sent / rate - (now - t0))))
            continue
        while sent < due:
            scheduled = t0 + sent / rate
            future = await js.publish_async(subject, payload)
            future.add_done_callback(lambda f, s=scheduled: on_done(f, s))
            sent += 1
    send_seconds = pc() - t0
    await asyncio.wait_for(js.publish_async_completed(), DRAIN_BOUND_S)
    cpu = meter.stop()
    if errors[0]:
        raise SystemExit(f"nats: {errors[0]} paced publishes failed")
    return {"target_rate": round(rate, 1), "records": sent,
            "achieved_rate": round(sent / send_seconds, 1), **latency_summary(samples), **cpu}


async def nats_consume(js: Any, stream: str, expected: int, args: argparse.Namespace,
                       meter: CpuMeter) -> dict[str, Any]:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    config = ConsumerConfig(durable_name="bench_pull", ack_policy=AckPolicy.NONE,
                            deliver_policy=DeliverPolicy.ALL, max_ack_pending=-1)
    sub = await js.pull_subscribe("bench.>", durable="bench_pull", stream=stream, config=config)
    count = payload = 0
    deadline = time.monotonic() + args.phase_seconds
    meter.start()
    started = time.perf_counter()
    while count < expected and time.monotonic() < deadline:
        try:
            messages = await sub.fetch(min(args.nats_fetch_batch, expected - count), timeout=2)
        except TimeoutError:
            continue
        for message in messages:
            payload += len(message.data)
        count += len(messages)
    elapsed = time.perf_counter() - started
    cpu = meter.stop()
    await sub.unsubscribe()
    return {"records": count, "complete": count >= expected, "seconds": round(elapsed, 3),
            "msgs_per_s": round(count / elapsed, 1), "mb_per_s": round(payload / elapsed / 1e6, 2),
            "fetch_batch": args.nats_fetch_batch, **cpu}


async def measure_nats_async(cluster: NatsCluster, count: int, rate: float,
                             args: argparse.Namespace) -> dict[str, Any]:
    import nats

    nc = await nats.connect(servers=cluster.urls(), connect_timeout=5,
                            max_reconnect_attempts=10, pending_size=64 * 1024 * 1024)
    try:
        js = nc.jetstream(publish_async_max_pending=args.nats_window, timeout=30)
        stream = "BENCH"
        # Short timeouts while JetStream elects its meta leader; a request sent before
        # that gets no answer at all.
        await nats_make_stream(nc.jetstream(timeout=1), stream, ["bench.>"])
        step(f"nats: publish {count} messages, window {args.nats_window}")
        for _ in range(10):  # warm up: stream leader, connection
            await js.publish("bench.warm", b"x" * args.record_bytes)
        meter = CpuMeter(cluster.pids())
        result: dict[str, Any] = {"window": args.nats_window}
        result["produce"] = await nats_produce_max(js, "bench.max", count, args, meter)
        step(f"nats: paced publish at {rate:,.0f}/s for {args.latency_seconds} s")
        result["latency"] = await nats_produce_paced(js, "bench.paced", rate, args, meter)
        step(f"nats: at rest, {args.rest_rate:,.0f}/s for {args.rest_seconds} s")
        result["rest"] = await nats_produce_paced(js, "bench.rest", args.rest_rate, args, meter,
                                                  seconds=args.rest_seconds)
        expected = (10 + result["produce"]["records"] + result["latency"]["records"]
                    + result["rest"]["records"])
        step(f"nats: pull-consume {expected} messages")
        result["consume"] = await nats_consume(js, stream, expected, args, meter)
        return result
    finally:
        await nc.close()


def measure_nats(root: pathlib.Path, count: int, rate: float, args: argparse.Namespace
                 ) -> dict[str, Any]:
    try:
        import nats  # noqa: F401
    except ImportError:
        raise SystemExit("nats-py is not installed: .venv/bin/pip install nats-py") from None
    binary = ensure_nats_server()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             check=False, timeout=10).stdout.strip()
    cluster = NatsCluster(root / "nats", binary)
    try:
        step("nats: start 3 servers")
        cluster.start()
        result = asyncio.run(measure_nats_async(cluster, count, rate, args))
        result["server_version"] = version
        return result
    finally:
        step("nats: stop")
        cluster.stop()


# -- plain gRPC anchor -------------------------------------------------------------------------


async def serve_sink(port: int) -> None:
    """A trivial grpc.aio server: one unary method taking bytes and answering b""."""

    async def put(request: bytes, context: Any) -> bytes:
        return b""

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
    handler = grpc.method_handlers_generic_handler("kraftlog.bench.Sink", {
        "Put": grpc.unary_unary_rpc_method_handler(put)})
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def grpc_load(port: int, args: argparse.Namespace, meter: CpuMeter) -> dict[str, Any]:
    payload = b"x" * (1 << 20)
    async with grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        put = ch.unary_unary(SINK_METHOD)
        for _ in range(5):
            await put(payload, timeout=10)
        calls = 0
        stop_at = time.perf_counter() + args.grpc_seconds
        max_calls = 100_000

        async def worker() -> None:
            nonlocal calls
            while time.perf_counter() < stop_at and calls < max_calls:
                await put(payload, timeout=10)
                calls += 1

        meter.start()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.grpc_in_flight)))
        elapsed = time.perf_counter() - started
        cpu = meter.stop()
    return {"calls": calls, "seconds": round(elapsed, 3), "in_flight": args.grpc_in_flight,
            "mb_per_s": round(calls * len(payload) / elapsed / 1e6, 1), **cpu}


def measure_grpc(root: pathlib.Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_ports(1)[0]
    step(f"gRPC: 1 MiB unary calls for {args.grpc_seconds} s")
    with (root / "grpc-sink.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, __file__, "--serve-grpc-sink", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_die_with_parent)
    try:
        if not wait_port(port, 30):
            raise SystemExit(f"the gRPC sink did not listen; see {root}/grpc-sink.log")
        return asyncio.run(grpc_load(port, args, CpuMeter([proc.pid])))
    finally:
        stop_child(proc)


# -- report ------------------------------------------------------------------------------------


def cpu_us_per_record(phase: dict[str, Any]) -> float:
    """Client + server CPU microseconds per record over a phase."""
    cores = phase["client_cpu_cores"] + phase["servers_cpu_cores"]
    return float(cores * phase["seconds"] / max(1, phase["records"]) * 1e6)


def report(ours: dict[str, Any], nats: dict[str, Any], anchor: dict[str, Any],
           load: dict[str, Any], args: argparse.Namespace) -> None:
    ratios = {
        "produce_msgs_ratio": ours["produce"]["msgs_per_s"] / nats["produce"]["msgs_per_s"],
        "latency_p99_ratio": nats["latency"]["p99_ms"] / ours["latency"]["p99_ms"],
        "consume_mb_ratio": ours["consume"]["mb_per_s"] / nats["consume"]["mb_per_s"],
        "produce_vs_grpc": ours["produce"]["mb_per_s"] / anchor["mb_per_s"],
    }
    # CPU per record (client + servers), which other tenants' load disturbs less than rates.
    cpu_us = {f"{system}_{phase}": cpu_us_per_record(result[phase])
              for system, result in (("kraftlog", ours), ("nats", nats))
              for phase in ("produce", "consume")}
    ratios["produce_cpu_ratio"] = cpu_us["nats_produce"] / cpu_us["kraftlog_produce"]
    ratios["consume_cpu_ratio"] = cpu_us["nats_consume"] / cpu_us["kraftlog_consume"]
    ratios["rest_p50_ratio"] = nats["rest"]["p50_ms"] / ours["rest"]["p50_ms"]
    passed = {"produce_msgs_ratio": ratios["produce_msgs_ratio"] >= 5,
              "latency_p99_ratio": ratios["latency_p99_ratio"] >= 1,
              "consume_mb_ratio": ratios["consume_mb_ratio"] >= 10,
              "rest_p50_ms": ours["rest"]["p50_ms"] <= REST_P50_TARGET_MS}
    op, np_, ol, nl, oc, nc = (ours["produce"], nats["produce"], ours["latency"],
                               nats["latency"], ours["consume"], nats["consume"])
    orest, nrest = ours["rest"], nats["rest"]
    rows = [
        ("produce msgs/s", f"{op['msgs_per_s']:,.0f}", f"{np_['msgs_per_s']:,.0f}",
         ratios["produce_msgs_ratio"], ">= 5", passed["produce_msgs_ratio"]),
        ("produce MB/s", f"{op['mb_per_s']:.1f}", f"{np_['mb_per_s']:.1f}",
         op["mb_per_s"] / np_["mb_per_s"], "", None),
        (f"p50 ms @ {ol['target_rate']:,.0f}/s", f"{ol['p50_ms']:.2f}", f"{nl['p50_ms']:.2f}",
         nl["p50_ms"] / ol["p50_ms"], "(NATS/ours)", None),
        (f"p99 ms @ {ol['target_rate']:,.0f}/s", f"{ol['p99_ms']:.2f}", f"{nl['p99_ms']:.2f}",
         ratios["latency_p99_ratio"], ">= 1 (NATS/ours)", passed["latency_p99_ratio"]),
        ("  achieved rate /s", f"{ol['achieved_rate']:,.0f}", f"{nl['achieved_rate']:,.0f}",
         None, "", None),
        (f"p50 ms at rest {orest['target_rate']:,.0f}/s", f"{orest['p50_ms']:.2f}",
         f"{nrest['p50_ms']:.2f}", ratios["rest_p50_ratio"],
         f"ours <= {REST_P50_TARGET_MS} ms (linger.ms 0)", passed["rest_p50_ms"]),
        (f"p99 ms at rest {orest['target_rate']:,.0f}/s", f"{orest['p99_ms']:.2f}",
         f"{nrest['p99_ms']:.2f}", nrest["p99_ms"] / orest["p99_ms"], "(info, NATS/ours)", None),
        ("consume MB/s" + ("" if oc["complete"] and nc["complete"] else " (cut short)"),
         f"{oc['mb_per_s']:.1f}", f"{nc['mb_per_s']:.1f}",
         ratios["consume_mb_ratio"], ">= 10", passed["consume_mb_ratio"]),
        ("consume msgs/s", f"{oc['msgs_per_s']:,.0f}", f"{nc['msgs_per_s']:,.0f}",
         oc["msgs_per_s"] / nc["msgs_per_s"], "", None),
        ("produce CPU us/record", f"{cpu_us['kraftlog_produce']:.1f}",
         f"{cpu_us['nats_produce']:.1f}", ratios["produce_cpu_ratio"], "(info, NATS/ours)",
         None),
        ("consume CPU us/record", f"{cpu_us['kraftlog_consume']:.1f}",
         f"{cpu_us['nats_consume']:.1f}", ratios["consume_cpu_ratio"], "(info, NATS/ours)",
         None),
        ("produce MB/s / gRPC 1 MiB", f"{op['mb_per_s']:.1f}", f"gRPC {anchor['mb_per_s']:.0f}",
         ratios["produce_vs_grpc"], "(info)", None),
    ]
    print(f"broker vs NATS JetStream: {args.record_bytes} B records, RF/R3, "
          f"{args.partitions} partitions, acks=all, min.insync.replicas=2, "
          f"linger.ms={args.linger_ms}, batch.size={args.batch_size}; NATS window "
          f"{args.nats_window}; clients' malloc tuned: {args.client_malloc_tuned}; "
          f"load avg {load['before'][0]:.2f} -> {load['after'][0]:.2f}")
    print(f"{'metric':28} {'kraftlog':>12} {'NATS':>12} {'ratio':>7}  target")
    for name, a, b, ratio, target, ok in rows:
        verdict = "" if ok is None else ("PASS" if ok else "MISS")
        shown = "" if ratio is None else f"{ratio:7.2f}"
        print(f"{name:28} {a:>12} {b:>12} {shown:>7}  {target} {verdict}".rstrip())
    print("cpu cores (client / servers / other tenants):")
    for phase in ("produce", "latency", "rest", "consume"):
        print(f"  {phase:8} kraftlog {ours[phase]['client_cpu_cores']:.2f} / "
              f"{ours[phase]['servers_cpu_cores']:.2f} / {ours[phase]['other_cpu_cores']:.2f}"
              f"   NATS {nats[phase]['client_cpu_cores']:.2f} / "
              f"{nats[phase]['servers_cpu_cores']:.2f} / {nats[phase]['other_cpu_cores']:.2f}")
    print(f"  gRPC     {anchor['client_cpu_cores']:.2f} / {anchor['servers_cpu_cores']:.2f} / "
          f"{anchor['other_cpu_cores']:.2f}")
    print(json.dumps({"bench": "broker", **{k: round(v, 3) for k, v in ratios.items()},
                      "pass": passed, "cpu_us_per_record": {
                          k: round(v, 1) for k, v in cpu_us.items()}, "kraftlog": ours, "nats": nats, "grpc": anchor,
                      "record_bytes": args.record_bytes,
                      "client_malloc_tuned": args.client_malloc_tuned, "loadavg": load}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000,
                        help="records in the max-rate produce phase (same count for NATS)")
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--partitioner", choices=("sticky", "round-robin"), default="sticky",
                        help="null-key records: the producer's sticky partitioner, or the "
                        "bench names partition i %% N for record i")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=1024 * 1024,
                        help="the producer's batch.size (default 1 MiB, Kafka's max.request.size)")
    parser.add_argument("--partition-fetch-bytes", type=int, default=4 * 1024 * 1024,
                        help="the consumer's max.partition.fetch.bytes")
    parser.add_argument("--latency-seconds", type=float, default=8.0,
                        help="length of each paced (half max rate) phase")
    parser.add_argument("--rest-rate", type=float, default=1000.0,
                        help="records/s of the at-rest latency phase (linger.ms 0)")
    parser.add_argument("--rest-seconds", type=float, default=5.0,
                        help="length of the at-rest latency phase")
    parser.add_argument("--phase-seconds", type=float, default=40.0,
                        help="bound on each produce / consume phase (a consume phase cut "
                        "short reports complete=false)")
    parser.add_argument("--nats-window", type=int, default=512,
                        help="nats-py publish_async_max_pending")
    parser.add_argument("--nats-fetch-batch", type=int, default=1000)
    parser.add_argument("--grpc-seconds", type=float, default=3.0)
    parser.add_argument("--grpc-in-flight", type=int, default=4)
    parser.add_argument("--serve-grpc-sink", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_grpc_sink:
        asyncio.run(serve_sink(args.serve_grpc_sink))
        return
    for name in ("records", "record_bytes", "partitions", "batch_size", "nats_window",
                 "nats_fetch_batch", "grpc_in_flight", "partition_fetch_bytes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("phase_seconds", "grpc_seconds"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.latency_seconds <= WARMUP_S:
        parser.error(f"--latency-seconds must be more than the {WARMUP_S} s warm-up")
    if args.rest_seconds <= WARMUP_S:
        parser.error(f"--rest-seconds must be more than the {WARMUP_S} s warm-up")
    if args.rest_rate <= 0:
        parser.error("--rest-rate must be positive")
    # Both systems' clients run in this process: malloc as a bulk client should set it
    # (client.tune_malloc; the brokers set it themselves, NATS's Go servers need none).
    args.client_malloc_tuned = client.tune_malloc()
    # A SIGTERM (a CI timeout, ^C from a wrapper) still runs the finally blocks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load = {"before": list(os.getloadavg())}
    with tempfile.TemporaryDirectory(prefix="kraftlog-bench-broker-") as tmp:
        root = pathlib.Path(tmp)
        try:
            ours = measure_kraftlog(root, args)
            nats = measure_nats(root, ours["produce"]["records"],
                                ours["latency"]["target_rate"], args)
            anchor = measure_grpc(root, args)
        except (client.ClientError, TimeoutError, grpc.RpcError) as exc:
            raise SystemExit(f"bench/broker.py: {type(exc).__name__}: {exc}") from None
    load["after"] = list(os.getloadavg())
    report(ours, nats, anchor, load, args)


if __name__ == "__main__":
    main()
