"""The Spark jobs against a real cluster: ``balance`` (plan + --execute) and ``metadata-audit``.

One ``kraftlog dev`` cluster (3 controllers, 4 brokers restarted with racks
101,102 -> r1 and 103,104 -> r2) and the module's local[2] SparkSession:

1. balance on a skewed cluster (topic ``heavy`` placed on 101+103 with most of the
   bytes, ``light`` on 102+104, written to while the job samples): the plan is valid
   Kafka JSON (replica counts kept, no broker twice, every partition on both racks),
   lowers the max/min bytes ratio, and ``execute`` converges: the reassignments
   complete and the brokers' measured bytes are closer;
2. metadata-audit over controller-1's live metadata log after a topic was created
   and deleted and broker 104 was killed: topic_created / topic_deleted,
   broker_fenced 104, leader changes away from 104, ISR shrinks of 104, the
   balance's reassignments and raft elections are all in the table; the parquet
   and CSV tables hold the events and the PNG is a real PNG;
3. the audit's classification is exact on a hand-built log (snapshot + segment
   with records inside the snapshot + a torn tail);
4. bad options fail with one line, before Spark starts.

Skipped only when pyspark is missing (conftest.py). Every wait is bounded; the
cluster and the restarted brokers are stopped in ``finally``.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

from kraftlog import client
from kraftlog.admin import reassign_plan as rp
from kraftlog.ids import Uuid
from kraftlog.metadata import record_convert
from kraftlog.metadata import records as r
from kraftlog.pipeline import audit, balance
from kraftlog.pipeline import jobs_audit_decode as jad
from kraftlog.pipeline import jobs_balance_plan as jbp
from kraftlog.raft import control_records as cr
from kraftlog.raft import snapshot as raft_snapshot
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.storage import record_batch as rb
from tests.dev_cluster import DevCluster, kraftlog

BROKERS = (101, 102, 103, 104)
RACKS = {101: "r1", 102: "r1", 103: "r2", 104: "r2"}
VALUE = b"x" * 10_000


class Env:
    def __init__(self, spark: Any, cluster: DevCluster, tmp: pathlib.Path) -> None:
        self.spark = spark
        self.cluster = cluster
        self.tmp = tmp
        self.bootstrap = tuple(cluster.broker(b) for b in BROKERS)
        self.balance_report: balance.BalanceReport | None = None

    def produce(self, topic: str, per_partition: int, partitions: int,
                value: bytes = VALUE) -> None:
        config = client.ProducerConfig(bootstrap_servers=self.bootstrap, acks=client.Acks.ALL)
        with client.Producer(config) as producer:
            futures = [producer.send(topic, value, partition=p)
                       for p in range(partitions) for _ in range(per_partition)]
            producer.flush(timeout_ms=60000)
            for future in futures:
                future.result(timeout=0)

    def brokers(self) -> dict[int, dict[str, Any]]:
        described = self.cluster.cli_json("cluster", "describe")
        return {b["id"]: b for b in described["brokers"]}


def _restart_with_racks(cluster: DevCluster, started: list[subprocess.Popen[bytes]]) -> None:
    """Restart every broker with ``--override broker.rack=...`` (the dev launcher has no
    rack setting). The new processes take over the dev pid files, so ``dev down`` stops
    them too."""
    directory = cluster.directory
    pids = {b: int((directory / f"broker-{b}.pid").read_text()) for b in BROKERS}
    for pid in pids.values():
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    for pid in pids.values():
        while pathlib.Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            stat = pathlib.Path(f"/proc/{pid}/stat").read_text() \
                if pathlib.Path(f"/proc/{pid}/stat").exists() else ""
            if stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]:
                break
            time.sleep(0.1)
    for broker, rack in RACKS.items():
        with (directory / f"broker-{broker}.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kraftlog", "broker", "--config",
                 str(directory / f"broker-{broker}.properties"), "--override",
                 f"broker.rack={rack}"], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, cwd=directory)
        started.append(proc)
        (directory / f"broker-{broker}.pid").write_text(f"{proc.pid}\n")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
        ) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("jobs")
    cluster = DevCluster(tmp / "cluster")
    outcome: list[BaseException | None] = []

    def up() -> None:
        try:
            cluster.up("--brokers", str(len(BROKERS)))
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=up, daemon=True)
    thread.start()
    started: list[subprocess.Popen[bytes]] = []
    try:
        spark = request.getfixturevalue("spark")
        thread.join(timeout=150)
        assert outcome, "kraftlog dev up did not finish within 150 s"
        if outcome[0] is not None:
            raise outcome[0]
        _restart_with_racks(cluster, started)
        environment = Env(spark, cluster, tmp)
        deadline = time.monotonic() + 60
        while True:
            brokers = environment.brokers()
            if all(b in brokers and brokers[b]["rack"] == RACKS[b]
                   and brokers[b]["state"] == "unfenced" for b in BROKERS):
                break
            assert time.monotonic() < deadline, f"brokers not back with racks: {brokers}"
            time.sleep(0.5)
        yield environment
    finally:
        thread.join(timeout=150)
        cluster.destroy()
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def _create(env: Env, topic: str, assignment: str) -> None:
    done = env.cluster.cli("topics", "create", "--topic", topic, "--replica-assignment",
                           assignment)
    assert done.returncode == 0, done.stdout + done.stderr


def test_balance_plans_and_executes_on_a_skewed_cluster(env: Env) -> None:
    _create(env, "heavy", ",".join(["101:103"] * 4))
    _create(env, "light", ",".join(["102:104"] * 4))
    env.produce("heavy", 200, 4)   # 8 MB on each of 101 and 103
    env.produce("light", 20, 4)    # 0.8 MB on each of 102 and 104
    plan_path = env.tmp / "plan.json"

    # Produce to `light` while the job samples (its first ~2 s): its leader 102 shows a
    # rate. Only briefly, so the sizes measured after the moves are the planned ones.
    stop = threading.Event()

    def keep_producing() -> None:
        config = client.ProducerConfig(bootstrap_servers=env.bootstrap, acks=client.Acks.ALL)
        until = time.monotonic() + 4.0
        with client.Producer(config) as producer:
            while not stop.is_set() and time.monotonic() < until:
                futures = [producer.send("light", b"y" * 500, partition=p % 4)
                           for p in range(20)]
                producer.flush(timeout_ms=30000)
                for future in futures:
                    future.result(timeout=0)
                time.sleep(0.05)

    writer = threading.Thread(target=keep_producing, daemon=True)
    writer.start()
    lines: list[str] = []
    try:
        options = balance.BalanceOptions(
            admin=env.cluster.admin, output=plan_path, execute=True, throttle=50_000_000,
            window_s=2.0, execute_timeout_s=90)
        started = time.monotonic()
        report = balance.run(env.spark, options, say=lines.append)
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        writer.join(timeout=30)
    env.balance_report = report
    output = "\n".join(lines)
    print(output)
    print(json.dumps(balance.report_json(report)), f"wall {elapsed:.1f} s")

    # Spark's aggregates: the sizes sampled match the skew; 102 leads `light` and shows its rate.
    by_broker = {b.broker: b for b in report.brokers}
    assert by_broker[101].bytes > 8_000_000 and by_broker[103].bytes > 8_000_000
    assert by_broker[102].bytes < 3_000_000 and by_broker[102].replicas == 4
    assert by_broker[102].leaders == 4 and by_broker[103].leaders == 0
    assert by_broker[102].lead_rate_bytes_per_s > 0, output
    assert by_broker[101].lead_rate_bytes_per_s == 0, output
    assert {b.rack for b in report.brokers} == {"r1", "r2"}

    # A valid plan: Kafka's JSON, replica counts kept, no duplicate, both racks everywhere.
    document = json.loads(plan_path.read_text())
    plan = rp.parse_plan(plan_path.read_text())
    assert document["version"] == 1 and plan.partitions
    assert all(e["log_dirs"] == ["any", "any"] for e in document["partitions"])
    for move in plan.partitions:
        assert len(move.replicas) == 2 and len(set(move.replicas)) == 2
        assert {RACKS[b] for b in move.replicas} == {"r1", "r2"}, move
    result = report.result
    assert result.before.ratio > 2.5
    projected = jbp.bytes_ratio(report.projected_bytes)
    assert projected < result.before.ratio / 2
    assert report.projected_bytes == result.after.bytes_by_broker  # Spark == the greedy
    assert result.bytes_moved > 0
    assert result.after.leader_spread < result.before.leader_spread
    assert f"max/min bytes ratio: {result.before.ratio:.2f} -> {projected:.2f}" in output

    # --execute converged: the cluster now has the plan's replicas, and the bytes moved.
    assert report.execute is not None and report.execute.completed
    assert report.execute.throttled  # set, then removed
    described = env.cluster.cli_json("topics", "describe", "--topic", "heavy")
    described_light = env.cluster.cli_json("topics", "describe", "--topic", "light")
    print(json.dumps(described)[:300])
    now = {(t["name"], p["partition"]): tuple(p["replicas"])
           for d in (described, described_light) for t in d["topics"] for p in t["partitions"]}
    for move in plan.partitions:
        assert now[(move.topic, move.partition)] == move.replicas
    assert report.measured_ratio is not None
    assert report.measured_ratio < result.before.ratio / 1.5
    assert report.measured_ratio == pytest.approx(projected, rel=0.25)
    assert "Measured after the moves: max/min bytes ratio" in output


def _wait(what: str, condition: Any, timeout_s: float = 40.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_metadata_audit_of_a_live_controller_log(env: Env) -> None:
    _create(env, "doomed", "101:102:103")
    deleted = env.cluster.cli("topics", "delete", "--topic", "doomed")
    assert deleted.returncode == 0, deleted.stderr
    _create(env, "led-by-104", "104:101,104:102")
    killed = env.cluster.dev("kill", "broker-104")
    assert killed.returncode == 0, killed.stderr
    # `cluster describe` lists unfenced brokers (and fenced ones only when asked).
    _wait("broker 104 fenced", lambda: env.brokers().get(104, {"state": "fenced"})["state"]
          == "fenced")
    out = env.tmp / "audit"
    lines: list[str] = []
    started = time.monotonic()
    report = audit.run(env.spark, env.cluster.directory / "controller-1", out,
                       say=lines.append)
    elapsed = time.monotonic() - started
    print("\n".join(lines))
    print(f"audit: {report.records} records, {report.events} events in {elapsed:.1f} s "
          f"{dict(report.durations_s)}")

    events = env.spark.read.parquet(str(out / audit.EVENTS_PARQUET)).collect()
    assert len(events) == report.events > 0
    kinds: dict[str, list[Any]] = {}
    for e in events:
        kinds.setdefault(e.kind, []).append(e)
    created = {e.topic for e in kinds["topic_created"]}
    assert {"doomed", "led-by-104"} <= created
    assert [e.topic for e in kinds["topic_deleted"]] == ["doomed"]
    fenced = [e for e in kinds["broker_fenced"] if e.broker == 104]
    assert fenced, kinds.get("broker_fenced")
    fence_offset = max(e.offset for e in fenced)
    # Leadership of led-by-104 moved to 101 and 102 when 104 was fenced; 104 left the ISRs.
    # (The controller fences and moves leaders in one batch of records.)
    moved = {(e.partition, e.broker) for e in kinds["leader_change"]
             if e.topic == "led-by-104" and abs(e.offset - fence_offset) < 100}
    assert moved == {(0, 101), (1, 102)}, [e for e in kinds["leader_change"]
                                           if e.topic == "led-by-104"]
    for e in kinds["leader_change"]:
        if e.topic == "led-by-104":
            assert e.leader == e.broker and e.leader_epoch >= 1 and 104 not in (e.isr or [])
    assert any(e.broker == 104 and e.topic == "led-by-104" for e in kinds["isr_shrink"])
    registered = {e.broker for e in kinds["broker_registered"]}
    assert set(BROKERS) <= registered
    assert kinds["election"], "no raft election (LeaderChange) in the log"
    if env.balance_report is not None:  # the balance test ran first: its moves are there
        assert {"heavy", "light"} <= created
        moved = {m.topic for m in env.balance_report.result.plan.partitions
                 if m.replicas != ()}
        assert {e.topic for e in kinds["reassignment_started"]} >= {"heavy"} & moved
    assert all(e.timestamp is not None for e in events)

    csv_parts = list((out / audit.EVENTS_CSV).glob("part-*.csv"))
    assert len(csv_parts) == 1
    csv_lines = csv_parts[0].read_text().splitlines()
    assert csv_lines[0].split(",")[:5] == ["offset", "timestamp", "timestamp_ms",
                                            "record_type", "kind"]
    assert len(csv_lines) - 1 >= report.events  # multi-line fields never occur; header + rows
    png = (out / audit.PLOT_PNG).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    assert any("leader_change" in line for line in lines)


# -- a hand-built log: exact classification ------------------------------------------------------

TOPIC = Uuid(bytes(range(1, 17)))
OTHER = Uuid(bytes(range(2, 18)))
T0 = 1_700_000_000_000


def _batch(offset: int, record: r.MetadataRecord, *, epoch: int = 3) -> bytes:
    return rb.build_batch([rb.RecordInput(value=record_convert.encode(record),
                                          timestamp_ms=T0 + offset * 1000)],
                          base_offset=offset, partition_leader_epoch=epoch,
                          now_ms=T0 + offset * 1000)


def _leader_change(offset: int, leader: int, epoch: int) -> bytes:
    message = cr.LeaderChangeMessage(leader_id=leader, voters=(1, 2, 3),
                                     granting_voters=(leader,))
    return rb.build_batch([rb.RecordInput(key=cr.encode_key(cr.ControlRecordType.LEADER_CHANGE),
                                          value=cr.encode_leader_change(message),
                                          timestamp_ms=T0 + offset * 1000)],
                          base_offset=offset, partition_leader_epoch=epoch,
                          now_ms=T0 + offset * 1000, is_control=True)


def _write_log(directory: pathlib.Path) -> None:
    part = directory / "__cluster_metadata-0"
    part.mkdir(parents=True)
    writer = raft_snapshot.SnapshotWriter(OffsetAndEpoch(offset=10, epoch=2),
                                          last_contained_log_timestamp=T0 + 9000, now_ms=T0)
    writer.append(record_convert.encode_all([
        r.TopicRecord(name="t", topic_id=TOPIC),
        r.PartitionRecord(topic_id=TOPIC, partition_id=0, replicas=(1, 2, 3), isr=(1, 2, 3),
                          leader=1, leader_epoch=5),
        r.RegisterBrokerRecord(broker_id=1, incarnation_id=OTHER, broker_epoch=1, rack="a",
                               fenced=False)]))
    (part / raft_snapshot.snapshot_file_name(OffsetAndEpoch(offset=10, epoch=2))).write_bytes(
        writer.build())
    # An older snapshot is ignored; so are log records below the latest snapshot's offset.
    old = raft_snapshot.SnapshotWriter(OffsetAndEpoch(offset=4, epoch=1),
                                       last_contained_log_timestamp=T0, now_ms=T0)
    old.append(record_convert.encode_all([r.TopicRecord(name="stale", topic_id=OTHER)]))
    (part / raft_snapshot.snapshot_file_name(OffsetAndEpoch(offset=4, epoch=1))).write_bytes(
        old.build())
    segment = b"".join([
        _batch(8, r.TopicRecord(name="inside-the-snapshot", topic_id=OTHER)),
        _leader_change(10, 2, 3),
        _batch(11, r.PartitionChangeRecord(topic_id=TOPIC, partition_id=0, isr=(1, 2))),
        _batch(12, r.FenceBrokerRecord(broker_id=3, broker_epoch=7)),
        _batch(13, r.PartitionChangeRecord(topic_id=TOPIC, partition_id=0, leader=2)),
        _batch(14, r.NoOpRecord()),
        _batch(15, r.PartitionChangeRecord(topic_id=TOPIC, partition_id=0, isr=(1, 2, 3))),
        _batch(16, r.PartitionChangeRecord(topic_id=TOPIC, partition_id=0, leader=2)),
        _batch(17, r.RemoveTopicRecord(topic_id=TOPIC)),
    ])
    torn = _batch(18, r.NoOpRecord())[:30]
    (part / f"{0:020d}.log").write_bytes(segment + torn)


def test_audit_classification_is_exact_on_a_hand_built_log(spark: Any,
                                                          tmp_path: pathlib.Path) -> None:
    _write_log(tmp_path / "meta")
    files = audit.list_files(tmp_path / "meta")
    assert [(pathlib.Path(f.path).name, f.source, f.min_offset) for f in files] == [
        (raft_snapshot.snapshot_file_name(OffsetAndEpoch(offset=10, epoch=2)), jad.SNAPSHOT,
         0), (f"{0:020d}.log", jad.LOG, 10)]
    lines: list[str] = []
    report = audit.run(spark, tmp_path / "meta", tmp_path / "out", say=lines.append)
    rows = spark.read.parquet(str(tmp_path / "out" / audit.EVENTS_PARQUET)) \
        .orderBy("offset", "kind", "broker").collect()
    got = [(e.offset, e.kind, e.topic, e.partition, e.broker, e.leader, e.isr, e.leader_epoch)
           for e in rows]
    assert got == [
        (10, "election", None, None, 2, None, None, 3),
        (11, "isr_shrink", "t", 0, 3, 1, [1, 2], 5),
        (12, "broker_fenced", None, None, 3, None, None, None),
        (13, "leader_change", "t", 0, 2, 2, [1, 2], 6),
        (15, "isr_expand", "t", 0, 3, 2, [1, 2, 3], 6),
        (16, "leader_epoch_bump", "t", 0, 2, 2, [1, 2, 3], 7),
        (17, "topic_deleted", "t", None, None, None, None, None),
    ]
    assert rows[0].timestamp_ms == T0 + 10_000
    assert report.records == 3 + 8  # snapshot records + log records from offset 10
    assert report.log_records == 8
    assert report.leader_changes_by_broker == {2: 1}
    assert len(report.warnings) == 1 and "00000000000000000000.log" in report.warnings[0]
    assert any(line.startswith("Warning: ") for line in lines)
    png = (tmp_path / "out" / audit.PLOT_PNG).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


# -- bad options: one line, exit 1 (or argparse's 2), before Spark starts ------------------------

@pytest.mark.parametrize(("args", "code", "message"), [
    (("balance", "--throttle", "5"), 1, "kraftlog: error: --throttle only applies with --execute"),
    (("balance", "--window-s", "0"), 2, "--window-s must be positive, not 0"),
    (("balance", "--min-improvement", "2"), 2, "--min-improvement must be in [0, 1)"),
    (("metadata-audit", "--metadata-log-dir", "/nonexistent/k", "--output-dir", "/tmp/x"), 1,
     "kraftlog: error: --metadata-log-dir /nonexistent/k does not exist"),
])
def test_bad_options_fail_with_one_line(args: tuple[str, ...], code: int, message: str) -> None:
    done = kraftlog("pipeline", *args, timeout_s=60)
    assert done.returncode == code, done.stderr
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_balance_against_an_unreachable_admin_fails_clearly(spark: Any) -> None:
    options = balance.BalanceOptions(admin="127.0.0.1:1", window_s=0.1, timeout_ms=2000)
    with pytest.raises(Exception) as failure:
        balance.run(spark, options, say=lambda _line: None)
    assert "cannot reach the admin service at 127.0.0.1:1" in str(failure.value)
