"""The group coordinator on one broker, in process: BrokerService handlers -> driver -> log.

Real partition logs in tmp dirs, a real ReplicaManager, reconciler and DataPlane on
an asyncio loop; metadata built by replaying records (as the loader does); the
driver's task is not started, so each sync / load / expiry is a step of the script.
Wall time: about a second.
"""

from __future__ import annotations

import asyncio
import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import pytest

from kraftlog import config as kconfig
from kraftlog.broker import data_plane, server
from kraftlog.broker import group_coordinator as gc
from kraftlog.broker import group_coordinator_driver as gcd
from kraftlog.broker import group_offsets as go
from kraftlog.broker import partition as partition_mod
from kraftlog.broker import reconciler as rc
from kraftlog.broker import replica_manager as rm
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import ConfigError
from kraftlog.ids import TopicPartition, Uuid
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r
from kraftlog.storage import record_batch as rb
from kraftlog.storage.compression import CompressionType
from kraftlog.v1 import broker_pb2, common_pb2, controller_pb2
from tests.broker.harness import Metadata, open_partition

BROKER = 1
OFFSETS_ID = Uuid(bytes(range(1, 17)))
EVENTS_ID = Uuid(bytes(range(2, 18)))
PARTITIONS = 3
RETENTION_MS = 60_000
T0 = 1_700_000_000_000


class Store:
    def __init__(self, root: pathlib.Path, offsets_config: partition_mod.PartitionConfig | None
                 ) -> None:
        self.root = root
        self.offsets_config = offsets_config

    def open_partition(self, info: im.PartitionInfo) -> partition_mod.Partition:
        tp = TopicPartition(topic=info.topic_name, partition=info.partition_id)
        config = (self.offsets_config if info.topic_name == go.GROUP_METADATA_TOPIC_NAME
                  else None)
        opened = open_partition(self.root / tp.dir_name, BROKER, topic=info.topic_name,
                                index=info.partition_id, config=config)
        opened.topic_id = info.topic_id
        return opened

    def delete_partition(self, partition: partition_mod.Partition) -> None:
        partition.log.close()
        shutil.rmtree(partition.log.directory)


def broker_record(broker_id: int, port: int) -> r.RegisterBrokerRecord:
    return r.RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=Uuid(bytes([broker_id] * 16)), broker_epoch=10,
        fenced=False, endpoints=(r.Endpoint(listener_name="PLAINTEXT", host="127.0.0.1",
                                            port=port),))


class Node:
    """One broker: reconciler, replica manager, data plane, coordinator driver, servicer."""

    def __init__(self, root: pathlib.Path, *, with_offsets_topic: bool = True,
                 retention_check_interval_ms: int = 600_000,
                 codec: CompressionType = CompressionType.NONE,
                 offsets_max_message_bytes: int | None = None) -> None:
        self.clock_ms = T0
        self.metadata = Metadata()
        self.manager = rm.ReplicaManager(broker_id=BROKER)
        store = Store(root, None if offsets_max_message_bytes is None else
                      partition_mod.PartitionConfig(max_message_bytes=offsets_max_message_bytes))
        self.reconciler = rc.Reconciler(broker_id=BROKER, manager=self.manager, store=store)
        self.data = data_plane.DataPlane(self.manager)  # wall clock: acks=all timeouts expire
        self.created: list[controller_pb2.CreateTopicsRequest] = []
        self.driver = gcd.GroupCoordinatorDriver(
            broker_id=BROKER, data=self.data, image=lambda: self.metadata.image,
            listener_name="PLAINTEXT", now_ms=lambda: self.clock_ms, create_topics=self._create,
            config=gc.GroupCoordinatorConfig(offsets_topic_num_partitions=PARTITIONS,
                                             offsets_retention_ms=RETENTION_MS,
                                             offsets_commit_timeout_ms=300,
                                             offset_metadata_max_bytes=16,
                                             offsets_load_buffer_size=200,
                                             offsets_retention_check_interval_ms=(
                                                 retention_check_interval_ms),
                                             offsets_topic_compression_codec=codec))
        self.servicer = server.BrokerServicer(
            self.data, broker_id=BROKER, cluster_id="c", image=lambda: self.metadata.image,
            controller_id=lambda: 100, listener_name="PLAINTEXT", groups=self.driver)
        records: list[r.MetadataRecord] = [
            broker_record(1, 9091), broker_record(2, 9092),
            r.TopicRecord(name="events", topic_id=EVENTS_ID),
            *[r.PartitionRecord(topic_id=EVENTS_ID, partition_id=p, replicas=(1,), isr=(1,),
                                leader=1) for p in range(2)]]
        if with_offsets_topic:
            records += [r.TopicRecord(name=go.GROUP_METADATA_TOPIC_NAME, topic_id=OFFSETS_ID)]
            # Partition 2 waits for a follower that never fetches (acks=all times out).
            records += [r.PartitionRecord(topic_id=OFFSETS_ID, partition_id=p, replicas=(1, 2),
                                          isr=(1, 2) if p == 2 else (1,), leader=1)
                        for p in range(PARTITIONS)]
        self.apply(*records)

    async def _create(self, request: controller_pb2.CreateTopicsRequest, deadline_s: float) -> Any:
        self.created.append(request)
        return controller_pb2.CreateTopicsResponse(topics=[
            controller_pb2.CreateTopicsResponse.CreatableTopicResult(name=request.topics[0].name)])

    def apply(self, *records: r.MetadataRecord) -> None:
        self.reconciler.apply_delta(*self.metadata.commit(*records), now_ms=self.clock_ms)
        self.data.dispatch()

    async def loaded(self) -> None:
        """Sync, then let the loads run until no partition is loading."""
        self.driver.sync()
        for _ in range(200):
            if all(o.state is gc.LoadState.ACTIVE for o in self.driver.state.owned().values()):
                return
            await asyncio.sleep(0.005)
        raise AssertionError("loads did not finish")

    def group_on(self, partition: int, prefix: str = "g") -> str:
        return next(g for g in (f"{prefix}{i}" for i in range(10_000))
                    if go.partition_for(g, PARTITIONS) == partition)

    async def commit(self, group: str, *parts: tuple[str, int, int, str],
                     generation: int | None = None) -> broker_pb2.OffsetCommitResponse:
        request = broker_pb2.OffsetCommitRequest(group_id=group, topics=[
            broker_pb2.OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                broker_pb2.OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                    committed_metadata=m)]) for topic, p, o, m in parts])
        if generation is not None:
            request.generation_id_or_member_epoch = generation
        answer: broker_pb2.OffsetCommitResponse = await self.servicer.OffsetCommit(request, None)
        return answer

    async def fetch(self, group: str, *tps: tuple[str, int]) -> broker_pb2.OffsetFetchResponse:
        request = broker_pb2.OffsetFetchRequest(group_id=group, topics=[
            common_pb2.TopicPartitions(topic=t, partitions=[p]) for t, p in tps])
        answer: broker_pb2.OffsetFetchResponse = await self.servicer.OffsetFetch(request, None)
        return answer


def offsets(answer: broker_pb2.OffsetFetchResponse) -> dict[tuple[str, int], tuple[int, str]]:
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata)
            for t in answer.topics for p in t.partitions}


def codes(answer: broker_pb2.OffsetCommitResponse) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): ErrorCode(p.error.code)
            for t in answer.topics for p in t.partitions}


def run(body: Callable[[], Any]) -> None:
    asyncio.run(asyncio.wait_for(body(), timeout=20))


def test_commit_fetch_and_bad_input(tmp_path: pathlib.Path) -> None:
    async def body() -> None:
        node = Node(tmp_path)
        node.data.start()
        try:
            await node.loaded()
            assert sorted(node.driver.state.owned()) == [0, 1, 2]
            group = node.group_on(0)
            answer = await node.commit(group, ("events", 0, 42, "meta"), ("events", 1, 7, ""))
            assert ErrorCode(answer.error.code) is ErrorCode.NONE
            assert set(codes(answer).values()) == {ErrorCode.NONE}
            assert offsets(await node.fetch(group, ("events", 0), ("events", 1))) == {
                ("events", 0): (42, "meta"), ("events", 1): (7, "")}
            # Every partition of the group (empty request), and -1 for none committed.
            every = await node.servicer.OffsetFetch(broker_pb2.OffsetFetchRequest(group_id=group),
                                                    None)
            assert offsets(every) == {("events", 0): (42, "meta"), ("events", 1): (7, "")}
            whole = await node.servicer.OffsetFetch(broker_pb2.OffsetFetchRequest(
                group_id=group, topics=[common_pb2.TopicPartitions(topic="events"),
                                        common_pb2.TopicPartitions(topic="x", partitions=[0]),
                                        common_pb2.TopicPartitions(topic="bad/", partitions=[0])]),
                None)
            assert offsets(whole) == {("events", 0): (42, "meta"), ("events", 1): (7, ""),
                                      ("x", 0): (-1, ""), ("bad/", 0): (-1, "")}
            assert [ErrorCode(p.error.code) for t in whole.topics for p in t.partitions
                    if t.name == "bad/"] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            other = node.group_on(0, prefix="other")
            assert offsets(await node.fetch(other, ("events", 0))) == {("events", 0): (-1, "")}
            # The record in __consumer_offsets-0 is Kafka's key/value.
            log = node.manager.get_partition(TopicPartition(
                topic=go.GROUP_METADATA_TOPIC_NAME, partition=0))
            assert log is not None
            records = [rec for b in rb.decode_batches(log.log.read(0, 1 << 20).records)
                       for rec in b.records]
            assert go.decode_key(records[0].key or b"") == go.OffsetKey(
                group=group, topic="events", partition=0)
            assert go.decode_offset_value(records[0].value or b"").offset == 42

            # Bad input: each with its Kafka error.
            empty = await node.commit("", ("events", 0, 1, ""))
            assert ErrorCode(empty.error.code) is ErrorCode.INVALID_GROUP_ID
            assert set(codes(empty).values()) == {ErrorCode.INVALID_GROUP_ID}
            generation = await node.commit(group, ("events", 0, 1, ""), generation=3)
            assert ErrorCode(generation.error.code) is ErrorCode.ILLEGAL_GENERATION
            simple = await node.commit(group, ("events", 0, 43, ""), generation=-1)
            assert ErrorCode(simple.error.code) is ErrorCode.NONE
            mixed = await node.commit(group, ("events", 0, 44, ""), ("events", 5, 1, ""),
                                      ("nope", 0, 1, ""), ("events", 1, 9, "x" * 17))
            assert codes(mixed) == {("events", 0): ErrorCode.NONE,
                                    ("events", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    ("events", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE}
            assert offsets(await node.fetch(group, ("events", 0), ("events", 1))) == {
                ("events", 0): (44, ""), ("events", 1): (7, "")}
            fetch_empty = await node.servicer.OffsetFetch(
                broker_pb2.OffsetFetchRequest(group_id=""), None)
            assert ErrorCode(fetch_empty.error.code) is ErrorCode.INVALID_GROUP_ID

            # acks=all: a follower in the ISR that never fetches -> REQUEST_TIMED_OUT, and
            # the cache is not updated.
            slow = node.group_on(2)
            timed_out = await node.commit(slow, ("events", 0, 5, ""))
            assert codes(timed_out) == {("events", 0): ErrorCode.REQUEST_TIMED_OUT}
            assert offsets(await node.fetch(slow, ("events", 0))) == {("events", 0): (-1, "")}
        finally:
            await node.data.stop()
            await node.driver.stop()

    run(body)


def test_emigration_answers_not_coordinator_and_immigration_reloads_the_log(
        tmp_path: pathlib.Path) -> None:
    async def body() -> None:
        node = Node(tmp_path)
        node.data.start()
        try:
            await node.loaded()
            group = node.group_on(1)
            for offset in range(1, 30):  # several batches, loaded in 200-byte steps
                answer = await node.commit(group, ("events", 0, offset, f"m{offset}"))
                assert set(codes(answer).values()) == {ErrorCode.NONE}
            await node.commit(group, ("events", 1, 3, ""))
            # Emigration: broker 2 leads __consumer_offsets-1 now.
            node.apply(r.PartitionChangeRecord(topic_id=OFFSETS_ID, partition_id=1, leader=2,
                                               isr=(2,)))
            node.driver.sync()
            assert 1 not in node.driver.state.owned()
            moved = await node.fetch(group, ("events", 0))
            assert ErrorCode(moved.error.code) is ErrorCode.NOT_COORDINATOR
            assert moved.coordinator.leader_id == 2 and moved.coordinator.endpoint.port == 9092
            commit = await node.commit(group, ("events", 0, 99, ""))
            assert ErrorCode(commit.error.code) is ErrorCode.NOT_COORDINATOR
            # Immigration: leader again (new epoch): COORDINATOR_LOAD_IN_PROGRESS until the log
            # is replayed, then the same offsets, from the log.
            node.apply(r.PartitionChangeRecord(topic_id=OFFSETS_ID, partition_id=1, leader=1,
                                               isr=(1,)))
            node.driver.sync()
            loading = await node.fetch(group, ("events", 0))
            assert ErrorCode(loading.error.code) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            await node.loaded()
            assert offsets(await node.fetch(group, ("events", 0), ("events", 1))) == {
                ("events", 0): (29, "m29"), ("events", 1): (3, "")}
        finally:
            await node.data.stop()
            await node.driver.stop()

    run(body)


def test_compressed_commits_load_and_oversized_ones_are_invalid_commit_offset_size(
        tmp_path: pathlib.Path) -> None:
    async def body() -> None:
        small = Node(tmp_path / "small", offsets_max_message_bytes=180)
        small.data.start()
        try:
            await small.loaded()
            group = small.group_on(0)
            answer = await small.commit(group, ("events", 0, 5, "a"))
            assert codes(answer) == {("events", 0): ErrorCode.NONE}
            too_big = await small.commit(group, ("events", 0, 6, "x" * 16),
                                         ("events", 1, 6, "y" * 16))
            assert set(codes(too_big).values()) == {ErrorCode.INVALID_COMMIT_OFFSET_SIZE}
            assert offsets(await small.fetch(group, ("events", 0))) == {("events", 0): (5, "a")}
        finally:
            await small.data.stop()
            await small.driver.stop()
        node = Node(tmp_path / "gzip", codec=CompressionType.GZIP)
        node.data.start()
        try:
            await node.loaded()
            answer = await node.commit(group, ("events", 0, 5, "a"))
            assert codes(answer) == {("events", 0): ErrorCode.NONE}
            log = node.manager.get_partition(TopicPartition(
                topic=go.GROUP_METADATA_TOPIC_NAME, partition=0))
            assert log is not None
            batches = rb.decode_batches(log.log.read(0, 1 << 20).records)
            assert [b.compression for b in batches] == [CompressionType.GZIP]
            node.apply(r.PartitionChangeRecord(topic_id=OFFSETS_ID, partition_id=0, leader=2,
                                               isr=(2,)))
            node.driver.sync()
            node.apply(r.PartitionChangeRecord(topic_id=OFFSETS_ID, partition_id=0, leader=1,
                                               isr=(1,)))
            await node.loaded()
            assert offsets(await node.fetch(group, ("events", 0))) == {("events", 0): (5, "a")}
        finally:
            await node.data.stop()
            await node.driver.stop()

    run(body)


def test_expired_offsets_get_tombstones_that_survive_a_reload(tmp_path: pathlib.Path) -> None:
    async def body() -> None:
        node = Node(tmp_path)
        node.data.start()
        try:
            await node.loaded()
            group = node.group_on(0)
            await node.commit(group, ("events", 0, 10, ""))
            node.clock_ms += RETENTION_MS // 2
            await node.commit(group, ("events", 1, 20, ""))
            node.clock_ms += RETENTION_MS // 2  # events-0 is exactly retention old
            assert await node.driver.expire_offsets() == 1
            assert offsets(await node.fetch(group, ("events", 0), ("events", 1))) == {
                ("events", 0): (-1, ""), ("events", 1): (20, "")}
            assert await node.driver.expire_offsets() == 0
            # Reload from the log: the tombstone keeps events-0 deleted.
            node.apply(r.PartitionChangeRecord(topic_id=OFFSETS_ID, partition_id=0, leader=2,
                                               isr=(2,)))
            node.driver.sync()
            node.apply(r.PartitionChangeRecord(topic_id=OFFSETS_ID, partition_id=0, leader=1,
                                               isr=(1,)))
            await node.loaded()
            assert offsets(await node.fetch(group, ("events", 0), ("events", 1))) == {
                ("events", 0): (-1, ""), ("events", 1): (20, "")}
        finally:
            await node.data.stop()
            await node.driver.stop()

    run(body)


def test_the_driver_task_loads_on_its_own_and_expires_periodically(
        tmp_path: pathlib.Path) -> None:
    async def body() -> None:
        node = Node(tmp_path, retention_check_interval_ms=50)
        node.data.start()
        node.driver.start()
        try:
            group = node.group_on(1)
            for _ in range(200):  # the task syncs by itself: loads every led partition
                answer = await node.commit(group, ("events", 0, 3, ""))
                if ErrorCode(answer.error.code) is ErrorCode.NONE:
                    break
                assert ErrorCode(answer.error.code) in (ErrorCode.NOT_COORDINATOR,
                                                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
                await asyncio.sleep(0.01)
            assert offsets(await node.fetch(group, ("events", 0))) == {("events", 0): (3, "")}
            node.clock_ms += RETENTION_MS
            for _ in range(200):
                if offsets(await node.fetch(group, ("events", 0))) == {("events", 0): (-1, "")}:
                    break
                await asyncio.sleep(0.01)
            assert offsets(await node.fetch(group, ("events", 0))) == {("events", 0): (-1, "")}
            # Emigration by metadata alone: the publisher wakes the task.
            node.apply(r.PartitionChangeRecord(topic_id=OFFSETS_ID, partition_id=1, leader=2,
                                               isr=(2,)))
            node.driver.on_metadata_update(dl.MetadataDelta(node.metadata.image),
                                           node.metadata.image)
            for _ in range(100):
                if 1 not in node.driver.state.owned():
                    break
                await asyncio.sleep(0.01)
            assert 1 not in node.driver.state.owned()
        finally:
            await node.driver.stop()
            await node.data.stop()

    run(body)


def test_find_coordinator_creates_the_compacted_topic_then_names_the_leader(
        tmp_path: pathlib.Path) -> None:
    async def body() -> None:
        node = Node(tmp_path / "a", with_offsets_topic=False)
        request = broker_pb2.FindCoordinatorRequest(
            key_type=broker_pb2.COORDINATOR_KEY_TYPE_GROUP, coordinator_keys=["g", ""])
        answer = await node.servicer.FindCoordinator(request, None)
        assert [ErrorCode(c.error.code) for c in answer.coordinators] == [
            ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.INVALID_REQUEST]
        for _ in range(100):
            if node.created:
                break
            await asyncio.sleep(0.01)
        (created,) = node.created
        topic = created.topics[0]
        assert topic.name == "__consumer_offsets" and topic.num_partitions == PARTITIONS
        assert topic.replication_factor == 2  # 3 wanted, 2 live brokers (with a warning)
        assert {c.name: c.value for c in topic.configs} == {
            "cleanup.policy": "compact", "compression.type": "producer",
            "segment.bytes": str(go.DEFAULT_OFFSETS_TOPIC_SEGMENT_BYTES)}

        node = Node(tmp_path / "b")
        answer = await node.servicer.FindCoordinator(request, None)
        first = answer.coordinators[0]
        assert (ErrorCode(first.error.code), first.key, first.node_id, first.host, first.port) == (
            ErrorCode.NONE, "g", 1, "127.0.0.1", 9091)
        txn = await node.servicer.FindCoordinator(broker_pb2.FindCoordinatorRequest(
            key_type=broker_pb2.COORDINATOR_KEY_TYPE_TRANSACTION, coordinator_keys=["t"]), None)
        assert ErrorCode(txn.coordinators[0].error.code) is ErrorCode.INVALID_REQUEST
        await node.driver.stop()

    run(body)


def test_broker_settings_have_kafka_names_and_defaults() -> None:
    definition = kconfig.ConfigDef(list(gcd.CONFIG_KEYS))
    defaults = gcd.config_from(definition.parse({}))
    assert defaults == gc.GroupCoordinatorConfig()
    assert (defaults.offsets_topic_num_partitions, defaults.offsets_topic_replication_factor,
            defaults.offsets_retention_ms, defaults.offsets_commit_timeout_ms,
            defaults.offset_metadata_max_bytes, defaults.offsets_load_buffer_size) == (
        50, 3, 10080 * 60_000, 5000, 4096, 5 * 1024 * 1024)
    tuned = gcd.config_from(definition.parse({"offsets.retention.minutes": "2",
                                              "offsets.topic.compression.codec": "4"}))
    assert tuned.offsets_retention_ms == 120_000
    assert tuned.offsets_topic_compression_codec is CompressionType.ZSTD
    for bad in ({"offsets.topic.compression.codec": "2"}, {"offsets.topic.compression.codec": "9"},
                {"offsets.topic.num.partitions": "0"}, {"offsets.commit.timeout.ms": "x"}):
        with pytest.raises(ConfigError):
            gcd.config_from(definition.parse(bad))
