"""Several replicated state machines on one raft log (Kafka's combined mode).

In a node with ``process.roles=broker,controller`` one raft client feeds both the
controller and the broker's metadata loader, the way Kafka registers several
``RaftClient.Listener`` s on one ``KafkaRaftClient``. :class:`FanOutListener` hands
every committed batch, loaded snapshot and leader change to each listener in order.
Committed batches and snapshot readers may be read more than once (their records
are immutable), so sharing them is safe.
"""

from __future__ import annotations

from collections.abc import Sequence

from kraftlog.raft import consensus
from kraftlog.raft import snapshot as snap


class FanOutListener:
    """A :class:`~kraftlog.raft.consensus.RaftListener` that forwards to several."""

    def __init__(self, listeners: Sequence[consensus.RaftListener]) -> None:
        if not listeners:
            raise ValueError("FanOutListener needs at least one listener")
        self.listeners = tuple(listeners)

    def handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        for listener in self.listeners:
            listener.handle_commit(batches)

    def handle_load_snapshot(self, reader: snap.SnapshotReader) -> None:
        for listener in self.listeners:
            listener.handle_load_snapshot(reader)

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        for listener in self.listeners:
            listener.handle_leader_change(leader_id, epoch)
