"""The broker: replicated partitions driven by the metadata log.

A follower fetches from its leader like a consumer; the leader's ISR and high watermark
follow those fetches.

Pure cores here (no asyncio, grpc, clock): :mod:`.partition` (one replica's
leader/follower state), :mod:`.follower` (a follower's fetch state),
:mod:`.purgatory` (delayed produce and fetch) and :mod:`.replica_manager` (the
map of partitions and the produce/fetch fan-out). The reconciler, the replica
fetcher tasks and the gRPC server drive them and own I/O and time.
"""
