"""Cluster metadata as values: the records of the metadata log, the image they build, snapshots.

Shared by the active controller (which generates records), standby controllers
and brokers (which replay them). Pure except the ``*convert`` edge modules.

    records         one frozen dataclass per metadata record (the MetadataRecord union)
    record_convert  records <-> serialized kraftlog.v1.MetadataRecord (edge: protobuf)
    image           the immutable MetadataImage and its parts, with broker/admin queries
    delta           MetadataDelta: Kafka's replay rules, apply() -> next image, local_changes
    loader          MetadataLoader: raft commits/snapshots -> images -> publishers
    snapshot        image -> records, SnapshotPolicy, filling a raft SnapshotWriter

The loader and the snapshot writer take the codec as an injected function
(``record_convert.decode`` / ``encode``) so that they stay pure.
"""
