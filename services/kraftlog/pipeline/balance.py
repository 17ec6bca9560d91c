"""The ``balance`` Spark job: a reassignment plan that evens bytes and leaders across brokers.

Run it either way, with the same arguments::

    kraftlog pipeline balance --bootstrap-admin 127.0.0.1:19090 --output plan.json \\
        [--execute [--throttle BYTES_PER_S]] [--window-s 10]
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit \\
        services/kraftlog/pipeline/balance.py --bootstrap-admin 127.0.0.1:19090 ...

Steps:

1. the driver samples the cluster through the AdminService
   (:mod:`kraftlog.pipeline.jobs_admin_client`): brokers and racks
   (DescribeCluster), replicas and leaders (DescribeTopics), and every replica's
   size and log end offset (DescribeLogDirs) twice, ``--window-s`` apart;
2. Spark turns them into DataFrames and aggregates (:func:`aggregate`): per
   replica the growth between the samples; per partition its size (largest
   replica), each replica's size and its produce rate (the leader's growth per
   second, bytes and records); per broker its bytes, replicas, leaders and the
   produce rate it leads — brokers without replicas included (left joins);
3. the driver collects the aggregates and runs the greedy of
   :mod:`kraftlog.pipeline.jobs_balance_plan` over them;
4. Spark projects the broker loads after the plan (the new assignment exploded
   and joined with partition sizes); the job prints a per-broker table, the
   max/min bytes ratio before and after and the bytes to move, and writes the
   plan (Kafka's reassignment JSON, ``log_dirs`` "any");
5. ``--execute`` submits the plan (:func:`~kraftlog.pipeline.jobs_admin_client.execute_plan`:
   throttles, AlterPartitionReassignments, a bounded wait, throttles removed, a
   preferred election), then measures the brokers' bytes again and prints the
   measured ratio.

Exit 0 when done (also when nothing is worth moving: no plan is written then), 1
with one line on stderr for bad arguments, an unreachable cluster or an execution
that did not finish in ``--execute-timeout-s``. Edge module (Spark, the admin client).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kraftlog import errors
from kraftlog.admin import reassign_throttles as rt
from kraftlog.pipeline import job_args, jobs_spark
from kraftlog.pipeline import jobs_admin_client as jac
from kraftlog.pipeline import jobs_balance_plan as jbp

MEASURE_TIMEOUT_S = 30.0
"""After --execute: how long the removed replicas may take to leave DescribeLogDirs."""

_BROKERS_DDL = "broker int, rack string, fenced boolean"
_PARTITIONS_DDL = "topic string, partition int, replicas array<int>, leader int, isr array<int>"
_REPLICAS_DDL = ("sample int, broker int, topic string, partition int, size_bytes long, "
                 "log_end_offset long, is_leader boolean")


@dataclass(frozen=True, slots=True, kw_only=True)
class BalanceOptions:
    admin: str
    output: pathlib.Path | None = None
    execute: bool = False
    throttle: int | None = None
    window_s: float = job_args.DEFAULT_WINDOW_S
    topics: tuple[str, ...] = ()
    settings: jbp.BalanceSettings = field(default_factory=jbp.BalanceSettings)
    execute_timeout_s: float = job_args.DEFAULT_EXECUTE_TIMEOUT_S
    timeout_ms: int = 30_000


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerAggregate:
    broker: int
    rack: str
    fenced: bool
    bytes: int
    replicas: int
    leaders: int
    lead_rate_bytes_per_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class BalanceReport:
    result: jbp.BalanceResult
    brokers: tuple[BrokerAggregate, ...]
    projected_bytes: Mapping[int, int]
    """Spark's projection of each broker's bytes after the plan."""
    sample_window_s: float
    partitions: int
    execute: jac.ExecuteOutcome | None = None
    measured_bytes: Mapping[int, int] | None = None
    """Each broker's bytes measured after --execute."""
    durations_s: Mapping[str, float] | None = None

    @property
    def measured_ratio(self) -> float | None:
        return None if self.measured_bytes is None else jbp.bytes_ratio(self.measured_bytes)


def options_from_args(args: argparse.Namespace) -> BalanceOptions:
    job_args.check_balance_arguments(args)
    topics: tuple[str, ...] = ()
    if args.topics:
        topics = tuple(dict.fromkeys(t.strip() for t in args.topics.split(",") if t.strip()))
        if not topics:
            raise errors.ConfigError(f"--topics names no topic: {args.topics!r}")
    defaults = jbp.BalanceSettings()
    settings = jbp.BalanceSettings(
        min_improvement_ratio=(defaults.min_improvement_ratio if args.min_improvement is None
                               else args.min_improvement),
        max_moves=defaults.max_moves if args.max_moves is None else args.max_moves)
    return BalanceOptions(
        admin=job_args.admin_address(args.admin),
        output=pathlib.Path(args.output) if args.output else None, execute=args.execute,
        throttle=args.throttle, window_s=args.window_s, topics=topics, settings=settings,
        execute_timeout_s=args.execute_timeout_s, timeout_ms=args.timeout_ms)


# -- Spark ----------------------------------------------------------------------------------------

def frames(spark: Any, sample: jac.ClusterSample) -> tuple[Any, Any, Any]:
    """(brokers, partitions, replica samples) DataFrames of one cluster sample."""
    brokers = spark.createDataFrame([(b.broker_id, b.rack, b.fenced) for b in sample.brokers],
                                    _BROKERS_DDL)
    partitions = spark.createDataFrame(
        [(p.topic, p.partition, list(p.replicas), p.leader, list(p.isr))
         for p in sample.partitions], _PARTITIONS_DDL)
    replicas = spark.createDataFrame(
        [(r.sample, r.broker_id, r.topic, r.partition, r.size_bytes, r.log_end_offset,
          r.is_leader) for r in sample.replicas], _REPLICAS_DDL)
    return brokers, partitions, replicas


def aggregate(brokers: Any, partitions: Any, replicas: Any, window_s: float
              ) -> tuple[Any, Any]:
    """(per-partition, per-broker) aggregate DataFrames; see the module docstring, step 2.

    Only replicas of the assignment count (a replica a broker still holds after a
    move, not yet deleted, does not).
    """
    from pyspark.sql import functions as F

    keys = ["broker", "topic", "partition"]
    assigned = partitions.select("topic", "partition",
                                 F.explode("replicas").alias("broker"))
    latest = replicas.filter(F.col("sample") == 1).drop("sample")
    earlier = replicas.filter(F.col("sample") == 0).select(
        *keys, F.col("size_bytes").alias("size0"), F.col("log_end_offset").alias("leo0"))
    grown = (latest.join(assigned, keys, "inner").join(earlier, keys, "left")
             .withColumn("bytes_per_s", F.greatest(F.lit(0.0), (
                 F.col("size_bytes") - F.coalesce("size0", "size_bytes")) / F.lit(window_s)))
             .withColumn("records_per_s", F.greatest(F.lit(0.0), (
                 F.col("log_end_offset") - F.coalesce("leo0", "log_end_offset"))
                 / F.lit(window_s))))
    per_partition = (grown.groupBy("topic", "partition").agg(
        F.max("size_bytes").alias("size_bytes"),
        F.map_from_entries(F.collect_list(F.struct("broker", "size_bytes")))
        .alias("replica_bytes"),
        F.max(F.when(F.col("is_leader"), F.col("bytes_per_s"))).alias("rate_bytes_per_s"),
        F.max(F.when(F.col("is_leader"), F.col("records_per_s"))).alias("rate_records_per_s")))
    per_partition = (partitions.join(per_partition, ["topic", "partition"], "left")
                     .fillna({"size_bytes": 0, "rate_bytes_per_s": 0.0,
                              "rate_records_per_s": 0.0}))
    held = grown.groupBy("broker").agg(F.sum("size_bytes").alias("bytes"),
                                       F.count(F.lit(1)).alias("replicas"))
    led = (per_partition.filter(F.col("leader") >= 0)
           .groupBy(F.col("leader").alias("broker"))
           .agg(F.count(F.lit(1)).alias("leaders"),
                F.sum("rate_bytes_per_s").alias("lead_rate_bytes_per_s")))
    per_broker = (brokers.join(held, "broker", "left").join(led, "broker", "left")
                  .fillna({"bytes": 0, "replicas": 0, "leaders": 0,
                           "lead_rate_bytes_per_s": 0.0})
                  .orderBy("broker"))
    return per_partition, per_broker


def projected_bytes(spark: Any, per_partition: Any,
                    assignment: Mapping[tuple[str, int], Sequence[int]]) -> dict[int, int]:
    """Each broker's bytes if ``assignment`` were in place: a replica that stays keeps its
    size, a new one is the size of the partition's largest replica."""
    from pyspark.sql import functions as F

    after = spark.createDataFrame(
        [(t, p, b) for (t, p), brokers in assignment.items() for b in brokers],
        "topic string, partition int, broker int")
    sized = (after.join(per_partition.select("topic", "partition", "size_bytes",
                                             "replica_bytes"), ["topic", "partition"], "left")
             .withColumn("bytes", F.coalesce(
                 F.element_at(F.col("replica_bytes"), F.col("broker")), F.col("size_bytes"),
                 F.lit(0))))
    return {r["broker"]: int(r["bytes"])
            for r in sized.groupBy("broker").agg(F.sum("bytes").alias("bytes")).collect()}


def measured_bytes(spark: Any, rows: Sequence[jac.ReplicaRow]) -> dict[int, int]:
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(r.broker_id, r.size_bytes) for r in rows],
                               "broker int, size_bytes long")
    return {r["broker"]: int(r["bytes"]) for r in
            df.groupBy("broker").agg(F.sum("size_bytes").alias("bytes")).collect()}


# -- the job --------------------------------------------------------------------------------------

def run(spark: Any, options: BalanceOptions, *, say: Callable[[str], None] = print
        ) -> BalanceReport:
    """Sample, aggregate, plan, print, write, and execute when asked."""
    durations: dict[str, float] = {}
    mark = time.monotonic()
    sample = jac.sample_cluster(options.admin, topics=options.topics,
                                window_s=options.window_s, timeout_ms=options.timeout_ms)
    durations["sample"] = time.monotonic() - mark
    for warning in sample.warnings:
        say(f"Warning: {warning}")
    if not sample.partitions:
        raise jobs_spark.JobError("no partitions to balance (no topics"
                                  + (f" named {', '.join(options.topics)}" if options.topics
                                     else "") + ")")
    mark = time.monotonic()
    per_partition, per_broker = aggregate(*frames(spark, sample), window_s=sample.window_s)
    per_partition = per_partition.cache()
    partition_rows = per_partition.collect()
    broker_rows = per_broker.collect()
    durations["aggregate"] = time.monotonic() - mark
    loads = [jbp.PartitionLoad(
        topic=r["topic"], partition=r["partition"], replicas=tuple(r["replicas"]),
        leader=r["leader"], size_bytes=int(r["size_bytes"]),
        rate_bytes_per_s=float(r["rate_bytes_per_s"]),
        replica_bytes=dict(r["replica_bytes"] or {})) for r in partition_rows]
    infos = [jbp.BrokerInfo(broker_id=r["broker"], rack=r["rack"], live=not r["fenced"])
             for r in broker_rows]
    mark = time.monotonic()
    result = jbp.plan_balance(loads, infos, options.settings)
    durations["plan"] = time.monotonic() - mark
    projected = projected_bytes(spark, per_partition, result.assignment)
    per_partition.unpersist()
    aggregates = tuple(BrokerAggregate(
        broker=r["broker"], rack=r["rack"], fenced=r["fenced"], bytes=int(r["bytes"]),
        replicas=int(r["replicas"]), leaders=int(r["leaders"]),
        lead_rate_bytes_per_s=float(r["lead_rate_bytes_per_s"])) for r in broker_rows)
    report = BalanceReport(result=result, brokers=aggregates, projected_bytes=projected,
                           sample_window_s=sample.window_s, partitions=len(loads))
    for line in format_report(report):
        say(line)
    if not result.plan.partitions:
        say("Nothing worth moving: the brokers are balanced within --min-improvement; "
            "no plan written")
        return _with(report, durations_s=durations)
    text = result.plan.to_json()
    if options.output is not None:
        try:
            options.output.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise errors.ConfigError(f"cannot write --output {options.output}: "
                                     f"{exc.strerror or exc}") from None
        say(f"Plan written to {options.output} ({len(result.plan.partitions)} partitions)")
    else:
        say("Proposed partition reassignment configuration")
        say(text)
    if not options.execute:
        return _with(report, durations_s=durations)
    mark = time.monotonic()
    outcome = jac.execute_plan(options.admin, result.plan, throttle=options.throttle,
                               timeout_s=options.execute_timeout_s,
                               timeout_ms=options.timeout_ms)
    durations["execute"] = time.monotonic() - mark
    if outcome.throttled:
        say(f"Throttle {options.throttle} B/s was set on {', '.join(outcome.throttled)} "
            "and removed")
    if not outcome.completed:
        raise jobs_spark.JobError(
            f"the reassignment did not complete within {options.execute_timeout_s:g} s; "
            "follow it with 'kraftlog reassign verify --watch' (throttles were removed)")
    say(f"Reassignment of {outcome.started} partitions completed in {outcome.elapsed_s:.1f} s; "
        f"preferred leaders elected for {outcome.elected}")
    mark = time.monotonic()
    rows = jac.measure_log_dirs(options.admin, result.assignment, timeout_s=MEASURE_TIMEOUT_S,
                                timeout_ms=options.timeout_ms)
    measured = measured_bytes(spark, rows)
    durations["measure"] = time.monotonic() - mark
    report = _with(report, execute=outcome, measured_bytes=measured, durations_s=durations)
    say(f"Measured after the moves: max/min bytes ratio {_ratio_text(report.measured_ratio)} "
        "(" + ", ".join(f"{b}: {rt.human_bytes(n)}" for b, n in sorted(measured.items()))
        + ")")
    return report


def _with(report: BalanceReport, **changes: Any) -> BalanceReport:
    fields = {name: getattr(report, name) for name in BalanceReport.__dataclass_fields__}
    fields.update(changes)
    return BalanceReport(**fields)


def _ratio_text(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return "inf (a broker holds no bytes)" if math.isinf(ratio) else f"{ratio:.2f}"


def format_report(report: BalanceReport) -> list[str]:
    result = report.result
    header = ("BROKER", "RACK", "REPLICAS", "BYTES", "BYTES AFTER", "LEADERS",
              "LEADERS AFTER", "LEAD RATE")
    rows = [(str(b.broker) + (" (fenced)" if b.fenced else ""), b.rack or "-",
             str(b.replicas), rt.human_bytes(b.bytes),
             rt.human_bytes(report.projected_bytes.get(b.broker, 0)), str(b.leaders),
             str(result.after.leaders_by_broker.get(b.broker, 0)),
             f"{rt.human_bytes(b.lead_rate_bytes_per_s)}/s") for b in report.brokers]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [f"Sampled {report.partitions} partitions on {len(report.brokers)} brokers "
             f"(produce rates over {report.sample_window_s:.1f} s)"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in (header, *rows)]
    projected_ratio = jbp.bytes_ratio(report.projected_bytes)
    lines.append(f"max/min bytes ratio: {_ratio_text(result.before.ratio)} -> "
                 f"{_ratio_text(projected_ratio)} (projected)")
    lines.append(f"leaders max-min: {result.before.leader_spread} -> "
                 f"{result.after.leader_spread}")
    moved_partitions = len({(m.topic, m.partition) for m in result.moves})
    lines.append(f"bytes moved: {result.bytes_moved} ({rt.human_bytes(result.bytes_moved)}) in "
                 f"{len(result.moves)} replica moves over {moved_partitions} partitions; "
                 f"{len(result.plan.partitions)} partitions in the plan")
    return lines


def report_json(report: BalanceReport) -> dict[str, Any]:
    """The numbers of a run, for scripts and tests."""
    result = report.result
    return {"before_ratio": result.before.ratio,
            "projected_ratio": jbp.bytes_ratio(report.projected_bytes),
            "measured_ratio": report.measured_ratio, "bytes_moved": result.bytes_moved,
            "moves": len(result.moves), "plan_partitions": len(result.plan.partitions),
            "durations_s": dict(report.durations_s or {})}


def main_with_args(args: argparse.Namespace, *, default_master: str | None) -> int:
    options = options_from_args(args)
    jac.check_reachable(options.admin, timeout_ms=min(options.timeout_ms, 10_000))
    spark = jobs_spark.spark_session("kraftlog-balance", master=args.master or default_master)
    try:
        report = run(spark, options)
    finally:
        spark.stop()
    print("Durations: " + json.dumps({k: round(v, 2) for k, v in
                                      (report.durations_s or {}).items()}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit balance.py ...``: one line on stderr and exit 1 on expected errors."""
    args = job_args.balance_parser().parse_args(argv)
    try:
        return main_with_args(args, default_master=None)
    except errors.KraftlogError as exc:
        print(f"balance: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
