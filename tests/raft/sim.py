"""Deterministic cluster simulator for the raft core (after Kafka's RaftEventSimulationTest).

One seeded ``random.Random`` drives everything: a scheduler (heap of
(time_ms, seq, event)) in virtual time, a network that drops, delays,
duplicates and reorders messages and applies partitions (one-way included),
crash-restarts that lose unflushed log writes (the quorum-state store is
durable at once), proposals, and snapshots. The per-node driver does what the
asyncio driver will do: hand an input to the client, then ``poll`` and sleep
until the returned wake-up time or the next message.

After every event :meth:`Cluster.check_invariants` asserts: at most one leader
per epoch; persisted epochs monotonic per node; HW monotonic per node while it
lives; a majority of voters holds the leader's committed prefix; committed
entries never lost or changed (checked against one global history by every
listener, snapshots included); a snapshot sits at every advanced log start.

``dynamic=True`` (KIP-853): the first voters start from the bootstrap snapshot that
``kraftlog storage format --initial-controllers`` writes, spare controllers (and every
controller, so removed ones come back) auto-join, an operator removes random voters,
and a crash sometimes replaces a node's disk (a new directory id, an empty log and
quorum-state), after which it must re-join by removing its old self. The majority check
then uses the leader's voter sets (the latest, or the one in force at the HW).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kraftlog import ids as uuid
from kraftlog.errors import NotLeaderError
from kraftlog.raft import consensus
from kraftlog.raft import messages as m
from kraftlog.raft import snapshot as snap
from kraftlog.raft import voter_set as vs
from kraftlog.raft.epoch_state import Role, majority_size
from kraftlog.raft.memory_log import MemoryRaftLog
from kraftlog.raft.quorum_state_store import MemoryQuorumStateStore
from kraftlog.raft.raft_config import RaftConfig
from kraftlog.raft.snapshot import SnapshotReader

CLUSTER_ID = "sim-cluster"
ADMIN_ID = 0
"""The source of the operator's RemoveRaftVoter requests (not a node)."""
SIM_CONFIG = RaftConfig(election_timeout_ms=150, election_backoff_max_ms=150,
                        fetch_timeout_ms=300, append_linger_ms=5, request_timeout_ms=200,
                        retry_backoff_ms=10, fetch_max_wait_ms=100, fetch_max_bytes=4096,
                        snapshot_chunk_bytes=512)


class InvariantFailure(AssertionError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultPlan:
    drop: float = 0.05
    duplicate: float = 0.03
    min_delay_ms: int = 1
    max_delay_ms: int = 25
    crash_every_ms: int = 900          # mean time between crashes (0: never)
    partition_every_ms: int = 700      # mean time between partition changes (0: never)
    propose_every_ms: int = 20
    snapshot_every_ms: int = 500
    remove_voter_every_ms: int = 600   # dynamic clusters: an operator removes a voter
    replace_disk: float = 0.6          # dynamic clusters: share of crashes that lose the disk


@dataclass(order=True)
class _Scheduled:
    time_ms: int
    seq: int
    action: Callable[[], None] = field(compare=False)
    label: str = field(compare=False, default="")


class SimListener:
    """A state machine that applies values in order and checks them against global history."""

    def __init__(self, cluster: Cluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.applied: list[tuple[int, bytes]] = []  # (offset, value)
        self.snapshot_values: tuple[bytes, ...] = ()
        self.leader: tuple[int, int] = (-1, -1)
        self.snapshot_offset = 0

    def handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        for batch in batches:
            for i, value in enumerate(batch.records):
                offset = batch.base_offset + i
                if self.applied and offset <= self.applied[-1][0]:
                    self.cluster.fail(f"node {self.node_id} applied offset {offset} after "
                                      f"{self.applied[-1][0]}")
                self.cluster.record_committed(self.node_id, offset, batch.epoch, value)
                self.applied.append((offset, value))

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        expected = self.cluster.committed_values_before(reader.snapshot_id.offset)
        if expected is not None and tuple(expected) != reader.records:
            self.cluster.fail(f"node {self.node_id} loaded snapshot {reader.snapshot_id} whose "
                              f"{len(reader.records)} values differ from the committed history")
        self.snapshot_values = reader.records
        self.applied = []
        self.snapshot_offset = reader.snapshot_id.offset

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leader = (leader_id, epoch)

    def values(self) -> list[bytes]:
        return [*self.snapshot_values, *(v for _, v in self.applied)]


class SimSink:
    def __init__(self, cluster: Cluster, node: SimNode) -> None:
        self.cluster = cluster
        self.node = node
        self.incarnation = node.incarnation

    def send(self, destination: int, request: m.RaftRequest) -> None:
        self.cluster.send_request(self.node.node_id, self.incarnation, destination, request)

    def complete(self, request_id: int, response: m.RaftResponse) -> None:
        self.cluster.complete_request(request_id, response)


class SimNode:
    def __init__(self, cluster: Cluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.log = MemoryRaftLog(f"node-{node_id} log")
        self.store = MemoryQuorumStateStore()
        self.rng = random.Random(cluster.rng.getrandbits(64))
        self.incarnation = 0
        self.flushing = False  # a leader fsync is running (begun, not yet complete)
        self.client: consensus.RaftClient | None = None
        self.listener: SimListener | None = None
        self.wakeup_generation = 0
        self.max_persisted_epoch = -1
        self.max_hw = 0
        self.events: list[consensus.RaftEvent] = []
        self.directory_id = uuid.random_directory_id(self.rng)

    def replace_disk(self) -> None:
        """A new, empty metadata disk: formatted with --no-initial-controllers."""
        self.log = MemoryRaftLog(f"node-{self.node_id} log (disk {self.incarnation})")
        self.store = MemoryQuorumStateStore()
        self.directory_id = uuid.random_directory_id(self.rng)
        self.max_persisted_epoch = -1
        self.max_hw = 0

    @property
    def alive(self) -> bool:
        return self.client is not None

    def start(self, now_ms: int) -> None:
        self.incarnation += 1
        self.flushing = False
        self.listener = SimListener(self.cluster, self.node_id)
        cluster = self.cluster
        controller = self.node_id in cluster.controller_ids
        self.client = consensus.RaftClient(
            node_id=self.node_id, voters={} if cluster.dynamic else cluster.voter_endpoints,
            cluster_id=CLUSTER_ID, config=cluster.config, log=self.log, store=self.store,
            rng=self.rng, listener=self.listener, sink=SimSink(cluster, self), now_ms=now_ms,
            on_event=self.events.append,
            directory_id=self.directory_id if cluster.dynamic else m.NO_DIRECTORY,
            local_endpoint=f"node-{self.node_id}:9093" if controller else "",
            bootstrap_servers=cluster.controller_ids if cluster.dynamic else (),
            auto_join=cluster.dynamic and controller)
        # As the asyncio driver runs it: the leader's fsync comes after its Fetch answers
        # left, as a separate event a crash can fall before.
        self.client.defer_leader_flush = True
        self.max_hw = self.log.high_watermark

    def crash(self) -> None:
        self.client = None
        self.listener = None
        self.log.crash()
        self.wakeup_generation += 1


class Cluster:
    def __init__(self, seed: int, *, voters: int = 3, observers: int = 1,
                 faults: FaultPlan | None = None, config: RaftConfig = SIM_CONFIG,
                 dynamic: bool = False, spares: int = 0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = config
        self.faults = faults or FaultPlan()
        self.now_ms = 0
        self._seq = 0
        self._queue: list[_Scheduled] = []
        self.voter_ids = list(range(1, voters + 1))
        self.observer_ids = list(range(100, 100 + observers))
        self.voter_endpoints = {v: f"node-{v}:9093" for v in self.voter_ids}
        self.dynamic = dynamic
        # Controllers beyond the first voters: they start as observers and auto-join.
        self.spare_ids = list(range(voters + 1, voters + 1 + spares))
        self.controller_ids = [*self.voter_ids, *self.spare_ids]
        self.nodes = {n: SimNode(self, n) for n in [*self.controller_ids, *self.observer_ids]}
        if dynamic:
            bootstrap = vs.VoterSet(vs.VoterNode(voter_id=v, directory_id=self.nodes[v].directory_id,
                                                 endpoint=self.voter_endpoints[v])
                                    for v in self.voter_ids)
            data = snap.SnapshotWriter(
                m.OffsetAndEpoch(offset=0, epoch=0), last_contained_log_timestamp=-1, now_ms=0,
                control=vs.control_batch_records(bootstrap, vs.KRAFT_VERSION_DYNAMIC)).build()
            for v in self.voter_ids:
                self.nodes[v].log.write_snapshot(m.OffsetAndEpoch(offset=0, epoch=0), data)
        self.admin_results: list[m.VoterChangeResponse] = []
        self.committed_voter_changes = 0
        self.disks_replaced = 0
        self.last_admin_request_ms = -1_000_000
        self.blocked: set[tuple[int, int]] = set()
        self.leaders_by_epoch: dict[int, int] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}  # offset -> (epoch, value)
        self.proposed = 0
        self.faults_enabled = True
        self._next_request_id = 0
        self._parked: dict[int, tuple[int, int, int, m.RaftRequest]] = {}
        self.events_run = 0
        self.trace: list[str] = []
        self.heal_proposal: int | None = None
        self.post_heal_offsets: list[int] = []  # offsets of values proposed after heal()

    # -- scheduling --------------------------------------------------------------------------

    def schedule(self, at_ms: int, action: Callable[[], None], label: str = "") -> None:
        self._seq += 1
        heapq.heappush(self._queue, _Scheduled(max(at_ms, self.now_ms), self._seq, action, label))

    def fail(self, message: str) -> None:
        raise InvariantFailure(f"seed {self.seed} at {self.now_ms} ms: {message}")

    # -- network ------------------------------------------------------------------------------

    def _deliver_later(self, src: int, dst: int, action: Callable[[], None], label: str) -> None:
        if (src, dst) in self.blocked:
            return
        copies = 1
        if self.faults_enabled:
            if self.rng.random() < self.faults.drop:
                return
            if self.rng.random() < self.faults.duplicate:
                copies = 2
        for _ in range(copies):
            delay = self.rng.randint(self.faults.min_delay_ms, self.faults.max_delay_ms)
            self.schedule(self.now_ms + delay, action, label)

    def send_request(self, src: int, incarnation: int, dst: int, request: m.RaftRequest) -> None:
        self._deliver_later(src, dst, lambda: self._on_request(src, incarnation, dst, request),
                            f"{type(request).__name__} {src}->{dst}")

    def _on_request(self, src: int, incarnation: int, dst: int, request: m.RaftRequest) -> None:
        node = self.nodes[dst]
        if node.client is None:
            return
        self._next_request_id += 1
        request_id = self._next_request_id
        response = node.client.handle_request(src, request, self.now_ms, request_id)
        if isinstance(response, m.Pending):
            self._parked[request_id] = (src, incarnation, dst, request)
        else:
            self._respond(dst, src, incarnation, request, response)
        self._poll(node)

    def complete_request(self, request_id: int, response: m.RaftResponse) -> None:
        parked = self._parked.pop(request_id, None)
        if parked is None:
            self.fail(f"completion for unknown request id {request_id}")
            return
        src, incarnation, dst, request = parked
        self._respond(dst, src, incarnation, request, response)

    def _respond(self, responder: int, requester: int, incarnation: int, request: m.RaftRequest,
                 response: m.RaftResponse) -> None:
        if requester == ADMIN_ID:
            assert isinstance(response, m.VoterChangeResponse)
            self.admin_results.append(response)
            return

        def deliver() -> None:
            node = self.nodes[requester]
            if node.client is None or node.incarnation != incarnation:
                return
            node.client.handle_response(responder, request, response, self.now_ms)
            self._poll(node)
        self._deliver_later(responder, requester, deliver,
                            f"{type(response).__name__} {responder}->{requester}")

    # -- node driver -----------------------------------------------------------------------------

    def _poll(self, node: SimNode) -> None:
        if node.client is None:
            return
        wakeup = node.client.poll(self.now_ms)
        node.wakeup_generation += 1
        generation = node.wakeup_generation
        if node.client.needs_leader_flush() and not node.flushing:
            # As the driver does: the fsync begins now (covering what is appended so far),
            # runs on another thread while messages keep arriving, and counts when it ends.
            pending = node.log.begin_flush()
            if pending is not None:
                node.flushing = True
                incarnation = node.incarnation

                def flush() -> None:
                    if node.client is None or node.incarnation != incarnation:
                        return  # crashed meanwhile: the flush never completed
                    node.flushing = False
                    pending.run()
                    node.log.complete_flush(pending)
                    self._poll(node)
                self.schedule(self.now_ms + self.rng.randint(0, 2), flush,
                              f"flush {node.node_id}")

        def wake() -> None:
            if node.wakeup_generation == generation and node.client is not None:
                self._poll(node)
        self.schedule(wakeup, wake, f"wakeup {node.node_id}")

    def start(self) -> None:
        for node in self.nodes.values():
            node.start(self.now_ms)
            self._poll(node)
        self.schedule(self.now_ms + self.faults.propose_every_ms, self._propose_tick, "propose")
        if self.faults.crash_every_ms:
            self.schedule(self._exp(self.faults.crash_every_ms), self._crash_tick, "crash")
        if self.faults.partition_every_ms:
            self.schedule(self._exp(self.faults.partition_every_ms), self._partition_tick,
                          "partition")
        if self.faults.snapshot_every_ms:
            self.schedule(self._exp(self.faults.snapshot_every_ms), self._snapshot_tick,
                          "snapshot")
        if self.dynamic and self.faults.remove_voter_every_ms:
            self.schedule(self._exp(self.faults.remove_voter_every_ms), self._remove_voter_tick,
                          "remove voter")

    def _exp(self, mean_ms: int) -> int:
        return self.now_ms + 1 + int(self.rng.expovariate(1.0 / mean_ms))

    def leader(self) -> SimNode | None:
        for node in self.nodes.values():
            if node.client is not None and node.client.role is Role.LEADER:
                return node
        return None

    def propose(self) -> int | None:
        node = self.leader()
        if node is None or node.client is None:
            return None
        self.proposed += 1
        value = f"v{self.proposed}@{node.node_id}".encode()
        try:
            offset = node.client.propose([value], self.now_ms)
        except NotLeaderError:
            return None
        self._poll(node)
        return offset

    def _propose_tick(self) -> None:
        self.propose()
        self.schedule(self.now_ms + self.rng.randint(1, 2 * self.faults.propose_every_ms),
                      self._propose_tick, "propose")

    def _crash_tick(self) -> None:
        if self.faults_enabled:
            node = self.nodes[self.rng.choice(sorted(self.nodes))]
            if node.client is not None:
                self.trace.append(f"{self.now_ms}: crash {node.node_id}")
                node.crash()
                if self.dynamic and node.node_id in self.controller_ids \
                        and self.rng.random() < self.faults.replace_disk \
                        and self._disk_may_be_replaced(node.node_id):
                    self.trace.append(f"{self.now_ms}: replace disk of {node.node_id}")
                    node.replace_disk()
                    self.disks_replaced += 1
                for rid in [r for r, p in self._parked.items() if p[2] == node.node_id]:
                    del self._parked[rid]
                downtime = self.rng.randint(10, 1000)
                self.schedule(self.now_ms + downtime, lambda: self._restart(node), "restart")
            self.schedule(self._exp(self.faults.crash_every_ms), self._crash_tick, "crash")

    def _restart(self, node: SimNode) -> None:
        if node.client is None:
            self.trace.append(f"{self.now_ms}: restart {node.node_id}")
            node.start(self.now_ms)
            self._poll(node)

    def _disk_may_be_replaced(self, node_id: int) -> bool:
        """Losing a disk is survivable while every other voter holds its data: only when the
        committed voter set has no stale member and keeps a majority without this one."""
        leader = self.leader()
        if leader is None or leader.client is None:
            return False
        client = leader.client
        at = client.history.latest_offset()
        if at is not None and at >= leader.log.high_watermark:
            return False  # a change in flight
        if self.now_ms - self.last_admin_request_ms < 2 * (
                self.config.request_timeout_ms + self.faults.max_delay_ms):
            return False  # an operator's removal may still land
        voters = client.voter_set
        hw = leader.log.high_watermark
        # The committed log must stay on a majority without this disk (losing more is data
        # loss no protocol prevents, not a bug to catch).
        holders = sum(1 for v in voters.ids() if v != node_id
                      and self.nodes[v].log.end_offset >= hw and self.nodes[v].alive)
        return not self._stale_voters(voters) and len(voters) >= 3 \
            and holders >= majority_size(len(voters))

    def _stale_voters(self, voters: vs.VoterSet) -> list[int]:
        """Voters whose disk was replaced since (their node has another directory now)."""
        return [v.voter_id for v in voters.nodes()
                if v.directory_id != self.nodes[v.voter_id].directory_id]

    def _remove_voter_tick(self) -> None:
        leader = self.leader()
        if self.faults_enabled and leader is not None and leader.client is not None:
            voters = leader.client.voter_set.nodes()
            # An operator does not remove a second voter while one has lost its disk: that
            # could leave no majority with data (auto-join replaces the stale one).
            if len(voters) > 1 and not self._stale_voters(leader.client.voter_set):
                self.last_admin_request_ms = self.now_ms
                victim = self.rng.choice(voters)
                request = m.RemoveRaftVoterRequest(cluster_id=CLUSTER_ID, voter_id=victim.voter_id,
                                                   voter_directory_id=victim.directory_id)
                self.trace.append(f"{self.now_ms}: remove voter {victim.describe()}")
                self._deliver_later(ADMIN_ID, leader.node_id, lambda: self._on_request(
                    ADMIN_ID, 0, leader.node_id, request), f"RemoveRaftVoter ->{leader.node_id}")
        if self.faults_enabled:
            self.schedule(self._exp(self.faults.remove_voter_every_ms), self._remove_voter_tick,
                          "remove voter")

    def _partition_tick(self) -> None:
        if not self.faults_enabled:
            return
        ids = sorted(self.nodes)
        choice = self.rng.random()
        self.blocked = set()
        if choice < 0.3:
            pass  # heal
        elif choice < 0.6:
            isolated = self.rng.choice(ids)
            for other in ids:
                if other != isolated:
                    self.blocked.add((isolated, other))
                    self.blocked.add((other, isolated))
        elif choice < 0.8:
            a, b = self.rng.sample(ids, 2)
            self.blocked.add((a, b))  # one-way
        else:
            side = set(self.rng.sample(ids, len(ids) // 2))
            for x in ids:
                for y in ids:
                    if (x in side) != (y in side):
                        self.blocked.add((x, y))
        self.trace.append(f"{self.now_ms}: partition {sorted(self.blocked)}")
        self.schedule(self._exp(self.faults.partition_every_ms), self._partition_tick, "partition")

    def _snapshot_tick(self) -> None:
        node = self.nodes[self.rng.choice(sorted(self.nodes))]
        client, listener = node.client, node.listener
        if client is not None and listener is not None:
            end = client.listener_next_offset
            if end > node.log.start_offset and end <= node.log.high_watermark:
                writer = client.create_snapshot(end, now_ms=self.now_ms)
                writer.append(listener.values())
                client.freeze_snapshot(writer)
                self.trace.append(f"{self.now_ms}: snapshot {node.node_id} at {end}")
        self.schedule(self._exp(self.faults.snapshot_every_ms), self._snapshot_tick, "snapshot")

    # -- running ----------------------------------------------------------------------------------

    def run_until(self, end_ms: int, *, stop: Callable[[], bool] | None = None) -> bool:
        while self._queue and self._queue[0].time_ms <= end_ms:
            item = heapq.heappop(self._queue)
            self.now_ms = item.time_ms
            item.action()
            self.events_run += 1
            self.check_invariants()
            if stop is not None and stop():
                return True
        self.now_ms = max(self.now_ms, end_ms)
        return False

    def heal(self) -> None:
        self.heal_proposal = self.proposed
        self.faults_enabled = False
        self.blocked = set()
        for node in self.nodes.values():
            if node.client is None:
                node.start(self.now_ms)
                self._poll(node)

    # -- history and invariants ------------------------------------------------------------------

    def record_committed(self, node_id: int, offset: int, epoch: int, value: bytes) -> None:
        seen = self.committed.get(offset)
        if seen is None:
            self.committed[offset] = (epoch, value)
            number = int(value[1:value.index(b"@")])
            if self.heal_proposal is not None and number > self.heal_proposal:
                self.post_heal_offsets.append(offset)
        elif seen != (epoch, value):
            self.fail(f"node {node_id} committed {(epoch, value)!r} at offset {offset}, but "
                      f"{seen!r} was committed there before")

    def committed_values_before(self, offset: int) -> list[bytes] | None:
        """Committed data values below ``offset``, or None when the history has gaps there
        (a control record offset is not a gap: the history only holds data records)."""
        return [v for o, (_, v) in sorted(self.committed.items()) if o < offset]

    def check_invariants(self) -> None:
        for node in self.nodes.values():
            stored = node.store.read()
            if stored is not None:
                if stored.epoch < node.max_persisted_epoch:
                    self.fail(f"node {node.node_id} persisted epoch went from "
                              f"{node.max_persisted_epoch} to {stored.epoch}")
                node.max_persisted_epoch = stored.epoch
            client = node.client
            if client is None:
                continue
            if client.role is Role.LEADER:
                other = self.leaders_by_epoch.setdefault(client.epoch, node.node_id)
                if other != node.node_id:
                    self.fail(f"two leaders in epoch {client.epoch}: {other} and {node.node_id}")
            hw = node.log.high_watermark
            if hw < node.max_hw:
                self.fail(f"node {node.node_id} HW went back from {node.max_hw} to {hw}")
            node.max_hw = hw
            start = node.log.start_offset
            if start > 0:
                latest = node.log.latest_snapshot_id()
                if latest is None or latest.offset != start:
                    self.fail(f"node {node.node_id} log starts at {start} but its latest "
                              f"snapshot is {latest}")
        leader = self.leader()
        if leader is not None and leader.client is not None:
            hw = leader.log.high_watermark
            if hw > 0:
                epoch = leader.log.epoch_of(hw - 1) if hw > leader.log.start_offset else None

                def holders(voter_set: list[tuple[int, uuid.Uuid]]) -> int:
                    count = 0
                    for voter, directory in voter_set:
                        node = self.nodes[voter]
                        if self.dynamic and node.directory_id != directory:
                            continue  # that disk is gone: its copy does not count
                        log = node.log
                        covered_by_snapshot = log.start_offset >= hw
                        holds_entry = log.end_offset >= hw and (
                            covered_by_snapshot or epoch is None or log.epoch_of(hw - 1) == epoch)
                        count += covered_by_snapshot or holds_entry
                    return count
                if self.dynamic:
                    history = leader.client.history
                    sets = [history.latest(), history.value_at_or_before(hw - 1)]
                else:
                    sets = [vs.VoterSet.static(self.voter_endpoints)]
                keys = [[(v.voter_id, v.directory_id) for v in s.nodes()] for s in sets]
                if not any(holders(k) >= majority_size(len(k)) for k in keys):
                    self.fail(f"leader {leader.node_id} HW {hw} is held by only "
                              f"{[holders(k) for k in keys]} of the voter sets "
                              f"{[s.describe() for s in sets]}")

    def describe(self) -> str:
        lines = []
        for node in self.nodes.values():
            state = node.client.quorum.state.describe() if node.client else "down"
            lines.append(f"node {node.node_id}: {state} end={node.log.end_offset} "
                         f"hw={node.log.high_watermark} start={node.log.start_offset}")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedResult:
    seed: int
    events: int
    committed: int
    elections: int
    virtual_ms: int
    voter_changes: int = 0
    disks_replaced: int = 0
    final_voters: tuple[int, ...] = ()


def run_seed(seed: int, *, voters: int | None = None, chaos_ms: int = 3000,
             liveness_bound_ms: int = 5000, faults: FaultPlan | None = None,
             dynamic: bool = False) -> SeedResult:
    """Chaos for ``chaos_ms``, then heal and require a fresh proposal to commit in time."""
    picker = random.Random(seed ^ 0x5EED)
    voter_count = voters if voters is not None else picker.choice([3, 5])
    if dynamic:
        voter_count = picker.choice([1, 3])
    cluster = Cluster(seed, voters=voter_count, observers=picker.choice([1, 2]), faults=faults,
                      dynamic=dynamic, spares=picker.choice([1, 2]) if dynamic else 0)
    cluster.start()
    cluster.run_until(chaos_ms)
    cluster.heal()
    heal_ms = cluster.now_ms

    def current_voters() -> list[int]:
        leader = cluster.leader()
        if not dynamic:
            return cluster.voter_ids
        if leader is None or leader.client is None:
            return []
        return sorted(leader.client.voter_set.ids())

    def committed_on_majority() -> bool:
        # A value proposed after healing is committed (its offset is below the HW of a
        # majority of voters). Proposals made before a leader change may be lost, and their
        # offsets reused by a LeaderChange record: only values that made it count.
        voters_now = current_voters()
        return bool(voters_now) and any(
            sum(1 for v in voters_now if cluster.nodes[v].log.high_watermark > offset)
            >= majority_size(len(voters_now))
            for offset in cluster.post_heal_offsets)

    if not cluster.run_until(heal_ms + liveness_bound_ms, stop=committed_on_majority):
        cluster.fail(f"no proposal committed within {liveness_bound_ms} ms after healing\n"
                     + cluster.describe() + "\n" + "\n".join(cluster.trace[-15:]))
    elections = sum(1 for n in cluster.nodes.values() for e in n.events
                    if e.kind is consensus.RaftEventKind.ELECTION_WON)
    changes = sum(1 for n in cluster.nodes.values() for e in n.events
                  if e.kind is consensus.RaftEventKind.VOTERS_CHANGED)
    return SeedResult(seed=seed, events=cluster.events_run, committed=len(cluster.committed),
                      elections=elections, virtual_ms=cluster.now_ms, voter_changes=changes,
                      disks_replaced=cluster.disks_replaced,
                      final_voters=tuple(current_voters()))


__all__ = ["Cluster", "FaultPlan", "InvariantFailure", "SeedResult", "run_seed"]
