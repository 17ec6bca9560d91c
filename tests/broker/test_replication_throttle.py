"""KIP-73 throttles on the data path: the leader's ReplicaManager answers a throttled follower
with no records while its quota is exceeded, the follower's fetch state knows when it is caught
up (in sync: never throttled), both on the harness's manual clock; and the replica fetcher
leaves throttled partitions out of its Fetch while the follower quota is exceeded (in-process,
over loopback gRPC)."""

from __future__ import annotations

import asyncio
import pathlib

import grpc

from kraftlog.broker import data_plane, fetcher_driver, purgatory, server
from kraftlog.broker import reconciler as rc
from kraftlog.broker import replica_manager as rm
from kraftlog.broker import replication_quota as rq
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition
from kraftlog.raft import transport
from kraftlog.v1 import broker_pb2
from tests.broker import harness
from tests.broker.harness import T0, TOPIC_ID, TP, Cluster, batch, open_partition

VALUE = b"x" * 4000  # one ~4 KB batch per produce
BOUND = 10_000  # bytes/s


def throttled_cluster(tmp_path: pathlib.Path) -> Cluster:
    """Broker 1 leads t-0 with ISR {1}; follower 2 is out of the ISR (being added)."""
    cluster = Cluster(tmp_path, broker_ids=(1, 2), min_isr=1, lag_ms=60_000)
    for _ in range(10):
        cluster.produce(VALUE, acks=1)
    cluster.elect(1, isr=(1,))  # follower 2 is 10 records behind and out of the ISR
    # Two 1 s samples: the bound bites after about one second's worth of bytes.
    quota = rq.ReplicationQuota(rq.QuotaType.LEADER, window=rq.QuotaWindow(samples=2, sample_ms=1000),
                                rate_bytes_per_s=BOUND)
    quota.mark_throttled(TP.topic, rq.parse_throttled_replicas("0:1,0:2", 1))
    cluster.managers[1].leader_quota = quota
    return cluster


def follower_fetch(cluster: Cluster, *, offset: int, max_wait_ms: int = 0) -> rm.FetchOutcome:
    """Broker 2 fetches one batch at ``offset`` from leader 1."""
    return cluster.managers[1].fetch_messages(
        purgatory.FetchParams(replica_id=2, max_wait_ms=max_wait_ms, min_bytes=1),
        {TP: purgatory.FetchPartitionRequest(
            fetch_offset=offset, partition_max_bytes=len(VALUE), current_leader_epoch=1,
            last_fetched_epoch=-1, log_start_offset=0)}, now_ms=cluster.now_ms)


def test_leader_withholds_records_from_a_throttled_follower_over_quota(tmp_path: pathlib.Path) -> None:
    cluster = throttled_cluster(tmp_path)
    quota = cluster.managers[1].leader_quota
    first = follower_fetch(cluster, offset=0).responses
    assert first is not None and first[TP].records  # under quota: data flows and is recorded
    sent = len(first[TP].records)
    assert quota.recorded_bytes == sent
    # One batch per fetch until more than 10 KB went out in the (minimum) 1 s window.
    offset = 1
    while not quota.is_quota_exceeded(cluster.now_ms):
        answer = follower_fetch(cluster, offset=offset).responses
        assert answer is not None and answer[TP].records
        offset += 1
    assert offset == 3 and quota.recorded_bytes == 3 * sent
    held = follower_fetch(cluster, offset=offset).responses
    assert held is not None
    assert held[TP].error is ErrorCode.NONE and held[TP].records == b""
    # The follower's fetch offset still counts (it is what ISR expansion looks at).
    status = cluster.leader_partition.replica_status(2)
    assert status is not None and status.log_end_offset == offset
    # A consumer is never throttled.
    consumer = cluster.managers[1].fetch_messages(
        purgatory.FetchParams(max_wait_ms=0), {TP: purgatory.FetchPartitionRequest(
            fetch_offset=0, partition_max_bytes=1 << 20)}, now_ms=cluster.now_ms).responses
    assert consumer is not None and consumer[TP].records
    # Once the window has passed, the follower gets data again.
    cluster.tick(2_000)
    again = follower_fetch(cluster, offset=offset).responses
    assert again is not None and again[TP].records


def test_in_sync_follower_and_unthrottled_partitions_are_not_held_back(tmp_path: pathlib.Path) -> None:
    cluster = throttled_cluster(tmp_path)
    quota = cluster.managers[1].leader_quota
    quota.record(10 * BOUND, cluster.now_ms)
    assert quota.is_quota_exceeded(cluster.now_ms)
    held = follower_fetch(cluster, offset=0).responses
    assert held is not None and held[TP].records == b""
    quota.remove_throttle(TP.topic)
    free = follower_fetch(cluster, offset=0).responses
    assert free is not None and free[TP].records
    quota.mark_throttled(TP.topic, rq.ALL_PARTITIONS)
    cluster.isr = (1, 2)
    cluster.partition_epoch += 1
    cluster.apply_metadata()  # follower 2 joins the ISR: in sync replicas are never throttled
    in_sync = follower_fetch(cluster, offset=0).responses
    assert in_sync is not None and in_sync[TP].records


def test_throttled_bytes_do_not_complete_a_waiting_follower_fetch(tmp_path: pathlib.Path) -> None:
    cluster = throttled_cluster(tmp_path)
    manager = cluster.managers[1]
    offset = 10
    outcome = follower_fetch(cluster, offset=offset, max_wait_ms=500)
    assert outcome.responses is None  # caught up: waits for data
    manager.leader_quota.record(10 * BOUND, cluster.now_ms)
    cluster.produce(VALUE, acks=1)
    assert manager.take_completed().fetches == ()  # new data, but throttled: keeps waiting
    cluster.tick(500)
    done = manager.take_completed().fetches
    assert len(done) == 1 and done[0].responses[TP].records == b""
    assert done[0].responses[TP].error is ErrorCode.NONE


def test_unthrottled_waiting_follower_fetch_completes_on_new_data(tmp_path: pathlib.Path) -> None:
    cluster = throttled_cluster(tmp_path)
    manager = cluster.managers[1]
    manager.leader_quota.remove_throttle(TP.topic)
    outcome = follower_fetch(cluster, offset=10, max_wait_ms=500)
    assert outcome.responses is None
    cluster.produce(VALUE, acks=1)
    done = manager.take_completed().fetches
    assert len(done) == 1 and done[0].responses[TP].records


def test_follower_is_in_sync_once_caught_up_with_the_leaders_high_watermark(
        tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path, broker_ids=(1, 2), min_isr=1, lag_ms=1000)
    for value in (b"a", b"b", b"c"):
        cluster.produce(value, acks=1)
    cluster.elect(1, isr=(1,))
    # Once the lagging follower stops holding it, the leader's HW reaches its log end (ISR {1}).
    cluster.tick(1001)
    assert cluster.leader_partition.high_watermark == 3
    state = cluster.fetchers[2]
    state.partition_max_bytes = 1  # one batch per fetch
    assert not state.is_replica_in_sync  # no answer yet
    cluster.fetch(2)
    assert state.lag == 2 and not state.is_replica_in_sync
    cluster.fetch(2)
    cluster.fetch(2)
    assert state.lag == 0 and state.is_replica_in_sync


# ---------------------------------------------------------------------------- the follower's fetcher

NEW_BATCH = batch(b"c")


def test_follower_fetcher_leaves_throttled_partitions_out_while_over_quota(
        tmp_path: pathlib.Path) -> None:
    """Broker 2 follows t-0 (throttled) and u-0 (not) from broker 1 over loopback gRPC, its
    follower quota far over its bound: u-0 replicates, t-0 does not, until the throttle goes."""
    other = TopicPartition(topic="u", partition=0)
    leader = rm.ReplicaManager(broker_id=1)
    follower = rm.ReplicaManager(broker_id=2)
    for tp in (TP, other):
        for broker_id, manager in ((1, leader), (2, follower)):
            replica = open_partition(tmp_path / f"b{broker_id}" / tp.dir_name, broker_id, topic=tp.topic)
            manager.add_partition(replica)
            manager.transition_replica(tp, rm.ReplicaState.ONLINE_REPLICA)
        leader.make_leader(tp, leader_epoch=0, partition_epoch=0, replicas=(1, 2), isr=(1,), now_ms=T0)
        follower.make_follower(tp, leader_id=1, leader_epoch=0, partition_epoch=0, replicas=(1, 2))
        leader.append_records({tp: batch(b"a", b"b")}, required_acks=1, timeout_ms=1000, now_ms=T0)
    # A bound of 1 byte/s over 2 windows of a minute, with 1 MB recorded: exceeded for minutes.
    quota = rq.ReplicationQuota(rq.QuotaType.FOLLOWER, window=rq.QuotaWindow(samples=2, sample_ms=60_000),
                                rate_bytes_per_s=1)
    quota.mark_throttled(TP.topic, rq.parse_throttled_replicas("0:2", 2))

    registered = harness.registered_brokers(1, 2)

    async def scenario() -> tuple[int, int, int, int]:
        leader_data, follower_data = data_plane.DataPlane(leader), data_plane.DataPlane(follower)
        quota.record(1_000_000, follower_data.now_ms())
        servicer = server.BrokerServicer(leader_data, broker_id=1, cluster_id="c", image=lambda: registered,
                                         controller_id=lambda: 3, listener_name="PLAINTEXT")
        grpc_server = grpc.aio.server(options=transport.server_options())
        server.add_to_server(servicer, grpc_server)
        port = grpc_server.add_insecure_port("127.0.0.1:0")
        await grpc_server.start()
        leader_data.start()
        fetchers = fetcher_driver.ReplicaFetcherManager(
            broker_id=2, manager=follower, data=follower_data,
            endpoint=lambda _b: f"127.0.0.1:{port}", broker_epoch=lambda: 2,
            config=fetcher_driver.FetcherConfig(fetch_wait_max_ms=100, fetch_backoff_ms=50), quota=quota)
        try:
            fetchers.apply(rc.ReconcileResult(start_fetching=[
                rc.FetchTarget(topic_partition=tp, topic_id=TOPIC_ID, leader_id=1, leader_epoch=0)
                for tp in (TP, other)]))
            async with asyncio.timeout(10):
                while follower.partitions[other].log_end_offset < 2:
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # several more fetch rounds: t-0 stays held back
            held = follower.partitions[TP].log_end_offset
            unthrottled_bytes = quota.recorded_bytes
            quota.remove_throttle(TP.topic)
            fetchers.wake()
            async with asyncio.timeout(10):
                while follower.partitions[TP].log_end_offset < 2:
                    await asyncio.sleep(0.01)
            freed_bytes = quota.recorded_bytes
            # Throttled but under quota: u-0's new batch flows and is counted.
            quota.update_quota(rq.UNLIMITED_RATE)
            quota.mark_throttled(other.topic, rq.ALL_PARTITIONS)
            await servicer.Produce(broker_pb2.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
                broker_pb2.ProduceRequest.TopicProduceData(name=other.topic, partition_data=[
                    broker_pb2.ProduceRequest.PartitionProduceData(index=0, records=NEW_BATCH)])]), None)
            async with asyncio.timeout(10):
                while follower.partitions[other].log_end_offset < 3:
                    await asyncio.sleep(0.01)
            return held, unthrottled_bytes, freed_bytes, quota.recorded_bytes
        finally:
            await fetchers.stop()
            await leader_data.stop()
            await grpc_server.stop(None)

    held, recorded_held, recorded_freed, recorded_last = asyncio.run(scenario())
    assert held == 0
    assert recorded_held == recorded_freed == 1_000_000  # u-0 and the freed t-0 are not counted
    assert recorded_last == 1_000_000 + len(NEW_BATCH)
