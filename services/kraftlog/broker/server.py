"""BrokerService over gRPC: the gRPC front door onto the broker's data plane.

Owns :class:`BrokerServicer`, which converts protobuf to the values of the
:class:`~kraftlog.broker.data_plane.DataPlane` (the asyncio owner of the
ReplicaManager) and back: Produce (acks 0 / 1 / -1), Fetch (consumers and
followers, long-poll), ListOffsets, Metadata (from the metadata image) and DescribeLogDirs (size, log end,
high watermark, leader epoch and replica state per replica), with
an error per partition. Consumer fetches answer BROKER_NOT_AVAILABLE until the broker
is registered, caught up and unfenced. A partition not hosted here but known to the image
answers NOT_LEADER_OR_FOLLOWER with the leader's hint (KIP-951).

OffsetForLeaderEpoch answers a leader's epoch end offsets (KIP-101/279).
DeleteRecords moves the log start offsets of partitions led here and answers once
every live replica followed (:mod:`kraftlog.broker.delete_records`); the injectable
``DataPlane.on_log_start_offsets_moved`` checkpoints them first.
FindCoordinator, OffsetCommit and OffsetFetch go to the injected ``groups``
(:class:`~kraftlog.broker.group_coordinator_driver.GroupCoordinatorDriver`), with the
coordinator's hint (the leader of the group's ``__consumer_offsets`` partition).
InitProducerId hands an idempotent producer a new producer id with epoch 0
(KIP-98, non-transactional path) from the injected ``producer_ids`` allocator.
FetchStream answers a stream of Fetch requests in order on one call (see its method).

Callers: :mod:`kraftlog.server.broker_server` (wiring). Edge module: asyncio, grpc,
protobuf and the clock; no replication rule lives here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from kraftlog import rpc, rpc_guard
from kraftlog.broker import data_plane, fetch_session, purgatory
from kraftlog.broker import group_coordinator as gc
from kraftlog.broker import group_offsets as go
from kraftlog.broker import partition as partition_mod
from kraftlog.broker import replica_manager as rm
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import ZERO_UUID, TopicPartition, Uuid
from kraftlog.metadata import image as im
from kraftlog.metadata import record_convert
from kraftlog.metadata.records import NO_LEADER
from kraftlog.security import principal, tls
from kraftlog.v1 import broker_pb2, broker_pb2_grpc, common_pb2

if TYPE_CHECKING:
    from kraftlog.broker import group_coordinator_driver as gcd

logger = logging.getLogger(__name__)

INIT_PRODUCER_ID_MAX_WAIT_S = 5.0
"""How long InitProducerId may wait for a producer id block before COORDINATOR_LOAD_IN_PROGRESS."""
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
INTERNAL_TOPICS = frozenset({go.GROUP_METADATA_TOPIC_NAME})
"""Topics only the broker itself writes (Produce answers INVALID_TOPIC_EXCEPTION)."""
PRODUCE_STREAM_MAX_IN_FLIGHT = 64
"""Requests one ProduceStream may have read and not yet answered; past it the broker stops
reading, and HTTP/2 flow control holds the client back (a client sends at most
``max.in.flight.requests.per.connection`` per partition, so this bounds only a hostile or
very wide one)."""


_REPLICA_STATES = {
    rm.ReplicaState.NEW_REPLICA: broker_pb2.REPLICA_STATE_NEW_REPLICA,
    rm.ReplicaState.ONLINE_REPLICA: broker_pb2.REPLICA_STATE_ONLINE_REPLICA,
    rm.ReplicaState.OFFLINE_REPLICA: broker_pb2.REPLICA_STATE_OFFLINE_REPLICA,
    rm.ReplicaState.REPLICA_DELETION_STARTED: broker_pb2.REPLICA_STATE_REPLICA_DELETION_STARTED,
    rm.ReplicaState.REPLICA_DELETION_SUCCESSFUL:
        broker_pb2.REPLICA_STATE_REPLICA_DELETION_SUCCESSFUL,
    rm.ReplicaState.REPLICA_DELETION_INELIGIBLE:
        broker_pb2.REPLICA_STATE_REPLICA_DELETION_INELIGIBLE,
    rm.ReplicaState.NON_EXISTENT_REPLICA: broker_pb2.REPLICA_STATE_NON_EXISTENT_REPLICA,
}




def error_proto(code: ErrorCode, message: str = "") -> common_pb2.Error:
    """An error for a response; a message built from a local exception (a log's, naming its
    directory) leaves without the server's directories."""
    if message and "/" in message:
        message = rpc_guard.public_message(message)
    return common_pb2.Error(code=int(code), message=message)  # type: ignore[arg-type]


class BrokerServicer(broker_pb2_grpc.BrokerServiceServicer):
    """BrokerService: protobuf in, the DataPlane, protobuf out."""

    def __init__(self, data: data_plane.DataPlane, *, broker_id: int, cluster_id: str,
                 image: Callable[[], im.MetadataImage], controller_id: Callable[[], int],
                 listener_name: str, log_dirs: Sequence[str] = (),
                 ready: Callable[[], bool] = lambda: True,
                 producer_ids: Callable[[float], Awaitable[tuple[ErrorCode, int, str]]] | None = None,
                 groups: gcd.GroupCoordinatorDriver | None = None,
                 broker_identity: principal.NodePrincipal | None = None,
                 observe_request: Callable[[str, float, bool], None] | None = None) -> None:
        self.data = data
        self._observe_request = observe_request
        """(method, seconds, ok) per request read on a FetchStream / ProduceStream: the
        request metrics the server interceptor keeps for unary Fetch and Produce calls."""
        self.groups = groups
        # With mTLS: the principal broker N must present to fetch as replica N.
        self._broker_identity = broker_identity
        # (deadline as time.monotonic()) -> (error, producer id, message); None: not wired.
        self._producer_ids = producer_ids
        self._ready = ready
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self._image = image
        self._controller_id = controller_id
        self.listener_name = listener_name

    # -- helpers --------------------------------------------------------------------------------

    def _leader_hint(self, tp: TopicPartition) -> common_pb2.LeaderHint:
        """The leader the image names for ``tp`` (KIP-951), leader -1 when unknown."""
        image = self._image()
        topic = image.topics.get_topic_by_name(tp.topic)
        registration = topic.partition(tp.partition) if topic is not None else None
        if registration is None:
            return common_pb2.LeaderHint(leader_id=NO_LEADER, leader_epoch=-1)
        hint = common_pb2.LeaderHint(leader_id=registration.leader,
                                     leader_epoch=registration.leader_epoch)
        broker = image.cluster.broker(registration.leader)
        endpoint = broker.endpoint(self.listener_name) if broker is not None else None
        if endpoint is not None:
            hint.endpoint.CopyFrom(common_pb2.Endpoint(
                host=endpoint.host, port=endpoint.port, listener_name=endpoint.listener_name,
                security_protocol=endpoint.security_protocol))
        return hint

    def _refine(self, tp: TopicPartition, error: ErrorCode, message: str
                ) -> tuple[ErrorCode, str, common_pb2.LeaderHint | None]:
        """UNKNOWN_TOPIC_OR_PARTITION of a partition the image knows is NOT_LEADER_OR_FOLLOWER."""
        if error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            topic = self._image().topics.get_topic_by_name(tp.topic)
            if topic is not None and topic.partition(tp.partition) is not None:
                return (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        f"broker {self.broker_id} does not host {tp}", self._leader_hint(tp))
        if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
            return error, message, self._leader_hint(tp)
        return error, message, None

    @staticmethod
    def _tp(topic: str, partition: int) -> TopicPartition | None:
        try:
            return TopicPartition(topic=topic, partition=partition)
        except ValueError:
            return None

    # -- Produce --------------------------------------------------------------------------------

    async def Produce(self, request: broker_pb2.ProduceRequest, context: Any) -> Any:
        return await self._answer_produce(request)

    async def ProduceStream(self, request_iterator: Any,
                            context: Any) -> AsyncIterator[broker_pb2.ProduceResponse]:
        """Produce pipelined on one stream: each request read is appended at once, in the
        order read (each starts its append before the next is read), and answered with its
        correlation id when it is done, so an acks=-1 request waiting for replication holds
        back neither the appends nor the answers behind it.

        Why: a unary call costs both ends several times the CPU of a message on an open
        stream (call set-up, metadata, a server task), which at Kafka's 16 KiB batches was
        most of a produce's cost. Flow control: at most :data:`PRODUCE_STREAM_MAX_IN_FLIGHT`
        requests read and not yet answered on the wire; then the broker reads no more until
        an answer is written.
        A request's outcome is exactly what unary Produce answers; when the stream breaks,
        a client cannot tell which requests were appended (the same as a lost unary
        answer), so it must keep their batches' identity (idempotence) when it resends.
        """
        answers: asyncio.Queue[broker_pb2.ProduceResponse | BaseException | None] = asyncio.Queue()
        room = asyncio.Semaphore(PRODUCE_STREAM_MAX_IN_FLIGHT)
        pending: set[asyncio.Task[None]] = set()

        observe = self._observe_request

        async def answer(request: broker_pb2.ProduceRequest) -> None:
            started = time.perf_counter()
            try:
                response = await self._answer_produce(request)
                response.correlation_id = request.correlation_id
                answers.put_nowait(response)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # handed to the stream: rpc_guard answers INTERNAL
                answers.put_nowait(exc)
                if observe is not None:
                    observe("Produce", time.perf_counter() - started, False)
                return
            if observe is not None:
                observe("Produce", time.perf_counter() - started, True)

        async def read() -> None:
            try:
                requests = request_iterator.__aiter__()
                while True:
                    await room.acquire()
                    try:
                        request = await requests.__anext__()
                    except StopAsyncIteration:
                        break
                    task = asyncio.create_task(answer(request))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                    await asyncio.sleep(0)  # let the append start before the next read
                while pending:
                    await asyncio.wait(list(pending))
                answers.put_nowait(None)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                answers.put_nowait(exc)

        reader = asyncio.create_task(read())
        try:
            while (item := await answers.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
                # Room frees once the answer is written, so a client that reads no answers
                # stops the reading of its requests, not just their appends.
                room.release()
        finally:
            reader.cancel()
            for task in list(pending):
                task.cancel()

    async def _answer_produce(self, request: broker_pb2.ProduceRequest) -> broker_pb2.ProduceResponse:
        """One Produce, unary or one request of a ProduceStream: the same checks and answer."""
        entries: dict[TopicPartition, bytes] = {}
        invalid: dict[tuple[str, int], str] = {}
        internal: set[tuple[str, int]] = set()
        for topic in request.topic_data:
            for data in topic.partition_data:
                tp = self._tp(topic.name, data.index)
                if tp is None or tp in entries:
                    invalid[(topic.name, data.index)] = (
                        "invalid topic or partition" if tp is None else "partition given twice")
                    continue
                if topic.name in INTERNAL_TOPICS:
                    internal.add((topic.name, data.index))
                    continue
                entries[tp] = data.records
        results = await self.data.produce(entries, acks=request.acks,
                                          timeout_ms=request.timeout_ms) if entries else {}
        by_topic: dict[str, list[broker_pb2.ProduceResponse.PartitionProduceResponse]] = {}
        for tp, result in results.items():
            error, message, hint = self._refine(tp, result.error, result.error_message)
            answer = broker_pb2.ProduceResponse.PartitionProduceResponse(
                index=tp.partition, error=error_proto(error, message),
                base_offset=result.base_offset, log_append_time_ms=result.log_append_time_ms,
                log_start_offset=result.log_start_offset)
            for record_error in result.record_errors:
                answer.record_errors.add(batch_index=record_error.batch_index,
                                         batch_index_error_message=record_error.message)
            if hint is not None:
                answer.current_leader.CopyFrom(hint)
            by_topic.setdefault(tp.topic, []).append(answer)
        for (name, index), message in invalid.items():
            by_topic.setdefault(name, []).append(broker_pb2.ProduceResponse.PartitionProduceResponse(
                index=index, error=error_proto(ErrorCode.INVALID_REQUEST, message),
                base_offset=-1, log_append_time_ms=-1, log_start_offset=-1))
        for name, index in sorted(internal):
            # Kafka: clients never append to an internal topic; its owner (the group
            # coordinator) writes through the data plane directly.
            by_topic.setdefault(name, []).append(broker_pb2.ProduceResponse.PartitionProduceResponse(
                index=index, error=error_proto(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                               f"cannot append to internal topic {name}"),
                base_offset=-1, log_append_time_ms=-1, log_start_offset=-1))
        return broker_pb2.ProduceResponse(responses=[
            broker_pb2.ProduceResponse.TopicProduceResponse(name=name, partition_responses=parts)
            for name, parts in by_topic.items()])

    # -- Fetch ----------------------------------------------------------------------------------

    def _replica_refusal(self, replica_id: int, replica_epoch: int) -> common_pb2.Error | None:
        """Why a replica Fetch naming ``replica_id`` is refused, ``None`` when it may go on.

        Replica identity (beyond Kafka): with mTLS, only broker N's own certificate may fetch
        as replica N, so a client certificate cannot pose as a follower and keep it in the
        ISR. KIP-903: the broker epoch the fetch carries must be the one broker N registered
        with (in this broker's metadata image), with security on or off, so a fetch from a
        stale incarnation, or one that names no epoch (-1), never counts as the follower's."""
        peer = tls.current_peer()
        if (peer is not None and self._broker_identity is not None
                and not self._broker_identity.matches(peer, replica_id)):
            logger.warning("broker=%d event=impersonation_refused rpc=Fetch replica_id=%d "
                           "principal=%r", self.broker_id, replica_id, peer.principal)
            return error_proto(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                               f"{peer.principal} may not fetch as replica {replica_id}")
        registration = self._image().cluster.broker(replica_id)
        if registration is None:
            return error_proto(ErrorCode.BROKER_ID_NOT_REGISTERED,
                               f"replica {replica_id} is not a registered broker")
        if replica_epoch != registration.broker_epoch:
            return error_proto(ErrorCode.STALE_BROKER_EPOCH,
                               f"replica {replica_id} fetches with broker epoch "
                               f"{replica_epoch}; its registration has "
                               f"{registration.broker_epoch} (KIP-903)")
        return None

    async def Fetch(self, request: broker_pb2.FetchRequest, context: Any) -> Any:
        return await self._answer_fetch(request)

    async def _answer_fetch(self, request: broker_pb2.FetchRequest) -> broker_pb2.FetchResponse:
        """One Fetch, unary or one request of a FetchStream: the same checks and answer (a
        replica's identity and broker epoch first, per request)."""
        if request.replica_id >= 0:
            refusal = self._replica_refusal(request.replica_id, request.replica_epoch)
            if refusal is not None:
                return broker_pb2.FetchResponse(error=refusal)
        if request.replica_id < 0 and not self._ready():
            # Consumers wait until this broker is registered, caught up and unfenced;
            # followers keep fetching (a fenced leader's followers still need its data).
            return broker_pb2.FetchResponse(error=error_proto(
                ErrorCode.BROKER_NOT_AVAILABLE,
                f"broker {self.broker_id} is not serving clients yet (fenced or catching up)"))
        params = purgatory.FetchParams(
            replica_id=request.replica_id, max_wait_ms=max(0, request.max_wait_ms),
            min_bytes=max(0, request.min_bytes),
            max_bytes=request.max_bytes if request.max_bytes > 0 else 50 * 1024 * 1024,
            isolation=partition_mod.FetchIsolation.HIGH_WATERMARK, replica_epoch=request.replica_epoch)
        partitions: dict[TopicPartition, purgatory.FetchPartitionRequest] = {}
        errors: dict[TopicPartition, tuple[ErrorCode, str]] = {}
        invalid: list[tuple[str, int]] = []
        topic_ids: dict[str, Uuid] = {}
        manager = self.data.manager
        for topic in request.topics:
            wanted_id = record_convert.uuid_from_proto(topic.topic_id) if topic.HasField("topic_id") else ZERO_UUID
            for part in topic.partitions:
                tp = self._tp(topic.topic, part.partition)
                if tp is None:
                    invalid.append((topic.topic, part.partition))
                    continue
                hosted = manager.get_partition(tp)
                if hosted is not None:
                    topic_ids[tp.topic] = hosted.topic_id
                    if wanted_id != ZERO_UUID and hosted.topic_id != wanted_id:
                        errors[tp] = (ErrorCode.INCONSISTENT_TOPIC_ID,
                                      f"{tp} has topic id {hosted.topic_id}, not {wanted_id}")
                        continue
                partitions[tp] = purgatory.FetchPartitionRequest(
                    fetch_offset=part.fetch_offset,
                    partition_max_bytes=(part.partition_max_bytes if part.partition_max_bytes > 0
                                         else params.max_bytes),
                    current_leader_epoch=part.current_leader_epoch,
                    last_fetched_epoch=part.last_fetched_epoch,
                    log_start_offset=part.log_start_offset)
        session_id = 0
        if request.HasField("session_epoch"):
            # KIP-227: an incremental fetch may name no partition at all (an idle follower).
            session = fetch_session.SessionRequest(
                session_id=request.session_id, epoch=request.session_epoch, forgotten=tuple(
                    tp for topic in request.forgotten_topics_data for index in topic.partitions
                    if (tp := self._tp(topic.topic, index)) is not None))
            results, session_id, session_error, session_message = await self.data.fetch_in_session(
                params, partitions, session)
            if session_error is not ErrorCode.NONE:
                return broker_pb2.FetchResponse(error=error_proto(session_error, session_message))
        else:
            results = await self.data.fetch(params, partitions) if partitions else {}
        # Built in place: a PartitionData handed to a parent's constructor is deep-copied with its
        # records (upb's merge measured ~0.7 ms per 256 KiB), add() copies them once into the arena.
        response = broker_pb2.FetchResponse()
        by_topic: dict[str, Any] = {}

        def partitions_of(name: str) -> Any:
            entry = by_topic.get(name)
            if entry is None:
                entry = by_topic[name] = response.responses.add(
                    topic=name, topic_id=record_convert.uuid_to_proto(topic_ids.get(name, ZERO_UUID))).partitions
            return entry

        for tp, result in results.items():
            if tp.topic not in topic_ids and (hosted := manager.get_partition(tp)) is not None:
                topic_ids[tp.topic] = hosted.topic_id  # a session partition the request did not name
            error, message, hint = self._refine(tp, result.error, result.error_message)
            data = partitions_of(tp.topic).add(
                partition_index=tp.partition, error=error_proto(error, message),
                high_watermark=result.high_watermark, last_stable_offset=result.last_stable_offset,
                log_start_offset=result.log_start_offset, records=result.records)
            if result.diverging_epoch is not None:
                data.diverging_epoch.epoch = result.diverging_epoch.epoch
                data.diverging_epoch.end_offset = result.diverging_epoch.end_offset
            if hint is not None:
                data.current_leader.CopyFrom(hint)
        for tp, (code, message) in errors.items():
            partitions_of(tp.topic).add(
                partition_index=tp.partition, error=error_proto(code, message),
                high_watermark=-1, last_stable_offset=-1, log_start_offset=-1)
        for name, index in invalid:
            partitions_of(name).add(
                partition_index=index, error=error_proto(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"invalid topic or partition {name!r}"),
                high_watermark=-1, last_stable_offset=-1, log_start_offset=-1)
        response.session_id = session_id
        return response

    # -- ListOffsets ----------------------------------------------------------------------------

    def _list_offset(self, tp: TopicPartition, part: Any, replica_id: int
                     ) -> broker_pb2.ListOffsetsResponse.ListOffsetsPartitionResponse:
        answer = broker_pb2.ListOffsetsResponse.ListOffsetsPartitionResponse(
            partition_index=tp.partition, timestamp=-1, offset=-1, leader_epoch=-1)
        partition = self.data.manager.get_partition(tp)
        error, message = ErrorCode.NONE, ""
        if partition is None:
            error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} is not hosted here"
        elif not partition.is_leader:
            error, message = (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                              f"broker {self.broker_id} does not lead {tp}")
        else:
            error = partition.check_current_leader_epoch(part.current_leader_epoch)
        if partition is None or error is not ErrorCode.NONE:
            error, message, hint = self._refine(tp, error, message or error.name)
            answer.error.CopyFrom(error_proto(error, message))
            if hint is not None:
                answer.current_leader.CopyFrom(hint)
            return answer
        timestamp = part.timestamp
        if timestamp == LATEST_TIMESTAMP:
            answer.offset = (partition.log_end_offset if replica_id >= 0
                             else partition.high_watermark)
            answer.leader_epoch = partition.leader_epoch
        elif timestamp == EARLIEST_TIMESTAMP:
            answer.offset = partition.log_start_offset
        elif timestamp >= 0:
            found = partition.log.offset_for_timestamp(timestamp)
            if found is not None and found.offset < partition.high_watermark:
                answer.offset = found.offset
                answer.timestamp = found.timestamp
        else:
            answer.error.CopyFrom(error_proto(ErrorCode.INVALID_REQUEST,
                                              f"timestamp {timestamp} is not supported"))
        return answer

    async def ListOffsets(self, request: broker_pb2.ListOffsetsRequest, context: Any) -> Any:
        topics = []
        for topic in request.topics:
            parts = []
            for part in topic.partitions:
                tp = self._tp(topic.name, part.partition_index)
                if tp is None:
                    parts.append(broker_pb2.ListOffsetsResponse.ListOffsetsPartitionResponse(
                        partition_index=part.partition_index, timestamp=-1, offset=-1,
                        leader_epoch=-1,
                        error=error_proto(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "invalid name")))
                    continue
                parts.append(self._list_offset(tp, part, request.replica_id))
            topics.append(broker_pb2.ListOffsetsResponse.ListOffsetsTopicResponse(
                name=topic.name, partitions=parts))
        return broker_pb2.ListOffsetsResponse(topics=topics)

    # -- OffsetForLeaderEpoch --------------------------------------------------------------------

    async def OffsetForLeaderEpoch(self, request: broker_pb2.OffsetForLeaderEpochRequest,
                                   context: Any) -> Any:
        response = broker_pb2.OffsetForLeaderEpochResponse()
        for topic in request.topics:
            results = []
            for part in topic.partitions:
                answer = broker_pb2.OffsetForLeaderEpochResponse.EpochEndOffsetResult(
                    partition=part.partition,
                    epoch_end_offset=common_pb2.EpochEndOffset(epoch=-1, end_offset=-1))
                tp = self._tp(topic.topic, part.partition)
                partition = self.data.manager.get_partition(tp) if tp is not None else None
                error, message = ErrorCode.NONE, ""
                if tp is None or partition is None:
                    error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "not hosted here"
                elif not partition.is_leader:
                    error, message = (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                      f"broker {self.broker_id} does not lead {tp}")
                else:
                    error = partition.check_current_leader_epoch(part.current_leader_epoch)
                    message = "" if error is ErrorCode.NONE else error.name
                if tp is not None and error is not ErrorCode.NONE:
                    error, message, _hint = self._refine(tp, error, message)
                if error is ErrorCode.NONE and partition is not None:
                    found = partition.end_offset_for_epoch(part.leader_epoch)
                    answer.epoch_end_offset.CopyFrom(common_pb2.EpochEndOffset(
                        epoch=found.epoch, end_offset=found.end_offset))
                answer.error.CopyFrom(error_proto(error, message))
                results.append(answer)
            response.topics.append(broker_pb2.OffsetForLeaderEpochResponse
                                   .OffsetForLeaderTopicResult(topic=topic.topic,
                                                               partitions=results))
        return response

    # -- Metadata -------------------------------------------------------------------------------

    async def Metadata(self, request: broker_pb2.MetadataRequest, context: Any) -> Any:
        image = self._image()
        response = broker_pb2.MetadataResponse(cluster_id=self.cluster_id,
                                               controller_id=self._controller_id())
        for broker_id in image.cluster.unfenced_broker_ids():
            broker = image.cluster.broker(broker_id)
            endpoint = broker.endpoint(self.listener_name) if broker is not None else None
            if broker is None or endpoint is None:
                continue
            response.brokers.append(broker_pb2.MetadataResponse.MetadataResponseBroker(
                node_id=broker_id, rack=broker.rack, endpoint=common_pb2.Endpoint(
                    host=endpoint.host, port=endpoint.port, listener_name=endpoint.listener_name,
                    security_protocol=endpoint.security_protocol)))
        names = list(request.topics) or sorted(image.topics.ids_by_name)
        for name in names:
            topic = image.topics.get_topic_by_name(name)
            if topic is None:
                response.topics.append(broker_pb2.MetadataResponse.MetadataResponseTopic(
                    name=name, error=error_proto(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                 f"topic {name!r} does not exist")))
                continue
            entry = broker_pb2.MetadataResponse.MetadataResponseTopic(
                name=name, topic_id=record_convert.uuid_to_proto(topic.topic_id),
                is_internal=name.startswith("__"))
            for index, registration in sorted(topic.partitions.items()):
                offline = [r for r in registration.replicas if not image.cluster.is_active(r)]
                entry.partitions.append(broker_pb2.MetadataResponse.MetadataResponsePartition(
                    error=error_proto(ErrorCode.NONE if registration.has_leader
                                      else ErrorCode.LEADER_NOT_AVAILABLE),
                    partition_index=index, leader_id=registration.leader,
                    leader_epoch=registration.leader_epoch,
                    replica_nodes=registration.replicas, isr_nodes=registration.isr,
                    offline_replicas=offline, eligible_leader_replicas=registration.elr,
                    last_known_elr=registration.last_known_elr))
            response.topics.append(entry)
        return response


    # -- DescribeLogDirs -----------------------------------------------------------------------

    async def DescribeLogDirs(self, request: broker_pb2.DescribeLogDirsRequest,
                              context: Any) -> Any:
        wanted: set[TopicPartition] | None = None
        if request.topics:
            wanted = {tp for topic in request.topics for index in topic.partitions
                      if (tp := self._tp(topic.topic, index)) is not None}
        manager = self.data.manager
        by_dir: dict[str, dict[str, list[broker_pb2.DescribeLogDirsResponse
                                          .DescribeLogDirsPartition]]] = {
            d: {} for d in self.log_dirs}
        for tp, partition in sorted(manager.partitions.items()):
            if wanted is not None and tp not in wanted:
                continue
            log = partition.log
            log_dir = os.path.dirname(os.path.abspath(log.directory))
            state = manager.replica_state(tp)
            by_dir.setdefault(log_dir, {}).setdefault(tp.topic, []).append(
                broker_pb2.DescribeLogDirsResponse.DescribeLogDirsPartition(
                    partition_index=tp.partition, partition_size=log.size_in_bytes,
                    # A follower knows the leader's high watermark only as of its last fetch.
                    offset_lag=(0 if partition.is_leader else
                                max(0, partition.high_watermark - partition.log_end_offset)),
                    log_end_offset=partition.log_end_offset,
                    high_watermark=partition.high_watermark,
                    replica_state=_REPLICA_STATES[state], leader_epoch=partition.leader_epoch,
                    is_leader=partition.is_leader))
        response = broker_pb2.DescribeLogDirsResponse()
        offline = {os.path.abspath(d): reason for d, reason in manager.offline_log_dirs.items()}
        for log_dir, topics in by_dir.items():
            reason = offline.get(os.path.abspath(log_dir))
            if reason is not None:
                # Kafka: an offline dir answers KAFKA_STORAGE_ERROR and lists no replicas.
                response.results.append(broker_pb2.DescribeLogDirsResponse.DescribeLogDirsResult(
                    log_dir=log_dir, total_bytes=-1, usable_bytes=-1, error=error_proto(
                        ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {log_dir} is offline: {reason}")))
                continue
            try:
                usage = shutil.disk_usage(log_dir)
                total, usable = usage.total, usage.free
            except OSError:
                total = usable = -1
            response.results.append(broker_pb2.DescribeLogDirsResponse.DescribeLogDirsResult(
                log_dir=log_dir, total_bytes=total, usable_bytes=usable, topics=[
                    broker_pb2.DescribeLogDirsResponse.DescribeLogDirsTopic(name=name,
                                                                            partitions=parts)
                    for name, parts in topics.items()]))
        return response

    # -- InitProducerId -------------------------------------------------------------------------

    async def InitProducerId(self, request: broker_pb2.InitProducerIdRequest, context: Any) -> Any:
        def answer(code: ErrorCode, message: str, producer_id: int = NO_PRODUCER_ID,
                   producer_epoch: int = NO_PRODUCER_EPOCH) -> broker_pb2.InitProducerIdResponse:
            return broker_pb2.InitProducerIdResponse(error=error_proto(code, message), producer_id=producer_id,
                                                     producer_epoch=producer_epoch, throttle_time_ms=0)

        if request.transactional_id:
            return answer(ErrorCode.INVALID_REQUEST,
                          f"transactions are not supported (transactional_id {request.transactional_id!r}); "
                          "send an empty transactional_id for an idempotent producer")
        has_id = request.producer_id != NO_PRODUCER_ID
        has_epoch = request.producer_epoch != NO_PRODUCER_EPOCH
        if has_id != has_epoch:
            # Kafka's KafkaApis.handleInitProducerIdRequest: both or neither.
            return answer(ErrorCode.INVALID_REQUEST,
                          f"producer_id {request.producer_id} and producer_epoch {request.producer_epoch} "
                          "must both be -1 or both be set")
        if has_id and (request.producer_id < 0 or not 0 <= request.producer_epoch <= 32767):
            return answer(ErrorCode.INVALID_REQUEST,
                          f"invalid producer_id {request.producer_id} / producer_epoch {request.producer_epoch}")
        if self._producer_ids is None:
            return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          f"broker {self.broker_id} does not allocate producer ids")
        wait_s = INIT_PRODUCER_ID_MAX_WAIT_S
        remaining = context.time_remaining() if context is not None else None
        if remaining is not None:
            wait_s = max(0.0, min(wait_s, remaining - 0.1))
        code, producer_id, message = await self._producer_ids(time.monotonic() + wait_s)
        if code is not ErrorCode.NONE:
            return answer(code, message)
        logger.info("broker=%d event=init_producer_id producer_id=%d producer_epoch=0 previous_producer_id=%d",
                    self.broker_id, producer_id, request.producer_id)
        return answer(ErrorCode.NONE, "", producer_id, 0)

    # -- DeleteRecords ---------------------------------------------------------------------------

    async def DeleteRecords(self, request: broker_pb2.DeleteRecordsRequest, context: Any) -> Any:
        """Kafka's handleDeleteRecordsRequest: each partition's log start offset moves on its
        leader, answered with the low watermark once every live replica followed."""
        offsets: dict[TopicPartition, int] = {}
        refused: dict[tuple[str, int], tuple[ErrorCode, str]] = {}
        for topic in request.topics:
            for part in topic.partitions:
                key = (topic.name, part.partition_index)
                tp = self._tp(topic.name, part.partition_index)
                if tp is None:
                    refused[key] = (ErrorCode.INVALID_REQUEST, "invalid topic or partition")
                elif tp in offsets or key in refused:
                    # Given twice: neither request is carried out.
                    refused[key] = (ErrorCode.INVALID_REQUEST, "partition given twice")
                    offsets.pop(tp, None)
                elif topic.name in INTERNAL_TOPICS:
                    refused[key] = (ErrorCode.INVALID_TOPIC_EXCEPTION,
                                    f"cannot delete records of internal topic {topic.name}")
                elif part.offset < -1:
                    refused[key] = (ErrorCode.OFFSET_OUT_OF_RANGE,
                                    f"offset {part.offset} must be -1 (the high watermark) or >= 0")
                elif (policy := self._image().configs.topic_configs(topic.name).get(
                        "cleanup.policy")) is not None and "delete" not in [
                            item.strip().lower() for item in policy.split(",")]:
                    # Kafka's deleteRecordsOnLeader: only a log whose policy deletes.
                    refused[key] = (ErrorCode.POLICY_VIOLATION,
                                    f"records of {tp} cannot be deleted: its cleanup.policy "
                                    f"is {policy!r}, without delete")
                else:
                    offsets[tp] = part.offset
        timeout_ms = max(0, request.timeout_ms)
        results = (await self.data.delete_records(offsets, timeout_ms=timeout_ms)
                   if offsets else {})
        by_topic: dict[str, list[broker_pb2.DeleteRecordsResponse.DeleteRecordsPartitionResult]] = {}
        for tp, result in results.items():
            error, message, hint = self._refine(tp, result.error, result.error_message)
            answer = broker_pb2.DeleteRecordsResponse.DeleteRecordsPartitionResult(
                partition_index=tp.partition, low_watermark=result.low_watermark,
                error=error_proto(error, message))
            if hint is not None:
                answer.current_leader.CopyFrom(hint)
            by_topic.setdefault(tp.topic, []).append(answer)
        for (name, index), (code, message) in refused.items():
            by_topic.setdefault(name, []).append(
                broker_pb2.DeleteRecordsResponse.DeleteRecordsPartitionResult(
                    partition_index=index, low_watermark=-1, error=error_proto(code, message)))
        return broker_pb2.DeleteRecordsResponse(topics=[
            broker_pb2.DeleteRecordsResponse.DeleteRecordsTopicResult(name=name, partitions=parts)
            for name, parts in by_topic.items()], error=error_proto(ErrorCode.NONE))

    # -- FetchStream ------------------------------------------------------------------------------

    async def FetchStream(self, request_iterator: Any,
                          context: Any) -> AsyncIterator[broker_pb2.FetchResponse]:
        """Fetch on one long-lived stream: each request is answered, in order, exactly as a
        unary Fetch would be (long-poll, session, every check), on the same stream.

        Why a stream and not pushed data: the leader learns a follower's position only from
        the fetch offsets the follower sends (ISR, high watermark), so a follower sends one
        message per append either way; what a unary call adds is its own cost (~250 µs of
        server CPU for a call's set-up and teardown in Python gRPC, against tens of µs for a
        message on an open stream). Flow control: the broker reads the next request only
        after it wrote the previous answer, so one stream holds at most one parked fetch and
        one answer (``max_bytes``) of this broker's memory; a client that writes ahead is
        held back by HTTP/2's window. Acknowledgement: the fetch offsets of the next request,
        as with unary Fetch; nothing streamed counts as replicated until it is asked past.
        """
        observe = self._observe_request
        async for request in request_iterator:
            started = time.perf_counter()
            ok = False
            try:
                answer = await self._answer_fetch(request)
                ok = True
            finally:
                if observe is not None:
                    observe("Fetch", time.perf_counter() - started, ok)
            yield answer

    # -- group offsets (FindCoordinator, OffsetCommit, OffsetFetch) ----------------------------

    def _no_groups(self) -> common_pb2.Error:
        return error_proto(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                           f"broker {self.broker_id} runs no group coordinator")

    def _coordinator_hint(self, partition: int) -> common_pb2.LeaderHint | None:
        if partition < 0:
            return None
        return self._leader_hint(TopicPartition(topic=go.GROUP_METADATA_TOPIC_NAME, partition=partition))

    async def FindCoordinator(self, request: broker_pb2.FindCoordinatorRequest,
                              context: Any) -> Any:
        response = broker_pb2.FindCoordinatorResponse()
        keys = list(request.coordinator_keys)
        if request.key_type != broker_pb2.COORDINATOR_KEY_TYPE_GROUP or self.groups is None:
            error = (self._no_groups() if request.key_type == broker_pb2.COORDINATOR_KEY_TYPE_GROUP
                     else error_proto(ErrorCode.INVALID_REQUEST,
                                      f"coordinator key type {request.key_type} is not supported "
                                      "(only GROUP: no transactions)"))
            for key in keys:
                response.coordinators.append(broker_pb2.FindCoordinatorResponse.Coordinator(
                    key=key, node_id=-1, port=-1, error=error))
            return response
        for answer in self.groups.find_coordinator(keys):
            response.coordinators.append(broker_pb2.FindCoordinatorResponse.Coordinator(
                key=answer.key, node_id=answer.node_id, host=answer.host, port=answer.port,
                error=error_proto(answer.error, answer.message)))
        return response

    async def OffsetCommit(self, request: broker_pb2.OffsetCommitRequest, context: Any) -> Any:
        entries = [gc.CommitEntry(topic=topic.name, partition=part.partition_index,
                                  offset=part.committed_offset,
                                  leader_epoch=part.committed_leader_epoch,
                                  metadata=part.committed_metadata)
                   for topic in request.topics for part in topic.partitions]
        response = broker_pb2.OffsetCommitResponse()
        if self.groups is None:
            outcome = None
            response.error.CopyFrom(self._no_groups())
        else:
            generation = (request.generation_id_or_member_epoch
                          if request.HasField("generation_id_or_member_epoch") else None)
            outcome = await self.groups.commit_offsets(
                request.group_id, entries, generation_id=generation, member_id=request.member_id)
            response.error.CopyFrom(error_proto(outcome.error, outcome.message))
            hint = self._coordinator_hint(outcome.coordinator_partition)
            if hint is not None:
                response.coordinator.CopyFrom(hint)
        by_topic: dict[str, list[broker_pb2.OffsetCommitResponse.OffsetCommitResponsePartition]] = {}
        for entry in entries:
            if outcome is None or outcome.error is not ErrorCode.NONE:
                error = response.error  # Kafka answers a group-wide error on every partition
            else:
                code, message = outcome.partitions.get(
                    (entry.topic, entry.partition), (ErrorCode.UNKNOWN_SERVER_ERROR, "no answer"))
                error = error_proto(code, message)
            parts = by_topic.setdefault(entry.topic, [])
            if any(p.partition_index == entry.partition for p in parts):
                continue
            parts.append(broker_pb2.OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=entry.partition, error=error))
        response.topics.extend(broker_pb2.OffsetCommitResponse.OffsetCommitResponseTopic(
            name=name, partitions=parts) for name, parts in by_topic.items())
        return response

    async def OffsetFetch(self, request: broker_pb2.OffsetFetchRequest, context: Any) -> Any:
        response = broker_pb2.OffsetFetchResponse()
        if self.groups is None:
            response.error.CopyFrom(self._no_groups())
            return response
        wanted: list[TopicPartition] = []
        whole_topics: set[str] = set()  # a topic with no partitions listed: all of them
        invalid: list[tuple[str, int]] = []
        for topic in request.topics:
            if not topic.partitions:
                whole_topics.add(topic.topic)
            for index in topic.partitions:
                tp = self._tp(topic.topic, index)
                if tp is None:
                    invalid.append((topic.topic, index))
                else:
                    wanted.append(tp)
        every = not request.topics or bool(whole_topics)
        answer = self.groups.fetch_offsets(request.group_id, None if every else wanted)
        response.error.CopyFrom(error_proto(answer.error, answer.message))
        hint = self._coordinator_hint(answer.coordinator_partition)
        if hint is not None:
            response.coordinator.CopyFrom(hint)
        if answer.error is not ErrorCode.NONE:
            return response
        found = answer.offsets
        if request.topics and every:
            found = {tp: found.get(tp) for tp in wanted}
            found.update({tp: value for tp, value in answer.offsets.items()
                          if tp.topic in whole_topics})
        by_topic: dict[str, list[broker_pb2.OffsetFetchResponse.OffsetFetchResponsePartition]] = {}
        for tp, value in found.items():
            by_topic.setdefault(tp.topic, []).append(
                broker_pb2.OffsetFetchResponse.OffsetFetchResponsePartition(
                    partition_index=tp.partition,
                    committed_offset=-1 if value is None else value.offset,
                    committed_leader_epoch=-1 if value is None else value.leader_epoch,
                    metadata="" if value is None else value.metadata,
                    error=error_proto(ErrorCode.NONE)))
        for name, index in invalid:
            by_topic.setdefault(name, []).append(
                broker_pb2.OffsetFetchResponse.OffsetFetchResponsePartition(
                    partition_index=index, committed_offset=-1, committed_leader_epoch=-1,
                    error=error_proto(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                      f"invalid topic or partition {name!r}-{index}")))
        response.topics.extend(broker_pb2.OffsetFetchResponse.OffsetFetchResponseTopic(
            name=name, partitions=parts) for name, parts in by_topic.items())
        return response


def add_to_server(servicer: BrokerServicer, server: Any) -> None:
    rpc_guard.add_service(
        lambda s: broker_pb2_grpc.add_BrokerServiceServicer_to_server(servicer, s), server)


def create_server(servicer: BrokerServicer, *, interceptors: Sequence[Any] = (),
                  server_tls: tls.ServerTls | None = None) -> Any:
    """A grpc.aio server with BrokerService registered (not yet bound or started); TLS and
    authentication per :mod:`kraftlog.rpc`."""
    grpc_server = rpc.create_server(interceptors=interceptors, server_tls=server_tls)
    add_to_server(servicer, grpc_server)
    return grpc_server
