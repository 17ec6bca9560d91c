"""Timeline (MVCC) data structures for the quorum controller (Kafka's org.apache.kafka.timeline).

The controller replays each record it appends into these structures at once,
snapshots them at the record's offset, reads committed state at the last
committed offset, and on losing leadership reverts them to it (Kafka's
``org.apache.kafka.timeline``; KIP-500, KIP-631). Modules:

- ``snapshot_registry``: ``SnapshotRegistry``, ``Snapshot``, ``Revertable``, ``LATEST_EPOCH``
- ``timeline_hash_map``: ``TimelineHashMap`` (a ``MutableMapping``)
- ``timeline_hash_set``: ``TimelineHashSet`` (a ``MutableSet``)
- ``timeline_value``: ``TimelineValue``, ``TimelineInteger``
- ``errors``: ``SnapshotNotFoundError``, ``SnapshotEpochError``
- ``snapshottable``: the shared copy-on-write engine (internal)

Pure: no I/O, clock, threads or RPC imports (tests/test_layering.py).
"""
