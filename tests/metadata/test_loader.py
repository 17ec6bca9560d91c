"""MetadataLoader: whole batches in, one image and delta per commit out, snapshots replace the
image, redelivered batches are skipped, and corrupt input leaves the image untouched."""

from __future__ import annotations

import pytest

from kraftlog.errors import CorruptRecordError, InvariantViolation
from kraftlog.ids import Uuid
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import loader, record_convert
from kraftlog.metadata import records as r
from kraftlog.metadata import snapshot as ms
from kraftlog.raft import consensus
from kraftlog.raft import snapshot as raft_snapshot
from kraftlog.raft.consensus import CommittedBatch
from kraftlog.raft.messages import OffsetAndEpoch

T1 = Uuid.from_bits(1, 1)
INC = Uuid.from_bits(7, 7)


class Recorder:
    def __init__(self) -> None:
        self.updates: list[tuple[dl.MetadataDelta, im.MetadataImage]] = []

    def on_metadata_update(self, delta: dl.MetadataDelta, image: im.MetadataImage) -> None:
        self.updates.append((delta, image))


def batch(base_offset: int, *records: r.MetadataRecord, epoch: int = 1,
          timestamp_ms: int = 1000) -> CommittedBatch:
    return CommittedBatch(base_offset=base_offset, last_offset=base_offset + len(records) - 1,
                          epoch=epoch, append_timestamp_ms=timestamp_ms,
                          records=tuple(record_convert.encode(x) for x in records))


def new_loader() -> tuple[loader.MetadataLoader, Recorder]:
    metadata_loader = loader.MetadataLoader(decode=record_convert.decode)
    recorder = Recorder()
    metadata_loader.add_publisher(recorder)
    return metadata_loader, recorder


TOPIC: list[r.MetadataRecord] = [r.TopicRecord(name="t", topic_id=T1),
         r.PartitionRecord(topic_id=T1, partition_id=0, replicas=(1, 2), isr=(1, 2), leader=1)]


def test_the_loader_has_the_raft_listener_shape() -> None:
    listener: consensus.RaftListener = loader.MetadataLoader(decode=record_convert.decode)
    listener.handle_leader_change(3, 7)
    assert isinstance(listener, loader.MetadataLoader)
    assert (listener.leader_id, listener.leader_epoch) == (3, 7)


def test_one_commit_of_many_batches_publishes_one_image() -> None:
    metadata_loader, recorder = new_loader()
    metadata_loader.handle_commit([batch(0, *TOPIC, timestamp_ms=10),
                                   batch(2, r.PartitionChangeRecord(topic_id=T1, partition_id=0,
                                                                    isr=(1,)),
                                         epoch=2, timestamp_ms=20)])
    assert len(recorder.updates) == 1
    delta, image = recorder.updates[0]
    assert image is metadata_loader.image and delta.image is im.EMPTY
    assert image.provenance == im.MetadataProvenance(last_offset=2, last_epoch=2,
                                                     last_append_timestamp_ms=20)
    registration = image.topics.partition(T1, 0)
    assert registration is not None and registration.isr == (1,)


def test_batches_the_image_already_covers_are_skipped() -> None:
    metadata_loader, recorder = new_loader()
    metadata_loader.handle_commit([batch(0, *TOPIC)])
    before = metadata_loader.image
    metadata_loader.handle_commit([batch(0, *TOPIC)])  # would fail as a duplicate topic
    assert metadata_loader.image is before and len(recorder.updates) == 1


def test_a_corrupt_record_fails_the_commit_and_keeps_the_old_image() -> None:
    metadata_loader, recorder = new_loader()
    metadata_loader.handle_commit([batch(0, *TOPIC)])
    before = metadata_loader.image
    bad = CommittedBatch(base_offset=2, last_offset=3, epoch=1, append_timestamp_ms=0,
                         records=(record_convert.encode(r.NoOpRecord()), b"\xff\xff"))
    with pytest.raises(CorruptRecordError, match="offset 3"):
        metadata_loader.handle_commit([bad])
    assert metadata_loader.image is before and len(recorder.updates) == 1


def test_a_record_that_cannot_apply_fails_the_commit_and_keeps_the_old_image() -> None:
    metadata_loader, _ = new_loader()
    with pytest.raises(dl.ReplayError, match="offset 5: unknown topic id"):
        metadata_loader.handle_commit([batch(5, TOPIC[1])])
    assert metadata_loader.image is im.EMPTY


def test_snapshot_load_replaces_the_image_and_publishes_the_difference() -> None:
    metadata_loader, recorder = new_loader()
    metadata_loader.handle_commit([batch(0, *TOPIC)])
    target = dl.MetadataDelta(im.EMPTY)
    target.replay(r.RegisterBrokerRecord(broker_id=1, incarnation_id=INC, broker_epoch=3), 0, 1)
    snapshot_id = OffsetAndEpoch(offset=50, epoch=4)
    writer = raft_snapshot.SnapshotWriter(snapshot_id, last_contained_log_timestamp=77, now_ms=0)
    ms.write_image(writer, target.apply(), encode=record_convert.encode)
    metadata_loader.handle_load_snapshot(
        raft_snapshot.read_snapshot_records(snapshot_id, writer.build()))
    delta, image = recorder.updates[-1]
    assert not image.topics.topics and set(image.cluster.brokers) == {1}
    assert image.provenance == im.MetadataProvenance(last_offset=49, last_epoch=4,
                                                     last_append_timestamp_ms=77)
    assert delta.topics_delta is not None
    assert [p.topic_name for p in delta.topics_delta.local_changes(1).deletes] == ["t"]
    # Batches up to the snapshot are now covered and skipped; the next one applies.
    metadata_loader.handle_commit([batch(49, r.NoOpRecord()), batch(50, *TOPIC)])
    assert metadata_loader.image.topics.get_topic_by_name("t") is not None
    assert metadata_loader.image.provenance.last_offset == 51


def test_a_late_publisher_catches_up_from_the_empty_image() -> None:
    metadata_loader = loader.MetadataLoader(decode=record_convert.decode)
    metadata_loader.handle_commit([batch(0, *TOPIC)])
    recorder = Recorder()
    metadata_loader.add_publisher(recorder)
    ((delta, image),) = recorder.updates
    assert image is metadata_loader.image and delta.image is im.EMPTY
    assert delta.apply().same_state(image)
    assert delta.topics_delta is not None
    assert [p.partition_id for p in delta.topics_delta.local_changes(1).leaders] == [0]
    metadata_loader.remove_publisher(recorder)
    metadata_loader.handle_commit([batch(2, r.NoOpRecord())])
    assert len(recorder.updates) == 1


def test_an_empty_loader_does_not_call_a_new_publisher() -> None:
    _, recorder = new_loader()
    assert recorder.updates == []


def test_a_batch_straddling_the_image_offset_is_an_invariant_violation() -> None:
    metadata_loader, _ = new_loader()
    metadata_loader.handle_commit([batch(0, *TOPIC)])  # image at offset 1
    with pytest.raises(InvariantViolation, match="straddles"):
        metadata_loader.handle_commit([batch(1, r.NoOpRecord(), r.NoOpRecord())])


def test_without_publishers_commits_pend_and_the_image_is_built_when_read() -> None:
    metadata_loader = loader.MetadataLoader(decode=record_convert.decode)
    change = r.PartitionChangeRecord(topic_id=T1, partition_id=0, isr=(1,))
    metadata_loader.handle_commit([batch(0, *TOPIC, timestamp_ms=10)])
    metadata_loader.handle_commit([batch(2, change, timestamp_ms=20)])
    image = metadata_loader.image
    partition = image.topics.partition(T1, 0)
    assert partition is not None and partition.isr == (1,)
    assert image.provenance == im.MetadataProvenance(last_offset=2, last_epoch=1,
                                                     last_append_timestamp_ms=20)
    assert metadata_loader.image is image  # built once; nothing pends any more
    # Redelivered batches are still skipped, and a straddling one still refused.
    metadata_loader.handle_commit([batch(3, r.NoOpRecord())])
    metadata_loader.handle_commit([batch(2, change), batch(3, r.NoOpRecord())])
    with pytest.raises(InvariantViolation, match="straddles"):
        metadata_loader.handle_commit([batch(3, r.NoOpRecord(), r.NoOpRecord())])
    assert metadata_loader.image.provenance.last_offset == 3


def test_without_publishers_a_failing_commit_keeps_what_pended_before_it() -> None:
    metadata_loader = loader.MetadataLoader(decode=record_convert.decode)
    metadata_loader.handle_commit([batch(0, *TOPIC)])
    second = r.TopicRecord(name="u", topic_id=Uuid.from_bits(2, 2))
    # The second batch of this call fails after its first batch (and record) replayed.
    bad = CommittedBatch(base_offset=3, last_offset=4, epoch=1, append_timestamp_ms=0,
                         records=(record_convert.encode(r.NoOpRecord()), b"\xff\xff"))
    with pytest.raises(CorruptRecordError, match="offset 4"):
        metadata_loader.handle_commit([batch(2, second), bad])
    image = metadata_loader.image
    assert image.provenance.last_offset == 1
    assert image.topics.get_topic_by_name("t") is not None
    assert image.topics.get_topic_by_name("u") is None
    # And it goes on from there.
    metadata_loader.handle_commit([batch(2, second)])
    assert metadata_loader.image.topics.get_topic_by_name("u") is not None


def test_without_publishers_the_image_is_built_once_enough_records_pend(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "MAX_PENDING_RECORDS", 3)
    metadata_loader = loader.MetadataLoader(decode=record_convert.decode)
    metadata_loader.handle_commit([batch(0, *TOPIC)])
    assert metadata_loader._image is im.EMPTY  # pending (2 records)
    metadata_loader.handle_commit([batch(2, r.NoOpRecord())])
    assert metadata_loader._image.provenance.last_offset == 2  # built at 3 records


def test_a_publisher_added_while_commits_pend_sees_them_all() -> None:
    metadata_loader = loader.MetadataLoader(decode=record_convert.decode)
    metadata_loader.handle_commit([batch(0, *TOPIC)])
    recorder = Recorder()
    metadata_loader.add_publisher(recorder)
    ((_, image),) = recorder.updates
    assert image.topics.get_topic_by_name("t") is not None
    metadata_loader.handle_commit([batch(2, r.NoOpRecord())])
    assert len(recorder.updates) == 2  # with a publisher: one publication per commit
