"""BrokerService in-process: the servicer, DataPlane and replica fetcher over real logs.

The servicer is called directly (no sockets) on a real event loop; broker 1 leads
``t-0`` with replicas (1, 2), and the test plays broker 2's follower fetches. The
clock the DataPlane gives the manager is wall time, but nothing here depends on how
fast it runs: every wait is on an answer, bounded by a generous timeout.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import random
from typing import Any

import crc32c
import grpc
import pytest

from kraftlog.broker import data_plane, fetcher_driver, server
from kraftlog.broker import partition as partition_mod
from kraftlog.broker import reconciler as rc
from kraftlog.broker import replica_manager as rm
from kraftlog.ids import TopicPartition, Uuid
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import record_convert
from kraftlog.metadata import records as r
from kraftlog.raft import transport
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.v1 import broker_pb2, broker_pb2_grpc, common_pb2
from tests import proto_fuzz
from tests.broker.harness import TOPIC_ID, TP, batch, open_partition

WAIT_S = 10.0


def image_with(leader: int, *, replicas: tuple[int, ...] = (1, 2), isr: tuple[int, ...] | None = None,
               elr: tuple[int, ...] = (), last_known_elr: tuple[int, ...] = ()) -> im.MetadataImage:
    delta = dl.MetadataDelta(im.EMPTY)
    records: list[r.MetadataRecord] = [
        r.RegisterBrokerRecord(broker_id=b, incarnation_id=Uuid(bytes([b]) * 16), broker_epoch=b,
                               endpoints=(r.Endpoint(listener_name="PLAINTEXT",
                                                     host="127.0.0.1", port=9000 + b),),
                               fenced=False)
        for b in (1, 2, 3)]
    records += [r.TopicRecord(name=TP.topic, topic_id=TOPIC_ID),
                r.PartitionRecord(topic_id=TOPIC_ID, partition_id=0, replicas=replicas,
                                  isr=replicas if isr is None else isr, leader=leader,
                                  eligible_leader_replicas=elr, last_known_elr=last_known_elr)]
    for offset, record in enumerate(records):
        delta.replay(record, offset, 1)
    return delta.apply()


class Broker:
    """Broker 1 leading t-0 with the given ISR; ``ready`` toggles client service."""

    def __init__(self, root: pathlib.Path, *, isr: tuple[int, ...], min_isr: int) -> None:
        self.manager = rm.ReplicaManager(broker_id=1)
        self.partition = open_partition(root / TP.dir_name, 1, config=partition_mod.PartitionConfig(
            min_insync_replicas=min_isr))
        self.manager.add_partition(self.partition)
        self.manager.transition_replica(TP, rm.ReplicaState.ONLINE_REPLICA)
        self.data = data_plane.DataPlane(self.manager)
        self.manager.make_leader(TP, leader_epoch=0, partition_epoch=0, replicas=(1, 2), isr=isr,
                                 now_ms=self.data.now_ms())
        self.ready = True
        self.image = image_with(1)
        self.servicer = server.BrokerServicer(
            self.data, broker_id=1, cluster_id="c", image=lambda: self.image,
            controller_id=lambda: 3, listener_name="PLAINTEXT", log_dirs=[str(root)],
            ready=lambda: self.ready)


def produce_request(values: list[bytes], *, acks: int = -1,
                    topic: str = TP.topic) -> broker_pb2.ProduceRequest:
    return broker_pb2.ProduceRequest(acks=acks, timeout_ms=30_000, topic_data=[
        broker_pb2.ProduceRequest.TopicProduceData(name=topic, partition_data=[
            broker_pb2.ProduceRequest.PartitionProduceData(index=0, records=batch(*values))])])


def fetch_request(offset: int, *, replica_id: int = -1, max_wait_ms: int = 0,
                  topic: str = TP.topic) -> broker_pb2.FetchRequest:
    return broker_pb2.FetchRequest(
        # image_with registers broker b with broker epoch b (KIP-903: a replica names it).
        replica_id=replica_id, replica_epoch=replica_id, max_wait_ms=max_wait_ms, min_bytes=1,
        max_bytes=1 << 20,
        topics=[broker_pb2.FetchRequest.FetchTopic(topic=topic, partitions=[
            broker_pb2.FetchRequest.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=offset,
                last_fetched_epoch=-1 if replica_id < 0 else 0, log_start_offset=-1,
                partition_max_bytes=1 << 20)])])


def run(coro: Any) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(coro, WAIT_S)
    return asyncio.run(main())


def test_acks_all_produce_answers_once_the_follower_fetched_past_it(tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1, 2), min_isr=2)

    async def scenario() -> tuple[Any, Any]:
        broker.data.start()
        try:
            pending = asyncio.ensure_future(broker.servicer.Produce(produce_request([b"a", b"b"]),
                                                                    None))
            await asyncio.sleep(0.05)
            assert not pending.done()  # the follower has not fetched it yet
            first = await broker.servicer.Fetch(fetch_request(0, replica_id=2), None)
            assert first.responses[0].partitions[0].records
            assert not pending.done()  # fetched, but not acknowledged by a later fetch offset
            await broker.servicer.Fetch(fetch_request(2, replica_id=2), None)
            return await pending, first
        finally:
            await broker.data.stop()

    answer, _first = run(scenario())
    part = answer.responses[0].partition_responses[0]
    assert part.error.code == common_pb2.NONE and part.base_offset == 0
    assert broker.partition.high_watermark == 2


def test_a_replica_fetch_without_the_registered_broker_epoch_acknowledges_nothing(
        tmp_path: pathlib.Path) -> None:
    """KIP-903, security off: a Fetch naming replica 2 with broker epoch -1 or a stale one
    (broker 2 registered with epoch 2) is refused whole, so it moves neither the follower's
    state nor the high watermark: a forged fetch cannot acknowledge an acks=all produce."""
    broker = Broker(tmp_path, isr=(1, 2), min_isr=2)

    def forged(offset: int, epoch: int) -> broker_pb2.FetchRequest:
        request = fetch_request(offset, replica_id=2)
        request.replica_epoch = epoch
        return request

    async def scenario() -> list[Any]:
        broker.data.start()
        try:
            pending = asyncio.ensure_future(broker.servicer.Produce(produce_request([b"a", b"b"]),
                                                                    None))
            await asyncio.sleep(0.05)
            answers = [await broker.servicer.Fetch(forged(offset, epoch), None)
                       for offset, epoch in ((0, -1), (2, -1), (2, 1), (2, 3))]
            await asyncio.sleep(0.05)
            assert not pending.done(), "a forged fetch acknowledged the produce"
            assert broker.partition.high_watermark == 0
            await broker.servicer.Fetch(fetch_request(2, replica_id=2), None)  # the real one
            produced = await pending
            assert produced.responses[0].partition_responses[0].error.code == common_pb2.NONE
            return answers
        finally:
            await broker.data.stop()

    answers = run(scenario())
    assert [a.error.code for a in answers] == [common_pb2.STALE_BROKER_EPOCH] * 4
    assert all(not a.responses for a in answers)
    unregistered = run(broker.servicer.Fetch(fetch_request(0, replica_id=9), None))
    assert unregistered.error.code == common_pb2.BROKER_ID_NOT_REGISTERED


def test_acks_all_is_refused_when_the_isr_is_below_min_insync_replicas(
        tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=2)
    answer = run(broker.servicer.Produce(produce_request([b"a"]), None))
    assert answer.responses[0].partition_responses[0].error.code == common_pb2.NOT_ENOUGH_REPLICAS


def test_consumer_fetch_long_polls_until_committed_data_arrives(tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=1)

    async def scenario() -> Any:
        broker.data.start()
        try:
            waiting = asyncio.ensure_future(
                broker.servicer.Fetch(fetch_request(0, max_wait_ms=5_000), None))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            await broker.servicer.Produce(produce_request([b"hello"], acks=1), None)
            return await waiting
        finally:
            await broker.data.stop()

    answer = run(scenario())
    data = answer.responses[0].partitions[0]
    assert data.error.code == common_pb2.NONE and data.high_watermark == 1 and data.records


def test_consumer_fetch_before_ready_answers_broker_not_available(tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    broker.ready = False
    answer = run(broker.servicer.Fetch(fetch_request(0), None))
    assert answer.error.code == common_pb2.BROKER_NOT_AVAILABLE and not answer.responses
    # Followers are still served.
    follower = run(broker.servicer.Fetch(fetch_request(0, replica_id=2), None))
    assert follower.error.code == common_pb2.NONE


def test_partition_led_elsewhere_answers_not_leader_with_the_leaders_endpoint(
        tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    broker.image = image_with(1)
    delta = dl.MetadataDelta(broker.image)
    other = Uuid(bytes(range(5, 21)))
    delta.replay(r.TopicRecord(name="other", topic_id=other), 10, 1)
    delta.replay(r.PartitionRecord(topic_id=other, partition_id=0, replicas=(2, 3), isr=(2, 3),
                                   leader=3, leader_epoch=4), 11, 1)
    broker.image = delta.apply()
    answer = run(broker.servicer.Produce(produce_request([b"x"], topic="other"), None))
    part = answer.responses[0].partition_responses[0]
    assert part.error.code == common_pb2.NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (3, 4)
    assert part.current_leader.endpoint.port == 9003
    unknown = run(broker.servicer.Produce(produce_request([b"x"], topic="nope"), None))
    assert unknown.responses[0].partition_responses[0].error.code == \
        common_pb2.UNKNOWN_TOPIC_OR_PARTITION


def test_list_offsets_metadata_log_dirs_and_epochs_describe_the_partition(tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    run(broker.servicer.Produce(produce_request([b"a", b"b", b"c"], acks=1), None))

    def offset(timestamp: int) -> int:
        answer = run(broker.servicer.ListOffsets(broker_pb2.ListOffsetsRequest(
            replica_id=-1, topics=[broker_pb2.ListOffsetsRequest.ListOffsetsTopic(
                name=TP.topic, partitions=[broker_pb2.ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=timestamp)])]), None))
        part = answer.topics[0].partitions[0]
        assert part.error.code == common_pb2.NONE, part
        return int(part.offset)

    assert (offset(server.EARLIEST_TIMESTAMP), offset(server.LATEST_TIMESTAMP)) == (0, 3)
    metadata = run(broker.servicer.Metadata(broker_pb2.MetadataRequest(), None))
    assert [b.node_id for b in metadata.brokers] == [1, 2, 3] and metadata.controller_id == 3
    [topic] = metadata.topics
    assert topic.name == TP.topic and list(topic.partitions[0].replica_nodes) == [1, 2]
    assert list(topic.partitions[0].eligible_leader_replicas) == []
    broker.image = image_with(1, replicas=(1, 2, 3), isr=(1,), elr=(2,), last_known_elr=(3,))
    [topic] = run(broker.servicer.Metadata(broker_pb2.MetadataRequest(), None)).topics
    elected = topic.partitions[0]
    assert (list(elected.isr_nodes), list(elected.eligible_leader_replicas),
            list(elected.last_known_elr)) == ([1], [2], [3])
    dirs = run(broker.servicer.DescribeLogDirs(broker_pb2.DescribeLogDirsRequest(), None))
    [replica] = dirs.results[0].topics[0].partitions
    assert (replica.log_end_offset, replica.high_watermark, replica.is_leader) == (3, 3, True)
    assert replica.replica_state == broker_pb2.REPLICA_STATE_ONLINE_REPLICA
    epochs = run(broker.servicer.OffsetForLeaderEpoch(broker_pb2.OffsetForLeaderEpochRequest(
        replica_id=2, topics=[broker_pb2.OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
            topic=TP.topic, partitions=[
                broker_pb2.OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                    partition=0, current_leader_epoch=0, leader_epoch=0)])]), None))
    found = epochs.topics[0].partitions[0]
    assert found.error.code == common_pb2.NONE
    assert (found.epoch_end_offset.epoch, found.epoch_end_offset.end_offset) == (0, 3)


@pytest.mark.parametrize("acks", [2, -2])
def test_bad_acks_answer_invalid_required_acks(tmp_path: pathlib.Path, acks: int) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    answer = run(broker.servicer.Produce(produce_request([b"a"], acks=acks), None))
    assert answer.responses[0].partition_responses[0].error.code == \
        common_pb2.INVALID_REQUIRED_ACKS


def leader_and_follower_of_two_partitions(tmp_path: pathlib.Path, tp1: TopicPartition
                                          ) -> tuple[Broker, rm.ReplicaManager]:
    """Broker 1 leads TP and ``tp1`` (replicas 1, 2; ISR both); broker 2's replica manager
    follows both (its fetchers are the test's)."""
    leader = Broker(tmp_path / "leader", isr=(1, 2), min_isr=1)
    second = open_partition(tmp_path / "leader" / tp1.dir_name, 1, index=1)
    leader.manager.add_partition(second)
    leader.manager.transition_replica(tp1, rm.ReplicaState.ONLINE_REPLICA)
    leader.manager.make_leader(tp1, leader_epoch=0, partition_epoch=0, replicas=(1, 2),
                               isr=(1, 2), now_ms=leader.data.now_ms())
    follower = rm.ReplicaManager(broker_id=2)
    for tp in (TP, tp1):
        replica = open_partition(tmp_path / "follower" / tp.dir_name, 2, index=tp.partition)
        follower.add_partition(replica)
        follower.transition_replica(tp, rm.ReplicaState.ONLINE_REPLICA)
        follower.make_follower(tp, leader_id=1, leader_epoch=0, partition_epoch=0,
                               replicas=(1, 2))
    return leader, follower


def test_replica_fetcher_replicates_over_grpc_and_takes_new_partitions_mid_poll(
        tmp_path: pathlib.Path) -> None:
    """A follower (broker 2) fetching from broker 1 over loopback gRPC; a partition added
    while its Fetch is parked at the leader joins the next Fetch (the parked one is cut)."""
    tp1 = TopicPartition(topic=TP.topic, partition=1)
    leader, follower = leader_and_follower_of_two_partitions(tmp_path, tp1)

    def target(tp: TopicPartition) -> rc.FetchTarget:
        return rc.FetchTarget(topic_partition=tp, topic_id=TOPIC_ID, leader_id=1, leader_epoch=0)

    async def scenario() -> tuple[int, int]:
        grpc_server = grpc.aio.server(options=transport.server_options())
        server.add_to_server(leader.servicer, grpc_server)
        port = grpc_server.add_insecure_port("127.0.0.1:0")
        await grpc_server.start()
        leader.data.start()
        follower_data = data_plane.DataPlane(follower)
        fetchers = fetcher_driver.ReplicaFetcherManager(
            broker_id=2, manager=follower, data=follower_data,
            endpoint=lambda _b: f"127.0.0.1:{port}", broker_epoch=lambda: 2,
            config=fetcher_driver.FetcherConfig(fetch_wait_max_ms=60_000, fetch_backoff_ms=50))
        try:
            await leader.servicer.Produce(produce_request([b"a", b"b"], acks=1), None)
            fetchers.apply(rc.ReconcileResult(start_fetching=[target(TP)]))
            while follower.partitions[TP].log_end_offset < 2:
                await asyncio.sleep(0.01)
            # The fetcher's next Fetch is now parked at the leader (nothing new for t-0).
            fetchers.apply(rc.ReconcileResult(start_fetching=[target(tp1)]))
            await leader.servicer.Produce(broker_pb2.ProduceRequest(
                acks=1, timeout_ms=1000, topic_data=[broker_pb2.ProduceRequest.TopicProduceData(
                    name=TP.topic, partition_data=[broker_pb2.ProduceRequest.PartitionProduceData(
                        index=1, records=batch(b"c"))])]), None)
            while follower.partitions[tp1].log_end_offset < 1:
                await asyncio.sleep(0.01)
            return follower.partitions[TP].log_end_offset, follower.partitions[tp1].log_end_offset
        finally:
            await fetchers.stop()
            await leader.data.stop()
            await grpc_server.stop(None)

    assert run(scenario()) == (2, 1)


def test_fetch_stream_answers_each_request_in_order_as_unary_fetch_does(
        tmp_path: pathlib.Path) -> None:
    """A follower's requests on one FetchStream: each answer is what Fetch answers; records
    answered on the stream are not replicated until a later request asks past them (the
    acks=all produce waits for it), and a request with nothing new parks until an append.
    Each request is timed as a unary Fetch is (the request metrics)."""
    broker = Broker(tmp_path, isr=(1, 2), min_isr=2)
    observed: list[tuple[str, bool]] = []
    broker.servicer = observed_servicer(broker, observed)

    async def scenario() -> tuple[Any, list[Any]]:
        broker.data.start()
        requests: asyncio.Queue[broker_pb2.FetchRequest | None] = asyncio.Queue()

        async def request_iterator() -> Any:
            while (request := await requests.get()) is not None:
                yield request

        answers = broker.servicer.FetchStream(request_iterator(), None).__aiter__()
        try:
            pending = asyncio.ensure_future(broker.servicer.Produce(produce_request([b"a", b"b"]),
                                                                    None))
            await asyncio.sleep(0.05)  # appended, waiting for the follower
            await requests.put(fetch_request(0, replica_id=2))
            first = await answers.__anext__()
            await asyncio.sleep(0.05)
            assert not pending.done()  # streamed to the follower, not yet acknowledged
            await requests.put(fetch_request(2, replica_id=2, max_wait_ms=5_000))
            parked = asyncio.ensure_future(answers.__anext__())
            produced = await pending  # the fetch offset 2 acknowledged it
            await asyncio.sleep(0.05)
            assert not parked.done()  # nothing past offset 2 yet: the request long-polls
            await broker.servicer.Produce(produce_request([b"c"], acks=1), None)
            second = await parked
            await requests.put(None)
            with pytest.raises(StopAsyncIteration):
                await answers.__anext__()
            return produced, [first, second]
        finally:
            await broker.data.stop()

    produced, (first, second) = run(scenario())
    assert produced.responses[0].partition_responses[0].error.code == common_pb2.NONE
    assert [r.value for b in rb.decode_batches(first.responses[0].partitions[0].records)
            for r in b.records] == [b"a", b"b"]
    part = second.responses[0].partitions[0]
    assert [r.value for b in rb.decode_batches(part.records) for r in b.records] == [b"c"]
    assert part.high_watermark == 2  # offset 2 is not on the follower yet
    assert broker.partition.high_watermark == 2
    assert observed == [("Fetch", True)] * 2


def observed_servicer(broker: Broker, observed: list[tuple[str, bool]]) -> server.BrokerServicer:
    return server.BrokerServicer(
        broker.data, broker_id=1, cluster_id="c", image=lambda: broker.image,
        controller_id=lambda: 3, listener_name="PLAINTEXT", log_dirs=[],
        observe_request=lambda method, _seconds, ok: observed.append((method, ok)))


def test_produce_stream_appends_in_order_and_answers_each_request_when_it_is_done(
        tmp_path: pathlib.Path) -> None:
    """Requests pipelined on one ProduceStream: appended in the order read; an acks=-1
    request waiting for the follower does not hold back the acks=1 answer behind it, and
    each answer carries its request's correlation id, and each is timed."""
    broker = Broker(tmp_path, isr=(1, 2), min_isr=2)
    observed: list[tuple[str, bool]] = []
    broker.servicer = observed_servicer(broker, observed)

    async def scenario() -> list[Any]:
        broker.data.start()
        requests: asyncio.Queue[broker_pb2.ProduceRequest | None] = asyncio.Queue()

        async def request_iterator() -> Any:
            while (request := await requests.get()) is not None:
                yield request

        answers = broker.servicer.ProduceStream(request_iterator(), None).__aiter__()
        try:
            waiting = produce_request([b"a", b"b"])
            waiting.correlation_id = 7
            quick = produce_request([b"c"], acks=1)
            quick.correlation_id = 8
            await requests.put(waiting)
            await requests.put(quick)
            first = await answers.__anext__()
            second = asyncio.ensure_future(answers.__anext__())
            await asyncio.sleep(0.05)
            assert not second.done()  # acks=-1: the follower has not fetched yet
            await broker.servicer.Fetch(fetch_request(0, replica_id=2), None)
            await broker.servicer.Fetch(fetch_request(3, replica_id=2), None)
            await requests.put(None)
            got = [first, await second]
            with pytest.raises(StopAsyncIteration):
                await answers.__anext__()
            return got
        finally:
            await broker.data.stop()

    first, second = run(scenario())
    assert (first.correlation_id, second.correlation_id) == (8, 7)
    assert first.responses[0].partition_responses[0].base_offset == 2
    assert second.responses[0].partition_responses[0].base_offset == 0
    assert second.responses[0].partition_responses[0].error.code == common_pb2.NONE
    assert observed == [("Produce", True)] * 2


def test_produce_stream_reads_no_more_than_its_window_while_answers_go_unwritten(
        tmp_path: pathlib.Path) -> None:
    """A client that reads no answers: the broker stops reading its requests once
    PRODUCE_STREAM_MAX_IN_FLIGHT are read and unanswered on the wire."""
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    window = server.PRODUCE_STREAM_MAX_IN_FLIGHT
    read = [0]

    async def request_iterator() -> Any:
        for index in range(window + 20):
            read[0] += 1
            request = produce_request([b"%d" % index], acks=1)
            request.correlation_id = index
            yield request

    async def scenario() -> tuple[int, int, int]:
        broker.data.start()
        answers = broker.servicer.ProduceStream(request_iterator(), None).__aiter__()
        try:
            first = await answers.__anext__()  # the stream is now paused writing it
            await asyncio.sleep(0.2)
            held = read[0]
            await answers.__anext__()
            await asyncio.sleep(0.1)
            return first.correlation_id, held, read[0]
        finally:
            await answers.aclose()
            await broker.data.stop()

    first, held, after_one_more = run(scenario())
    assert first == 0
    assert held == window
    assert after_one_more == window + 1


class CountingServicer(server.BrokerServicer):
    """Counts unary Fetches and FetchStream calls (and the requests on them)."""

    unary_fetches = 0
    streams = 0
    stream_requests = 0

    async def Fetch(self, request: broker_pb2.FetchRequest, context: Any) -> Any:
        self.unary_fetches += 1
        return await super().Fetch(request, context)

    async def FetchStream(self, request_iterator: Any, context: Any) -> Any:
        self.streams += 1

        async def counted() -> Any:
            async for request in request_iterator:
                self.stream_requests += 1
                yield request

        async for answer in super().FetchStream(counted(), context):
            yield answer


class ServicerWithoutFetchStream(CountingServicer):
    """A broker from before FetchStream: the generated servicer's UNIMPLEMENTED answer."""

    def FetchStream(self, request_iterator: Any, context: Any) -> Any:
        return broker_pb2_grpc.BrokerServiceServicer.FetchStream(self, request_iterator, context)


@pytest.mark.parametrize("servicer_class", [CountingServicer, ServicerWithoutFetchStream])
def test_replica_fetcher_fetches_on_one_stream_or_unary_from_an_older_leader(
        tmp_path: pathlib.Path, servicer_class: type[CountingServicer]) -> None:
    """Replication over loopback gRPC: every round of the fetcher is a request on one
    FetchStream; a leader answering FetchStream UNIMPLEMENTED gets unary Fetches instead."""
    leader = Broker(tmp_path / "leader", isr=(1, 2), min_isr=2)
    leader.servicer = servicer_class(
        leader.data, broker_id=1, cluster_id="c", image=lambda: leader.image,
        controller_id=lambda: 3, listener_name="PLAINTEXT", log_dirs=[str(tmp_path / "leader")])
    follower = rm.ReplicaManager(broker_id=2)
    follower.add_partition(open_partition(tmp_path / "follower" / TP.dir_name, 2))
    follower.transition_replica(TP, rm.ReplicaState.ONLINE_REPLICA)
    follower.make_follower(TP, leader_id=1, leader_epoch=0, partition_epoch=0, replicas=(1, 2))

    async def scenario() -> list[int]:
        grpc_server = grpc.aio.server(options=transport.server_options())
        server.add_to_server(leader.servicer, grpc_server)
        port = grpc_server.add_insecure_port("127.0.0.1:0")
        await grpc_server.start()
        leader.data.start()
        follower_data = data_plane.DataPlane(follower)
        fetchers = fetcher_driver.ReplicaFetcherManager(
            broker_id=2, manager=follower, data=follower_data,
            endpoint=lambda _b: f"127.0.0.1:{port}", broker_epoch=lambda: 2,
            config=fetcher_driver.FetcherConfig(fetch_wait_max_ms=60_000, fetch_backoff_ms=50))
        try:
            fetchers.apply(rc.ReconcileResult(start_fetching=[rc.FetchTarget(
                topic_partition=TP, topic_id=TOPIC_ID, leader_id=1, leader_epoch=0)]))
            offsets = []
            for value in (b"a", b"b", b"c"):
                # acks=all with min ISR 2: answered only once the follower's next request
                # reported the append.
                answer = await leader.servicer.Produce(produce_request([value]), None)
                offsets.append(answer.responses[0].partition_responses[0].base_offset)
            return offsets
        finally:
            await fetchers.stop()
            await leader.data.stop()
            await grpc_server.stop(None)

    assert run(scenario()) == [0, 1, 2]
    assert leader.partition.high_watermark == 3
    servicer = leader.servicer
    assert isinstance(servicer, CountingServicer)
    if servicer_class is CountingServicer:
        assert servicer.unary_fetches == 0 and servicer.streams == 1
        assert servicer.stream_requests >= 4  # a request per append and the one parked after
    else:
        assert servicer.unary_fetches >= 4 and servicer.stream_requests == 0


def test_clients_cannot_produce_to_an_internal_topic(tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    answer = run(broker.servicer.Produce(produce_request([b"x"], acks=1, topic="__consumer_offsets"),
                                         None))
    [part] = answer.responses[0].partition_responses
    assert part.error.code == common_pb2.INVALID_TOPIC_EXCEPTION
    assert "internal topic __consumer_offsets" in part.error.message


def test_fetch_answers_every_partition_grouped_by_topic_with_records_and_errors(
        tmp_path: pathlib.Path) -> None:
    # The response is built in place (no nested copies of the records): each topic once, with
    # its id, its partitions in order, records, errors, and a follower's diverging epoch.
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    run(broker.servicer.Produce(produce_request([b"a", b"b"], acks=1), None))
    request = broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
        broker_pb2.FetchRequest.FetchTopic(topic=TP.topic, topic_id=record_convert.uuid_to_proto(TOPIC_ID), partitions=[
            broker_pb2.FetchRequest.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                                   last_fetched_epoch=-1, log_start_offset=-1,
                                                   partition_max_bytes=1 << 20) for p in (0, 7, -1)]),
        broker_pb2.FetchRequest.FetchTopic(topic="other", partitions=[
            broker_pb2.FetchRequest.FetchPartition(partition=0, fetch_offset=0, current_leader_epoch=-1,
                                                   last_fetched_epoch=-1, partition_max_bytes=1 << 20)])])
    answer = run(broker.servicer.Fetch(request, None))
    topics = {t.topic: t for t in answer.responses}
    assert [t.topic for t in answer.responses] == [TP.topic, "other"]
    assert record_convert.uuid_from_proto(topics[TP.topic].topic_id) == TOPIC_ID
    parts = {p.partition_index: p for p in topics[TP.topic].partitions}
    assert sorted(parts) == [-1, 0, 7]
    assert parts[0].error.code == common_pb2.NONE and parts[0].high_watermark == 2
    assert parts[0].records == broker.partition.log.read(0, 1 << 20).records
    assert parts[7].error.code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION and not parts[7].records
    assert parts[-1].error.code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION and parts[-1].high_watermark == -1
    assert [p.error.code for p in topics["other"].partitions] == [common_pb2.UNKNOWN_TOPIC_OR_PARTITION]

    wrong_id = broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, topics=[
        broker_pb2.FetchRequest.FetchTopic(topic=TP.topic, topic_id=common_pb2.Uuid(
            most_significant_bits=1, least_significant_bits=2), partitions=[
            broker_pb2.FetchRequest.FetchPartition(partition=0, fetch_offset=0, current_leader_epoch=-1,
                                                   last_fetched_epoch=-1, partition_max_bytes=1 << 20)])])
    part = run(broker.servicer.Fetch(wrong_id, None)).responses[0].partitions[0]
    assert part.error.code == common_pb2.INCONSISTENT_TOPIC_ID and not part.records

    # A follower whose log of epoch 0 goes past ours is told where ours ends, without records.
    diverged = fetch_request(5, replica_id=2)
    part = run(broker.servicer.Fetch(diverged, None)).responses[0].partitions[0]
    assert part.error.code == common_pb2.NONE and not part.records
    assert part.HasField("diverging_epoch")
    assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (0, 2)


def test_the_alter_partition_sender_is_woken_only_when_a_proposal_waits(tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    wakeups: list[int] = []
    broker.data = data_plane.DataPlane(broker.manager, on_alter_partition=lambda: wakeups.append(1))
    broker.servicer.data = broker.data
    run(broker.servicer.Produce(produce_request([b"a"], acks=1), None))
    run(broker.servicer.Fetch(fetch_request(0), None))
    assert wakeups == []
    # Broker 2 fetches from the log end: it caught up, the leader proposes ISR (1, 2).
    run(broker.servicer.Fetch(fetch_request(1, replica_id=2), None))
    assert wakeups == [1]
    assert [r.new_isr for r in broker.manager.take_alter_partition_requests()] == [(1, 2)]
    run(broker.servicer.Fetch(fetch_request(1, replica_id=2), None))
    assert wakeups == [1]  # in flight: nothing new to send


def test_a_parked_follower_fetch_answers_on_append_and_its_next_fetch_acknowledges_at_once(
        tmp_path: pathlib.Path) -> None:
    # acks=all costs two follower round trips and nothing more: the leader answers a fetch
    # parked for a minute as soon as records arrive, and answers the produce as soon as the
    # follower's next fetch (itself parked, there being nothing new) moves the high watermark.
    broker = Broker(tmp_path, isr=(1, 2), min_isr=2)

    async def scenario() -> tuple[Any, Any]:
        broker.data.start()
        try:
            parked = asyncio.ensure_future(broker.servicer.Fetch(
                fetch_request(0, replica_id=2, max_wait_ms=60_000), None))
            await asyncio.sleep(0.05)
            assert not parked.done()
            produce = asyncio.ensure_future(broker.servicer.Produce(produce_request([b"a"]), None))
            fetched = await asyncio.wait_for(parked, 2.0)
            assert not produce.done()
            next_fetch = asyncio.ensure_future(broker.servicer.Fetch(
                fetch_request(1, replica_id=2, max_wait_ms=60_000), None))
            answer = await asyncio.wait_for(produce, 2.0)
            assert not next_fetch.done()  # parked again: nothing new to send
            next_fetch.cancel()
            return fetched, answer
        finally:
            await broker.data.stop()

    fetched, answer = run(scenario())
    assert fetched.responses[0].partitions[0].records
    part = answer.responses[0].partition_responses[0]
    assert part.error.code == common_pb2.NONE and part.base_offset == 0


def test_a_parked_request_wakes_the_poll_loop_only_if_its_deadline_comes_first(
        tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1, 2), min_isr=2)
    now = [broker.data.now_ms()]
    broker.data = data_plane.DataPlane(broker.manager, now_ms=lambda: now[0])
    broker.servicer.data = broker.data
    data = broker.data

    async def scenario() -> None:
        data.poll_at_ms = now[0] + 50  # the poll loop sleeps until then
        waiting = asyncio.ensure_future(broker.servicer.Fetch(fetch_request(0, max_wait_ms=5_000), None))
        await asyncio.sleep(0)
        assert broker.manager.waiting_fetches == 1
        assert not data._wakeup.is_set()  # its deadline is long after the next poll
        sooner = asyncio.ensure_future(broker.servicer.Fetch(fetch_request(0, max_wait_ms=10), None))
        await asyncio.sleep(0)
        assert data._wakeup.is_set()  # this one expires before the poll loop would look
        now[0] += 5_000
        data.start()
        answers = await asyncio.wait_for(asyncio.gather(waiting, sooner), WAIT_S)
        await data.stop()
        assert all(a.responses[0].partitions[0].error.code == common_pb2.NONE for a in answers)

    run(scenario())


def test_fetcher_id_is_kafkas_hash() -> None:
    # Java's String.hashCode: "hello" is 99162322; a non-BMP character counts as its two
    # UTF-16 units (0xD83D, 0xDE00); the definition, with 32-bit wrap-around, for long names.
    assert fetcher_driver._java_string_hash("hello") == 99162322
    assert fetcher_driver._java_string_hash("\N{GRINNING FACE}") == 31 * 0xD83D + 0xDE00
    name = "__consumer_offsets-and-a-long-topic-name"
    assert fetcher_driver._java_string_hash(name) == sum(
        ord(c) * 31 ** (len(name) - 1 - i) for i, c in enumerate(name)) % (1 << 32)
    # abs(31 * hash + partition) % n: "t" hashes to 116, 31 * 116 = 3596.
    assert [fetcher_driver.fetcher_id(TopicPartition(topic="t", partition=p), 3)
            for p in range(4)] == [3596 % 3, 3597 % 3, 3598 % 3, 3599 % 3]
    assert all(fetcher_driver.fetcher_id(TopicPartition(topic="t", partition=p), 1) == 0
               for p in range(4))
    # Utils.abs: a negative sum counts by its magnitude, MIN_VALUE as 0.
    negative = next(t for t in (f"topic-{i}" for i in range(1000))
                    if (31 * fetcher_driver._java_string_hash(t)) & 0x80000000)
    h = (31 * fetcher_driver._java_string_hash(negative)) & 0xFFFFFFFF
    assert fetcher_driver.fetcher_id(TopicPartition(topic=negative, partition=0), 7) == (
        ((1 << 32) - h) % 7)


def test_partitions_spread_over_num_replica_fetchers_and_follow_a_resize(
        tmp_path: pathlib.Path) -> None:
    """num.replica.fetchers = 2: t-0 and t-1 (fetcher ids 0 and 1) get a Fetch loop each to
    the same leader; resized to 1, both move to one fetcher and keep replicating; a
    bad count is refused."""
    tp1 = TopicPartition(topic=TP.topic, partition=1)
    leader, follower = leader_and_follower_of_two_partitions(tmp_path, tp1)

    def produce(partition: int, value: bytes) -> Any:
        return leader.servicer.Produce(broker_pb2.ProduceRequest(
            acks=1, timeout_ms=1000, topic_data=[broker_pb2.ProduceRequest.TopicProduceData(
                name=TP.topic, partition_data=[broker_pb2.ProduceRequest.PartitionProduceData(
                    index=partition, records=batch(value))])]), None)

    async def until(ends: tuple[int, int]) -> None:
        async with asyncio.timeout(10):
            while (follower.partitions[TP].log_end_offset,
                   follower.partitions[tp1].log_end_offset) != ends:
                await asyncio.sleep(0.01)

    async def scenario() -> list[Any]:
        grpc_server = grpc.aio.server(options=transport.server_options())
        server.add_to_server(leader.servicer, grpc_server)
        port = grpc_server.add_insecure_port("127.0.0.1:0")
        await grpc_server.start()
        leader.data.start()
        fetchers = fetcher_driver.ReplicaFetcherManager(
            broker_id=2, manager=follower, data=data_plane.DataPlane(follower),
            endpoint=lambda _b: f"127.0.0.1:{port}", broker_epoch=lambda: 2,
            config=fetcher_driver.FetcherConfig(fetch_wait_max_ms=60_000, fetch_backoff_ms=50,
                                                num_fetchers=2))
        seen = []
        try:
            fetchers.apply(rc.ReconcileResult(start_fetching=[
                rc.FetchTarget(topic_partition=tp, topic_id=TOPIC_ID, leader_id=1, leader_epoch=0)
                for tp in (TP, tp1)]))
            seen.append({key: sorted(f.states) for key, f in fetchers.fetchers.items()})
            await produce(0, b"a")
            await produce(1, b"b")
            await until((1, 1))
            fetchers.resize(1)
            seen.append({key: sorted(f.states) for key, f in fetchers.fetchers.items()})
            await produce(0, b"c")
            await produce(1, b"d")
            await until((2, 2))
            fetchers.resize(1)  # the same count: nothing moves
            seen.append(list(fetchers.fetchers))
            with pytest.raises(ValueError, match="at least 1"):
                fetchers.resize(0)
            return seen
        finally:
            await fetchers.stop()
            await leader.data.stop()
            await grpc_server.stop(None)

    assert run(scenario()) == [{(1, 0): [TP], (1, 1): [tp1]}, {(1, 0): [TP, tp1]}, [(1, 0)]]


def test_the_publisher_takes_num_replica_fetchers_from_dynamic_configs() -> None:
    """The broker's own resource wins over the cluster default, which wins over the config
    file; a value that is not an integer >= 1 is skipped with a warning."""
    from kraftlog.server import broker_server as process

    class Fetchers:
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def resize(self, count: int) -> None:
            self.sizes.append(count)

    class Reconciler:
        broker_id = 7

    def image(configs: dict[str, dict[str, str]]) -> im.MetadataImage:
        return im.MetadataImage(configs=im.ConfigsImage(resources={
            im.ConfigResource(resource_type=r.ConfigResourceType.BROKER, resource_name=name):
                values for name, values in configs.items()}))

    fetchers = Fetchers()
    publisher = process._Publisher(Reconciler(), fetchers, None, on_image=lambda: None,  # type: ignore[arg-type]
                                   tracer=None, static_num_fetchers=3)  # type: ignore[arg-type]
    key = process.NUM_REPLICA_FETCHERS
    publisher.apply_num_fetchers(image({}))
    publisher.apply_num_fetchers(image({"": {key: "2"}}))
    publisher.apply_num_fetchers(image({"": {key: "2"}, "7": {key: "4"}}))
    publisher.apply_num_fetchers(image({"": {key: "2"}, "8": {key: "4"}}))
    publisher.apply_num_fetchers(image({"": {key: "5"}, "7": {key: "zero"}}))
    publisher.apply_num_fetchers(image({"7": {key: "0"}}))
    assert fetchers.sizes == [3, 2, 4, 2, 5, 3]


def test_a_poisoned_produce_is_refused_with_record_errors_and_the_partition_stays_readable(
        tmp_path: pathlib.Path) -> None:
    """A batch of CRC-valid garbage records, and one with an lz4 flag over bytes that are
    not lz4. Both are refused with nothing appended; consumers read on past them."""
    broker = Broker(tmp_path, isr=(1,), min_isr=1)
    good = batch(b"a", b"b")
    garbage = bytearray(good)
    garbage[bh.RECORDS_OFFSET:] = bytes(range(1, 1 + len(good) - bh.RECORDS_OFFSET))
    not_lz4 = bytearray(good)
    not_lz4[bh.ATTRIBUTES_OFFSET + 1] |= int(rb.CompressionType.LZ4)

    def request(records: bytes) -> broker_pb2.ProduceRequest:
        return broker_pb2.ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[
            broker_pb2.ProduceRequest.TopicProduceData(name=TP.topic, partition_data=[
                broker_pb2.ProduceRequest.PartitionProduceData(index=0, records=records)])])

    def resealed(damaged: bytearray) -> bytes:
        damaged[bh.CRC_OFFSET:bh.CRC_OFFSET + 4] = crc32c.crc32c(
            bytes(damaged[bh.ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
        return bytes(damaged)

    async def scenario() -> tuple[Any, Any, Any, Any]:
        broker.data.start()
        try:
            first = await broker.servicer.Produce(request(resealed(garbage)), None)
            second = await broker.servicer.Produce(request(resealed(not_lz4)), None)
            third = await broker.servicer.Produce(request(good), None)
            fetched = await broker.servicer.Fetch(fetch_request(0), None)
            return first, second, third, fetched
        finally:
            await broker.data.stop()

    first, second, third, fetched = run(scenario())
    refused = first.responses[0].partition_responses[0]
    assert refused.error.code == common_pb2.INVALID_RECORD and refused.base_offset == -1
    assert refused.record_errors and refused.record_errors[0].batch_index == 0
    assert refused.record_errors[0].batch_index_error_message
    assert second.responses[0].partition_responses[0].error.code == common_pb2.CORRUPT_MESSAGE
    accepted = third.responses[0].partition_responses[0]
    assert accepted.error.code == common_pb2.NONE and accepted.base_offset == 0
    records = fetched.responses[0].partitions[0].records
    assert [r.value for b in rb.decode_batches(records) for r in b.records] == [b"a", b"b"]


def test_hostile_requests_get_error_codes_and_leave_the_partition_alone(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    """Every unary BrokerService RPC with random edge-value requests (names and ids the
    broker knows mixed in): each answers a response, never an exception; error messages
    name no server path; the partition's ISR and leader epoch stay, and its log grows only by
    the produces that were answered NONE."""
    broker = Broker(tmp_path, isr=(1, 2), min_isr=1)
    rng = random.Random(11)
    service = broker_pb2.DESCRIPTOR.services_by_name["BrokerService"]
    before = (broker.partition.isr, broker.partition.leader_epoch)
    start_offset = broker.partition.log_end_offset

    async def scenario() -> int:
        appended = 0
        broker.data.start()
        try:
            for method in service.methods:
                if method.client_streaming or method.server_streaming:
                    continue  # FetchStream: each request is answered by Fetch's code
                request_cls = getattr(broker_pb2, method.input_type.name)
                for _ in range(60):
                    request = proto_fuzz.hostile(request_cls, rng, strings=(TP.topic,),
                                                 ints=(0, 1, 2, 3))
                    try:
                        answer = await getattr(broker.servicer, method.name)(
                            request, proto_fuzz.FakeContext(2.0))
                    except proto_fuzz.Aborted as exc:  # only what a handler may abort with
                        assert exc.code in (grpc.StatusCode.UNIMPLEMENTED,), exc
                        continue
                    for message in proto_fuzz.error_messages(answer):
                        assert str(tmp_path) not in message, message  # (log_dir fields may)
                    if method.name == "Produce" and request.acks != 0:
                        for topic in answer.responses:
                            for part in topic.partition_responses:
                                if part.error.code == common_pb2.NONE:
                                    appended = max(appended, part.base_offset + 1)
        finally:
            await broker.data.stop()
        return appended

    run(scenario())
    assert (broker.partition.isr, broker.partition.leader_epoch) == before
    assert broker.partition.log_end_offset >= start_offset
    assert not [r.getMessage() for r in caplog.records
                if r.levelno >= logging.ERROR and r.name.startswith("kraftlog")]


def test_an_out_of_range_fetch_names_no_server_directory(tmp_path: pathlib.Path) -> None:
    broker = Broker(tmp_path, isr=(1,), min_isr=1)

    async def scenario() -> Any:
        broker.data.start()
        try:
            return await broker.servicer.Fetch(fetch_request(5, replica_id=-1), None)
        finally:
            await broker.data.stop()

    part = run(scenario()).responses[0].partitions[0]
    assert part.error.code == common_pb2.OFFSET_OUT_OF_RANGE
    assert "offset 5" in part.error.message and str(tmp_path) not in part.error.message
