"""The ``metadata-audit`` Spark job: a controller's metadata log as a table of events.

Run it either way, with the same arguments::

    kraftlog pipeline metadata-audit --metadata-log-dir .kraftlog/dev/controller-1 \\
        --output-dir audit/
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit \\
        services/kraftlog/pipeline/audit.py --metadata-log-dir DIR --output-dir OUT

**Reading, in Spark.** The driver lists ``__cluster_metadata-0``: the latest
snapshot (``<offset>-<epoch>.checkpoint``) and the log segments holding offsets
at or after its end offset (all segments when there is no snapshot). The list is
parallelized, one Spark task per file, and each task decodes its file
(:func:`kraftlog.pipeline.jobs_audit_decode.decode_file`) into raw rows: a
parallelized list of files rather than a Python data source, because a
metadata log is a handful of files and each is read whole. The tasks read the
files by path, so the directory must be readable where the executors run
(local mode, or a shared volume).

**Classifying, in Spark.** Whether an ISR change shrinks or grows it, whether a
leader really changed, and the leader epoch a change produced depend on the
partition's earlier records, so :func:`classify` orders each partition's rows
(snapshot state first, then log offsets) in a window and looks back
(``last(..., ignorenulls)``); leader epochs are the last full PartitionRecord's
epoch plus the changes that set a leader since (Kafka's replay rule). Topic
names come from a join with the TopicRecords (a RemoveTopicRecord names only
the id). Each record becomes zero or more events, one per ``kind``:

``topic_created``, ``topic_deleted``, ``partition_created``, ``leader_change``
(broker = the new leader, -1 when the partition went offline),
``leader_epoch_bump`` (the same leader re-set), ``isr_shrink`` / ``isr_expand``
(one row per broker leaving / joining), ``reassignment_started``,
``replicas_changed``, ``election`` (a raft LeaderChange: broker = the new active
controller, leader_epoch = the raft epoch), ``broker_registered``,
``broker_unregistered``, ``broker_fenced``, ``broker_unfenced``,
``broker_controlled_shutdown``, ``config_changed``, ``feature_level``.
Snapshot rows only set the starting state; NoOp and ProducerIds records make no
event.

**Output.** ``OUT/events.parquet/`` and ``OUT/events.csv/`` (the table; ISR as
``1,2,3`` in CSV), ``OUT/leader_changes.png`` (leader changes per broker per
time bucket, and cumulative, with the brokers' fencings marked; matplotlib, Agg
backend) and a summary on stdout. Edge module (Spark, files).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kraftlog import errors
from kraftlog import ids as topic_partition
from kraftlog.pipeline import job_args, jobs_spark
from kraftlog.pipeline import jobs_audit_decode as jad
from kraftlog.raft import snapshot as raft_snapshot

EVENTS_PARQUET = "events.parquet"
EVENTS_CSV = "events.csv"
PLOT_PNG = "leader_changes.png"
PLOT_BUCKETS = 60
"""Default plot resolution: the log's time span in this many buckets."""

EVENT_COLUMNS = ("offset", "timestamp", "timestamp_ms", "record_type", "kind", "topic",
                 "topic_id", "partition", "leader", "isr", "leader_epoch", "broker",
                 "raft_epoch", "detail")


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditReport:
    files: tuple[jad.MetadataFile, ...]
    records: int
    """Records decoded (snapshot and log)."""
    log_records: int
    events: int
    kinds: Mapping[str, int]
    leader_changes_by_broker: Mapping[int, int]
    first_offset: int | None
    last_offset: int | None
    warnings: tuple[str, ...]
    output_dir: pathlib.Path
    plot: pathlib.Path
    durations_s: Mapping[str, float]


def partition_dir(directory: pathlib.Path) -> pathlib.Path:
    """``DIR/__cluster_metadata-0``, or DIR itself when it is that partition directory."""
    name = topic_partition.METADATA_PARTITION_DIR
    if (directory / name).is_dir():
        return directory / name
    if directory.name == name and directory.is_dir():
        return directory
    if not directory.exists():
        raise errors.ConfigError(f"--metadata-log-dir {directory} does not exist")
    raise errors.ConfigError(f"--metadata-log-dir {directory} holds no {name} (give a "
                             "controller's metadata.log.dir)")


def list_files(directory: pathlib.Path) -> list[jad.MetadataFile]:
    """The latest snapshot and the segments after it (see the module docstring)."""
    part = partition_dir(directory)
    snapshots = []
    segments: list[tuple[int, pathlib.Path]] = []
    for path in sorted(part.iterdir()):
        snapshot_id = raft_snapshot.parse_snapshot_file_name(path.name)
        if snapshot_id is not None:
            snapshots.append((snapshot_id.offset, snapshot_id.epoch, path))
        elif path.suffix == ".log" and path.stem.isdigit() and len(path.stem) == 20:
            segments.append((int(path.stem), path))
    files: list[jad.MetadataFile] = []
    start = 0
    if snapshots:
        offset, epoch, path = max(snapshots)
        start = offset
        files.append(jad.MetadataFile(path=str(path), source=jad.SNAPSHOT,
                                      snapshot_end_offset=offset, snapshot_epoch=epoch))
    segments.sort()
    for i, (_base, path) in enumerate(segments):
        next_base = segments[i + 1][0] if i + 1 < len(segments) else None
        if next_base is not None and next_base <= start:
            continue  # wholly inside the snapshot
        files.append(jad.MetadataFile(path=str(path), source=jad.LOG, min_offset=start))
    if not files:
        raise errors.ConfigError(f"--metadata-log-dir {directory}: {part} holds no snapshot "
                                 "and no log segment")
    return files


def read_raw(spark: Any, files: Sequence[jad.MetadataFile]) -> Any:
    """The raw rows of ``files``, one Spark task per file (:data:`jad.RAW_DDL`)."""
    rdd = spark.sparkContext.parallelize(list(files), len(files)).flatMap(jad.decode_file)
    return spark.createDataFrame(rdd, jad.RAW_DDL)


def classify(raw: Any) -> Any:
    """Events (:data:`EVENT_COLUMNS`) from raw rows; see the module docstring."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rows = raw.filter(F.col("record_type") != jad.WARNING).withColumn(
        "source_rank", F.when(F.col("source") == jad.SNAPSHOT, 0).otherwise(1))
    order = ["source_rank", "offset", "record_index"]
    names = (rows.filter(F.col("record_type") == "TopicRecord")
             .select("topic_id", F.col("topic_name").alias("topic")).dropDuplicates(["topic_id"]))

    parts = rows.filter(F.col("record_type").isin("PartitionRecord", "PartitionChangeRecord"))
    by_partition = Window.partitionBy("topic_id", "partition").orderBy(*order)
    before = by_partition.rowsBetween(Window.unboundedPreceding, -1)
    upto = by_partition.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    full = F.col("record_type") == "PartitionRecord"
    parts = (parts
             .withColumn("prev_isr", F.last("isr", ignorenulls=True).over(before))
             .withColumn("prev_leader", F.last("leader", ignorenulls=True).over(before))
             .withColumn("generation", F.sum(F.when(full, 1).otherwise(0)).over(upto)))
    by_generation = (Window.partitionBy("topic_id", "partition", "generation").orderBy(*order)
                     .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    sets_leader = (~full) & F.col("leader").isNotNull()
    epoch_now = (F.first("leader_epoch", ignorenulls=True).over(by_generation)
                 + F.sum(F.when(sets_leader, 1).otherwise(0)).over(by_generation))
    parts = (parts.withColumn("leader_epoch", epoch_now.cast("int"))
             .withColumn("isr_now", F.coalesce("isr", "prev_isr"))
             .withColumn("leader_now", F.coalesce("leader", "prev_leader")))

    def event(kind: str, broker: Any) -> Any:
        return F.array(F.struct(F.lit(kind).alias("kind"), broker.cast("int").alias("broker")))

    def per_broker(kind: str, brokers: Any) -> Any:
        return F.transform(brokers, lambda b: F.struct(F.lit(kind).alias("kind"),
                                                       b.alias("broker")))

    none = F.array().cast("array<struct<kind:string,broker:int>>")
    isr_set = (~full) & F.col("isr").isNotNull() & F.col("prev_isr").isNotNull()
    partition_events = F.concat(
        F.when(full, event("partition_created", F.col("leader"))).otherwise(none),
        F.when(sets_leader & (F.col("prev_leader").isNull()
                              | (F.col("leader") != F.col("prev_leader"))),
               event("leader_change", F.col("leader"))).otherwise(none),
        F.when(sets_leader & (F.col("leader") == F.col("prev_leader")),
               event("leader_epoch_bump", F.col("leader"))).otherwise(none),
        F.when(isr_set, per_broker("isr_shrink", F.array_except("prev_isr", "isr")))
        .otherwise(none),
        F.when(isr_set, per_broker("isr_expand", F.array_except("isr", "prev_isr")))
        .otherwise(none),
        F.when((~full) & (F.size(F.coalesce("adding_replicas", F.array())) > 0),
               event("reassignment_started", F.lit(None))).otherwise(none),
        F.when((~full) & F.col("replicas").isNotNull()
               & (F.size(F.coalesce("adding_replicas", F.array())) == 0),
               event("replicas_changed", F.lit(None))).otherwise(none))
    parts = (parts.filter(F.col("source") == jad.LOG)
             .withColumn("events", partition_events)
             .withColumn("leader", F.col("leader_now")).withColumn("isr", F.col("isr_now")))

    rt = F.col("record_type")
    other_events = (
        F.when(rt == "TopicRecord", event("topic_created", F.lit(None)))
        .when(rt == "RemoveTopicRecord", event("topic_deleted", F.lit(None)))
        .when(rt == jad.LEADER_CHANGE, event("election", F.col("broker")))
        .when(rt == "RegisterBrokerRecord", event("broker_registered", F.col("broker")))
        .when(rt == "UnregisterBrokerRecord", event("broker_unregistered", F.col("broker")))
        .when(rt == "FenceBrokerRecord", event("broker_fenced", F.col("broker")))
        .when(rt == "UnfenceBrokerRecord", event("broker_unfenced", F.col("broker")))
        .when(rt == "BrokerRegistrationChangeRecord", F.concat(
            F.when(F.col("fenced") == F.lit(True), event("broker_fenced", F.col("broker")))
            .otherwise(none),
            F.when(F.col("fenced") == F.lit(False), event("broker_unfenced", F.col("broker")))
            .otherwise(none),
            F.when(F.col("controlled_shutdown") == F.lit(True),
                   event("broker_controlled_shutdown", F.col("broker"))).otherwise(none)))
        .when(rt == "ConfigRecord", event("config_changed", F.lit(None)))
        .when(rt == "FeatureLevelRecord", event("feature_level", F.lit(None)))
        .otherwise(none))
    others = (rows.filter((F.col("source") == jad.LOG)
                          & ~rt.isin("PartitionRecord", "PartitionChangeRecord"))
              .withColumn("events", other_events))
    common = ["offset", "record_index", "timestamp_ms", "record_type", "topic_id", "partition",
              "leader", "isr", "leader_epoch", "broker", "raft_epoch", "detail", "events"]
    both = parts.select(*common).unionByName(others.select(*common))
    exploded = (both.select(*[c for c in common if c not in ("events", "broker")],
                            F.col("broker").alias("record_broker"),
                            F.explode("events").alias("event"))
                .select("*", F.col("event.kind").alias("kind"),
                        F.coalesce(F.col("event.broker"), F.col("record_broker"))
                        .alias("broker"))
                .drop("event", "record_broker"))
    named = exploded.join(F.broadcast(names), "topic_id", "left")
    return (named.withColumn("timestamp", F.timestamp_millis("timestamp_ms"))
            .orderBy("offset", "record_index", "kind", "broker")
            .select(*EVENT_COLUMNS))


def leader_changes_per_bucket(events: Any, bucket_ms: int) -> list[tuple[int, int, int]]:
    """(bucket start ms, broker, leader changes won) — a Spark aggregation."""
    from pyspark.sql import functions as F

    counted = (events.filter(F.col("kind") == "leader_change")
               .withColumn("bucket", F.floor(F.col("timestamp_ms") / bucket_ms) * bucket_ms)
               .groupBy("bucket", "broker").count().orderBy("bucket", "broker").collect())
    return [(int(r["bucket"]), int(r["broker"]), int(r["count"])) for r in counted]


def plot(path: pathlib.Path, buckets: Sequence[tuple[int, int, int]],
         fencings: Sequence[tuple[int, int]], *, bucket_ms: int, span_ms: tuple[int, int],
         title: str) -> None:
    """Leader changes per broker per bucket (top) and cumulative (bottom), PNG.

    The x axis covers ``span_ms`` (the log's first to last event) plus a bucket each side.
    """
    import datetime

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import dates, pyplot, ticker

    def when(ms: int) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)

    lo, hi = span_ms
    figure, (top, bottom) = pyplot.subplots(2, 1, figsize=(10, 7), sharex=True)
    brokers = sorted({b for _, b, _ in buckets})
    for broker in brokers:
        mine = [(t, n) for t, b, n in buckets if b == broker]
        label = "offline (-1)" if broker < 0 else f"broker {broker}"
        top.plot([when(t) for t, _ in mine], [n for _, n in mine], marker="o",
                 linestyle="-" if len(mine) > 1 else "none", label=label)
        total = 0
        xs, ys = [when(lo - bucket_ms)], [0]
        for t, n in mine:
            total += n
            xs.append(when(t))
            ys.append(total)
        xs.append(when(hi + bucket_ms))
        ys.append(total)
        bottom.step(xs, ys, where="post", marker="o", markevery=list(range(1, len(xs) - 1)),
                    label=label)
    for ms, broker in fencings:
        for axis in (top, bottom):
            axis.axvline(when(ms), color="grey", linestyle="--", linewidth=0.8)
        top.annotate(f"{broker} fenced", (when(ms), 0), rotation=90, fontsize=7,
                     color="grey", va="bottom")
    for axis in (top, bottom):
        axis.set_xlim(when(lo - bucket_ms), when(hi + bucket_ms))
        axis.set_ylim(bottom=0)
        axis.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
    bottom.xaxis.set_major_formatter(
        dates.DateFormatter("%H:%M:%S"))  # type: ignore[no-untyped-call]
    top.set_ylabel(f"leader changes / {bucket_ms / 1000:.3g} s")
    bottom.set_ylabel("cumulative leader changes")
    bottom.set_xlabel(f"time (UTC), from {when(lo):%Y-%m-%d %H:%M:%S}")
    top.set_title(title)
    if brokers:
        top.legend(loc="upper right", fontsize=8)
    else:
        top.text(0.5, 0.5, "no leader changes in the log", transform=top.transAxes,
                 ha="center")
    figure.autofmt_xdate()
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=100)
    pyplot.close(figure)


def run(spark: Any, directory: pathlib.Path, output_dir: pathlib.Path, *,
        bucket_s: float | None = None, say: Callable[[str], None] = print) -> AuditReport:
    from pyspark.sql import functions as F

    durations: dict[str, float] = {}
    mark = time.monotonic()
    files = list_files(directory)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise errors.ConfigError(f"--output-dir {output_dir}: {exc.strerror or exc}") from None
    raw = read_raw(spark, files).cache()
    # One pass for the counts, the log's offsets and the warnings (rare, so collected).
    is_warning = F.col("record_type") == jad.WARNING
    stats = raw.groupBy("source").agg(
        F.sum(F.when(is_warning, 0).otherwise(1)).alias("records"),
        F.min(F.when(~is_warning, F.col("offset"))).alias("first"),
        F.max(F.when(~is_warning, F.col("offset"))).alias("last"),
        F.collect_list(F.when(is_warning, F.col("detail"))).alias("warnings")).collect()
    counts = {r["source"]: int(r["records"]) for r in stats}
    log_span = next((r for r in stats if r["source"] == jad.LOG), None)
    warnings = tuple(w for r in stats for w in r["warnings"])
    durations["read"] = time.monotonic() - mark
    mark = time.monotonic()
    events = classify(raw).cache()
    events.write.mode("overwrite").parquet(str(output_dir / EVENTS_PARQUET))
    (events.withColumn("isr", F.array_join(F.col("isr").cast("array<string>"), ","))
     .coalesce(1).write.mode("overwrite").option("header", "true")
     .csv(str(output_dir / EVENTS_CSV)))
    # One pass for the counts per kind and broker, the time span and the fencings.
    summary = events.groupBy("kind", "broker").agg(
        F.count(F.lit(1)).alias("count"), F.min("timestamp_ms").alias("lo"),
        F.max("timestamp_ms").alias("hi"),
        F.collect_list(F.when(F.col("kind") == "broker_fenced", F.col("timestamp_ms")))
        .alias("fenced_at")).collect()
    kinds: dict[str, int] = {}
    for r in summary:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + int(r["count"])
    by_broker = {int(r["broker"]): int(r["count"]) for r in summary
                 if r["kind"] == "leader_change"}
    fencings = sorted((int(ms), int(r["broker"])) for r in summary for ms in r["fenced_at"])
    durations["classify_and_write"] = time.monotonic() - mark
    mark = time.monotonic()
    lo = min((int(r["lo"]) for r in summary if r["lo"] is not None), default=0)
    hi = max((int(r["hi"]) for r in summary if r["hi"] is not None), default=0)
    bucket_ms = (max(1, int(bucket_s * 1000)) if bucket_s is not None
                 else max(1000, -(-(hi - lo) // PLOT_BUCKETS)))
    buckets = leader_changes_per_bucket(events, bucket_ms)
    png = output_dir / PLOT_PNG
    plot(png, buckets, fencings, bucket_ms=bucket_ms, span_ms=(lo, hi),
         title=f"Leader changes per broker ({directory})")
    durations["plot"] = time.monotonic() - mark
    events.unpersist()
    raw.unpersist()
    report = AuditReport(
        files=tuple(files), records=sum(counts.values()), log_records=counts.get(jad.LOG, 0),
        events=sum(kinds.values()), kinds=kinds, leader_changes_by_broker=by_broker,
        first_offset=None if log_span is None else log_span["first"],
        last_offset=None if log_span is None else log_span["last"], warnings=warnings,
        output_dir=output_dir, plot=png, durations_s=durations)
    for line in format_summary(report):
        say(line)
    return report


def format_summary(report: AuditReport) -> list[str]:
    snapshot = [f for f in report.files if f.source == jad.SNAPSHOT]
    lines = [f"Read {len(report.files)} files ("
             + (f"snapshot ending at offset {snapshot[0].snapshot_end_offset}, "
                if snapshot else "no snapshot, ")
             + f"{len(report.files) - len(snapshot)} segments): {report.records} records, "
             f"{report.log_records} from the log"
             + (f" (offsets {report.first_offset}..{report.last_offset})"
                if report.first_offset is not None else "")]
    lines.append(f"{report.events} events:")
    for kind, count in sorted(report.kinds.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {kind:<28} {count}")
    if report.leader_changes_by_broker:
        lines.append("Leader changes won per broker: " + ", ".join(
            f"{'offline' if b < 0 else b}: {n}"
            for b, n in sorted(report.leader_changes_by_broker.items())))
    lines += [f"Warning: {w}" for w in report.warnings]
    lines.append(f"Wrote {report.output_dir / EVENTS_PARQUET}, "
                 f"{report.output_dir / EVENTS_CSV}, {report.plot}")
    return lines


def main_with_args(args: argparse.Namespace, *, default_master: str | None) -> int:
    directory = pathlib.Path(args.metadata_log_dir)
    list_files(directory)  # a bad directory fails before Spark starts
    spark = jobs_spark.spark_session("kraftlog-metadata-audit",
                                     master=args.master or default_master)
    try:
        report = run(spark, directory, pathlib.Path(args.output_dir), bucket_s=args.bucket_s)
    finally:
        spark.stop()
    print("Durations: " + json.dumps({k: round(v, 2) for k, v in report.durations_s.items()}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit audit.py ...``: one line on stderr and exit 1 on expected errors."""
    args = job_args.audit_parser().parse_args(argv)
    try:
        return main_with_args(args, default_master=None)
    except errors.KraftlogError as exc:
        print(f"metadata-audit: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
