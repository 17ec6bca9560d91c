"""The broker's log cleaner over real replicas: compacted topics shrink, others do not, replicas still catch up."""

from __future__ import annotations

import os
import pathlib

from kraftlog.broker import log_cleaner
from kraftlog.broker import partition as partition_mod
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r
from kraftlog.storage import batch_header as bh
from kraftlog.storage import checkpoint
from kraftlog.storage import record_batch as rb

from .harness import TP, Cluster

KEYS = 50


def keyed_batch(round_: int, first_key: int, count: int, ts: int) -> bytes:
    return rb.build_batch([rb.RecordInput(key=b"k%03d" % k, value=b"v%03d-%03d" % (k, round_), timestamp_ms=ts)
                           for k in range(first_key, first_key + count)])


def produce_rounds(cluster: Cluster, rounds: int) -> None:
    for round_ in range(rounds):
        for first in range(0, KEYS, 10):
            outcome = cluster.leader_manager.append_records(
                {TP: keyed_batch(round_, first, 10, cluster.now_ms)}, required_acks=1, timeout_ms=1_000,
                now_ms=cluster.now_ms)
            assert outcome.responses is not None
        for broker_id in (2, 3):
            cluster.catch_up(broker_id)
        # Segments roll as they would at log.segment.bytes; every replica rolls its own.
        for p in cluster.partitions.values():
            p.log.roll(cluster.now_ms)
    cluster.fetch(2)
    cluster.fetch(3)


def records_of(p: partition_mod.Partition) -> list[tuple[int, int, bytes]]:
    """(offset, leader epoch, value) of every record, across segments (one Log.read stops at a segment end)."""
    out: list[tuple[int, int, bytes]] = []
    offset = p.log.log_start_offset
    while offset < p.log.log_end_offset:
        fetched = p.log.read(offset, 1 << 30)
        assert fetched.records
        for batch in rb.decode_batches(fetched.records):
            out.extend((rec.offset, batch.partition_leader_epoch, rec.value or b"") for rec in batch.records)
        offset = fetched.next_offset
    return out


def image_with(topic_configs: dict[str, str]) -> im.MetadataImage:
    resource = im.ConfigResource(resource_type=r.ConfigResourceType.TOPIC, resource_name=TP.topic)
    return im.MetadataImage(configs=im.ConfigsImage(resources={resource: topic_configs}))


def test_a_compacted_topic_shrinks_on_every_replica_and_a_new_replica_catches_up_through_it(
        tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path)
    produce_rounds(cluster, 20)
    leader = cluster.leader_partition
    assert leader.high_watermark == leader.log_end_offset == 20 * KEYS
    before = {b: p.log.size_in_bytes for b, p in cluster.partitions.items()}
    latest = {value[:4]: (offset, value) for offset, _epoch, value in records_of(leader)}

    image = image_with({"cleanup.policy": "compact"})
    cleaner = log_cleaner.LogCleaner(settings=log_cleaner.LogCleanerSettings(backoff_ms=1_000),
                                     image=lambda: image, broker_id=1)
    done = cleaner.maybe_clean(cluster.partitions.values(), cluster.now_ms)
    assert {c.topic_partition for c in done} == {TP} and len(done) == 3, "each replica cleans its own log"
    for broker_id, p in cluster.partitions.items():
        assert p.log.size_in_bytes < before[broker_id] / 5
        assert [(o, v) for o, _e, v in records_of(p)] == sorted(latest.values())
        # The checkpoint records where the clean section ends, in each broker's log dir.
        cp = checkpoint.OffsetCheckpointFile(pathlib.Path(p.log.directory).parent
                                             / checkpoint.CLEANER_OFFSET_CHECKPOINT).read()
        assert cp == {TP: p.log.log_end_offset}
    # Nothing more is due: the next call backs off without looking.
    assert cleaner.maybe_clean(cluster.partitions.values(), cluster.now_ms) == []

    # Produce more, then a replica that lost its log fetches the cleaned log from offset 0.
    produce_rounds(cluster, 1)
    follower = cluster.partitions[3]
    follower.log.truncate_fully_and_start_at(0)
    cluster.catch_up(3)
    assert records_of(follower) == records_of(leader)

    # A fresh cleaner (a restarted broker) resumes from the checkpoint files.
    restarted = log_cleaner.LogCleaner(settings=log_cleaner.LogCleanerSettings(), image=lambda: image, broker_id=1)
    assert restarted.checkpoint_of(leader.log.directory) == 20 * KEYS


def test_topics_without_compact_are_left_alone_and_the_broker_default_policy_applies(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path)
    produce_rounds(cluster, 4)
    sizes = {b: p.log.size_in_bytes for b, p in cluster.partitions.items()}
    delete = log_cleaner.LogCleaner(settings=log_cleaner.LogCleanerSettings(), image=lambda: image_with({}))
    assert delete.maybe_clean(cluster.partitions.values(), cluster.now_ms) == []
    topic_delete = log_cleaner.LogCleaner(
        settings=log_cleaner.LogCleanerSettings(defaults={"log.cleanup.policy": "compact"}),
        image=lambda: image_with({"cleanup.policy": "delete"}))
    assert topic_delete.maybe_clean(cluster.partitions.values(), cluster.now_ms) == []
    disabled = log_cleaner.LogCleaner(
        settings=log_cleaner.LogCleanerSettings(enabled=False, defaults={"log.cleanup.policy": "compact"}))
    assert disabled.maybe_clean(cluster.partitions.values(), cluster.now_ms) == []
    assert {b: p.log.size_in_bytes for b, p in cluster.partitions.items()} == sizes
    by_default = log_cleaner.LogCleaner(
        settings=log_cleaner.LogCleanerSettings(defaults={"log.cleanup.policy": "compact,delete"}),
        image=lambda: image_with({}))
    assert len(by_default.maybe_clean(cluster.partitions.values(), cluster.now_ms)) == 3


def test_a_log_that_fails_to_clean_is_marked_uncleanable_and_the_others_go_on(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path)
    produce_rounds(cluster, 4)
    broken = cluster.partitions[2]
    first = broken.log.segment_handles()[0]
    with open(first.log_path, "r+b") as f:  # damaged bytes: the cleaner checks each batch's CRC
        f.seek(bh.RECORDS_OFFSET)
        f.write(b"\xff" * 8)
    cleaner = log_cleaner.LogCleaner(
        settings=log_cleaner.LogCleanerSettings(defaults={"log.cleanup.policy": "compact"}))
    done = cleaner.maybe_clean(cluster.partitions.values(), cluster.now_ms)
    assert len(done) == 2 and cleaner.uncleanable == {TP}


def test_a_log_that_changes_while_its_cleaning_is_prepared_is_retried_not_marked(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path)
    produce_rounds(cluster, 4)
    cleaner = log_cleaner.LogCleaner(
        settings=log_cleaner.LogCleanerSettings(backoff_ms=0, defaults={"log.cleanup.policy": "compact"}))
    planned = cleaner.plan(cluster.partitions.values(), cluster.now_ms)
    assert len(planned) == 3
    prepared = log_cleaner.prepare(planned)  # what the broker runs in a worker thread
    follower = cluster.partitions[3]
    follower.log.truncate_fully_and_start_at(0)  # the follower's log changes meanwhile
    done = cleaner.commit(prepared, cluster.now_ms)
    assert {c.result.end_offset for c in done} == {4 * KEYS} and len(done) == 2
    assert cleaner.uncleanable == frozenset()
    assert not [n for n in os.listdir(follower.log.directory) if n.endswith(".cleaned")]
    cluster.catch_up(3)
    follower.log.roll(cluster.now_ms)
    assert len(cleaner.maybe_clean([follower], cluster.now_ms)) == 1, "the next pass cleans it"
    assert records_of(follower) == records_of(cluster.leader_partition)


def test_time_and_size_retention_apply_only_where_the_policy_says_delete() -> None:
    def cleaner_for(topic_configs: dict[str, str], default: str = "delete") -> log_cleaner.LogCleaner:
        image = image_with(topic_configs)
        return log_cleaner.LogCleaner(settings=log_cleaner.LogCleanerSettings(
            defaults={"log.cleanup.policy": default}), image=lambda: image, broker_id=1)

    assert cleaner_for({}).deletes_old_segments(TP.topic)
    assert not cleaner_for({"cleanup.policy": "compact"}).deletes_old_segments(TP.topic)
    assert cleaner_for({"cleanup.policy": "compact,delete"}).deletes_old_segments(TP.topic)
    assert not cleaner_for({}, default="compact").deletes_old_segments(TP.topic)
    assert cleaner_for({"cleanup.policy": "delete"}, default="compact").deletes_old_segments(TP.topic)
