"""The client library and ``kraftlog produce`` / ``consume`` against 3 controllers + 3 brokers.

One cluster, one topic with 3 partitions (replication factor 3,
min.insync.replicas=2):

1. the library produces keyed records with acks=all; each lands on Kafka's
   murmur2 partition for its key, at consecutive offsets, and the consumer reads
   every one back in per-partition send order; beginning/end offsets and
   offsets_for_times agree;
2. the CLI produces ``key:value`` lines with a header and consumes everything as
   JSON; unknown topics fail with one line naming UNKNOWN_TOPIC_OR_PARTITION;
3. ``kraftlog delete-records`` (kafka-delete-records' JSON, through a broker's
   AdminService) moves partition 0's log start offset: Kafka's output lines, an offset
   past the high watermark answers OFFSET_OUT_OF_RANGE (exit 1), a consumer from the
   beginning starts at the new offset, one positioned below it resets by
   ``auto.offset.reset`` (or raises with ``none``);
4. partition 0's leader is SIGKILLed while the producer is sending: every
   acknowledged record is read back at its acknowledged offset, and the new leader (a
   follower when the records were deleted) starts at the new log start offset too.

Every wait is bounded; all children are killed in ``finally``.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from kraftlog import client
from kraftlog.client import partitioner
from kraftlog.tools import cli as kraftlog_cli
from tests.quorum_cluster import BROKERS, Topic, running_cluster, wait_for, wait_for_full_isr

TOPIC = "orders"
PARTITIONS = 3
DELETED = 5
"""Partition 0's records below this offset are deleted (kraftlog delete-records)."""


def cli(*args: str, stdin: str = "", timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kraftlog", *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout_s, check=False)


def read_all(bootstrap: str, expected: int, *, timeout_s: float = 15
             ) -> dict[int, list[client.ConsumerRecord]]:
    """Every record of TOPIC from the beginning, by partition, until ``expected`` arrived."""
    config = client.ConsumerConfig(bootstrap_servers=(bootstrap,),
                                   auto_offset_reset=client.OffsetReset.EARLIEST)
    out: dict[int, list[client.ConsumerRecord]] = {p: [] for p in range(PARTITIONS)}
    with client.Consumer(config) as consumer:
        consumer.assign_topic(TOPIC)
        consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        total = 0
        while total < expected and time.monotonic() < deadline:
            for record in consumer.poll(max_records=1000, timeout_ms=500):
                out[record.partition].append(record)
                total += 1
    return out


def log_start_checkpoint(root: pathlib.Path, broker: int) -> str:
    path = root / f"broker-{broker}" / "log-start-offset-checkpoint"
    return path.read_text() if path.exists() else ""


def test_produce_consume_through_library_and_cli_and_a_leader_kill(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    with running_cluster(tmp_path, topics=[
            Topic(name=TOPIC, partitions=PARTITIONS, min_insync_replicas=2)]) as running:
        brokers = running.brokers
        bootstrap = ",".join(running.bootstrap)
        config = client.ProducerConfig(bootstrap_servers=tuple(bootstrap.split(",")),
                                       acks=client.Acks.ALL, linger_ms=5,
                                       request_timeout_ms=5000, delivery_timeout_ms=30000)
        producer = client.Producer(config)
        try:
            wait_for_full_isr(producer, TOPIC, PARTITIONS)

            # 1. library: keyed records, acks=all, read back in order.
            sent = [(f"key-{i % 40}".encode(), f"value-{i}".encode()) for i in range(300)]
            futures = [producer.send(TOPIC, value, key=key, headers=[("n", str(i).encode())])
                       for i, (key, value) in enumerate(sent)]
            producer.flush(20000)
            metas = [f.result(timeout=1) for f in futures]
            by_partition: dict[int, list[tuple[int, bytes, bytes]]] = {
                p: [] for p in range(PARTITIONS)}
            for (key, value), meta in zip(sent, metas, strict=True):
                assert meta.partition == partitioner.partition_for_key(key, PARTITIONS)
                by_partition[meta.partition].append((meta.offset, key, value))
            for rows in by_partition.values():
                assert [o for o, _k, _v in rows] == list(range(len(rows)))
            assert all(by_partition.values())
            read = read_all(bootstrap, len(sent))
            for p in range(PARTITIONS):
                assert [(r.offset, r.key, r.value) for r in read[p]] == by_partition[p]
            first = read[0][0]
            assert first.headers[0].key == "n" and first.topic == TOPIC
            assert first.timestamp_type is client.TimestampType.CREATE_TIME

            with client.Consumer(client.ConsumerConfig(
                    bootstrap_servers=tuple(bootstrap.split(",")))) as consumer:
                tps = consumer.assign_topic(TOPIC)
                ends = consumer.end_offsets(tps)
                assert ends == {client.TopicPartition(topic=TOPIC, partition=p):
                                len(by_partition[p]) for p in range(PARTITIONS)}
                assert set(consumer.beginning_offsets(tps).values()) == {0}
                found = consumer.offsets_for_times({tps[0]: 0, tps[1]: 2**62})
                assert found[tps[0]] == client.OffsetAndTimestamp(
                    offset=0, timestamp_ms=read[0][0].timestamp_ms)
                assert found[tps[1]] is None
                # seek_to_end then poll: nothing new.
                consumer.seek_to_end()
                assert consumer.poll(timeout_ms=300) == []
                assert consumer.position(tps[2]) == len(by_partition[2])

            # 2. CLI: produce lines with keys and a header, consume them all as JSON.
            lines = "".join(f"cli-{i}:line-{i}\n" for i in range(30))
            done = cli("produce", "--bootstrap-server", bootstrap, "--topic", TOPIC,
                       "--key-separator", ":", "--header", "src=cli", "--acks", "all",
                       stdin=lines)
            assert done.returncode == 0, done.stderr
            total = len(sent) + 30
            done = cli("consume", "--bootstrap-server", bootstrap, "--topic", TOPIC,
                       "--from-beginning", "--max-messages", str(total), "--timeout-ms",
                       "10000", "--output", "json")
            assert done.returncode == 0, done.stderr
            assert f"Processed a total of {total} messages" in done.stderr
            rows = [json.loads(line) for line in done.stdout.splitlines()]
            assert len(rows) == total
            cli_rows = [r for r in rows if r["key"] and r["key"].startswith("cli-")]
            assert sorted(r["value"] for r in cli_rows) == sorted(
                f"line-{i}" for i in range(30))
            for row in cli_rows:
                assert row["headers"] == [{"key": "src", "value": "cli"}]
                assert row["partition"] == partitioner.partition_for_key(
                    row["key"].encode(), PARTITIONS)
            for p in range(PARTITIONS):
                offsets = [r["offset"] for r in rows if r["partition"] == p]
                assert offsets == list(range(len(offsets)))
            # One partition, from an offset, text with key and offset (in-process).
            capsys.readouterr()
            code = kraftlog_cli.main([
                "consume", "--bootstrap-server", bootstrap, "--topic", TOPIC,
                "--partition", "1", "--offset", "2", "--max-messages", "1", "--print-key",
                "--print-offset", "--timeout-ms", "10000"])
            captured = capsys.readouterr()
            assert code == 0, captured.err
            _o, key, value = by_partition[1][2]
            assert captured.out == f"Offset:2\t{key.decode()}\t{value.decode()}\n"

            # 3. delete-records: partition 0 starts at DELETED from now on, on every replica.
            offsets_file = tmp_path / "delete.json"
            offsets_file.write_text(json.dumps({"partitions": [
                {"topic": TOPIC, "partition": 0, "offset": DELETED},
                {"topic": TOPIC, "partition": 1, "offset": 10**9}], "version": 1}))
            done = cli("delete-records", "--bootstrap-server", bootstrap,
                       "--offset-json-file", str(offsets_file))
            assert done.returncode == 1, done.stderr
            assert done.stdout.splitlines()[:3] == [
                "Executing records delete operation", "Records delete operation completed:",
                f"partition: {TOPIC}-0\tlow_watermark: {DELETED}"], done.stdout
            assert done.stdout.splitlines()[3].startswith(
                f"partition: {TOPIC}-1\terror: OFFSET_OUT_OF_RANGE"), done.stdout
            # The leader checkpointed its new log start offset before answering; the
            # followers' periodic checkpoint follows.
            p0_leader = producer.partitions_for(TOPIC)[0].leader_id
            assert f"{TOPIC} 0 {DELETED}" in log_start_checkpoint(tmp_path, p0_leader)
            wait_for(lambda: True if all(
                f"{TOPIC} 0 {DELETED}" in log_start_checkpoint(tmp_path, b)
                for b in BROKERS) else None, timeout_s=15,
                what="every replica's log-start-offset-checkpoint")
            p0 = client.TopicPartition(topic=TOPIC, partition=0)
            with client.Consumer(client.ConsumerConfig(
                    bootstrap_servers=tuple(bootstrap.split(",")),
                    auto_offset_reset=client.OffsetReset.EARLIEST)) as consumer:
                consumer.assign([p0])
                assert consumer.beginning_offsets([p0]) == {p0: DELETED}
                consumer.seek(p0, 0)  # below the log start: reset to the earliest
                first = []
                for _ in range(20):
                    first += consumer.poll(timeout_ms=500)
                    if first:
                        break
                assert first[0].offset == DELETED
            with client.Consumer(client.ConsumerConfig(
                    bootstrap_servers=tuple(bootstrap.split(",")),
                    auto_offset_reset=client.OffsetReset.NONE)) as consumer:
                consumer.assign([p0])
                consumer.seek(p0, DELETED - 1)
                with pytest.raises(client.OffsetOutOfRangeError):
                    for _ in range(20):
                        consumer.poll(timeout_ms=500)

            # 4. kill partition 0's leader while sending; every ack must be readable,
            # by a consumer that was polling through the kill and by a new one.
            before = sum(len(rows) for rows in by_partition.values()) + 30
            leader = producer.partitions_for(TOPIC)[0].leader_id
            live = client.Consumer(client.ConsumerConfig(
                bootstrap_servers=tuple(bootstrap.split(",")), retry_backoff_ms=50))
            live.assign_topic(TOPIC)
            live.seek_to_end()
            assert sum(live.position(tp) for tp in live.assignment()) == before
            seen: dict[tuple[int, int], bytes | None] = {}
            acked: dict[int, tuple[client.RecordMetadata, bytes]] = {}
            failed: list[BaseException] = []
            lock = threading.Lock()

            def on_done(index: int, value: bytes) -> object:
                def callback(future: client.RecordFuture) -> None:
                    with lock:
                        error = future.exception()
                        if error is None:
                            acked[index] = (future.result(), value)
                        else:
                            failed.append(error)
                return callback

            for i in range(300):
                value = f"kill-{i}".encode()
                future = producer.send(TOPIC, value, key=f"k{i}".encode())
                future.add_done_callback(on_done(i, value))  # type: ignore[arg-type]
                if i == 80:
                    brokers.kill(leader)
                if i % 10 == 0:
                    seen.update(((r.partition, r.offset), r.value)
                                for r in live.poll(max_records=1000, timeout_ms=0))
                time.sleep(0.005)
            producer.flush(30000)
            producer.metadata.request_update()
            assert producer.partitions_for(TOPIC)[0].leader_id not in (leader, -1)
            deadline = time.monotonic() + 15
            while len(seen) < len(acked) and time.monotonic() < deadline:
                seen.update(((r.partition, r.offset), r.value)
                            for r in live.poll(max_records=1000, timeout_ms=300))
            live.close()
        finally:
            producer.close(timeout_ms=5000)
        assert len(acked) + len(failed) == 300
        assert not failed, failed[:3]
        # Retries kept each partition's order: offsets grow in send order.
        for p in range(PARTITIONS):
            offsets = [m.offset for i, (m, _v) in sorted(acked.items()) if m.partition == p]
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        survivor = next(b for b in BROKERS if b != leader)
        read = read_all(f"127.0.0.1:{brokers.ports[survivor]}",
                        before - DELETED + len(acked), timeout_s=15)
        # The new leader of partition 0 was a follower when its records were deleted.
        assert read[0][0].offset == DELETED
        stored = {(p, r.offset): r.value for p, rows in read.items() for r in rows}
        missing = [(m, v) for m, v in acked.values() if stored.get((m.partition, m.offset)) != v]
        assert not missing, missing[:5]
        missed_live = [(m, v) for m, v in acked.values()
                       if seen.get((m.partition, m.offset)) != v]
        assert not missed_live, missed_live[:5]
        assert time.monotonic() - started < 120
