"""The Kafka protocol's request handlers (Kafka's KafkaApis): Kafka messages in, the data plane, Kafka messages out.

Owns :class:`KafkaApis`, which answers each request the Kafka listener
(:mod:`kraftlog.broker.kafka_server`) decoded, at the version it came in, through the same
objects the gRPC BrokerService uses (one data plane, two front doors): Produce and Fetch go
to :class:`~kraftlog.broker.data_plane.DataPlane` (the ReplicaManager's partitions, their
validation, purgatories and replication), FindCoordinator / OffsetCommit / OffsetFetch to
the group coordinator driver, InitProducerId to the producer id allocator, Metadata and
ListOffsets read the metadata image and the partitions.

What differs from the gRPC front door, as Kafka's broker does it:

* Metadata lists every unfenced broker's endpoint on *this* listener (the name the request
  came in on) and names this broker as the controller: admin requests sent to it are
  forwarded to the active controller (KIP-590). Unknown topics are not created
  (UNKNOWN_TOPIC_OR_PARTITION; ``auto.create.topics.enable`` is not served).
* Produce with acks=0 gets no answer at all; if a partition failed, the connection is
  closed instead so the producer refreshes its metadata (:data:`CLOSE_CONNECTION`).
* Fetch sessions (KIP-227) for consumers are refused the way Kafka refuses them when its
  session cache is full: a full fetch is answered with session id 0 (the client keeps
  sending full fetches), an incremental one with FETCH_SESSION_ID_NOT_FOUND. Fetches from
  replicas (replica id >= 0) are refused: replication runs over gRPC.
* CreateTopics and DeleteTopics are forwarded to the active controller (KIP-590), which
  validates and decides; Metadata names this broker as the controller, so admin clients
  send them here.
* Transactions are not served: InitProducerId with a transactional id and FindCoordinator
  for a TRANSACTION key answer INVALID_REQUEST, and ApiVersions lists no transaction API.

Ordering: a handler's work up to its first ``await`` runs in request order (the listener
starts one task per request, in order), and Produce appends before it awaits, so one
connection's produce requests append in the order they were sent.

Callers: :mod:`kraftlog.broker.kafka_server`. Edge module (it awaits the data plane); no
replication rule lives here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from kraftlog.broker import group_coordinator as gc
from kraftlog.broker import group_offsets as go
from kraftlog.broker import kafka_admin_convert, purgatory
from kraftlog.broker import partition as partition_mod
from kraftlog.broker import replica_manager as rm
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import ZERO_UUID, TopicPartition, Uuid
from kraftlog.metadata import image as im
from kraftlog.protocol import api_keys
from kraftlog.protocol.generated import (
    api_versions,
    create_topics,
    delete_topics,
    fetch,
    find_coordinator,
    init_producer_id,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    produce,
)

if TYPE_CHECKING:
    from kraftlog.broker import data_plane
    from kraftlog.broker import group_coordinator_driver as gcd

logger = logging.getLogger(__name__)

CLOSE_CONNECTION: Final = object()
"""A handler's answer meaning: send nothing and close the connection (acks=0 failures)."""
NO_RESPONSE: Final = object()
"""A handler's answer meaning: send nothing (acks=0)."""
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
INIT_PRODUCER_ID_MAX_WAIT_S = 5.0
DEFAULT_FETCH_MAX_BYTES = 50 * 1024 * 1024
COORDINATOR_KEY_TYPE_GROUP = 0
FORWARD_MIN_WAIT_S = 5.0
"""A forwarded admin request waits at least this long for the controller (its timeout_ms
is how long the controller may take; 0 asks it not to wait at all)."""
INTERNAL_TOPICS = frozenset({go.GROUP_METADATA_TOPIC_NAME})


def _tp(topic: str | None, partition: int) -> TopicPartition | None:
    if topic is None:
        return None
    try:
        return TopicPartition(topic=topic, partition=partition)
    except ValueError:
        return None


class KafkaApis:
    """Answers decoded Kafka requests. See the module docstring."""

    def __init__(self, data: data_plane.DataPlane, *, broker_id: int, cluster_id: str,
                 image: Callable[[], im.MetadataImage],
                 ready: Callable[[], bool] = lambda: True,
                 producer_ids: Callable[[float], Awaitable[tuple[ErrorCode, int, str]]] | None = None,
                 groups: gcd.GroupCoordinatorDriver | None = None,
                 controller: Callable[[str, Any, float], Awaitable[Any]] | None = None,
                 monotonic_s: Callable[[], float]) -> None:
        self.data = data
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self._image = image
        self._ready = ready
        self._producer_ids = producer_ids
        self.groups = groups
        self._monotonic_s = monotonic_s
        # (ControllerService method, its protobuf request, deadline as monotonic_s()) -> the
        # active controller's answer; raises TimeoutError when none answered (KIP-590).
        self._controller = controller
        self._handlers: dict[int, Callable[[str, int, Any], Awaitable[object]]] = {
            api_keys.ApiKey.API_VERSIONS: self.handle_api_versions,
            api_keys.ApiKey.METADATA: self.handle_metadata,
            api_keys.ApiKey.PRODUCE: self.handle_produce,
            api_keys.ApiKey.FETCH: self.handle_fetch,
            api_keys.ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            api_keys.ApiKey.FIND_COORDINATOR: self.handle_find_coordinator,
            api_keys.ApiKey.OFFSET_COMMIT: self.handle_offset_commit,
            api_keys.ApiKey.OFFSET_FETCH: self.handle_offset_fetch,
            api_keys.ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            api_keys.ApiKey.CREATE_TOPICS: self.handle_create_topics,
            api_keys.ApiKey.DELETE_TOPICS: self.handle_delete_topics,
        }
        missing = set(api_keys.SERVED) - set(self._handlers)
        assert not missing, f"served APIs without a handler: {missing}"

    async def handle(self, listener: str, api_key: int, version: int, request: Any) -> object:
        """The response message, :data:`NO_RESPONSE` or :data:`CLOSE_CONNECTION`."""
        return await self._handlers[api_key](listener, version, request)

    # -- helpers --------------------------------------------------------------------------------

    def _endpoint(self, image: im.MetadataImage, listener: str, broker_id: int
                  ) -> tuple[str, int, str | None] | None:
        broker = image.cluster.broker(broker_id)
        endpoint = broker.endpoint(listener) if broker is not None else None
        if broker is None or endpoint is None:
            return None
        return endpoint.host, endpoint.port, broker.rack or None

    def _leader(self, image: im.MetadataImage, tp: TopicPartition) -> tuple[int, int]:
        topic = image.topics.get_topic_by_name(tp.topic)
        registration = topic.partition(tp.partition) if topic is not None else None
        if registration is None:
            return -1, -1
        return registration.leader, registration.leader_epoch

    def _refine(self, image: im.MetadataImage, tp: TopicPartition, error: ErrorCode
                ) -> tuple[ErrorCode, tuple[int, int] | None]:
        """A partition the image knows but this broker does not host is
        NOT_LEADER_OR_FOLLOWER; with that error and FENCED_LEADER_EPOCH comes the leader
        (KIP-951)."""
        if error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            topic = image.topics.get_topic_by_name(tp.topic)
            if topic is not None and topic.partition(tp.partition) is not None:
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
            return error, self._leader(image, tp)
        return error, None

    # -- ApiVersions ----------------------------------------------------------------------------

    async def handle_api_versions(self, listener: str, version: int,
                                  request: api_versions.ApiVersionsRequest
                                  ) -> api_versions.ApiVersionsResponse:
        return api_versions_response(ErrorCode.NONE)

    # -- Metadata -------------------------------------------------------------------------------

    async def handle_metadata(self, listener: str, version: int,
                              request: metadata.MetadataRequest) -> metadata.MetadataResponse:
        image = self._image()
        response = metadata.MetadataResponse(cluster_id=self.cluster_id,
                                             controller_id=self.broker_id)
        for broker_id in image.cluster.unfenced_broker_ids():
            endpoint = self._endpoint(image, listener, broker_id)
            if endpoint is not None:
                host, port, rack = endpoint
                response.brokers.append(metadata.MetadataResponseBroker(
                    node_id=broker_id, host=host, port=port, rack=rack))
        wanted = request.topics
        every = wanted is None or (version == 0 and not wanted)
        if every:
            topics: list[tuple[str | None, Uuid]] = [
                (name, ZERO_UUID) for name in sorted(image.topics.ids_by_name)]
        else:
            assert wanted is not None
            topics = [(t.name, t.topic_id) for t in wanted]
        for name, topic_id in topics:
            topic = (image.topics.get_topic_by_name(name) if name is not None
                     else image.topics.get_topic(topic_id))
            if topic is None:
                response.topics.append(metadata.MetadataResponseTopic(
                    error_code=(ErrorCode.UNKNOWN_TOPIC_ID if name is None
                                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    name=name, topic_id=topic_id))
                continue
            entry = metadata.MetadataResponseTopic(
                error_code=ErrorCode.NONE, name=topic.name, topic_id=topic.topic_id,
                is_internal=topic.name in INTERNAL_TOPICS)
            for index, registration in sorted(topic.partitions.items()):
                entry.partitions.append(metadata.MetadataResponsePartition(
                    error_code=(ErrorCode.NONE if registration.has_leader
                                else ErrorCode.LEADER_NOT_AVAILABLE),
                    partition_index=index, leader_id=registration.leader,
                    leader_epoch=registration.leader_epoch,
                    replica_nodes=list(registration.replicas), isr_nodes=list(registration.isr),
                    offline_replicas=[r for r in registration.replicas
                                      if not image.cluster.is_active(r)]))
            response.topics.append(entry)
        return response

    # -- Produce --------------------------------------------------------------------------------

    async def handle_produce(self, listener: str, version: int,
                             request: produce.ProduceRequest) -> object:
        entries: dict[TopicPartition, bytes] = {}
        refused: dict[tuple[str, int], tuple[ErrorCode, str]] = {}
        acks = request.acks
        for topic in request.topic_data:
            for data in topic.partition_data:
                key = (topic.name, data.index)
                tp = _tp(topic.name, data.index)
                if acks not in (-1, 0, 1):
                    refused[key] = (ErrorCode.INVALID_REQUIRED_ACKS, f"acks {acks} is not -1, 0 or 1")
                elif tp is None:
                    refused[key] = (ErrorCode.INVALID_TOPIC_EXCEPTION, "invalid topic or partition")
                elif tp in entries or key in refused:
                    refused[key] = (ErrorCode.INVALID_REQUEST, "partition given twice")
                    entries.pop(tp, None)
                elif topic.name in INTERNAL_TOPICS:
                    refused[key] = (ErrorCode.INVALID_TOPIC_EXCEPTION,
                                    f"cannot append to internal topic {topic.name}")
                elif data.records is None:
                    refused[key] = (ErrorCode.CORRUPT_MESSAGE, "no records")
                else:
                    entries[tp] = data.records
        if request.transactional_id is not None:
            # Transactional batches need the transaction coordinator, which is not served.
            for tp in entries:
                refused[(tp.topic, tp.partition)] = (
                    ErrorCode.INVALID_REQUEST, "transactions are not supported")
            entries = {}
        results = (await self.data.produce(entries, acks=acks, timeout_ms=max(0, request.timeout_ms))
                   if entries else {})
        if acks == 0:
            failed = refused or any(r.error is not ErrorCode.NONE for r in results.values())
            return CLOSE_CONNECTION if failed else NO_RESPONSE
        image = self._image()
        response = produce.ProduceResponse()
        by_topic: dict[str, produce.TopicProduceResponse] = {}
        leaders: set[int] = set()

        def partitions_of(name: str) -> list[produce.PartitionProduceResponse]:
            entry = by_topic.get(name)
            if entry is None:
                entry = by_topic[name] = produce.TopicProduceResponse(name=name)
                response.responses.append(entry)
            return entry.partition_responses

        for tp, result in results.items():
            error, leader = self._refine(image, tp, result.error)
            answer = produce.PartitionProduceResponse(
                index=tp.partition, error_code=error, base_offset=result.base_offset,
                log_append_time_ms=result.log_append_time_ms,
                log_start_offset=result.log_start_offset,
                error_message=result.error_message or None,
                record_errors=[produce.BatchIndexAndErrorMessage(
                    batch_index=e.batch_index, batch_index_error_message=e.message or None)
                    for e in result.record_errors])
            if leader is not None:
                answer.current_leader = produce.LeaderIdAndEpoch(leader_id=leader[0],
                                                                 leader_epoch=leader[1])
                if leader[0] >= 0:
                    leaders.add(leader[0])
            partitions_of(tp.topic).append(answer)
        for (name, index), (code, message) in refused.items():
            partitions_of(name).append(produce.PartitionProduceResponse(
                index=index, error_code=code, base_offset=-1, error_message=message))
        for leader_id in sorted(leaders):
            endpoint = self._endpoint(image, listener, leader_id)
            if endpoint is not None:
                response.node_endpoints.append(produce.NodeEndpoint(
                    node_id=leader_id, host=endpoint[0], port=endpoint[1], rack=endpoint[2]))
        return response

    # -- Fetch ----------------------------------------------------------------------------------

    async def handle_fetch(self, listener: str, version: int,
                           request: fetch.FetchRequest) -> fetch.FetchResponse:
        image = self._image()
        replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
        if request.session_epoch > 0:
            # Kafka's answer to an incremental fetch for a session it does not hold.
            return fetch.FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                                       session_id=0)
        by_id = version >= 13
        refused: dict[tuple[str, Uuid, int], ErrorCode] = {}
        partitions: dict[TopicPartition, purgatory.FetchPartitionRequest] = {}
        topic_keys: dict[str, Uuid] = {}
        max_bytes = request.max_bytes if request.max_bytes > 0 else DEFAULT_FETCH_MAX_BYTES
        serving = replica_id < 0 and self._ready()
        for topic in request.topics:
            if by_id:
                found = image.topics.get_topic(topic.topic_id)
                name: str | None = found.name if found is not None else None
            else:
                name = topic.topic
            for part in topic.partitions:
                tp = _tp(name, part.partition)
                if tp is None:
                    refused[(name or "", topic.topic_id, part.partition)] = (
                        ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    continue
                if replica_id >= 0:
                    refused[(tp.topic, topic.topic_id, tp.partition)] = ErrorCode.INVALID_REQUEST
                    continue
                if not serving:
                    # Not registered, caught up and unfenced yet: clients go elsewhere.
                    refused[(tp.topic, topic.topic_id, tp.partition)] = (
                        ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    continue
                topic_keys[tp.topic] = topic.topic_id
                partitions[tp] = purgatory.FetchPartitionRequest(
                    fetch_offset=part.fetch_offset,
                    partition_max_bytes=(part.partition_max_bytes if part.partition_max_bytes > 0
                                         else max_bytes),
                    current_leader_epoch=part.current_leader_epoch,
                    last_fetched_epoch=part.last_fetched_epoch,
                    log_start_offset=-1)
        params = purgatory.FetchParams(
            replica_id=-1, max_wait_ms=max(0, request.max_wait_ms),
            min_bytes=max(0, request.min_bytes), max_bytes=max_bytes,
            isolation=partition_mod.FetchIsolation.HIGH_WATERMARK)
        results: dict[TopicPartition, rm.FetchPartitionResponse] = (
            await self.data.fetch(params, partitions) if partitions else {})
        if results:
            image = self._image()
        response = fetch.FetchResponse(error_code=ErrorCode.NONE, session_id=0)
        by_topic: dict[tuple[str, Uuid], fetch.FetchableTopicResponse] = {}
        leaders: set[int] = set()
        read_committed = request.isolation_level == 1

        def partitions_of(name: str, topic_id: Uuid) -> list[fetch.PartitionData]:
            if by_id and topic_id == ZERO_UUID:
                found = image.topics.get_topic_by_name(name)
                topic_id = found.topic_id if found is not None else ZERO_UUID
            entry = by_topic.get((name, topic_id))
            if entry is None:
                entry = by_topic[(name, topic_id)] = fetch.FetchableTopicResponse(
                    topic=name, topic_id=topic_id)
                response.responses.append(entry)
            return entry.partitions

        for tp, result in results.items():
            error, leader = self._refine(image, tp, result.error)
            data = fetch.PartitionData(
                partition_index=tp.partition, error_code=error,
                high_watermark=result.high_watermark,
                last_stable_offset=result.last_stable_offset,
                log_start_offset=result.log_start_offset,
                aborted_transactions=[] if read_committed else None,
                records=result.records)
            if result.diverging_epoch is not None:
                data.diverging_epoch = fetch.EpochEndOffset(
                    epoch=result.diverging_epoch.epoch, end_offset=result.diverging_epoch.end_offset)
            if leader is not None:
                data.current_leader = fetch.LeaderIdAndEpoch(leader_id=leader[0],
                                                             leader_epoch=leader[1])
                if leader[0] >= 0:
                    leaders.add(leader[0])
            partitions_of(tp.topic, topic_keys.get(tp.topic, ZERO_UUID)).append(data)
        for (name, topic_id, index), code in refused.items():
            data = fetch.PartitionData(partition_index=index, error_code=code, high_watermark=-1,
                                       records=b"")
            tp = _tp(name, index)
            if code is ErrorCode.NOT_LEADER_OR_FOLLOWER and tp is not None:
                leader_id, leader_epoch = self._leader(image, tp)
                data.current_leader = fetch.LeaderIdAndEpoch(leader_id=leader_id,
                                                             leader_epoch=leader_epoch)
                if leader_id >= 0:
                    leaders.add(leader_id)
            partitions_of(name, topic_id).append(data)
        for leader_id in sorted(leaders):
            endpoint = self._endpoint(image, listener, leader_id)
            if endpoint is not None:
                response.node_endpoints.append(fetch.NodeEndpoint(
                    node_id=leader_id, host=endpoint[0], port=endpoint[1], rack=endpoint[2]))
        return response

    # -- ListOffsets ----------------------------------------------------------------------------

    def _list_offset(self, image: im.MetadataImage, tp: TopicPartition,
                     part: list_offsets.ListOffsetsPartition
                     ) -> list_offsets.ListOffsetsPartitionResponse:
        answer = list_offsets.ListOffsetsPartitionResponse(partition_index=tp.partition)
        partition = self.data.manager.get_partition(tp)
        if partition is None:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif not partition.is_leader:
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        else:
            error = partition.check_current_leader_epoch(part.current_leader_epoch)
        if partition is None or error is not ErrorCode.NONE:
            answer.error_code, _ = self._refine(image, tp, error)
            return answer
        timestamp = part.timestamp
        if timestamp == LATEST_TIMESTAMP:
            # No transactions: the last stable offset is the high watermark.
            answer.offset = partition.high_watermark
            answer.leader_epoch = partition.leader_epoch
        elif timestamp == EARLIEST_TIMESTAMP:
            answer.offset = partition.log_start_offset
            answer.leader_epoch = partition.leader_epoch
        elif timestamp >= 0:
            found = partition.log.offset_for_timestamp(timestamp)
            if found is not None and found.offset < partition.high_watermark:
                answer.offset = found.offset
                answer.timestamp = found.timestamp
                answer.leader_epoch = partition.leader_epoch
        else:
            answer.error_code = ErrorCode.INVALID_REQUEST
        return answer

    async def handle_list_offsets(self, listener: str, version: int,
                                  request: list_offsets.ListOffsetsRequest
                                  ) -> list_offsets.ListOffsetsResponse:
        image = self._image()
        response = list_offsets.ListOffsetsResponse()
        for topic in request.topics:
            entry = list_offsets.ListOffsetsTopicResponse(name=topic.name)
            seen: set[int] = set()
            for part in topic.partitions:
                tp = _tp(topic.name, part.partition_index)
                if tp is None or part.partition_index in seen:
                    # Kafka: a partition given twice answers INVALID_REQUEST.
                    entry.partitions.append(list_offsets.ListOffsetsPartitionResponse(
                        partition_index=part.partition_index,
                        error_code=(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp is None
                                    else ErrorCode.INVALID_REQUEST)))
                    continue
                seen.add(part.partition_index)
                entry.partitions.append(self._list_offset(image, tp, part))
            response.topics.append(entry)
        return response

    # -- FindCoordinator ------------------------------------------------------------------------

    async def handle_find_coordinator(self, listener: str, version: int,
                                      request: find_coordinator.FindCoordinatorRequest
                                      ) -> find_coordinator.FindCoordinatorResponse:
        keys = list(request.coordinator_keys) if version >= 4 else [request.key]
        answers: list[find_coordinator.Coordinator] = []
        if request.key_type != COORDINATOR_KEY_TYPE_GROUP or self.groups is None:
            message = (f"coordinator key type {request.key_type} is not supported (only GROUP: "
                       "no transactions)" if request.key_type != COORDINATOR_KEY_TYPE_GROUP
                       else f"broker {self.broker_id} runs no group coordinator")
            code = (ErrorCode.INVALID_REQUEST if request.key_type != COORDINATOR_KEY_TYPE_GROUP
                    else ErrorCode.COORDINATOR_NOT_AVAILABLE)
            answers = [find_coordinator.Coordinator(key=key, node_id=-1, host="", port=-1,
                                                    error_code=code, error_message=message)
                       for key in keys]
        else:
            image = self._image()
            for found in self.groups.find_coordinator(keys):
                code, message = found.error, found.message
                host, port = "", -1
                if code is ErrorCode.NONE:
                    endpoint = self._endpoint(image, listener, found.node_id)
                    if endpoint is None:
                        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                        message = f"broker {found.node_id} has no {listener} listener"
                    else:
                        host, port = endpoint[0], endpoint[1]
                answers.append(find_coordinator.Coordinator(
                    key=found.key, node_id=found.node_id if code is ErrorCode.NONE else -1,
                    host=host, port=port, error_code=code, error_message=message or None))
        if version >= 4:
            return find_coordinator.FindCoordinatorResponse(coordinators=answers)
        only = answers[0]
        return find_coordinator.FindCoordinatorResponse(
            error_code=only.error_code, error_message=only.error_message, node_id=only.node_id,
            host=only.host, port=only.port)

    # -- OffsetCommit ---------------------------------------------------------------------------

    async def handle_offset_commit(self, listener: str, version: int,
                                   request: offset_commit.OffsetCommitRequest
                                   ) -> offset_commit.OffsetCommitResponse:
        entries = [gc.CommitEntry(topic=topic.name, partition=part.partition_index,
                                  offset=part.committed_offset,
                                  leader_epoch=part.committed_leader_epoch,
                                  metadata=part.committed_metadata or "")
                   for topic in request.topics for part in topic.partitions]
        group_error: ErrorCode | None = None
        partitions: dict[tuple[str, int], tuple[ErrorCode, str]] = {}
        if self.groups is None:
            group_error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            outcome = await self.groups.commit_offsets(
                request.group_id, entries, generation_id=request.generation_id_or_member_epoch,
                member_id=request.member_id)
            if outcome.error is not ErrorCode.NONE:
                group_error = outcome.error
            partitions = outcome.partitions
        response = offset_commit.OffsetCommitResponse()
        by_topic: dict[str, offset_commit.OffsetCommitResponseTopic] = {}
        for entry in entries:
            topic = by_topic.get(entry.topic)
            if topic is None:
                topic = by_topic[entry.topic] = offset_commit.OffsetCommitResponseTopic(
                    name=entry.topic)
                response.topics.append(topic)
            if any(p.partition_index == entry.partition for p in topic.partitions):
                continue
            code = group_error if group_error is not None else partitions.get(
                (entry.topic, entry.partition), (ErrorCode.UNKNOWN_SERVER_ERROR, ""))[0]
            topic.partitions.append(offset_commit.OffsetCommitResponsePartition(
                partition_index=entry.partition, error_code=code))
        return response

    # -- OffsetFetch ----------------------------------------------------------------------------

    def _fetch_group(self, group_id: str, topics: list[tuple[str, list[int]]] | None
                     ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, int, int, str, ErrorCode]]]]]:
        """(group error, [(topic, [(partition, offset, leader epoch, metadata, error)])])."""
        if self.groups is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        wanted: list[TopicPartition] = []
        invalid: list[tuple[str, int]] = []
        for name, indexes in topics or []:
            for index in indexes:
                tp = _tp(name, index)
                if tp is None:
                    invalid.append((name, index))
                else:
                    wanted.append(tp)
        answer = self.groups.fetch_offsets(group_id, None if topics is None else wanted)
        if answer.error is not ErrorCode.NONE:
            return answer.error, []
        found = answer.offsets if topics is None else {tp: answer.offsets.get(tp) for tp in wanted}
        by_topic: dict[str, list[tuple[int, int, int, str, ErrorCode]]] = {}
        for tp, value in found.items():
            by_topic.setdefault(tp.topic, []).append(
                (tp.partition, -1, -1, "", ErrorCode.NONE) if value is None else
                (tp.partition, value.offset, value.leader_epoch, value.metadata, ErrorCode.NONE))
        for name, index in invalid:
            by_topic.setdefault(name, []).append(
                (index, -1, -1, "", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        return ErrorCode.NONE, list(by_topic.items())

    async def handle_offset_fetch(self, listener: str, version: int,
                                  request: offset_fetch.OffsetFetchRequest
                                  ) -> offset_fetch.OffsetFetchResponse:
        response = offset_fetch.OffsetFetchResponse()
        if version >= 8:
            for group in request.groups:
                topics = (None if group.topics is None
                          else [(t.name, list(t.partition_indexes)) for t in group.topics])
                error, found = self._fetch_group(group.group_id, topics)
                response.groups.append(offset_fetch.OffsetFetchResponseGroup(
                    group_id=group.group_id, error_code=error, topics=[
                        offset_fetch.OffsetFetchResponseTopics(name=name, partitions=[
                            offset_fetch.OffsetFetchResponsePartitions(
                                partition_index=index, committed_offset=offset,
                                committed_leader_epoch=epoch, metadata=meta, error_code=code)
                            for index, offset, epoch, meta, code in parts])
                        for name, parts in found]))
            return response
        requested = (None if request.topics is None
                     else [(t.name, list(t.partition_indexes)) for t in request.topics])
        error, found = self._fetch_group(request.group_id, requested)
        if error is not ErrorCode.NONE and version < 2:
            # Version 1 has no top-level error: each partition asked for carries it.
            found = [(name, [(index, -1, -1, "", error) for index in indexes])
                     for name, indexes in requested or []]
        response.error_code = error
        response.topics = [offset_fetch.OffsetFetchResponseTopic(name=name, partitions=[
            offset_fetch.OffsetFetchResponsePartition(
                partition_index=index, committed_offset=offset, committed_leader_epoch=epoch,
                metadata=meta, error_code=code)
            for index, offset, epoch, meta, code in parts]) for name, parts in found]
        return response

    # -- InitProducerId -------------------------------------------------------------------------

    async def handle_init_producer_id(self, listener: str, version: int,
                                      request: init_producer_id.InitProducerIdRequest
                                      ) -> init_producer_id.InitProducerIdResponse:
        def answer(code: ErrorCode, producer_id: int = -1, epoch: int = -1
                   ) -> init_producer_id.InitProducerIdResponse:
            return init_producer_id.InitProducerIdResponse(error_code=code, producer_id=producer_id,
                                                           producer_epoch=epoch)

        if request.transactional_id is not None:
            return answer(ErrorCode.INVALID_REQUEST)
        has_id, has_epoch = request.producer_id != -1, request.producer_epoch != -1
        if has_id != has_epoch or (has_id and request.producer_id < 0) or (
                has_epoch and request.producer_epoch < 0):
            # Kafka's handleInitProducerIdRequest: both or neither.
            return answer(ErrorCode.INVALID_REQUEST)
        if self._producer_ids is None:
            return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        code, producer_id, _message = await self._producer_ids(
            self._monotonic_s() + INIT_PRODUCER_ID_MAX_WAIT_S)
        if code is not ErrorCode.NONE:
            return answer(code)
        # A non-transactional producer gets a new id with epoch 0, as in Kafka.
        logger.info("broker=%d event=init_producer_id producer_id=%d producer_epoch=0 "
                    "previous_producer_id=%d listener=kafka", self.broker_id, producer_id,
                    request.producer_id)
        return answer(ErrorCode.NONE, producer_id, 0)


    # -- CreateTopics / DeleteTopics: forwarded to the active controller (KIP-590) ---------------

    def _deadline(self, timeout_ms: int) -> float:
        return self._monotonic_s() + max(FORWARD_MIN_WAIT_S, min(timeout_ms, 60_000) / 1000)

    async def handle_create_topics(self, listener: str, version: int,
                                   request: create_topics.CreateTopicsRequest
                                   ) -> create_topics.CreateTopicsResponse:
        names = [t.name for t in request.topics]
        duplicates = {name for name in names if names.count(name) > 1}
        unique = [t for t in request.topics if t.name not in duplicates]
        results: dict[str, create_topics.CreatableTopicResult] = {
            name: create_topics.CreatableTopicResult(
                name=name, error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"topic {name!r} is named more than once in the request")
            for name in duplicates}
        if unique:
            wanted = [t.name for t in unique]
            if self._controller is None:
                answered = [create_topics.CreatableTopicResult(
                    name=name, error_code=ErrorCode.NOT_CONTROLLER,
                    error_message="this broker does not forward to the controller")
                    for name in wanted]
            else:
                try:
                    answer = await self._controller("CreateTopics", kafka_admin_convert.create_topics_request(
                        unique, timeout_ms=max(0, request.timeout_ms),
                        validate_only=request.validate_only), self._deadline(request.timeout_ms))
                    answered = kafka_admin_convert.create_topics_results(answer, wanted)
                except TimeoutError:
                    answered = [create_topics.CreatableTopicResult(
                        name=name, error_code=ErrorCode.REQUEST_TIMED_OUT,
                        error_message="no active controller answered in time")
                        for name in wanted]
            results.update((r.name, r) for r in answered)
        ordered = list(dict.fromkeys(names))
        return create_topics.CreateTopicsResponse(topics=[results[name] for name in ordered])

    async def handle_delete_topics(self, listener: str, version: int,
                                   request: delete_topics.DeleteTopicsRequest
                                   ) -> delete_topics.DeleteTopicsResponse:
        topics: list[tuple[str | None, Uuid]] = (
            [(t.name, t.topic_id) for t in request.topics] if version >= 6
            else [(name, ZERO_UUID) for name in request.topic_names])
        if not topics:
            return delete_topics.DeleteTopicsResponse()
        if self._controller is None:
            return delete_topics.DeleteTopicsResponse(responses=[
                delete_topics.DeletableTopicResult(name=name, topic_id=topic_id,
                                                   error_code=ErrorCode.NOT_CONTROLLER)
                for name, topic_id in topics])
        try:
            answer = await self._controller("DeleteTopics", kafka_admin_convert.delete_topics_request(
                topics, timeout_ms=max(0, request.timeout_ms)), self._deadline(request.timeout_ms))
        except TimeoutError:
            return delete_topics.DeleteTopicsResponse(responses=[
                delete_topics.DeletableTopicResult(name=name, topic_id=topic_id,
                                                   error_code=ErrorCode.REQUEST_TIMED_OUT)
                for name, topic_id in topics])
        results = kafka_admin_convert.delete_topics_results(answer, topics)
        if version < 6:
            for result in results:
                result.name = result.name or ""
        return delete_topics.DeleteTopicsResponse(responses=results)


def api_versions_response(error: ErrorCode) -> api_versions.ApiVersionsResponse:
    """ApiVersions' answer: every API and version range this broker serves."""
    return api_versions.ApiVersionsResponse(error_code=error,
                                            api_keys=api_keys.api_versions_entries())
