"""Shared helpers for the broker tests: real storage logs in tmp dirs, and a hand-driven cluster.

:class:`Cluster` hosts partition ``t-0`` on brokers 1..n (a ReplicaManager
each), plays the controller for AlterPartition and leader elections, and moves
time only when a test says so. Nothing runs by itself: every fetch, poll and
ISR commit is a method call, so each scenario reads as a script.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable

from kraftlog.broker import follower as follower_mod
from kraftlog.broker import partition as partition_mod
from kraftlog.broker import purgatory
from kraftlog.broker import replica_manager as rm_mod
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition, Uuid
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r
from kraftlog.storage import leader_epoch
from kraftlog.storage import log as storage_log
from kraftlog.storage import record_batch as rb
from kraftlog.storage.log_config import LogConfig

TOPIC = "t"
TOPIC_ID = Uuid(bytes(range(1, 17)))
TP = TopicPartition(topic=TOPIC, partition=0)
T0 = 10_000_000
"""Start of test time (well above replica.lag.time.max.ms, as wall-clock time is)."""
LOG_CONFIG = LogConfig(segment_index_bytes=64 * 1024)


def batch(*values: bytes, ts: int = T0) -> bytes:
    """One v2 batch holding ``values`` (offsets and epoch are the leader's to stamp)."""
    return rb.build_batch([rb.RecordInput(value=v, timestamp_ms=ts) for v in values or (b"v",)])


def open_partition(directory: pathlib.Path, broker_id: int, *,
                   config: partition_mod.PartitionConfig | None = None, high_watermark: int = 0,
                   topic: str = TOPIC, index: int = 0, log_config: LogConfig = LOG_CONFIG) -> partition_mod.Partition:
    directory.mkdir(parents=True, exist_ok=True)
    cache = leader_epoch.LeaderEpochFileCache(directory / "leader-epoch-checkpoint")
    log = storage_log.Log.open(directory, log_config, now_ms=T0, epoch_cache=cache)
    return partition_mod.Partition(TOPIC_ID, topic, index, log, epoch_cache=cache, local_broker_id=broker_id,
                                   config=config, high_watermark=high_watermark)


def records_of(partition: partition_mod.Partition, *, end: int | None = None) -> list[tuple[int, int, bytes]]:
    """(offset, leader epoch, value) of every record below ``end`` (default: the log end)."""
    log = partition.log
    data = log.read(log.log_start_offset, 1 << 30).records
    out: list[tuple[int, int, bytes]] = []
    for decoded in rb.decode_batches(data):
        for record in decoded.records:
            if end is None or record.offset < end:
                out.append((record.offset, decoded.partition_leader_epoch, record.value or b""))
    return out


def values_of(partition: partition_mod.Partition, *, end: int | None = None) -> list[bytes]:
    return [value for _offset, _epoch, value in records_of(partition, end=end)]


class Cluster:
    """Brokers hosting ``t-0``, a stand-in controller, and a manual clock."""

    def __init__(self, root: pathlib.Path, *, broker_ids: Iterable[int] = (1, 2, 3), min_isr: int = 2,
                 lag_ms: int = partition_mod.DEFAULT_REPLICA_LAG_TIME_MAX_MS, fetch_backoff_ms: int = 100,
                 leader: int | None = None) -> None:
        self.now_ms = T0
        self.broker_ids = tuple(broker_ids)
        self.config = partition_mod.PartitionConfig(min_insync_replicas=min_isr, replica_lag_time_max_ms=lag_ms)
        self.fetch_backoff_ms = fetch_backoff_ms
        self.managers: dict[int, rm_mod.ReplicaManager] = {}
        self.partitions: dict[int, partition_mod.Partition] = {}
        self.fetchers: dict[int, follower_mod.FollowerFetchState] = {}
        self.alive: set[int] = set(self.broker_ids)
        for broker_id in self.broker_ids:
            p = open_partition(root / f"broker-{broker_id}" / TP.dir_name, broker_id, config=self.config)
            manager = rm_mod.ReplicaManager(broker_id=broker_id)
            manager.add_partition(p)
            manager.transition_replica(TP, rm_mod.ReplicaState.ONLINE_REPLICA)
            self.managers[broker_id] = manager
            self.partitions[broker_id] = p
        # The controller's view of the partition (what the metadata log says).
        self.leader = self.broker_ids[0] if leader is None else leader
        self.leader_epoch = 0
        self.partition_epoch = 0
        self.replicas = self.broker_ids
        self.isr: tuple[int, ...] = self.broker_ids
        self.apply_metadata()

    # --- metadata / controller -----------------------------------------------------------

    def apply_metadata(self, brokers: Iterable[int] | None = None) -> None:
        """Replay the controller's partition state on live brokers (the reconciler's job)."""
        for broker_id in sorted(self.alive if brokers is None else brokers):
            manager = self.managers[broker_id]
            if broker_id == self.leader:
                manager.make_leader(TP, leader_epoch=self.leader_epoch, partition_epoch=self.partition_epoch,
                                    replicas=self.replicas, isr=self.isr, now_ms=self.now_ms)
                self.fetchers.pop(broker_id, None)
            elif manager.make_follower(TP, leader_id=self.leader, leader_epoch=self.leader_epoch,
                                       partition_epoch=self.partition_epoch, replicas=self.replicas):
                self.fetchers[broker_id] = follower_mod.FollowerFetchState(
                    self.partitions[broker_id], leader_id=self.leader, leader_epoch=self.leader_epoch,
                    fetch_backoff_ms=self.fetch_backoff_ms)

    def elect(self, new_leader: int, *, isr: Iterable[int] | None = None) -> None:
        """The controller moves leadership (new leader epoch) and replays it."""
        self.leader = new_leader
        self.isr = tuple(sorted(self.isr if isr is None else isr))
        self.leader_epoch += 1
        self.partition_epoch += 1
        self.apply_metadata()

    def commit_isr_changes(self) -> list[tuple[partition_mod.AlterPartitionRequest, ErrorCode]]:
        """Send the leader's AlterPartition proposals to the controller and answer them."""
        if self.leader not in self.alive:
            return []
        manager = self.managers[self.leader]
        answered: list[tuple[partition_mod.AlterPartitionRequest, ErrorCode]] = []
        for request in manager.take_alter_partition_requests():
            result: partition_mod.LeaderAndIsr | None = None
            if request.leader_epoch != self.leader_epoch:
                error = ErrorCode.FENCED_LEADER_EPOCH
            elif request.partition_epoch != self.partition_epoch:
                error = ErrorCode.INVALID_UPDATE_VERSION
            else:
                error = ErrorCode.NONE
                self.isr = request.new_isr
                self.partition_epoch += 1
                result = partition_mod.LeaderAndIsr(leader_id=self.leader, leader_epoch=self.leader_epoch,
                                                    isr=self.isr, partition_epoch=self.partition_epoch)
            manager.handle_alter_partition_response(request, error=error, result=result, now_ms=self.now_ms)
            answered.append((request, error))
        if answered:
            self.apply_metadata()
        return answered

    # --- data path -----------------------------------------------------------------------

    @property
    def leader_partition(self) -> partition_mod.Partition:
        return self.partitions[self.leader]

    @property
    def leader_manager(self) -> rm_mod.ReplicaManager:
        return self.managers[self.leader]

    def produce(self, *values: bytes, acks: int = -1, timeout_ms: int = 30_000) -> rm_mod.ProduceOutcome:
        return self.leader_manager.append_records({TP: batch(*values)}, required_acks=acks,
                                                  timeout_ms=timeout_ms, now_ms=self.now_ms)

    def fetch(self, broker_id: int) -> follower_mod.FollowerOutcome | None:
        """One fetch round trip of ``broker_id``'s follower; None if it may not fetch now."""
        state = self.fetchers.get(broker_id)
        if state is None or broker_id not in self.alive:
            return None
        request = state.build_fetch_request(self.now_ms)
        if request is None:
            return None
        source = self.managers[state.leader_id] if state.leader_id in self.alive else None
        if source is None:
            response = follower_mod.FollowerFetchResponse(error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        else:
            outcome = source.fetch_messages(
                purgatory.FetchParams(replica_id=broker_id, max_wait_ms=0),
                {TP: purgatory.FetchPartitionRequest(
                    fetch_offset=request.fetch_offset, partition_max_bytes=request.partition_max_bytes,
                    current_leader_epoch=request.current_leader_epoch,
                    last_fetched_epoch=request.last_fetched_epoch, log_start_offset=request.log_start_offset)},
                now_ms=self.now_ms)
            assert outcome.responses is not None
            data = outcome.responses[TP]
            response = follower_mod.FollowerFetchResponse(
                error=data.error, high_watermark=data.high_watermark, log_start_offset=data.log_start_offset,
                records=data.records, diverging_epoch=data.diverging_epoch)
        return state.handle_fetch_response(request, response, now_ms=self.now_ms)

    def catch_up(self, broker_id: int, *, max_rounds: int = 20) -> None:
        """Fetch until the follower holds the leader's whole log and has reported it."""
        for _ in range(max_rounds):
            self.fetch(broker_id)
            status = self.leader_partition.replica_status(broker_id)
            if status is not None and status.log_end_offset == self.leader_partition.log_end_offset:
                return
        raise AssertionError(f"broker {broker_id} did not catch up in {max_rounds} fetches")

    def tick(self, ms: int) -> None:
        """Advance time and poll every live broker (expiry, ISR shrink)."""
        self.now_ms += ms
        for broker_id in sorted(self.alive):
            self.managers[broker_id].poll(self.now_ms)

    def completed_produces(self) -> dict[int, dict[TopicPartition, purgatory.ProducePartitionResponse]]:
        done = self.leader_manager.take_completed()
        return {c.op_id: c.responses for c in done.produces}


class Metadata:
    """A metadata image advanced by replaying records, one delta per :meth:`commit`."""

    def __init__(self) -> None:
        self.image = im.EMPTY
        self.offset = 0

    def commit(self, *records: r.MetadataRecord) -> tuple[dl.MetadataDelta, im.MetadataImage]:
        delta = dl.MetadataDelta(self.image)
        for record in records:
            delta.replay(record, self.offset, 1)
            self.offset += 1
        delta.set_provenance(im.MetadataProvenance(last_offset=self.offset - 1, last_epoch=1,
                                                   last_append_timestamp_ms=0))
        self.image = delta.apply()
        return delta, self.image



def registered_brokers(*broker_ids: int) -> im.MetadataImage:
    """An image where each of ``broker_ids`` is registered and unfenced, with broker epoch
    equal to its id (a replica Fetch must name it: KIP-903)."""
    delta = dl.MetadataDelta(im.EMPTY)
    for offset, broker_id in enumerate(broker_ids):
        delta.replay(r.RegisterBrokerRecord(
            broker_id=broker_id, incarnation_id=Uuid(bytes([broker_id]) * 16),
            broker_epoch=broker_id, endpoints=(r.Endpoint(
                listener_name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id),),
            fenced=False), offset, 1)
    return delta.apply()
