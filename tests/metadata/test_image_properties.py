"""Hypothesis: random valid record sequences build the image a naive model predicts, however
they are split into deltas; image_records(image) rebuilds the same image; and a snapshot written
with raft's SnapshotWriter and loaded through the MetadataLoader gives it back too."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import loader, record_convert
from kraftlog.metadata import records as r
from kraftlog.metadata import snapshot as ms
from kraftlog.raft import snapshot as raft_snapshot
from kraftlog.raft.consensus import CommittedBatch
from kraftlog.raft.messages import OffsetAndEpoch
from tests.metadata import model as mm

SETTINGS = settings(max_examples=100, deadline=None)


def replay_all(records: list[r.MetadataRecord], cuts: list[int]) -> im.MetadataImage:
    """Replay ``records``, starting a new delta at each index in ``cuts``."""
    image = im.EMPTY
    delta = dl.MetadataDelta(image)
    for offset, record in enumerate(records):
        if offset in cuts:
            image = delta.apply()
            delta = dl.MetadataDelta(image)
        delta.replay(record, offset, 1)
    return delta.apply()


@SETTINGS
@given(sequence=mm.valid_sequences(), data=st.data())
def test_random_valid_sequences_build_the_model_image(
        sequence: tuple[list[r.MetadataRecord], mm.Model], data: st.DataObject) -> None:
    records, model = sequence
    cuts = data.draw(st.lists(st.integers(0, max(len(records) - 1, 0)), max_size=6))
    image = replay_all(records, cuts)
    assert mm.plain(image) == model.plain()
    assert image.provenance.last_offset == len(records) - 1
    assert image == replay_all(records, [])


@SETTINGS
@given(sequence=mm.valid_sequences())
def test_image_records_rebuild_an_equal_image(
        sequence: tuple[list[r.MetadataRecord], mm.Model]) -> None:
    image = replay_all(sequence[0], [])
    rebuilt = replay_all(list(ms.image_records(image)), [])
    assert rebuilt.same_state(image)
    assert mm.plain(rebuilt) == mm.plain(image)


@settings(max_examples=40, deadline=None)
@given(sequence=mm.valid_sequences(), chunk=st.integers(1, 7))
def test_snapshot_bytes_load_back_through_the_loader(
        sequence: tuple[list[r.MetadataRecord], mm.Model], chunk: int) -> None:
    records = sequence[0]
    image = replay_all(records, [])
    snapshot_id = OffsetAndEpoch(offset=image.provenance.snapshot_end_offset, epoch=1)
    writer = raft_snapshot.SnapshotWriter(snapshot_id, last_contained_log_timestamp=1234,
                                          now_ms=99)
    count = ms.write_image(writer, image, encode=record_convert.encode, chunk_records=chunk)
    reader = raft_snapshot.read_snapshot_records(snapshot_id, writer.build())
    assert len(reader.records) == count
    metadata_loader = loader.MetadataLoader(decode=record_convert.decode)
    metadata_loader.handle_load_snapshot(reader)
    loaded = metadata_loader.image
    assert loaded.same_state(image)
    assert loaded.provenance == im.MetadataProvenance(
        last_offset=snapshot_id.offset - 1, last_epoch=1, last_append_timestamp_ms=1234)


@settings(max_examples=40, deadline=None)
@given(first=mm.valid_sequences(), second=mm.valid_sequences())
def test_a_snapshot_load_replaces_whatever_image_the_loader_had(
        first: tuple[list[r.MetadataRecord], mm.Model],
        second: tuple[list[r.MetadataRecord], mm.Model]) -> None:
    target = replay_all(second[0], [])
    snapshot_id = OffsetAndEpoch(offset=1000, epoch=2)
    writer = raft_snapshot.SnapshotWriter(snapshot_id, last_contained_log_timestamp=0, now_ms=0)
    ms.write_image(writer, target, encode=record_convert.encode)
    metadata_loader = loader.MetadataLoader(decode=record_convert.decode)
    values = tuple(record_convert.encode_all(first[0]))
    if values:
        metadata_loader.handle_commit([CommittedBatch(
            base_offset=0, last_offset=len(values) - 1, epoch=1, append_timestamp_ms=5,
            records=values)])
    metadata_loader.handle_load_snapshot(
        raft_snapshot.read_snapshot_records(snapshot_id, writer.build()))
    assert metadata_loader.image.same_state(target)


def _expected_local_changes(before: im.MetadataImage, after: im.MetadataImage,
                            broker_id: int) -> dict[str, set[tuple[object, int]]]:
    """local_changes restated as a diff of two whole images."""
    keys = {(t.topic_id, p) for image in (before, after) for t in image.topics.topics.values()
            for p in t.partitions}
    expected: dict[str, set[tuple[object, int]]] = {"deletes": set(), "leaders": set(),
                                                    "followers": set()}
    for topic_id, partition_id in keys:
        old = before.topics.partition(topic_id, partition_id)  # type: ignore[arg-type]
        new = after.topics.partition(topic_id, partition_id)  # type: ignore[arg-type]
        if new is None or broker_id not in new.replicas:
            if old is not None and broker_id in old.replicas:
                expected["deletes"].add((topic_id, partition_id))
        elif old is None or old.partition_epoch != new.partition_epoch:
            kind = "leaders" if new.leader == broker_id else "followers"
            expected[kind].add((topic_id, partition_id))
    return expected


@SETTINGS
@given(sequence=mm.valid_sequences(max_size=60), data=st.data())
def test_local_changes_match_a_diff_of_the_two_images(
        sequence: tuple[list[r.MetadataRecord], mm.Model], data: st.DataObject) -> None:
    records = sequence[0]
    cut = data.draw(st.integers(0, len(records)))
    before = replay_all(records[:cut], [])
    delta = dl.MetadataDelta(before)
    for offset, record in enumerate(records[cut:], start=cut):
        delta.replay(record, offset, 1)
    after = delta.apply()
    if delta.topics_delta is None:
        assert after.topics is before.topics
        return
    for broker_id in range(5):
        changes = delta.topics_delta.local_changes(broker_id)
        got = {kind: {(p.topic_id, p.partition_id) for p in getattr(changes, kind)}
               for kind in ("deletes", "leaders", "followers")}
        assert got == _expected_local_changes(before, after, broker_id)
        assert {(p.topic_id, p.partition_id) for p in changes.elected_leaders} <= got["leaders"]
