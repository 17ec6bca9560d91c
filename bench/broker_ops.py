"""CPU per broker data-path operation, in one process (diagnostic for bench/broker.py).

Three ReplicaManagers over real logs in a temporary directory (tests/broker's ``Cluster``:
broker 1 leads ``t-0``, brokers 2 and 3 follow, min ISR 2) and broker 1's BrokerServicer,
called directly (no sockets). Each step runs what a broker runs for one request, protobuf
included (request parsed from bytes, response serialized), and is timed with
``time.process_time``:

* ``produce``: an idempotent 250 x 1 KiB batch (~256 KiB), acks=1;
* ``serve_data`` / ``serve_empty``: a follower's Fetch answered with that batch / with
  nothing new (the fetch that reports the follower's new log end);
* ``apply_data`` / ``apply_empty``: the follower's ReplicaFetcher applying that answer;
* ``consume``: a consumer Fetch of ~1 MiB (every 4th batch).

Prints the median and mean per operation in microseconds. Not a benchmark against an
anchor: use it to compare two versions of services/ on the same box
(``PYTHONPATH=<worktree>/services``). Page-cache writes dominate produce and apply.
``--tune-malloc`` applies the broker process's malloc settings first
(``kraftlog.malloc.mmap.threshold.bytes``), as ``kraftlog broker`` does.

    .venv/bin/python bench/broker_ops.py --batches 200 [--tune-malloc]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import pathlib
import statistics
import sys
import tempfile
import time

from kraftlog.broker import data_plane, fetcher_driver, server
from kraftlog.storage import record_batch as rb
from kraftlog.storage.log_config import LogConfig
from kraftlog.v1 import broker_pb2

# tests/broker/harness.py by path (bench/broker.py shadows "broker").
_SPEC = importlib.util.spec_from_file_location(
    "broker_harness", pathlib.Path(__file__).resolve().parent.parent / "tests" / "broker" / "harness.py")
assert _SPEC is not None and _SPEC.loader is not None
harness = importlib.util.module_from_spec(_SPEC)
sys.modules["broker_harness"] = harness
_SPEC.loader.exec_module(harness)

RECORDS_PER_BATCH = 250
RECORD_BYTES = 1024


def fetch_bytes(replica_id: int, offset: int, *, leader_epoch: int = -1, last_epoch: int = -1,
                log_start: int = -1, partition_max_bytes: int = 1 << 20) -> bytes:
    return broker_pb2.FetchRequest(
        replica_id=replica_id, replica_epoch=replica_id, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20,
        topics=[broker_pb2.FetchRequest.FetchTopic(topic=harness.TOPIC, partitions=[
            broker_pb2.FetchRequest.FetchPartition(
                partition=0, current_leader_epoch=leader_epoch, fetch_offset=offset,
                last_fetched_epoch=last_epoch, log_start_offset=log_start,
                partition_max_bytes=partition_max_bytes)])]).SerializeToString()


async def measure(batches: int, root: pathlib.Path) -> dict[str, list[float]]:
    harness.LOG_CONFIG = LogConfig(segment_index_bytes=10 * 1024 * 1024, segment_bytes=1 << 30)
    cluster = harness.Cluster(root)
    now = [harness.T0]
    planes = {b: data_plane.DataPlane(cluster.managers[b], now_ms=lambda: now[0]) for b in cluster.broker_ids}
    registered = harness.registered_brokers(*cluster.broker_ids)  # replica Fetch: KIP-903
    servicer = server.BrokerServicer(planes[1], broker_id=1, cluster_id="bench", image=lambda: registered,
                                     controller_id=lambda: 1, listener_name="PLAINTEXT")
    fetchers: dict[int, fetcher_driver.ReplicaFetcher] = {}
    for broker_id in (2, 3):
        fetcher = fetcher_driver.ReplicaFetcher(
            broker_id=broker_id, source_id=1, endpoint=lambda _id: None,
            broker_epoch=lambda broker_id=broker_id: broker_id,
            data=planes[broker_id], config=fetcher_driver.FetcherConfig())
        fetcher.states[harness.TP] = cluster.fetchers[broker_id]
        fetchers[broker_id] = fetcher
    value = b"x" * RECORD_BYTES
    requests = [broker_pb2.ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[
        broker_pb2.ProduceRequest.TopicProduceData(name=harness.TOPIC, partition_data=[
            broker_pb2.ProduceRequest.PartitionProduceData(index=0, records=rb.build_batch(
                [rb.RecordInput(value=value, timestamp_ms=harness.T0)] * RECORDS_PER_BATCH,
                producer_id=7, producer_epoch=0, base_sequence=i * RECORDS_PER_BATCH))])]).SerializeToString()
        for i in range(batches)]
    samples: dict[str, list[float]] = {k: [] for k in (
        "produce", "serve_data", "serve_empty", "apply_data", "apply_empty", "consume")}
    clock = time.process_time

    async def follower_round(broker_id: int) -> None:
        state = cluster.fetchers[broker_id]
        request = state.build_fetch_request(now[0])
        assert request is not None
        wire = fetch_bytes(broker_id, request.fetch_offset, leader_epoch=request.current_leader_epoch,
                           last_epoch=request.last_fetched_epoch, log_start=request.log_start_offset,
                           partition_max_bytes=request.partition_max_bytes)
        started = clock()
        answer = (await servicer.Fetch(broker_pb2.FetchRequest.FromString(wire), None)).SerializeToString()
        served = clock()
        response = broker_pb2.FetchResponse.FromString(answer)
        asked = {(harness.TP.topic, harness.TP.partition): (harness.TP, (state, request))}
        await fetchers[broker_id]._apply(None, asked, response)  # type: ignore[arg-type]
        planes[broker_id].dispatch()
        applied = clock()
        kind = "data" if response.responses[0].partitions[0].records else "empty"
        samples[f"serve_{kind}"].append(served - started)
        samples[f"apply_{kind}"].append(applied - served)

    consumed = 0
    for i, produce in enumerate(requests):
        now[0] += 1
        started = clock()
        await servicer.Produce(broker_pb2.ProduceRequest.FromString(produce), None)
        samples["produce"].append(clock() - started)
        for broker_id in (2, 3, 2, 3):  # the data, then the fetch that reports it
            await follower_round(broker_id)
        if i % 4 == 3:
            wire = fetch_bytes(-1, consumed)
            started = clock()
            (await servicer.Fetch(broker_pb2.FetchRequest.FromString(wire), None)).SerializeToString()
            samples["consume"].append(clock() - started)
            consumed += 4 * RECORDS_PER_BATCH
    if cluster.leader_partition.high_watermark != batches * RECORDS_PER_BATCH:
        raise SystemExit(f"high watermark {cluster.leader_partition.high_watermark}, "
                         f"expected {batches * RECORDS_PER_BATCH}")
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200, help="produce requests (~256 KiB each)")
    parser.add_argument("--tune-malloc", action="store_true", help="mallopt as a broker process does")
    args = parser.parse_args()
    if args.tune_malloc:
        from kraftlog import malloc_tuning
        if not malloc_tuning.tune():
            raise SystemExit("mallopt not applied (no glibc, or MALLOC_*_ / GLIBC_TUNABLES set)")
    with tempfile.TemporaryDirectory(prefix="broker-ops-") as root:
        samples = asyncio.run(measure(args.batches, pathlib.Path(root)))
    print("operation     median us   mean us   count")
    for name, values in samples.items():
        if values:
            print(f"{name:12s} {statistics.median(values) * 1e6:10.0f} {statistics.fmean(values) * 1e6:9.0f}"
                  f" {len(values):7d}")


if __name__ == "__main__":
    main()
