"""Deterministic simulation of the controller quorum with simulated brokers and admin clients.

Builds on ``raft_sim`` (tests/raft/sim.py: seeded scheduler, lossy network, partitions,
crash-restart, raft invariants), which it subclasses rather than copies:

* every raft node also runs a :class:`SimController`: ``ControllerState`` driven by the
  QuorumController's rules (``controller/driver.py``, mirrored line by line) on virtual
  time: one event queue of raft callbacks, writes and reads, drained a little after raft
  enqueued (sometimes much later: a stalled event loop); a write generates from the
  current state, proposes, replays at once, snapshots the timeline at its last offset and
  is answered only when that offset commits; reads answer at the committed offset; losing
  leadership reverts to the committed offset and fails pending writes with NOT_CONTROLLER;
  a standby replays committed batches; a snapshot load replaces the state. Periodic jobs
  of the active one (``server/controller_host.py``): fence stale brokers, NoOp, rebalance.
* :class:`SimBroker` s (not raft members) register, heartbeat and send AlterPartition to
  the node they believe active, over the simulated network; NOT_CONTROLLER or silence
  sends them elsewhere. They crash and restart (new incarnation).
* an :class:`SimAdmin` creates and deletes topics, reassigns partitions and reads.

After every event :meth:`ControllerCluster.check_invariants` adds to raft_sim's checks:
each live controller's metadata at its committed offset equals a reference state built
from the one committed history at that offset, and the broker-side MetadataImage
(kraftlog.metadata) replayed from that history says the same; a revert lands exactly on
the committed state; reads answered by an active controller match the committed state;
an answered write's records are committed (at answer time) and a newly active
controller holds every write acknowledged in an older epoch; partitions keep
leader ∈ ISR ⊆ replicas with an unfenced leader; an active controller fences a silent
broker within the session timeout; a broker told ShouldShutDown leads nothing. After
healing, a broker that stopped heartbeating must be fenced and lead nothing within a
bound, and the cluster must make progress.

Imported as ``tests.controller.ctl_sim`` by test_simulation.py. A
change to the driver's rules must be mirrored in :class:`SimController`.
"""

from __future__ import annotations

import bisect
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kraftlog import errors
from kraftlog.controller import api, driver
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.controller.feature_control import METADATA_VERSION
from kraftlog.controller.partition_change import PartitionRegistration, TopicIdPartition
from kraftlog.controller.result import ControllerResult
from kraftlog.controller.state import ControllerState
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import Uuid
from kraftlog.metadata import delta as metadata_delta
from kraftlog.metadata import image as metadata_image
from kraftlog.metadata import record_convert
from kraftlog.metadata.records import NO_LEADER, MetadataRecord, RemoveTopicRecord
from kraftlog.raft import consensus
from kraftlog.raft import epoch_state as es
from kraftlog.raft.snapshot import SnapshotReader
from kraftlog.timeline.snapshot_registry import LATEST_EPOCH
from tests.controller import harness as controller_harness
from tests.raft import sim as raft_sim

CTL_CONFIG = ControllerConfig(broker_session_timeout_ms=600, broker_heartbeat_interval_ms=100,
                              metadata_max_idle_interval_ms=500)
HEARTBEAT_MS = CTL_CONFIG.broker_heartbeat_interval_ms
FENCE_CHECK_INTERVAL_MS = 50
SHUTDOWN_GIVE_UP_MS = 1000
REBALANCE_INTERVAL_MS = 400
BROKER_ADDRESS_BASE = 1000
ADMIN_ADDRESS = 2000
TOPIC_NAMES = tuple(f"t{i}" for i in range(8))
FEATURES = (api.SupportedFeature(name=METADATA_VERSION, min_supported_version=1,
                                 max_supported_version=1),)


@dataclass(frozen=True, slots=True, kw_only=True)
class CtlFaultPlan:
    """Faults beyond raft_sim's: brokers crashing; the active controller dying right after
    it appended a write (a failover in the middle of an operation); the controller's event
    loop running late behind raft (each drain after up to ``drain_delay_max_ms``, and with
    ``stall_chance`` a stall of up to ``stall_max_ms``, as a busy event loop would)."""

    broker_crash_every_ms: int = 700
    crash_after_append: float = 0.03
    admin_every_ms: int = 40
    drain_delay_max_ms: int = 3
    stall_chance: float = 0.0
    stall_max_ms: int = 600
    alter_partition_chance: float = 0.3


# -- the metadata as a comparable value -------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataDump:
    """Every metadata fact a ControllerState holds, canonically ordered.

    Registrations leave out ``register_offset``: after a snapshot load it is the
    snapshot's last offset (as in Kafka), not the RegisterBrokerRecord's own."""

    brokers: tuple[tuple[int, Uuid, int, bool, bool, str], ...]
    topics: tuple[tuple[str, Uuid, int], ...]
    partitions: tuple[tuple[TopicIdPartition, PartitionRegistration], ...]
    configs: tuple[tuple[Any, str], ...]
    features: tuple[tuple[str, int], ...]
    next_producer_id: int

    def fenced(self, broker_id: int) -> bool | None:
        for b in self.brokers:
            if b[0] == broker_id:
                return b[3]
        return None


def dump(state: ControllerState, epoch: int = LATEST_EPOCH) -> MetadataDump:
    replication = state.replication
    return MetadataDump(
        brokers=tuple(sorted((r.broker_id, r.incarnation_id, r.broker_epoch, r.fenced,
                              r.in_controlled_shutdown, r.rack)
                             for r in state.cluster.registrations.values(epoch))),
        topics=tuple(sorted((t.name, t.topic_id, t.num_partitions)
                            for t in replication.topics.values(epoch))),
        partitions=tuple(sorted(replication.partitions.items(epoch), key=lambda kv: kv[0])),
        configs=tuple(sorted(state.configuration._values.items(epoch))),
        features=tuple(sorted(state.features.finalized(epoch).items())),
        next_producer_id=state.producer_ids.next_producer_id(epoch))


def image_dump(image: metadata_image.MetadataImage) -> MetadataDump:
    """The same facts from a broker-side MetadataImage (kraftlog.metadata's own replay)."""
    partitions = []
    for topic in image.topics.topics.values():
        for partition_id, p in topic.partitions.items():
            partitions.append((TopicIdPartition(topic.topic_id, partition_id),
                               PartitionRegistration(
                                   replicas=p.replicas, isr=p.isr, leader=p.leader,
                                   leader_epoch=p.leader_epoch,
                                   partition_epoch=p.partition_epoch,
                                   removing_replicas=p.removing_replicas,
                                   adding_replicas=p.adding_replicas,
                                   leader_recovery_state=p.leader_recovery_state,
                                   elr=p.elr, last_known_elr=p.last_known_elr)))
    return MetadataDump(
        brokers=tuple(sorted((b.broker_id, b.incarnation_id, b.broker_epoch, b.fenced,
                              b.in_controlled_shutdown, b.rack)
                             for b in image.cluster.brokers.values())),
        topics=tuple(sorted((t.name, t.topic_id, len(t.partitions))
                            for t in image.topics.topics.values())),
        partitions=tuple(sorted(partitions, key=lambda kv: kv[0])),
        configs=tuple(sorted(((resource.resource_type, resource.resource_name, name), value)
                             for resource, values in image.configs.resources.items()
                             for name, value in values.items())),
        features=tuple(sorted(image.features.levels.items())),
        # The image says -1 before the first block, the controller 0: the same state.
        next_producer_id=max(image.producer_ids.next_producer_id, 0))


def dump_diff(a: MetadataDump, b: MetadataDump) -> str:
    lines = []
    for name in MetadataDump.__slots__:
        x, y = getattr(a, name), getattr(b, name)
        if x != y:
            if isinstance(x, tuple):
                lines.append(f"{name}: only left {sorted(set(x) - set(y), key=repr)}; "
                             f"only right {sorted(set(y) - set(x), key=repr)}")
            else:
                lines.append(f"{name}: {x!r} != {y!r}")
    return "; ".join(lines)


def check_partitions(d: MetadataDump, where: str, fail: Callable[[str], None]) -> None:
    """leader ∈ ISR ⊆ replicas; adding/removing ⊆ replicas; the leader is a registered,
    unfenced broker (a fenced one never keeps a leadership: with no other choice the
    partition has no leader)."""
    fenced = {b[0]: b[3] for b in d.brokers}
    for tp, p in d.partitions:
        replicas = set(p.replicas)
        ok = (set(p.isr) <= replicas and set(p.adding_replicas) <= replicas
              and set(p.removing_replicas) <= replicas)
        if p.leader != NO_LEADER:
            ok = ok and p.leader in p.isr and fenced.get(p.leader) is False
        if not ok:
            fail(f"{where}: partition {tp} breaks leader ∈ ISR ⊆ replicas / unfenced leader: "
                 f"{p} (fenced: {fenced})")


# -- the controller on each raft node ---------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """What a client gets back: ``response``, or NOT_CONTROLLER with a leader hint."""

    request_id: int
    response: Any = None
    not_controller: bool = False
    leader_hint: int = -1


ReplyFn = Callable[[Reply], None]
Generate = Callable[[ControllerState, int, int], ControllerResult[Any]]


@dataclass(slots=True, kw_only=True)
class _Pending:
    first_offset: int
    offset: int
    values: tuple[bytes, ...]
    reply: ReplyFn | None
    response: Any


@dataclass(slots=True, kw_only=True)
class _Write:
    name: str
    generate: Generate
    reply: ReplyFn | None


@dataclass(slots=True, kw_only=True)
class _Read:
    fn: Callable[[ControllerState, int], Any]
    reply: ReplyFn


@dataclass(slots=True, kw_only=True)
class _Commit:
    batches: Sequence[consensus.CommittedBatch]


@dataclass(slots=True, kw_only=True)
class _LoadSnapshot:
    end_offset: int
    records: tuple[bytes, ...]


@dataclass(slots=True, kw_only=True)
class _LeaderChange:
    leader_id: int
    epoch: int


_Event = _Write | _Read | _Commit | _LoadSnapshot | _LeaderChange


class _NodeListener:
    """The raft listener of a simulated node: raft_sim's history checker, then the
    controller's event queue (raft callbacks only enqueue, as in the driver)."""

    def __init__(self, inner: consensus.RaftListener, controller: SimController) -> None:
        self.inner = inner
        self.controller = controller

    def handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        self.inner.handle_commit(batches)
        self.controller.enqueue(_Commit(batches=batches))

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        self.inner.handle_load_snapshot(reader)
        self.controller.enqueue(
            _LoadSnapshot(end_offset=reader.snapshot_id.offset, records=reader.records))

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.inner.handle_leader_change(leader_id, epoch)
        self.controller.enqueue(_LeaderChange(leader_id=leader_id, epoch=epoch))


class SimController:
    """``driver.QuorumController``'s rules on virtual time, for one incarnation of a node.

    One event queue holds raft callbacks, writes and reads in arrival order; the
    cluster drains it after a random delay of at most ``drain_delay_max_ms`` (the
    controller task runs apart from raft's), then polls raft."""

    def __init__(self, cluster: ControllerCluster, node: raft_sim.SimNode) -> None:
        self.cluster = cluster
        self.node = node
        self.node_id = node.node_id
        self.incarnation = node.incarnation
        self._rng_seed = cluster.rng.getrandbits(64)
        self.state = self._new_state()
        self.events: deque[_Event] = deque()
        self.drain_scheduled = False
        self.active = False
        self.epoch = -1
        self.leader_id = -1
        self.last_written_offset = -1
        self.committed_offset = -1
        # The last offset raft delivered (commit or snapshot). Activation sets the committed
        # offset past it, to the epoch's LeaderChange record, which a deposed leader's
        # successor may replace: what the state holds is the history up to here.
        self.delivered_offset = -1
        self.pending: deque[_Pending] = deque()
        self.checked: tuple[int, bool] | None = None  # (delivered offset, active) last checked
        self.activated_ms = -1
        self.last_contact_ms: dict[int, int] = {}  # broker id -> last heartbeat processed

    def _new_state(self) -> ControllerState:
        return ControllerState(CTL_CONFIG, rng=random.Random(self._rng_seed))

    @property
    def current(self) -> bool:
        return self.node.client is not None and self.node.incarnation == self.incarnation

    # -- the event queue ---------------------------------------------------------------------

    def enqueue(self, event: _Event) -> None:
        self.events.append(event)
        if not self.drain_scheduled:
            self.drain_scheduled = True
            self.cluster.schedule_drain(self)

    def write(self, name: str, generate: Generate, reply: ReplyFn | None) -> None:
        self.enqueue(_Write(name=name, generate=generate, reply=reply))

    def read(self, fn: Callable[[ControllerState, int], Any], reply: ReplyFn) -> None:
        self.enqueue(_Read(fn=fn, reply=reply))

    def drain(self) -> None:
        self.drain_scheduled = False
        while self.events and self.current:
            event = self.events.popleft()
            if isinstance(event, _Write):
                self._handle_write(event)
            elif isinstance(event, _Read):
                self._handle_read(event)
            elif isinstance(event, _Commit):
                self._handle_commit(event.batches)
            elif isinstance(event, _LoadSnapshot):
                self._handle_load_snapshot(event)
            else:
                self._handle_leader_change(event.leader_id, event.epoch)
        if self.current:
            self.cluster.poll_node(self.node)  # proposals wait for raft's next poll

    def _handle_write(self, event: _Write) -> None:
        if not self.active:
            if event.reply is not None:
                event.reply(Reply(request_id=-1, not_controller=True, leader_hint=self.hint()))
            return
        try:
            result = event.generate(self.state, self.last_written_offset + 1,
                                    self.cluster.now_ms)
        except api.RequestError as exc:  # a refusal that is not an error code in a response
            if event.reply is not None:
                event.reply(Reply(request_id=-1, response=exc.error))
            return
        self._append(event.name, result, event.reply)

    def _handle_read(self, event: _Read) -> None:
        if not self.active:
            event.reply(Reply(request_id=-1, not_controller=True, leader_hint=self.hint()))
            return
        event.reply(Reply(request_id=-1, response=event.fn(self.state, self.committed_offset)))

    def _handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        for batch in batches:
            if self.active and batch.epoch != self.epoch:
                self._renounce(f"raft committed records of epoch {batch.epoch}")
            if not (self.active and batch.last_offset <= self.last_written_offset):
                if self.active:
                    self.cluster.fail(f"controller {self.node_id}: committed batch "
                                      f"{batch.base_offset}..{batch.last_offset} beyond the "
                                      f"last written offset {self.last_written_offset}")
                for i, value in enumerate(batch.records):
                    self.replay_committed(value, batch.base_offset + i)
                self.last_written_offset = batch.last_offset
            self.committed_offset = self.delivered_offset = batch.last_offset
        if self.active:
            self.state.registry.delete_snapshots_up_to(self.committed_offset)
            while self.pending and self.pending[0].offset <= self.committed_offset:
                pending = self.pending.popleft()
                self.cluster.on_answer(self, pending)
                if pending.reply is not None:
                    pending.reply(Reply(request_id=-1, response=pending.response))

    def replay_committed(self, value: bytes, offset: int) -> None:
        self.state.replay(record_convert.decode(value, offset=offset), offset)

    def _handle_load_snapshot(self, event: _LoadSnapshot) -> None:
        if self.active:
            self.cluster.fail(f"controller {self.node_id}: snapshot loaded while active")
        self.state = self._new_state()
        for value in event.records:
            record = record_convert.decode(value, offset=event.end_offset - 1)
            self.state.replay(record, event.end_offset - 1)
        self.last_written_offset = self.committed_offset = event.end_offset - 1
        self.delivered_offset = event.end_offset - 1
        self.cluster.snapshot_loads += 1
        self.cluster.check_controller_now(self, "snapshot load")

    def _handle_leader_change(self, leader_id: int, epoch: int) -> None:
        active_epoch = self.epoch
        self.leader_id, self.epoch = leader_id, epoch
        if self.active and (leader_id != self.node_id or epoch != active_epoch):
            self._renounce(f"node {leader_id} leads epoch {epoch}")
        client = self.node.client
        if leader_id == self.node_id and not self.active:
            next_offset = None if client is None else leader_next_offset(client, epoch)
            if next_offset is None:
                return
            self.active = True
            self.activated_ms = self.cluster.now_ms
            self.last_written_offset = self.committed_offset = next_offset - 1
            self.state.registry.get_or_create_snapshot(self.committed_offset)
            self.cluster.on_activate(self)
            self.state.activate(self.cluster.now_ms)
            if METADATA_VERSION not in self.state.features.finalized():
                self._append("Activate", ControllerResult(
                    records=self.state.bootstrap_records(), response=None, is_atomic=True), None)

    def _renounce(self, why: str) -> None:
        if not self.active:
            return
        self.active = False
        registry = self.state.registry
        if not registry.has_snapshot(self.committed_offset):
            self.cluster.fail(f"controller {self.node_id}: no snapshot at the committed offset "
                              f"{self.committed_offset} ({why}); kept {registry.epochs()}")
        registry.revert_to_snapshot(self.committed_offset)
        registry.delete_snapshots_up_to(self.committed_offset + 1)
        self.last_written_offset = self.committed_offset
        pending, self.pending = self.pending, deque()
        for p in pending:
            if p.reply is not None:
                p.reply(Reply(request_id=-1, not_controller=True, leader_hint=self.hint()))
        self.cluster.trace.append(f"{self.cluster.now_ms}: controller {self.node_id} renounced "
                                  f"({why}), failed {len(pending)} pending")
        self.cluster.check_controller_now(self, "revert")

    def hint(self) -> int:
        return self.leader_id if self.leader_id != self.node_id else -1

    # -- appending ---------------------------------------------------------------------------

    def _append(self, name: str, result: ControllerResult[Any], reply: ReplyFn | None) -> None:
        records = result.records
        if not records:
            self._complete_at(self.last_written_offset, (), reply, result.response)
            return
        if len(records) > driver.MAX_RECORDS_PER_OPERATION:
            self.cluster.fail(f"{name} generated {len(records)} records")
        client = self.node.client
        assert client is not None
        next_offset = self.last_written_offset + 1
        values = tuple(record_convert.encode(r) for r in records)
        try:
            last_offset = client.propose(values, self.cluster.now_ms, epoch=self.epoch)
        except errors.NotLeaderError:
            self._renounce("raft refused the append")
            if reply is not None:
                reply(Reply(request_id=-1, not_controller=True, leader_hint=self.hint()))
            return
        if last_offset != next_offset + len(values) - 1:
            self.cluster.fail(f"controller {self.node_id}: {name} expected offsets "
                              f"{next_offset}..{next_offset + len(values) - 1}, raft assigned "
                              f"up to {last_offset}")
        for i, record in enumerate(records):
            self.state.replay(record, next_offset + i)
        self.last_written_offset = last_offset
        self.state.registry.get_or_create_snapshot(last_offset)
        self._complete_at(last_offset, values, reply, result.response)
        self.cluster.after_append(self)

    def _complete_at(self, offset: int, values: tuple[bytes, ...], reply: ReplyFn | None,
                     response: Any) -> None:
        pending = _Pending(first_offset=offset - len(values) + 1, offset=offset, values=values,
                           reply=reply, response=response)
        if self.is_committed(offset):
            self.cluster.on_answer(self, pending)
            if reply is not None:
                reply(Reply(request_id=-1, response=response))
        else:
            self.pending.append(pending)

    def is_committed(self, offset: int) -> bool:
        return offset <= self.committed_offset

    # -- periodic jobs of the active controller (server/controller_host.py) ----------------------

    def fence_stale_brokers(self) -> None:
        """One broker per write; after each commit, again while one was fenced."""
        if self.active:
            self.write("FenceStaleBrokers",
                       lambda s, _o, now_ms: s.maybe_fence_stale_brokers(now_ms),
                       self._fenced)

    def _fenced(self, reply: Reply) -> None:
        if reply.not_controller or not reply.response:
            return
        self.cluster.trace.append(f"{self.cluster.now_ms}: controller {self.node_id} fenced "
                                  f"{reply.response}")
        self.cluster.on_fenced(reply.response)
        self.fence_stale_brokers()

    def no_op(self) -> None:
        if self.active:
            self.write("NoOp", lambda s, _o, _n: s.no_op_record(), None)

    def balance_leaders(self) -> None:
        if self.active:
            self.write("LeaderRebalance", lambda s, _o, _n: s.maybe_balance_partition_leaders(),
                       self._balanced)

    def _balanced(self, reply: Reply) -> None:
        if not reply.not_controller and reply.response:
            self.balance_leaders()


def leader_next_offset(client: consensus.RaftClient, epoch: int) -> int | None:
    """What ``driver._leader_next_offset`` answers on a leader-change event for ``epoch``:
    None unless raft still leads that very epoch."""
    state = client.quorum.state
    if not isinstance(state, es.LeaderState) or state.epoch != epoch:
        return None
    return state.next_offset


# -- clients -----------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class _Outstanding:
    request: Any
    target: int
    sent_ms: int


@dataclass(slots=True, kw_only=True)
class SimClient:
    """Something that sends requests to the node it believes is the active controller."""

    cluster: ControllerCluster
    address: int
    rng: random.Random
    target: int = -1
    next_request_id: int = 0
    outstanding: dict[int, _Outstanding] = field(default_factory=dict)

    def send(self, request: Any) -> None:
        cluster = self.cluster
        if self.target not in cluster.voter_ids:
            self.target = self.rng.choice(cluster.voter_ids)
        self.next_request_id += 1
        request_id = self.next_request_id
        self.outstanding[request_id] = _Outstanding(request=request, target=self.target,
                                                    sent_ms=cluster.now_ms)
        cluster.send_client_request(self, request_id, self.target, request)

    def on_reply(self, reply: Reply) -> None:
        outstanding = self.outstanding.pop(reply.request_id, None)
        if outstanding is None:
            return  # a duplicate, or an answer we stopped waiting for
        if reply.not_controller:
            hint = reply.leader_hint
            self.target = hint if hint >= 0 else self.rng.choice(self.cluster.voter_ids)
            return
        self.handle(outstanding.request, reply.response)

    def expire(self, timeout_ms: int) -> None:
        """Give up on requests unanswered for ``timeout_ms``: the target may be dead."""
        now = self.cluster.now_ms
        for request_id, outstanding in list(self.outstanding.items()):
            if now - outstanding.sent_ms > timeout_ms:
                del self.outstanding[request_id]
                if outstanding.target == self.target:
                    self.target = self.rng.choice(self.cluster.voter_ids)

    def handle(self, request: Any, response: Any) -> None:
        raise NotImplementedError


@dataclass(slots=True, kw_only=True)
class SimBroker(SimClient):
    broker_id: int
    alive: bool = True
    generation: int = 0
    broker_epoch: int = -1
    previous_epoch: int = -1
    metadata_offset: int = -1
    fenced: bool = True
    dead_since_ms: int = -1
    permanently_dead: bool = False
    shutting_down_since_ms: int = -1
    controlled_shutdowns: int = 0

    def incarnation(self) -> Uuid:
        return Uuid.from_bits(self.broker_id + 1, self.generation + 1)

    def tick(self) -> None:
        if not self.alive:
            return
        cluster = self.cluster
        self.expire(3 * HEARTBEAT_MS)
        # Replay the metadata log as far as some live quorum member has delivered it.
        live = [n for n in cluster.nodes.values() if n.client is not None]
        if live:
            node = self.rng.choice(live)
            assert node.client is not None
            self.metadata_offset = max(self.metadata_offset, node.client.listener_next_offset - 1)
        waiting = {type(o.request) for o in self.outstanding.values()}
        if self.broker_epoch < 0:
            if api.BrokerRegistrationRequest in waiting:
                return  # one registration at a time
            self.send(api.BrokerRegistrationRequest(
                broker_id=self.broker_id, cluster_id="", incarnation_id=self.incarnation(),
                listeners=(api.Endpoint(listener_name="PLAINTEXT", host="broker",
                                        port=9092 + self.broker_id),),
                features=FEATURES, rack=f"r{self.broker_id % 2}",
                previous_broker_epoch=self.previous_epoch))
            return
        shutting_down = self.shutting_down_since_ms >= 0
        if shutting_down and cluster.now_ms - self.shutting_down_since_ms > SHUTDOWN_GIVE_UP_MS:
            self.stop(clean=False)
            return
        if api.BrokerHeartbeatRequest in waiting:
            return  # one heartbeat at a time
        self.send(api.BrokerHeartbeatRequest(
            broker_id=self.broker_id, broker_epoch=self.broker_epoch,
            current_metadata_offset=self.metadata_offset, want_shut_down=shutting_down))
        if not shutting_down and self.rng.random() < cluster.ctl_faults.alter_partition_chance:
            self._maybe_alter_partition()

    def _maybe_alter_partition(self) -> None:
        view = self.cluster.reference_dump_at(self.metadata_offset)
        if view is None:
            return
        led = [(tp, p) for tp, p in view.partitions if p.leader == self.broker_id]
        if not led:
            return
        tp, p = self.rng.choice(led)
        others = [b for b in p.isr if b != self.broker_id]
        outside = [b for b in p.replicas if b not in p.isr]
        if outside and (not others or self.rng.random() < 0.6):
            new_isr = (*p.isr, self.rng.choice(outside))
        elif others:
            dropped = self.rng.choice(others)
            new_isr = tuple(b for b in p.isr if b != dropped)
        else:
            return
        epochs = {b[0]: b[2] for b in view.brokers}
        self.send(api.AlterPartitionRequest(
            broker_id=self.broker_id, broker_epoch=self.broker_epoch,
            topics=(api.AlterPartitionTopicData(topic_id=tp.topic_id, partitions=(
                api.AlterPartitionPartitionData(
                    partition_index=tp.partition_id, leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                    new_isr_with_epochs=tuple(api.BrokerState(broker_id=b,
                                                              broker_epoch=epochs.get(b, -1))
                                              for b in new_isr)),)),)))

    def handle(self, request: Any, response: Any) -> None:
        if isinstance(request, api.BrokerRegistrationRequest):
            if (response.error.code == ErrorCode.NONE
                    and request.incarnation_id == self.incarnation() and self.broker_epoch < 0):
                self.broker_epoch = response.broker_epoch
                self.fenced = True
        elif isinstance(request, api.BrokerHeartbeatRequest):
            if request.broker_epoch != self.broker_epoch:
                return
            if response.error.code in (ErrorCode.STALE_BROKER_EPOCH,
                                       ErrorCode.BROKER_ID_NOT_REGISTERED):
                self.previous_epoch, self.broker_epoch = -1, -1  # register again
            elif response.error.code == ErrorCode.NONE:
                self.fenced = response.is_fenced
                if request.want_shut_down and response.should_shut_down:
                    self._check_may_shut_down()
                    self.controlled_shutdowns += 1
                    self.stop(clean=True)

    def _check_may_shut_down(self) -> None:
        """ShouldShutDown comes only once its leaderships moved, committed, and it is
        fenced (so nothing can elect it again)."""
        view = self.cluster.reference_dump_at(LATEST_EPOCH)
        led = [] if view is None else [tp for tp, p in view.partitions
                                       if p.leader == self.broker_id]
        if led or view is None or view.fenced(self.broker_id) is not True:
            self.cluster.fail(f"broker {self.broker_id} told to shut down while the committed "
                              f"state has it leading {led}, fenced="
                              f"{None if view is None else view.fenced(self.broker_id)}")

    def begin_controlled_shutdown(self) -> None:
        """Heartbeat with WantShutDown until told ShouldShutDown (or give up), then stop."""
        if self.alive and self.shutting_down_since_ms < 0:
            self.shutting_down_since_ms = self.cluster.now_ms

    def stop(self, *, clean: bool) -> None:
        """The process ends; a clean stop remembers its epoch for the next registration
        (KIP-966: an unclean one may have lost log data)."""
        if not self.alive:
            return
        self.alive = False
        self.dead_since_ms = self.cluster.now_ms
        self.shutting_down_since_ms = -1
        self.outstanding.clear()
        self.previous_epoch = self.broker_epoch if clean else -1
        if not self.permanently_dead:
            self.cluster.schedule(self.cluster.now_ms + self.rng.randint(50, 1500), self.restart,
                                  f"broker restart {self.broker_id}")

    def restart(self) -> None:
        if self.alive or self.permanently_dead:
            return
        self.alive = True
        self.generation += 1
        self.broker_epoch = -1
        self.fenced = True
        self.dead_since_ms = -1


@dataclass(slots=True, kw_only=True)
class SimAdmin(SimClient):
    acked_writes: int = 0
    acked_after_heal: int = 0

    def tick(self) -> None:
        cluster = self.cluster
        self.expire(600)
        view = cluster.reference_dump_at(LATEST_EPOCH)
        choice = self.rng.random()
        name = self.rng.choice(TOPIC_NAMES)
        broker_ids = sorted(b.broker_id for b in cluster.brokers)
        if choice < 0.3:
            self.send(api.CreateTopicsRequest(topics=(api.CreatableTopic(
                name=name, num_partitions=self.rng.randint(1, 3),
                replication_factor=self.rng.randint(1, 3)),)))
        elif choice < 0.4:
            self.send(api.DeleteTopicsRequest(topics=(api.DeleteTopicState(name=name),)))
        elif choice < 0.65 and view is not None and view.topics:
            topic, _, partitions = self.rng.choice(view.topics)
            target: tuple[int, ...] | None = None
            if self.rng.random() < 0.8:
                target = tuple(self.rng.sample(broker_ids, self.rng.randint(1, 3)))
            self.send(api.AlterPartitionReassignmentsRequest(topics=(api.ReassignableTopic(
                name=topic, partitions=(api.ReassignablePartition(
                    partition_index=self.rng.randrange(max(partitions, 1)),
                    replicas=target),)),)))
        elif choice < 0.75 and view is not None and view.topics:
            topic = self.rng.choice(view.topics)[0]
            self.send(api.ElectLeadersRequest(topic_partitions=(
                api.TopicPartitions(topic=topic, partitions=(0,)),)))
        else:
            self.send(api.DescribeClusterRequest(include_fenced_brokers=True))

    def handle(self, request: Any, response: Any) -> None:
        if not isinstance(request, api.DescribeClusterRequest):
            self.acked_writes += 1
            if self.cluster.healed_at_ms is not None:
                self.acked_after_heal += 1


# -- the cluster -------------------------------------------------------------------------------


class ControllerCluster(raft_sim.Cluster):
    """raft_sim's cluster whose nodes run controllers, plus brokers and an admin client."""

    def __init__(self, seed: int, *, voters: int = 3, brokers: int = 4,
                 faults: raft_sim.FaultPlan | None = None,
                 ctl_faults: CtlFaultPlan | None = None) -> None:
        super().__init__(seed, voters=voters, observers=0, faults=faults)
        self.ctl_faults = ctl_faults or CtlFaultPlan()
        self.controllers: dict[int, SimController] = {}
        self.reference = ControllerState(CTL_CONFIG, rng=random.Random(0))
        self.reference_offsets: list[int] = []  # data offsets replayed into the reference
        self._reference_dumps: dict[int, MetadataDump] = {}
        self._reference_checked = -1
        self.removed_topic_ids: set[Uuid] = set()
        # The committed history replayed by kraftlog.metadata too, as brokers do.
        self.image = metadata_image.MetadataImage()
        self._image_pending: list[tuple[int, int, MetadataRecord]] = []
        # Acknowledged writes by the epoch of the controller that answered them.
        self.acked_topics: dict[str, tuple[Uuid, int]] = {}
        self.max_acked_offset: dict[int, int] = {}
        self.brokers = [SimBroker(cluster=self, address=BROKER_ADDRESS_BASE + b, broker_id=b,
                                  rng=random.Random(self.rng.getrandbits(64)))
                        for b in range(brokers)]
        self.admin = SimAdmin(cluster=self, address=ADMIN_ADDRESS,
                              rng=random.Random(self.rng.getrandbits(64)))
        self.healed_at_ms: int | None = None
        self.activations = 0
        self.reverts = 0
        self.snapshot_loads = 0
        self.crashes_after_append = 0
        self.fence_latencies_ms: list[int] = []

    # -- wiring controllers into raft_sim's nodes --------------------------------------------

    def _controller_for(self, node: raft_sim.SimNode) -> SimController | None:
        client = node.client
        if client is None:
            self.controllers.pop(node.node_id, None)
            return None
        controller = self.controllers.get(node.node_id)
        if controller is None or controller.incarnation != node.incarnation:
            assert node.listener is not None
            controller = SimController(self, node)
            self.controllers[node.node_id] = controller
            client.listener = _NodeListener(node.listener, controller)
            self._schedule_jobs(controller)
        return controller

    def _poll(self, node: raft_sim.SimNode) -> None:
        self._controller_for(node)
        super()._poll(node)

    def poll_node(self, node: raft_sim.SimNode) -> None:
        super()._poll(node)

    def schedule_drain(self, controller: SimController) -> None:
        delay = self.rng.randint(0, self.ctl_faults.drain_delay_max_ms)
        if self.faults_enabled and self.rng.random() < self.ctl_faults.stall_chance:
            delay += self.rng.randint(1, self.ctl_faults.stall_max_ms)

        def drain() -> None:
            if controller.current:
                controller.drain()
        self.schedule(self.now_ms + delay, drain, f"controller {controller.node_id}")

    def on_fenced(self, broker_ids: tuple[int, ...]) -> None:
        for broker in self.brokers:
            if broker.broker_id in broker_ids and broker.dead_since_ms >= 0:
                self.fence_latencies_ms.append(self.now_ms - broker.dead_since_ms)

    def _schedule_jobs(self, controller: SimController) -> None:
        jobs: list[tuple[int, Callable[[], None], str]] = [
            (FENCE_CHECK_INTERVAL_MS, controller.fence_stale_brokers, "fence"),
            (CTL_CONFIG.metadata_max_idle_interval_ms, controller.no_op, "noop"),
            (REBALANCE_INTERVAL_MS, controller.balance_leaders, "rebalance"),
        ]
        for interval_ms, job, label in jobs:
            self._schedule_job(controller, interval_ms, job, f"{label} {controller.node_id}")

    def _schedule_job(self, controller: SimController, interval_ms: int, job: Callable[[], None],
                      label: str) -> None:
        def run() -> None:
            if controller.current:
                job()
                self._schedule_job(controller, interval_ms, job, label)
        self.schedule(self.now_ms + interval_ms, run, label)

    def propose(self) -> int | None:
        return None  # raft_sim's raw proposals would not decode as metadata records

    # -- client traffic over the simulated network -------------------------------------------

    def send_client_request(self, client: SimClient, request_id: int, dst: int,
                            request: Any) -> None:
        def deliver() -> None:
            controller = self.controllers.get(dst)
            node = self.nodes[dst]
            if controller is None or node.client is None:
                return

            def reply(r: Reply) -> None:
                answer = Reply(request_id=request_id, response=r.response,
                               not_controller=r.not_controller, leader_hint=r.leader_hint)
                self._deliver_later(dst, client.address, lambda: client.on_reply(answer),
                                    f"reply {dst}->{client.address}")

            if isinstance(request, api.DescribeClusterRequest):
                controller.read(lambda s, committed: self._checked_read(
                    controller, s, request, committed), reply)
            else:
                controller.write(type(request).__name__,
                                 lambda s, next_offset, now_ms: _generate(
                                     controller, s, request, next_offset, now_ms), reply)
        self._deliver_later(client.address, dst, deliver,
                            f"{type(request).__name__} {client.address}->{dst}")

    def _checked_read(self, controller: SimController, state: ControllerState,
                      request: api.DescribeClusterRequest, committed: int
                      ) -> api.DescribeClusterResponse:
        answer = state.describe_cluster(request, committed, controller_id=controller.node_id)
        expected = self.reference_dump_at(committed)
        if expected is not None:
            seen = tuple((b.broker_id, b.is_fenced, b.broker_epoch) for b in answer.brokers)
            want = tuple((b[0], b[3], b[2]) for b in expected.brokers)
            if seen != want:
                self.fail(f"controller {controller.node_id} read at committed offset "
                          f"{committed} saw brokers {seen}, the committed state has {want}")
        return answer

    # -- hooks called by the controllers ------------------------------------------------------

    def on_answer(self, controller: SimController, pending: _Pending) -> None:
        """A write is answered: its records must be the committed ones at their offsets."""
        for i, value in enumerate(pending.values):
            offset = pending.first_offset + i
            seen = self.committed.get(offset)
            if seen is None or seen[1] != value:
                self.fail(f"controller {controller.node_id} answered a write whose record at "
                          f"{offset} is not the committed one ({seen!r})")
        epoch = controller.epoch
        if pending.values:
            self.max_acked_offset[epoch] = max(self.max_acked_offset.get(epoch, -1),
                                               pending.offset)
        response = pending.response
        if isinstance(response, api.CreateTopicsResponse):
            for topic in response.topics:
                if topic.error.code == ErrorCode.NONE:
                    self.acked_topics[topic.name] = (topic.topic_id, epoch)

    def on_activate(self, controller: SimController) -> None:
        self.activations += 1
        self.trace.append(f"{self.now_ms}: controller {controller.node_id} active in epoch "
                          f"{controller.epoch} at committed {controller.committed_offset}")
        # Raft's leader completeness: what a leader of an older epoch committed is in this
        # one's log. (A deposed leader of an older epoch may still activate, and lag.)
        acked = max((o for e, o in self.max_acked_offset.items() if e < controller.epoch),
                    default=-1)
        if controller.committed_offset < acked:
            self.fail(f"controller {controller.node_id} became active in epoch "
                      f"{controller.epoch} at committed offset {controller.committed_offset}, "
                      f"below the offset {acked} acknowledged in an older epoch")
        state = controller.state
        for name, (topic_id, epoch) in self.acked_topics.items():
            if epoch < controller.epoch and topic_id not in self.removed_topic_ids and \
                    state.replication.topics.get(topic_id) is None:
                self.fail(f"controller {controller.node_id} became active without the "
                          f"acknowledged topic {name} ({topic_id})")
        self.check_controller_now(controller, "activation")

    def after_append(self, controller: SimController) -> None:
        """Sometimes kill the active controller right after it appended (mid-operation)."""
        if not self.faults_enabled or self.rng.random() >= self.ctl_faults.crash_after_append:
            return
        node = controller.node
        delay = self.rng.randint(0, 2 * self.config.append_linger_ms)
        incarnation = node.incarnation

        def crash() -> None:
            if node.client is not None and node.incarnation == incarnation:
                self.crashes_after_append += 1
                self.crash_node(node)
        self.schedule(self.now_ms + delay, crash, f"crash after append {node.node_id}")

    def crash_node(self, node: raft_sim.SimNode) -> None:
        self.trace.append(f"{self.now_ms}: crash {node.node_id}")
        node.crash()
        self.controllers.pop(node.node_id, None)
        for rid in [r for r, p in self._parked.items() if p[2] == node.node_id]:
            del self._parked[rid]
        self.schedule(self.now_ms + self.rng.randint(10, 1000), lambda: self._restart(node),
                      "restart")

    # -- the reference: one ControllerState fed the committed history in order -------------

    def record_committed(self, node_id: int, offset: int, epoch: int, value: bytes) -> None:
        seen = self.committed.get(offset)
        if seen is None:
            if self.reference_offsets and offset <= self.reference_offsets[-1]:
                self.fail(f"offset {offset} first committed after {self.reference_offsets[-1]}")
            self.committed[offset] = (epoch, value)
            record: MetadataRecord = record_convert.decode(value, offset=offset)
            if isinstance(record, RemoveTopicRecord):
                self.removed_topic_ids.add(record.topic_id)
            self.reference.replay(record, offset)
            self.reference.registry.get_or_create_snapshot(offset)
            self._image_pending.append((offset, epoch, record))
            self.reference_offsets.append(offset)
        elif seen != (epoch, value):
            self.fail(f"node {node_id} committed {(epoch, value)!r} at offset {offset}, but "
                      f"{seen!r} was committed there before")

    def reference_dump_at(self, committed_offset: int) -> MetadataDump | None:
        """The committed metadata as of ``committed_offset`` (LATEST: all of it)."""
        if not self.reference_offsets:
            return None
        i = bisect.bisect_right(self.reference_offsets, committed_offset)
        if i == 0:
            return None
        key = self.reference_offsets[i - 1]
        cached = self._reference_dumps.get(key)
        if cached is None:
            cached = self._reference_dumps[key] = dump(self.reference, key)
            check_partitions(cached, f"committed state at {key}", self.fail)
        return cached

    # -- invariants -----------------------------------------------------------------------------

    def check_controller_now(self, controller: SimController, why: str) -> None:
        """The controller's state read at its committed offset is the committed metadata."""
        if controller.active:
            registry = controller.state.registry
            if not registry.has_snapshot(controller.committed_offset):
                self.fail(f"active controller {controller.node_id} keeps no snapshot at its "
                          f"committed offset {controller.committed_offset}")
            mine = dump(controller.state, controller.committed_offset)
        else:
            mine = dump(controller.state)
        expected = self.reference_dump_at(controller.delivered_offset)
        if expected is None:
            expected = dump(ControllerState(CTL_CONFIG))
        if mine != expected:
            self.fail(f"controller {controller.node_id} ({why}, active={controller.active}) "
                      f"at committed offset {controller.committed_offset} (delivered "
                      f"{controller.delivered_offset}) differs from the committed metadata: "
                      f"{dump_diff(mine, expected)}")
        if why in ("revert", "snapshot load"):
            self.reverts += why == "revert"
            try:
                controller_harness.check_invariants(controller.state)
            except AssertionError as exc:
                self.fail(f"controller {controller.node_id} after {why}: indexes broken: {exc}")
        controller.checked = (controller.delivered_offset, controller.active)

    def check_invariants(self) -> None:
        super().check_invariants()
        for controller in list(self.controllers.values()):
            if controller.current and \
                    controller.checked != (controller.delivered_offset, controller.active):
                self.check_controller_now(controller, "commit")
        self._check_silent_brokers_fenced()
        latest = self.reference_offsets[-1] if self.reference_offsets else -1
        if latest != self._reference_checked:
            self._reference_checked = latest
            try:
                controller_harness.check_invariants(self.reference)
            except AssertionError as exc:
                self.fail(f"committed state at {latest} breaks a partition invariant: {exc}")
            delta = metadata_delta.MetadataDelta(self.image)
            for offset, epoch, record in self._image_pending:
                delta.replay(record, offset, epoch)
            self._image_pending.clear()
            self.image = delta.apply()
            theirs, mine = image_dump(self.image), dump(self.reference)
            if theirs != mine:
                self.fail(f"the MetadataImage replayed from the committed history up to "
                          f"{latest} differs from the controller's: {dump_diff(theirs, mine)}")

    def _check_silent_brokers_fenced(self) -> None:
        """An active controller fences a silent broker, and moves its leaderships, within
        ``broker.session.timeout.ms`` (+ the fence job's period) of the last heartbeat or
        registration it processed for that broker, or of its activation (which starts
        every session afresh), whichever is later. Checked on the controller's own
        (possibly uncommitted) state: committing is raft's part, checked after healing."""
        for controller in self.controllers.values():
            # A fence waiting for its commit holds the next one back (one broker per
            # write): judge only a controller with nothing in flight.
            if not (controller.active and controller.current) or controller.pending \
                    or controller.events:
                continue
            for broker in self.brokers:
                if broker.alive or broker.broker_epoch < 0:
                    continue
                since = max(controller.activated_ms,
                            controller.last_contact_ms.get(broker.broker_id, -1))
                if self.now_ms <= since + CTL_CONFIG.broker_session_timeout_ms \
                        + FENCE_CHECK_INTERVAL_MS + self.ctl_faults.drain_delay_max_ms:
                    continue
                registration = controller.state.cluster.get(broker.broker_id)
                if registration is None or registration.broker_epoch != broker.broker_epoch:
                    continue
                led = controller.state.replication.partitions_led_by(broker.broker_id)
                if not registration.fenced or led:
                    self.fail(f"active controller {controller.node_id} (since "
                              f"{controller.activated_ms} ms) has not fenced broker "
                              f"{broker.broker_id}, silent since {broker.dead_since_ms} ms "
                              f"(fenced={registration.fenced}, leads {led})")

    # -- running --------------------------------------------------------------------------------

    def start(self) -> None:
        super().start()
        for broker in self.brokers:
            self._schedule_broker_tick(broker, broker.rng.randint(1, HEARTBEAT_MS))

        def admin_tick() -> None:
            self.admin.tick()
            self.schedule(self.now_ms + self.rng.randint(1, 2 * self.ctl_faults.admin_every_ms),
                          admin_tick, "admin")
        self.schedule(self.now_ms + self.ctl_faults.admin_every_ms, admin_tick, "admin")
        if self.ctl_faults.broker_crash_every_ms:
            self.schedule(self._exp(self.ctl_faults.broker_crash_every_ms), self._broker_crash_tick,
                          "broker crash")

    def _schedule_broker_tick(self, broker: SimBroker, delay_ms: int) -> None:
        def tick() -> None:
            broker.tick()
            self._schedule_broker_tick(broker, HEARTBEAT_MS + broker.rng.randint(-10, 10))
        self.schedule(self.now_ms + delay_ms, tick, f"broker {broker.broker_id}")

    def _broker_crash_tick(self) -> None:
        if not self.faults_enabled:
            return
        broker = self.rng.choice(self.brokers)
        if broker.alive and broker.shutting_down_since_ms < 0:
            if self.rng.random() < 0.5:
                self.trace.append(f"{self.now_ms}: broker {broker.broker_id} shuts down")
                broker.begin_controlled_shutdown()
            else:
                self.trace.append(f"{self.now_ms}: broker {broker.broker_id} crashes")
                broker.stop(clean=False)
        self.schedule(self._exp(self.ctl_faults.broker_crash_every_ms), self._broker_crash_tick,
                      "broker crash")

    def heal_and_stop_one_broker(self) -> SimBroker:
        """Heal everything, restart every broker but one, which stops heartbeating for good."""
        self.heal()
        self.healed_at_ms = self.now_ms
        victim = self.rng.choice(self.brokers)
        for broker in self.brokers:
            if broker is victim:
                broker.permanently_dead = True
                broker.stop(clean=False)
            else:
                if broker.shutting_down_since_ms >= 0:
                    broker.stop(clean=False)
                broker.restart()
        return victim


def _generate(controller: SimController, state: ControllerState, request: Any, next_offset: int,
              now_ms: int) -> ControllerResult[Any]:
    """What ``controller/server.py`` runs for each request type."""
    if isinstance(request, api.BrokerRegistrationRequest | api.BrokerHeartbeatRequest):
        controller.last_contact_ms[request.broker_id] = now_ms
    if isinstance(request, api.BrokerRegistrationRequest):
        return state.register_broker(request, now_ms, next_offset)
    if isinstance(request, api.BrokerHeartbeatRequest):
        return state.process_heartbeat(request, now_ms, controller.committed_offset)
    if isinstance(request, api.AlterPartitionRequest):
        return state.alter_partition(request)
    if isinstance(request, api.CreateTopicsRequest):
        return state.create_topics(request)
    if isinstance(request, api.DeleteTopicsRequest):
        return state.delete_topics(request)
    if isinstance(request, api.AlterPartitionReassignmentsRequest):
        return state.alter_partition_reassignments(request)
    if isinstance(request, api.ElectLeadersRequest):
        return state.elect_leaders(request)
    raise AssertionError(f"no operation for {request!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CtlSeedResult:
    seed: int
    events: int
    committed: int
    activations: int
    reverts: int
    snapshot_loads: int
    crashes_after_append: int
    acked_writes: int
    controlled_shutdowns: int
    fence_latencies_ms: tuple[int, ...]
    fence_ms: int
    virtual_ms: int


def run_seed(seed: int, *, chaos_ms: int = 2500, faults: raft_sim.FaultPlan | None = None,
             ctl_faults: CtlFaultPlan | None = None,
             fence_bound_ms: int | None = None) -> CtlSeedResult:
    """Chaos for ``chaos_ms``; then heal with one broker silenced for good and require, within
    ``fence_bound_ms``: that broker fenced and leading nothing, every other broker
    registered and unfenced, and an admin write acknowledged."""
    picker = random.Random(seed ^ 0xC7A1)
    cluster = ControllerCluster(seed, voters=picker.choice([3, 3, 5]),
                                brokers=picker.randint(3, 5), faults=faults,
                                ctl_faults=ctl_faults)
    cluster.start()
    cluster.run_until(chaos_ms)
    victim = cluster.heal_and_stop_one_broker()
    heal_ms = cluster.now_ms
    # Election (a few election timeouts) + a full session for the silent broker under the
    # new active controller (it starts every session afresh) + fence checks and commit.
    bound_ms = fence_bound_ms if fence_bound_ms is not None else (
        CTL_CONFIG.broker_session_timeout_ms + 2500)
    fenced_at: list[int] = []

    def settled() -> bool:
        view = cluster.reference_dump_at(LATEST_EPOCH)
        if view is None:
            return False
        if not fenced_at:
            if view.fenced(victim.broker_id) is False or any(
                    p.leader == victim.broker_id for _, p in view.partitions):
                return False
            fenced_at.append(cluster.now_ms)
        return (cluster.admin.acked_after_heal > 0
                and all(view.fenced(b.broker_id) is False
                        for b in cluster.brokers if b is not victim))

    if not cluster.run_until(heal_ms + bound_ms, stop=settled):
        view = cluster.reference_dump_at(LATEST_EPOCH)
        cluster.fail(f"not settled within {bound_ms} ms after healing (broker "
                     f"{victim.broker_id} silenced; fenced at {fenced_at}); brokers "
                     f"{None if view is None else view.brokers}; admin acked after heal "
                     f"{cluster.admin.acked_after_heal}\n" + cluster.describe() + "\n"
                     + "\n".join(cluster.trace[-20:]))
    return CtlSeedResult(seed=seed, events=cluster.events_run, committed=len(cluster.committed),
                         activations=cluster.activations, reverts=cluster.reverts,
                         snapshot_loads=cluster.snapshot_loads,
                         fence_latencies_ms=tuple(cluster.fence_latencies_ms),
                         crashes_after_append=cluster.crashes_after_append,
                         acked_writes=cluster.admin.acked_writes,
                         controlled_shutdowns=sum(b.controlled_shutdowns
                                                  for b in cluster.brokers),
                         fence_ms=fenced_at[0] - heal_ms, virtual_ms=cluster.now_ms)


__all__ = ["CTL_CONFIG", "ControllerCluster", "CtlFaultPlan", "CtlSeedResult", "MetadataDump",
           "SimController", "dump", "run_seed"]
