"""Metadata snapshots: the policy (Kafka's byte and interval thresholds), the record order of
image_records, and write_image's chunking and end-offset check."""

from __future__ import annotations

import pytest

from kraftlog.errors import InvariantViolation
from kraftlog.ids import Uuid
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import record_convert
from kraftlog.metadata import records as r
from kraftlog.metadata import snapshot as ms
from kraftlog.raft import snapshot as raft_snapshot
from kraftlog.raft.messages import OffsetAndEpoch

T1 = Uuid.from_bits(1, 1)
MIB = 1024 * 1024
HOUR_MS = 3_600_000


def test_policy_defaults_are_kafkas() -> None:
    policy = ms.SnapshotPolicy()
    assert policy.max_bytes_between_snapshots == 20 * MIB
    assert policy.max_interval_ms == HOUR_MS


@pytest.mark.parametrize(("bytes_since", "elapsed_ms", "due"), [
    (0, 0, False),
    (20 * MIB - 1, HOUR_MS - 1, False),
    (20 * MIB, 0, True),             # the byte threshold alone
    (1, HOUR_MS, True),              # the interval, with something new to cover
    (0, 10 * HOUR_MS, False),        # an idle log gets no new snapshot
])
def test_policy_decides_by_bytes_or_by_interval(bytes_since: int, elapsed_ms: int,
                                                due: bool) -> None:
    policy = ms.SnapshotPolicy()
    assert policy.should_snapshot(bytes_since_last_snapshot=bytes_since,
                                  now_ms=5_000 + elapsed_ms, last_snapshot_ms=5_000) is due


def test_policy_reason_names_the_kafka_config() -> None:
    policy = ms.SnapshotPolicy(max_bytes_between_snapshots=100, max_interval_ms=10)
    reason = policy.snapshot_reason(bytes_since_last_snapshot=100, now_ms=0, last_snapshot_ms=0)
    assert reason is not None and "metadata.log.max.record.bytes.between.snapshots" in reason
    reason = policy.snapshot_reason(bytes_since_last_snapshot=1, now_ms=10, last_snapshot_ms=0)
    assert reason is not None and "metadata.log.max.snapshot.interval.ms" in reason


def test_interval_zero_disables_the_time_rule() -> None:
    policy = ms.SnapshotPolicy(max_interval_ms=0)
    assert not policy.should_snapshot(bytes_since_last_snapshot=1, now_ms=10**12,
                                      last_snapshot_ms=0)


def test_policy_rejects_nonsense_settings() -> None:
    with pytest.raises(ValueError, match=r"between\.snapshots"):
        ms.SnapshotPolicy(max_bytes_between_snapshots=0)
    with pytest.raises(ValueError, match=r"interval\.ms"):
        ms.SnapshotPolicy(max_interval_ms=-1)


def sample_image() -> im.MetadataImage:
    delta = dl.MetadataDelta(im.EMPTY)
    records: list[r.MetadataRecord] = [
        r.ConfigRecord(resource_type=r.ConfigResourceType.TOPIC, resource_name="t", name="a",
                       value="1"),
        r.TopicRecord(name="t", topic_id=T1),
        r.PartitionRecord(topic_id=T1, partition_id=0, replicas=(1,), isr=(1,), leader=1),
        r.RegisterBrokerRecord(broker_id=1, incarnation_id=T1, broker_epoch=4, fenced=True),
        r.UnfenceBrokerRecord(broker_id=1, broker_epoch=4),
        r.FeatureLevelRecord(name="other", feature_level=2),
        r.FeatureLevelRecord(name="metadata.version", feature_level=21),
        r.ProducerIdsRecord(broker_id=1, broker_epoch=4, next_producer_id=3000),
    ]
    for offset, record in enumerate(records):
        delta.replay(record, offset, 1)
    return delta.apply()


def test_image_records_come_in_kafkas_order_with_metadata_version_first() -> None:
    kinds = [type(x).__name__ for x in ms.image_records(sample_image())]
    assert kinds == ["FeatureLevelRecord", "FeatureLevelRecord", "RegisterBrokerRecord",
                     "TopicRecord", "PartitionRecord", "ConfigRecord", "ProducerIdsRecord"]
    first = next(ms.image_records(sample_image()))
    assert first == r.FeatureLevelRecord(name="metadata.version", feature_level=21)


def test_image_records_carry_the_fence_state_in_the_registration() -> None:
    (register,) = [x for x in ms.image_records(sample_image())
                   if isinstance(x, r.RegisterBrokerRecord)]
    assert register.fenced is False


def test_the_empty_image_has_no_records() -> None:
    assert list(ms.image_records(im.EMPTY)) == []


def test_write_image_fills_the_writer_in_chunks() -> None:
    image = sample_image()
    snapshot_id = OffsetAndEpoch(offset=image.provenance.snapshot_end_offset, epoch=1)
    writer = raft_snapshot.SnapshotWriter(snapshot_id, last_contained_log_timestamp=0, now_ms=0)
    assert ms.write_image(writer, image, encode=record_convert.encode, chunk_records=2) == 7
    reader = raft_snapshot.read_snapshot_records(snapshot_id, writer.build())
    assert [record_convert.decode(v, offset=0) for v in reader] == list(ms.image_records(image))


def test_write_image_refuses_a_snapshot_that_ends_inside_the_image() -> None:
    image = sample_image()  # last offset 7
    writer = raft_snapshot.SnapshotWriter(OffsetAndEpoch(offset=7, epoch=1),
                                          last_contained_log_timestamp=0, now_ms=0)
    with pytest.raises(InvariantViolation, match="ends at offset 7"):
        ms.write_image(writer, image, encode=record_convert.encode)
    with pytest.raises(ValueError, match="chunk_records"):
        ms.write_image(writer, image, encode=record_convert.encode, chunk_records=0)
