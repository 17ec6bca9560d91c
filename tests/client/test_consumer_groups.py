"""The consumer's committed offsets (group.id) against an in-process fake coordinator.

One fake broker on a real gRPC server: Metadata (topic ``t``, 2 partitions),
ListOffsets (earliest 0, latest 100), an empty Fetch, FindCoordinator (itself),
OffsetCommit / OffsetFetch over a dict, with group-wide and per-partition errors
scripted, and every call counted. Checks the retries on coordinator errors (bounded
by the call's timeout), the per-partition errors that are final, and where a
partition without a position starts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from kraftlog import client
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import ConfigError
from kraftlog.v1 import broker_pb2, broker_pb2_grpc, common_pb2

TP0 = client.TopicPartition(topic="t", partition=0)
TP1 = client.TopicPartition(topic="t", partition=1)


def _error(code: ErrorCode, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=int(code), message=message)  # type: ignore[arg-type]


class FakeCoordinator(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.port = 0
        self.committed: dict[tuple[str, str, int], tuple[int, str, int]] = {}
        self.find_errors: list[ErrorCode] = []
        self.group_errors: list[ErrorCode] = []
        self.partition_errors: list[ErrorCode] = []
        self.calls: dict[str, int] = {}
        self.commit_requests: list[broker_pb2.OffsetCommitRequest] = []

    def _count(self, name: str) -> None:
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1

    def Metadata(self, request: Any, context: Any) -> Any:
        return broker_pb2.MetadataResponse(cluster_id="fake", controller_id=1, brokers=[
            broker_pb2.MetadataResponse.MetadataResponseBroker(
                node_id=1, endpoint=common_pb2.Endpoint(host="127.0.0.1", port=self.port))],
            topics=[broker_pb2.MetadataResponse.MetadataResponseTopic(name="t", partitions=[
                broker_pb2.MetadataResponse.MetadataResponsePartition(
                    partition_index=p, leader_id=1, leader_epoch=0, replica_nodes=[1],
                    isr_nodes=[1]) for p in range(2)])])

    def ListOffsets(self, request: Any, context: Any) -> Any:
        self._count("ListOffsets")
        return broker_pb2.ListOffsetsResponse(topics=[
            broker_pb2.ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=[
                broker_pb2.ListOffsetsResponse.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index, error=_error(ErrorCode.NONE),
                    offset=0 if p.timestamp == -2 else 100, timestamp=-1, leader_epoch=0)
                for p in t.partitions]) for t in request.topics])

    def Fetch(self, request: Any, context: Any) -> Any:
        time.sleep(min(0.05, request.max_wait_ms / 1000))
        return broker_pb2.FetchResponse(responses=[
            broker_pb2.FetchResponse.FetchableTopicResponse(topic=t.topic, partitions=[
                broker_pb2.FetchResponse.PartitionData(partition_index=p.partition,
                                                       error=_error(ErrorCode.NONE),
                                                       high_watermark=100)
                for p in t.partitions]) for t in request.topics])

    def FindCoordinator(self, request: Any, context: Any) -> Any:
        self._count("FindCoordinator")
        with self.lock:
            error = self.find_errors.pop(0) if self.find_errors else ErrorCode.NONE
        return broker_pb2.FindCoordinatorResponse(coordinators=[
            broker_pb2.FindCoordinatorResponse.Coordinator(
                key=key, node_id=1 if error is ErrorCode.NONE else -1, host="127.0.0.1",
                port=self.port if error is ErrorCode.NONE else -1, error=_error(error))
            for key in request.coordinator_keys])

    def OffsetCommit(self, request: Any, context: Any) -> Any:
        self._count("OffsetCommit")
        with self.lock:
            self.commit_requests.append(request)
            group_error = self.group_errors.pop(0) if self.group_errors else ErrorCode.NONE
            part_error = (self.partition_errors.pop(0)
                          if self.partition_errors and group_error is ErrorCode.NONE
                          else ErrorCode.NONE)
        answer = broker_pb2.OffsetCommitResponse(error=_error(group_error, "scripted"))
        for topic in request.topics:
            parts = []
            for part in topic.partitions:
                code = group_error if group_error is not ErrorCode.NONE else part_error
                if code is ErrorCode.NONE:
                    with self.lock:
                        self.committed[(request.group_id, topic.name, part.partition_index)] = (
                            part.committed_offset, part.committed_metadata,
                            part.committed_leader_epoch)
                parts.append(broker_pb2.OffsetCommitResponse.OffsetCommitResponsePartition(
                    partition_index=part.partition_index, error=_error(code, "scripted")))
            answer.topics.append(broker_pb2.OffsetCommitResponse.OffsetCommitResponseTopic(
                name=topic.name, partitions=parts))
        return answer

    def OffsetFetch(self, request: Any, context: Any) -> Any:
        self._count("OffsetFetch")
        with self.lock:
            group_error = self.group_errors.pop(0) if self.group_errors else ErrorCode.NONE
        answer = broker_pb2.OffsetFetchResponse(error=_error(group_error, "scripted"))
        if group_error is not ErrorCode.NONE:
            return answer
        for topic in request.topics:
            parts = []
            for index in topic.partitions:
                offset, metadata, epoch = self.committed.get(
                    (request.group_id, topic.topic, index), (-1, "", -1))
                parts.append(broker_pb2.OffsetFetchResponse.OffsetFetchResponsePartition(
                    partition_index=index, committed_offset=offset, metadata=metadata,
                    committed_leader_epoch=epoch, error=_error(ErrorCode.NONE)))
            answer.topics.append(broker_pb2.OffsetFetchResponse.OffsetFetchResponseTopic(
                name=topic.topic, partitions=parts))
        return answer


@pytest.fixture
def fake() -> Iterator[FakeCoordinator]:
    broker = FakeCoordinator()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    broker_pb2_grpc.add_BrokerServiceServicer_to_server(broker, server)
    broker.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield broker
    finally:
        server.stop(grace=None)


def consumer(fake: FakeCoordinator, **overrides: Any) -> client.Consumer:
    settings: dict[str, Any] = {"bootstrap_servers": (f"127.0.0.1:{fake.port}",),
                                "group_id": "g", "enable_auto_commit": False,
                                "retry_backoff_ms": 10, "default_api_timeout_ms": 3000}
    settings.update(overrides)
    made = client.Consumer(client.ConsumerConfig(**settings))
    made.assign([TP0, TP1])
    return made


def test_commit_and_committed_round_trip_through_the_found_coordinator(
        fake: FakeCoordinator) -> None:
    with consumer(fake) as c:
        c.commit({TP0: 5, TP1: client.OffsetAndMetadata(offset=9, metadata="m", leader_epoch=2)})
        assert c.committed([TP0, TP1]) == {
            TP0: client.OffsetAndMetadata(offset=5),
            TP1: client.OffsetAndMetadata(offset=9, metadata="m", leader_epoch=2)}
        request = fake.commit_requests[0]
        assert request.group_id == "g" and request.generation_id_or_member_epoch == -1
    assert fake.calls["FindCoordinator"] == 1  # cached between calls


def test_coordinator_errors_look_the_coordinator_up_again_and_retry(
        fake: FakeCoordinator) -> None:
    fake.find_errors = [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    fake.group_errors = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                         ErrorCode.COORDINATOR_NOT_AVAILABLE]
    fake.partition_errors = [ErrorCode.REQUEST_TIMED_OUT]
    with consumer(fake) as c:
        c.commit({TP0: 3})
    assert fake.committed[("g", "t", 0)][0] == 3
    assert fake.calls["OffsetCommit"] == 5
    assert fake.calls["FindCoordinator"] == 6  # the first (refused), then after each retry


def test_retries_are_bounded_by_the_timeout(fake: FakeCoordinator) -> None:
    fake.group_errors = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 10_000
    with consumer(fake) as c:
        started = time.monotonic()
        with pytest.raises(client.ClientTimeoutError, match="COORDINATOR_LOAD_IN_PROGRESS"):
            c.commit({TP0: 3}, timeout_ms=300)
        assert time.monotonic() - started < 2
        with pytest.raises(client.ClientTimeoutError):
            c.committed([TP0], timeout_ms=200)


@pytest.mark.parametrize("code", [ErrorCode.OFFSET_METADATA_TOO_LARGE,
                                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  ErrorCode.INVALID_COMMIT_OFFSET_SIZE])
def test_refused_partitions_raise_at_once(fake: FakeCoordinator, code: ErrorCode) -> None:
    fake.partition_errors = [code]
    with consumer(fake) as c, pytest.raises(client.KafkaApiError, match=code.name) as raised:
        c.commit({TP0: 3})
    assert raised.value.code is code
    assert fake.calls["OffsetCommit"] == 1


def test_group_errors_other_than_coordinator_moves_raise(fake: FakeCoordinator) -> None:
    fake.group_errors = [ErrorCode.ILLEGAL_GENERATION]
    with consumer(fake) as c, pytest.raises(client.KafkaApiError, match="ILLEGAL_GENERATION"):
        c.commit({TP0: 3})


def test_a_partition_without_a_position_starts_at_the_committed_offset(
        fake: FakeCoordinator) -> None:
    fake.committed[("g", "t", 0)] = (42, "", -1)
    with consumer(fake, auto_offset_reset=client.OffsetReset.EARLIEST) as c:
        assert c.position(TP0) == 42  # committed
        assert c.position(TP1) == 0   # nothing committed: auto.offset.reset
        c.seek_to_end([TP0])          # an explicit seek wins over the committed offset
        assert c.position(TP0) == 100
        c.commit()                    # the current positions
    assert fake.committed[("g", "t", 0)][0] == 100 and fake.committed[("g", "t", 1)][0] == 0
    with consumer(fake, group_id=None, auto_offset_reset="earliest") as c:
        assert c.position(TP0) == 0  # no group: committed offsets play no part


def test_auto_commit_from_poll_and_at_close(fake: FakeCoordinator) -> None:
    c = consumer(fake, enable_auto_commit=True, auto_commit_interval_ms=0)
    try:
        c.seek(TP0, 7)
        c.seek(TP1, 8)
        c.poll(timeout_ms=0)
        assert fake.committed[("g", "t", 0)][0] == 7
        c.seek(TP0, 11)
    finally:
        c.close()
    assert fake.committed[("g", "t", 0)][0] == 11
    quiet = consumer(fake, enable_auto_commit=True, auto_commit_interval_ms=60_000)
    quiet.seek(TP0, 20)
    quiet.poll(timeout_ms=0)
    assert fake.committed[("g", "t", 0)][0] == 11  # not yet: the interval has not passed
    quiet.close()
    assert fake.committed[("g", "t", 0)][0] == 20


def test_group_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"group\.id"):
        client.ConsumerConfig(bootstrap_servers=("h:1",), group_id="")
    parsed = client.ConsumerConfig.from_properties({
        "bootstrap.servers": "h:1", "group.id": "g", "enable.auto.commit": "false",
        "auto.commit.interval.ms": "250"})
    assert (parsed.group_id, parsed.enable_auto_commit, parsed.auto_commit_interval_ms) == (
        "g", False, 250)
    with pytest.raises(ValueError, match="non-negative"):
        client.OffsetAndMetadata(offset=-1)


def test_commit_without_a_group_id_is_refused(fake: FakeCoordinator) -> None:
    with consumer(fake, group_id=None) as c:
        with pytest.raises(client.ClientError, match=r"no group\.id"):
            c.commit({TP0: 1})
        with pytest.raises(client.ClientError, match=r"no group\.id"):
            c.committed([TP0])
