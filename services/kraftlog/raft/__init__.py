"""KRaft: the controller quorum's consensus (KIP-595, KIP-630, KIP-996).

The pure core lives here and does no I/O of its own: :mod:`.quorum_state_store`
(the durable ``quorum-state`` file), :mod:`.epoch_state` and :mod:`.quorum_state`
(the per-role state objects and their transition table), :mod:`.raft_log`
(what the core needs from the replicated log) with its in-memory model
:mod:`.memory_log`, :mod:`.messages` and :mod:`.raft_errors` (the RPCs as plain
values), :mod:`.control_records` and :mod:`.snapshot` (KIP-630 files), and
:mod:`.consensus` (the ``KafkaRaftClient``-like poll engine). A driver and a gRPC
transport (edge modules, written elsewhere) feed it time and messages.
"""
