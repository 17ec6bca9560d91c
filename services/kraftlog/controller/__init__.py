"""The quorum controller's pure core: managers that turn requests into metadata records.

In the shape of Kafka's ``org.apache.kafka.controller``: each write
operation reads the current (uncommitted) timeline state and returns a
:class:`~kraftlog.controller.result.ControllerResult` (records + response)
without changing anything; :meth:`~kraftlog.controller.state.ControllerState.replay`
is the only way state changes, on the active controller right after it appends
the records and on standbys as they commit. Modules:

- ``state``: ``ControllerState``, the facade the QuorumController drives
- ``api``: request/response values mirroring ``controller.proto``
- ``result``: ``ControllerResult``
- ``controller_config``: ``ControllerConfig`` (Kafka config names)
- ``cluster_control``: broker registrations, heartbeats, fencing states
- ``replication_control``: topics, partitions, elections, ISR, reassignment
- ``partition_change``: ``PartitionRegistration`` and ``PartitionChangeBuilder``
- ``replica_placer``: rack-aware striped placement
- ``configuration_control`` / ``config_defs``: topic and broker configs
- ``feature_control``, ``producer_id_control``

These are pure: no asyncio, grpc, protobuf, clock or threads
(tests/test_layering.py). The edge modules around them — ``driver`` (the
QuorumController: event queue, raft append, commit wait, revert), ``server``,
``convert`` and ``process`` — own all I/O.
"""
