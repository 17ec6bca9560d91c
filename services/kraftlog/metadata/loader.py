"""The metadata log's consumer: committed raft batches and snapshots in, images out.

Owns :class:`MetadataLoader`, after Kafka's ``MetadataLoader``: it has the
shape of the raft client's ``RaftListener`` (``handle_commit``,
``handle_load_snapshot``, ``handle_leader_change``), decodes every record,
replays whole batches into a :class:`~kraftlog.metadata.delta.MetadataDelta`,
and hands the new image and that delta to each registered
:class:`MetadataPublisher` (a broker's reconciler, a standby controller, the
admin cache, the snapshot generator).

Pure: the record decoder is injected (a :class:`RecordDecoder`; production
passes :func:`kraftlog.metadata.record_convert.decode`), so this module imports
no protobuf and runs unchanged under the deterministic simulator. Called on the
raft driver's thread/task only; no locks.

Rules:

* A batch applies whole or not at all. One ``handle_commit`` call becomes one
  delta and one publication, however many batches it carries.
* Batches the image already covers (``last_offset`` at or below its
  provenance, e.g. redelivered after a snapshot load) are skipped.
* A snapshot load replaces the image: the snapshot's records are replayed into
  a ``from_snapshot`` delta of the current image, so anything the snapshot
  lacks is removed and publishers still see what changed.
* A corrupt record (:class:`~kraftlog.errors.CorruptRecordError`) or a record
  that cannot apply (:class:`~kraftlog.metadata.delta.ReplayError`) propagates
  and leaves the image as it was before the call: both are fatal for the
  process (committed metadata is trusted), never skipped.
* The image is switched before publishers run; an exception from a publisher
  propagates too (a publisher that cannot keep up with the image is a bug).
* With no publisher registered (the active controller's loader, kept only for
  metadata snapshots and metrics), commits coalesce into one pending delta and the
  image is built when :attr:`MetadataLoader.image` is next read, or once
  :data:`MAX_PENDING_RECORDS` records are pending. Building an image copies the
  top-level maps (O(topics)); doing that per commit made every CreateTopics cost
  O(topics) on the controller. Kafka's loader batches commits the same way before
  it publishes. The rules above still hold per call: a failing commit leaves the
  pending records as they were.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from kraftlog.errors import InvariantViolation
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r
from kraftlog.metadata import snapshot as ms
from kraftlog.raft.consensus import CommittedBatch
from kraftlog.raft.snapshot import SnapshotReader


class RecordDecoder(Protocol):
    """Bytes of one metadata record value -> the record; raises naming ``offset`` if corrupt."""

    def __call__(self, data: bytes, *, offset: int) -> r.MetadataRecord: ...


class MetadataPublisher(Protocol):
    """Receives every new image with the delta that made it from the previous one."""

    def on_metadata_update(self, delta: dl.MetadataDelta, image: im.MetadataImage) -> None: ...


MAX_PENDING_RECORDS = 50_000
"""Records a publisher-less loader lets pend before it builds the image anyway (memory)."""


def replay_batches(image: im.MetadataImage, batches: Iterable[CommittedBatch],
                   decode: RecordDecoder,
                   delta: dl.MetadataDelta | None = None) -> dl.MetadataDelta | None:
    """A delta of ``image`` with every batch it does not already cover; ``None`` if none.

    With ``delta`` (a delta of ``image`` holding earlier batches), replays into it instead,
    skipping what it already covers."""
    last_offset = image.provenance.last_offset if delta is None else delta.provenance.last_offset
    for batch in batches:
        if batch.last_offset <= last_offset:
            continue
        if batch.base_offset <= last_offset:
            # Images stand at batch boundaries (snapshots end on one), so a batch that
            # straddles the image's offset means the log and the image disagree.
            raise InvariantViolation(
                f"batch [{batch.base_offset}, {batch.last_offset}] straddles the image's last "
                f"offset {last_offset}")
        if delta is None:
            delta = dl.MetadataDelta(image)
        offset = batch.base_offset
        epoch = batch.epoch
        replay = delta.replay
        for value in batch.records:
            replay(decode(value, offset=offset), offset, epoch)
            offset += 1
        delta.set_provenance(im.MetadataProvenance(
            last_offset=batch.last_offset, last_epoch=epoch,
            last_append_timestamp_ms=batch.append_timestamp_ms))
        last_offset = batch.last_offset
    return delta


def replay_snapshot(image: im.MetadataImage, reader: SnapshotReader,
                    decode: RecordDecoder) -> dl.MetadataDelta:
    """A snapshot-load delta of ``image``: its ``apply()`` is exactly the snapshot's state.

    Records are numbered from the snapshot's end offset minus its record count,
    so errors name a position inside it; the provenance is the snapshot's last
    offset (end offset - 1), epoch and last contained timestamp.
    """
    delta = dl.MetadataDelta(image, from_snapshot=True)
    snapshot_id = reader.snapshot_id
    epoch = snapshot_id.epoch
    records = reader.records
    # Snapshot records have no log offsets; count them back from the end so that each gets
    # a distinct number below the end offset in error messages.
    offset = snapshot_id.offset - len(records)
    replay = delta.replay
    for value in records:
        replay(decode(value, offset=offset), offset, epoch)
        offset += 1
    delta.set_provenance(im.MetadataProvenance(
        last_offset=snapshot_id.offset - 1, last_epoch=epoch,
        last_append_timestamp_ms=reader.last_contained_log_timestamp))
    return delta


class MetadataLoader:
    """Keeps the latest :class:`~kraftlog.metadata.image.MetadataImage` and publishes changes."""

    def __init__(self, *, decode: RecordDecoder, image: im.MetadataImage = im.EMPTY):
        self._decode = decode
        self._image = image
        self._publishers: list[MetadataPublisher] = []
        # Without publishers: the commits not yet in ``_image`` (see the module doc), and
        # the batches they came from, to rebuild the delta if a later commit fails midway.
        self._pending: dl.MetadataDelta | None = None
        self._pending_batches: list[CommittedBatch] = []
        self._pending_records = 0
        self.leader_id = -1
        self.leader_epoch = -1

    @property
    def image(self) -> im.MetadataImage:
        if self._pending is not None:
            self._apply_pending()
        return self._image

    def add_publisher(self, publisher: MetadataPublisher) -> None:
        """Register ``publisher``; it first gets the current image as a delta of the empty one,
        unless the image is still empty, so it can catch up (like Kafka's installPublishers)."""
        if self._pending is not None:
            self._apply_pending()
        self._publishers.append(publisher)
        if self._image.provenance != im.EMPTY_PROVENANCE:
            delta = dl.MetadataDelta(im.EMPTY)
            for record in ms.image_records(self._image):
                delta.replay(record, self._image.provenance.last_offset,
                             self._image.provenance.last_epoch)
            delta.set_provenance(self._image.provenance)
            publisher.on_metadata_update(delta, self._image)

    def remove_publisher(self, publisher: MetadataPublisher) -> None:
        self._publishers.remove(publisher)

    # RaftListener

    def handle_commit(self, batches: Sequence[CommittedBatch]) -> None:
        if self._publishers:
            delta = replay_batches(self._image, batches, self._decode)
            if delta is not None:
                self._publish(delta)
            return
        pending = self._pending
        try:
            delta = replay_batches(self._image, batches, self._decode, pending)
        except Exception:
            if pending is not None:  # half of this call is in it: rebuild it without
                self._pending = replay_batches(self._image, self._pending_batches,
                                               self._decode)
            raise
        if delta is None:
            return
        self._pending = delta
        self._pending_batches.extend(batches)
        self._pending_records += sum(b.last_offset - b.base_offset + 1 for b in batches)
        if self._pending_records >= MAX_PENDING_RECORDS:
            self._apply_pending()

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        self._publish(replay_snapshot(self.image, reader, self._decode))

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        """Remember the raft leader (-1: unknown); the image does not change."""
        self.leader_id = leader_id
        self.leader_epoch = epoch

    def _apply_pending(self) -> None:
        assert self._pending is not None
        self._image = self._pending.apply()
        self._pending = None
        self._pending_batches.clear()
        self._pending_records = 0

    def _publish(self, delta: dl.MetadataDelta) -> None:
        image = delta.apply()
        self._image = image
        for publisher in tuple(self._publishers):
            publisher.on_metadata_update(delta, image)

