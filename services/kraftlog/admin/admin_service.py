"""AdminService over gRPC: the stateless front door to a kraftlog cluster.

Owns :class:`ClusterLocator` (finds the active controller, the raft leader and the
brokers, and retries across their changes) and :class:`AdminServicer` (every RPC of
``protos/kraftlog/v1/admin.proto``). Served by :mod:`kraftlog.tools.admin_commands`
(``kraftlog admin``) and, through :func:`serve_on`, by every broker on its own port (so
``--bootstrap-server BROKER`` works as in Kafka, KIP-590); called by :mod:`.admin_client`.

Where the answers come from:

- controller writes and reads (CreateTopics, DeleteTopics, CreatePartitions,
  AlterPartitionReassignments, ElectLeaders, IncrementalAlterConfigs, DescribeConfigs,
  DescribeCluster, UnregisterBroker, ListPartitionReassignments) are forwarded to the active
  controller's ControllerService. A controller that is not active answers
  NOT_CONTROLLER with a hint (its ``active_controller``); the locator follows the
  hint, or walks the bootstrap list (the order is
  :class:`~kraftlog.controller_locator.ControllerLocator`'s), with ``retry.backoff.ms``
  between rounds, until the call's deadline. A controller that cannot be reached (gRPC
  UNAVAILABLE, DEADLINE_EXCEEDED) is skipped the same way. Only those two outcomes are retried:
  every other answer, errors included, goes back to the caller. As with Kafka's
  AdminClient, a write whose connection broke after the controller committed it is
  retried on the next controller and may then answer TOPIC_ALREADY_EXISTS (or
  UNKNOWN_TOPIC_OR_PARTITION for a delete).
- DescribeQuorum and QuorumHistory go to the raft leader's RaftService.
- DescribeTopics and ListTopics read a broker's Metadata (the brokers come from the
  controller's DescribeCluster), joined with the controller's DescribeConfigs
  (``min.insync.replicas`` and the topic's own configs) and
  ListPartitionReassignments (adding / removing replicas).
- ListPartitionReassignments' progress and DescribeLogDirs fan out to the brokers'
  DescribeLogDirs.
- DeleteRecords (Kafka's AdminClient.deleteRecords) finds each partition's leader in a
  broker's Metadata and sends each leader one BrokerService DeleteRecords for its
  partitions; a partition whose leader moved (NOT_LEADER_OR_FOLLOWER,
  LEADER_NOT_AVAILABLE, an unreachable leader) is looked up and sent again within the
  deadline. An unknown topic or partition answers UNKNOWN_TOPIC_OR_PARTITION.

Read-your-writes for tools: CreateTopics, CreatePartitions and DeleteTopics return
once every live broker's metadata shows the change (or after at most
:data:`PROPAGATION_WAIT_S`, within the deadline), so a ``topics describe`` right
after ``topics create`` sees the topic.

Whole-request failures (no controller, no broker, deadline) answer ``error`` with
NOT_CONTROLLER / BROKER_NOT_AVAILABLE / REQUEST_TIMED_OUT and a message naming what
was tried; they are never gRPC errors. Edge module: grpc, asyncio, protobuf.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
import grpc.aio

from kraftlog import rpc, rpc_guard
from kraftlog.admin import quorum_history, topic_health
from kraftlog.controller_locator import ControllerLocator
from kraftlog.error_codes import ErrorCode
from kraftlog.storage import batch_header as bh
from kraftlog.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    controller_pb2,
    controller_pb2_grpc,
    raft_pb2,
    raft_pb2_grpc,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

PROPAGATION_WAIT_S = 5.0
"""Longest a topic write waits for the brokers' metadata to show it."""
PROPAGATION_POLL_S = 0.05
ANSWER_MARGIN_S = 0.2
"""How long before the caller's deadline the service stops retrying and answers."""
METADATA_TOPIC = "__cluster_metadata"
FETCH_MAX_BYTES = 8 * 1024 * 1024
MIN_INSYNC_REPLICAS = "min.insync.replicas"


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminSettings:
    """What the AdminService needs to find the cluster. Times in milliseconds."""

    bootstrap_controllers: tuple[str, ...]
    """``host:port`` of controllers to ask first (``controller.quorum.bootstrap.servers``
    or the addresses of ``controller.quorum.voters``)."""
    voters: Mapping[int, str] = field(default_factory=dict)
    """Voter id -> ``host:port`` when ``controller.quorum.voters`` is known: resolves a
    raft leader id to its address."""
    request_timeout_ms: int = 10_000
    """Bound of one attempt against one controller or broker."""
    default_api_timeout_ms: int = 60_000
    """A call's deadline when the caller set none."""
    retry_backoff_ms: int = 100
    """Pause between rounds of attempts that found no active controller."""


class RequestFailed(Exception):
    """A whole-request failure, answered as the response's ``error``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def error_proto(code: ErrorCode, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=int(code), message=message)  # type: ignore[arg-type]


def endpoint_text(endpoint: common_pb2.Endpoint) -> str:
    host = endpoint.host
    return f"[{host}]:{endpoint.port}" if ":" in host else f"{host}:{endpoint.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerAddress:
    """A registered broker and the address the admin reaches it on."""

    broker_id: int
    target: str
    fenced: bool


class Deadline:
    """A call's deadline on the loop's monotonic clock."""

    def __init__(self, timeout_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self.timeout_s = timeout_s
        self.at = self._loop.time() + timeout_s

    def remaining(self) -> float:
        return self.at - self._loop.time()

    def attempt(self, cap_s: float) -> float:
        """The timeout of one attempt: what is left, at most ``cap_s``, never below 1 ms."""
        return max(min(self.remaining(), cap_s), 0.001)

    def expired(self) -> bool:
        return self.remaining() <= 0


class ClusterLocator:
    """Finds and caches the active controller, the raft leader and the brokers.

    One per process; channels are cached per address and live as long as it does.
    """

    def __init__(self, settings: AdminSettings, *, interceptors: Sequence[Any] = ()) -> None:
        self.settings = settings
        self._interceptors = tuple(interceptors)
        """Client interceptors of every channel (tracing: the caller's trace goes on)."""
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._controllers = ControllerLocator[str](self._bootstrap_controllers)
        """The active controller's address and the order to look for it in."""
        self._raft = ControllerLocator[str](self._bootstrap_controllers)
        """The same for the raft leader (DescribeQuorum)."""
        self._preferred_broker: int | None = None

    def _bootstrap_controllers(self) -> Sequence[str]:
        return self.settings.bootstrap_controllers

    def channel(self, target: str) -> grpc.aio.Channel:
        channel = self._channels.get(target)
        if channel is None:
            channel = rpc.aio_channel(target, options=rpc.channel_options(
                retry_backoff_ms=self.settings.retry_backoff_ms, max_reconnect_backoff_ms=500),
                interceptors=self._interceptors)
            self._channels[target] = channel
        return channel

    async def close(self) -> None:
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            await channel.close()

    @property
    def active_controller(self) -> str | None:
        return self._controllers.active

    def _attempt_cap_s(self) -> float:
        return self.settings.request_timeout_ms / 1000

    async def _back_off(self, deadline: Deadline) -> None:
        # A full round without an active controller: the quorum is electing, or the new
        # leader's controller is still activating. Back off, then retry.
        await asyncio.sleep(min(self.settings.retry_backoff_ms / 1000,
                                max(deadline.remaining(), 0)))

    def _hint_target(self, hint: common_pb2.LeaderHint) -> str | None:
        if hint.leader_id < 0:
            return None
        if hint.HasField("endpoint") and hint.endpoint.port > 0:
            return endpoint_text(hint.endpoint)
        return self.settings.voters.get(hint.leader_id)

    # -- the active controller ---------------------------------------------------------------

    async def controller_call(self, rpc: str, request: Any, deadline: Deadline) -> Any:
        """``ControllerService.<rpc>(request)`` on the active controller, following
        NOT_CONTROLLER hints and skipping unreachable controllers until ``deadline``.

        Raises :class:`RequestFailed` (NOT_CONTROLLER) naming every controller tried
        when none answered as the active one in time."""
        tried: dict[str, str] = {}
        locator = self._controllers
        locator.begin()
        while True:
            if deadline.expired():
                raise RequestFailed(ErrorCode.NOT_CONTROLLER, (
                    f"{rpc}: no active controller answered within {deadline.timeout_s:.1f} s; "
                    "tried " + ", ".join(f"{t} ({why})" for t, why in sorted(tried.items()))
                    if tried else f"{rpc}: deadline of {deadline.timeout_s:.1f} s passed "
                                  "before any controller could be asked"))
            attempt = locator.next()
            if attempt is None or attempt.back_off:
                await self._back_off(deadline)
                if attempt is None or deadline.expired():
                    continue
            target = attempt.target
            stub = controller_pb2_grpc.ControllerServiceStub(self.channel(target))
            try:
                answer = await getattr(stub, rpc)(
                    request, timeout=deadline.attempt(self._attempt_cap_s()))
            except grpc.aio.AioRpcError as exc:
                tried[target] = exc.code().name
                locator.unreachable(target)
                continue
            if answer.error.code != common_pb2.NOT_CONTROLLER:
                if locator.active != target:
                    logger.info("event=active_controller target=%s leader=%s epoch=%s "
                                "rpc=%s waited_ms=%d tried=%r", target,
                                answer.active_controller.leader_id,
                                answer.active_controller.leader_epoch, rpc,
                                (deadline.timeout_s - deadline.remaining()) * 1000, tried)
                locator.answered(target)
                return answer
            hint = answer.active_controller
            tried[target] = f"NOT_CONTROLLER, leader {hint.leader_id}"
            locator.not_controller(target, self._hint_target(hint))

    # -- the raft leader -----------------------------------------------------------------------

    async def describe_quorum(self, deadline: Deadline) -> tuple[str, raft_pb2.DescribeQuorumResponse]:
        """The raft leader's address and its DescribeQuorum answer."""
        tried: dict[str, str] = {}
        locator = self._raft
        # The active controller is most likely the raft leader too (combined or not).
        locator.begin(None if locator.active is not None else self._controllers.active)
        while True:
            if deadline.expired():
                raise RequestFailed(ErrorCode.NOT_CONTROLLER, (
                    f"DescribeQuorum: no raft leader answered within {deadline.timeout_s:.1f} s; "
                    "tried " + ", ".join(f"{t} ({why})" for t, why in sorted(tried.items()))))
            attempt = locator.next()
            if attempt is None or attempt.back_off:
                await self._back_off(deadline)
                if attempt is None or deadline.expired():
                    continue
            target = attempt.target
            stub = raft_pb2_grpc.RaftServiceStub(self.channel(target))
            try:
                answer: raft_pb2.DescribeQuorumResponse = await stub.DescribeQuorum(
                    raft_pb2.DescribeQuorumRequest(topic_partition=common_pb2.TopicPartition(
                        topic=METADATA_TOPIC, partition=0)),
                    timeout=deadline.attempt(self._attempt_cap_s()))
            except grpc.aio.AioRpcError as exc:
                tried[target] = exc.code().name
                locator.unreachable(target)
                continue
            if answer.error.code == common_pb2.NONE:
                locator.answered(target)
                return target, answer
            tried[target] = f"{ErrorCode(answer.error.code).name}, leader {answer.leader_id}"
            hinted = self._leader_address(answer)
            locator.not_controller(target, hinted if hinted != target else None)

    def _leader_address(self, answer: raft_pb2.DescribeQuorumResponse) -> str | None:
        if answer.leader_id < 0:
            return None
        for node in answer.nodes:
            if node.node_id == answer.leader_id and node.listeners:
                return endpoint_text(node.listeners[0])
        return self.settings.voters.get(answer.leader_id)

    # -- brokers -------------------------------------------------------------------------------

    async def brokers(self, deadline: Deadline) -> list[BrokerAddress]:
        """Every registered broker (fenced ones too), from the active controller."""
        answer: controller_pb2.DescribeClusterResponse = await self.controller_call(
            "DescribeCluster", controller_pb2.DescribeClusterRequest(include_fenced_brokers=True),
            deadline)
        if answer.error.code != common_pb2.NONE:
            raise RequestFailed(ErrorCode(answer.error.code),
                                f"DescribeCluster: {answer.error.message}")
        found = []
        for broker in answer.brokers:
            if broker.endpoints:
                found.append(BrokerAddress(broker_id=broker.broker_id,
                                           target=endpoint_text(broker.endpoints[0]),
                                           fenced=broker.is_fenced))
        return found

    async def live_brokers(self, deadline: Deadline) -> list[BrokerAddress]:
        return [b for b in await self.brokers(deadline) if not b.fenced]

    def broker_stub(self, broker: BrokerAddress) -> broker_pb2_grpc.BrokerServiceStub:
        return broker_pb2_grpc.BrokerServiceStub(self.channel(broker.target))

    async def metadata(self, topics: Sequence[str], deadline: Deadline,
                       brokers: Sequence[BrokerAddress] | None = None,
                       ) -> broker_pb2.MetadataResponse:
        """One live broker's Metadata answer (the last one that answered is asked first)."""
        live = list(brokers) if brokers is not None else await self.live_brokers(deadline)
        if not live:
            raise RequestFailed(ErrorCode.BROKER_NOT_AVAILABLE,
                                "no live (registered, unfenced) broker to read metadata from")
        live.sort(key=lambda b: (b.broker_id != self._preferred_broker, b.broker_id))
        tried: dict[str, str] = {}
        for broker in live:
            if deadline.expired():
                break
            try:
                answer: broker_pb2.MetadataResponse = await self.broker_stub(broker).Metadata(
                    broker_pb2.MetadataRequest(topics=list(topics)),
                    timeout=deadline.attempt(self._attempt_cap_s()))
            except grpc.aio.AioRpcError as exc:
                tried[f"broker {broker.broker_id} at {broker.target}"] = exc.code().name
                continue
            self._preferred_broker = broker.broker_id
            return answer
        raise RequestFailed(ErrorCode.BROKER_NOT_AVAILABLE, "no broker answered Metadata; tried "
                            + ", ".join(f"{b} ({why})" for b, why in tried.items()))


# -- the servicer ---------------------------------------------------------------------------------

Partition = admin_pb2.DescribeTopicsResponse.PartitionDescription
TopicDescription = admin_pb2.DescribeTopicsResponse.TopicDescription
Progress = admin_pb2.ListPartitionReassignmentsProgressResponse


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    """Every AdminService RPC; holds no cluster state beyond the locator's caches."""

    def __init__(self, locator: ClusterLocator) -> None:
        self.locator = locator
        self.settings = locator.settings
        self._crash_log = rpc_guard.RateLimitedLog()

    # -- plumbing ------------------------------------------------------------------------------

    def _deadline(self, context: Any) -> Deadline:
        remaining = context.time_remaining() if context is not None else None
        default_s = self.settings.default_api_timeout_ms / 1000
        if remaining is None:
            return Deadline(default_s)
        # Answer a little before the caller gives up, so it reads why rather than a bare
        # DEADLINE_EXCEEDED.
        margin_s = min(ANSWER_MARGIN_S, remaining / 10)
        return Deadline(max(min(remaining - margin_s, default_s), 0.0))

    async def _run(self, rpc: str, context: Any, response_cls: type[T],
                   body: Callable[[Deadline], Awaitable[T]]) -> T:
        deadline = self._deadline(context)
        try:
            return await body(deadline)
        except RequestFailed as exc:
            logger.info("event=admin_rpc_failed rpc=%s code=%s message=%r", rpc, exc.code.name,
                        exc.message)
            code, message = exc.code, exc.message
        except Exception as exc:  # a bug here must not become a bare gRPC UNKNOWN
            # One traceback per interval and RPC; the caller learns that it failed, not
            # the text (which may name files of this server).
            suppressed = self._crash_log.admit(rpc)
            if suppressed is not None:
                logger.error("event=admin_rpc_crashed rpc=%s error=%s suppressed=%d", rpc,
                             type(exc).__name__, suppressed, exc_info=exc)
            code, message = (ErrorCode.UNKNOWN_SERVER_ERROR,
                             f"{rpc}: internal error in the admin service (logged there)")
        response = response_cls()
        response.error.CopyFrom(error_proto(code, message))  # type: ignore[attr-defined]
        return response

    async def _forward(self, rpc: str, request: Any, context: Any, response_cls: type[T]) -> T:
        async def body(deadline: Deadline) -> T:
            answer: T = await self.locator.controller_call(rpc, request, deadline)
            return answer
        return await self._run(rpc, context, response_cls, body)

    # -- controller pass-throughs -----------------------------------------------------------------

    async def CreateTopics(self, request: controller_pb2.CreateTopicsRequest,
                           context: Any) -> controller_pb2.CreateTopicsResponse:
        async def body(deadline: Deadline) -> controller_pb2.CreateTopicsResponse:
            answer: controller_pb2.CreateTopicsResponse = await self.locator.controller_call(
                "CreateTopics", request, deadline)
            if not request.validate_only:
                created = {t.name: t.num_partitions for t in answer.topics
                           if t.error.code == common_pb2.NONE}
                await self._await_brokers(deadline, list(created), lambda topics: all(
                    t.name in created and t.error.code == common_pb2.NONE
                    and len(t.partitions) == created[t.name] for t in topics))
            return answer
        return await self._run("CreateTopics", context, controller_pb2.CreateTopicsResponse, body)

    async def DeleteTopics(self, request: controller_pb2.DeleteTopicsRequest,
                           context: Any) -> controller_pb2.DeleteTopicsResponse:
        async def body(deadline: Deadline) -> controller_pb2.DeleteTopicsResponse:
            answer: controller_pb2.DeleteTopicsResponse = await self.locator.controller_call(
                "DeleteTopics", request, deadline)
            gone = [t.name for t in answer.responses if t.error.code == common_pb2.NONE and t.name]
            await self._await_brokers(deadline, gone, lambda topics: all(
                t.error.code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION for t in topics))
            return answer
        return await self._run("DeleteTopics", context, controller_pb2.DeleteTopicsResponse, body)

    async def CreatePartitions(self, request: controller_pb2.CreatePartitionsRequest,
                               context: Any) -> controller_pb2.CreatePartitionsResponse:
        async def body(deadline: Deadline) -> controller_pb2.CreatePartitionsResponse:
            answer: controller_pb2.CreatePartitionsResponse = await self.locator.controller_call(
                "CreatePartitions", request, deadline)
            if not request.validate_only:
                counts = {t.name: t.count for t in request.topics}
                grown = {r.name: counts[r.name] for r in answer.results
                         if r.error.code == common_pb2.NONE and r.name in counts}
                await self._await_brokers(deadline, list(grown), lambda topics: all(
                    t.name in grown and len(t.partitions) >= grown[t.name] for t in topics))
            return answer
        return await self._run("CreatePartitions", context,
                               controller_pb2.CreatePartitionsResponse, body)

    async def AlterPartitionReassignments(
            self, request: controller_pb2.AlterPartitionReassignmentsRequest,
            context: Any) -> controller_pb2.AlterPartitionReassignmentsResponse:
        return await self._forward("AlterPartitionReassignments", request, context,
                                   controller_pb2.AlterPartitionReassignmentsResponse)

    async def ElectLeaders(self, request: controller_pb2.ElectLeadersRequest,
                           context: Any) -> controller_pb2.ElectLeadersResponse:
        return await self._forward("ElectLeaders", request, context,
                                   controller_pb2.ElectLeadersResponse)

    async def DescribeCluster(self, request: controller_pb2.DescribeClusterRequest,
                              context: Any) -> controller_pb2.DescribeClusterResponse:
        return await self._forward("DescribeCluster", request, context,
                                   controller_pb2.DescribeClusterResponse)

    async def UnregisterBroker(self, request: controller_pb2.UnregisterBrokerRequest,
                               context: Any) -> controller_pb2.UnregisterBrokerResponse:
        return await self._forward("UnregisterBroker", request, context,
                                   controller_pb2.UnregisterBrokerResponse)

    async def DescribeConfigs(self, request: controller_pb2.DescribeConfigsRequest,
                              context: Any) -> controller_pb2.DescribeConfigsResponse:
        return await self._forward("DescribeConfigs", request, context,
                                   controller_pb2.DescribeConfigsResponse)

    async def IncrementalAlterConfigs(
            self, request: controller_pb2.IncrementalAlterConfigsRequest,
            context: Any) -> controller_pb2.IncrementalAlterConfigsResponse:
        return await self._forward("IncrementalAlterConfigs", request, context,
                                   controller_pb2.IncrementalAlterConfigsResponse)

    async def CancelPartitionReassignments(
            self, request: admin_pb2.CancelPartitionReassignmentsRequest,
            context: Any) -> controller_pb2.AlterPartitionReassignmentsResponse:
        async def body(deadline: Deadline) -> controller_pb2.AlterPartitionReassignmentsResponse:
            wanted: dict[str, list[int]] = {}
            for topic in request.topics:
                wanted.setdefault(topic.topic, []).extend(topic.partitions)
            # No partitions named (for the request, or for a topic): every reassignment in
            # progress there.
            whole = [name for name, partitions in wanted.items() if not partitions]
            if not request.topics or whole:
                ongoing: controller_pb2.ListPartitionReassignmentsResponse = \
                    await self.locator.controller_call(
                        "ListPartitionReassignments",
                        controller_pb2.ListPartitionReassignmentsRequest(
                            timeout_ms=request.timeout_ms,
                            topics=[common_pb2.TopicPartitions(topic=n) for n in whole]),
                        deadline)
                if ongoing.error.code != common_pb2.NONE:
                    return controller_pb2.AlterPartitionReassignmentsResponse(
                        error=ongoing.error, active_controller=ongoing.active_controller)
                for ongoing_topic in ongoing.topics:
                    wanted[ongoing_topic.name] = [p.partition_index
                                                  for p in ongoing_topic.partitions]
            alter = controller_pb2.AlterPartitionReassignmentsRequest(
                timeout_ms=request.timeout_ms)
            R = controller_pb2.AlterPartitionReassignmentsRequest
            for name, partitions in wanted.items():
                if not partitions:
                    continue  # a whole topic with nothing in progress: nothing to cancel
                # A ReassignablePartition without replicas cancels (Kafka's null replicas).
                alter.topics.append(R.ReassignableTopic(name=name, partitions=[
                    R.ReassignablePartition(partition_index=p) for p in partitions]))
            if not alter.topics:
                return controller_pb2.AlterPartitionReassignmentsResponse()
            answer: controller_pb2.AlterPartitionReassignmentsResponse = \
                await self.locator.controller_call("AlterPartitionReassignments", alter,
                                                   deadline)
            return answer
        return await self._run("CancelPartitionReassignments", context,
                               controller_pb2.AlterPartitionReassignmentsResponse, body)

    async def _await_brokers(self, deadline: Deadline, names: Sequence[str],
                             done: Callable[[Sequence[broker_pb2.MetadataResponse
                                                      .MetadataResponseTopic]], bool]) -> None:
        """Until every live broker's metadata satisfies ``done`` for ``names`` (best effort:
        at most :data:`PROPAGATION_WAIT_S`, and never past the deadline)."""
        if not names:
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        stop_at = min(started + PROPAGATION_WAIT_S, deadline.at - 0.05)
        try:
            brokers = await self.locator.live_brokers(deadline)
        except RequestFailed:
            return
        waiting = list(brokers)
        while waiting and loop.time() < stop_at:
            still = []
            for broker in waiting:
                try:
                    answer: broker_pb2.MetadataResponse = await self.locator.broker_stub(
                        broker).Metadata(broker_pb2.MetadataRequest(topics=list(names)),
                                         timeout=max(stop_at - loop.time(), 0.001))
                except grpc.aio.AioRpcError:
                    continue  # a broker that does not answer cannot be waited for
                if not done(answer.topics):
                    still.append(broker)
            waiting = still
            if waiting:
                await asyncio.sleep(PROPAGATION_POLL_S)
        logger.info("event=metadata_propagation topics=%s waited_ms=%d lagging_brokers=%s",
                    list(names), (loop.time() - started) * 1000,
                    [b.broker_id for b in waiting])

    # -- DescribeTopics / ListTopics --------------------------------------------------------------

    async def ListTopics(self, request: admin_pb2.ListTopicsRequest,
                         context: Any) -> admin_pb2.ListTopicsResponse:
        async def body(deadline: Deadline) -> admin_pb2.ListTopicsResponse:
            metadata = await self.locator.metadata((), deadline)
            response = admin_pb2.ListTopicsResponse()
            for topic in sorted(metadata.topics, key=lambda t: t.name):
                if request.exclude_internal and topic.is_internal:
                    continue
                response.topics.append(admin_pb2.ListTopicsResponse.TopicListing(
                    name=topic.name, topic_id=topic.topic_id,
                    partition_count=len(topic.partitions), is_internal=topic.is_internal))
            return response
        return await self._run("ListTopics", context, admin_pb2.ListTopicsResponse, body)

    async def DescribeTopics(self, request: admin_pb2.DescribeTopicsRequest,
                             context: Any) -> admin_pb2.DescribeTopicsResponse:
        async def body(deadline: Deadline) -> admin_pb2.DescribeTopicsResponse:
            return await self._describe_topics(request, deadline)
        return await self._run("DescribeTopics", context, admin_pb2.DescribeTopicsResponse, body)

    async def _describe_topics(self, request: admin_pb2.DescribeTopicsRequest,
                               deadline: Deadline) -> admin_pb2.DescribeTopicsResponse:
        try:
            health_filter = topic_health.HealthFilter(int(request.health_filter))
        except ValueError:
            raise RequestFailed(ErrorCode.INVALID_REQUEST, f"DescribeTopics: health_filter "
                                f"{int(request.health_filter)} is not a PartitionHealthFilter"
                                ) from None
        if any(not name for name in request.topics):
            raise RequestFailed(ErrorCode.INVALID_REQUEST,
                                "DescribeTopics: a topic name is empty")
        brokers = await self.locator.live_brokers(deadline)
        metadata = await self.locator.metadata(list(request.topics), deadline, brokers)
        live = {b.node_id for b in metadata.brokers}
        found = [t for t in metadata.topics if t.error.code == common_pb2.NONE
                 and not (request.exclude_internal and t.is_internal)]
        configs = await self._topic_configs([t.name for t in found], deadline)
        moving = await self._reassignments([t.name for t in found], deadline)
        response = admin_pb2.DescribeTopicsResponse()
        for topic in sorted(metadata.topics, key=lambda t: t.name):
            if topic.error.code != common_pb2.NONE:
                response.topics.append(TopicDescription(error=topic.error, name=topic.name))
                continue
            if request.exclude_internal and topic.is_internal:
                continue
            topic_configs, min_isr = configs.get(topic.name, ({}, 1))
            partitions = []
            for p in sorted(topic.partitions, key=lambda p: p.partition_index):
                adding, removing = moving.get((topic.name, p.partition_index), ((), ()))
                health = topic_health.PartitionHealth(
                    leader_id=p.leader_id, replicas=tuple(p.replica_nodes),
                    isr=tuple(p.isr_nodes), removing_replicas=removing)
                if not topic_health.matches(health_filter, health, min_isr=min_isr,
                                            live_brokers=live):
                    continue
                partitions.append(Partition(
                    partition_index=p.partition_index, leader_id=p.leader_id,
                    leader_epoch=p.leader_epoch, replicas=p.replica_nodes, isr=p.isr_nodes,
                    adding_replicas=adding, removing_replicas=removing,
                    offline_replicas=p.offline_replicas,
                    eligible_leader_replicas=p.eligible_leader_replicas,
                    last_known_elr=p.last_known_elr))
            if health_filter is not topic_health.HealthFilter.ALL and not partitions:
                continue
            first = min(topic.partitions, key=lambda p: p.partition_index, default=None)
            rf = 0
            if first is not None:
                _adding, removing = moving.get((topic.name, first.partition_index), ((), ()))
                rf = topic_health.replication_factor(first.replica_nodes, removing)
            response.topics.append(TopicDescription(
                error=error_proto(ErrorCode.NONE), name=topic.name, topic_id=topic.topic_id,
                is_internal=topic.is_internal, partition_count=len(topic.partitions),
                replication_factor=rf, min_insync_replicas=min_isr,
                configs=[admin_pb2.DescribeTopicsResponse.TopicConfig(name=k, value=v)
                         for k, v in sorted(topic_configs.items())],
                partitions=partitions))
        return response

    async def _topic_configs(self, names: Sequence[str], deadline: Deadline,
                             ) -> dict[str, tuple[dict[str, str], int]]:
        """Per topic: the configs set on it, and its effective min.insync.replicas."""
        if not names:
            return {}
        request = controller_pb2.DescribeConfigsRequest(resources=[
            controller_pb2.DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=common_pb2.CONFIG_RESOURCE_TYPE_TOPIC, resource_name=name)
            for name in names])
        answer: controller_pb2.DescribeConfigsResponse = await self.locator.controller_call(
            "DescribeConfigs", request, deadline)
        if answer.error.code != common_pb2.NONE:
            raise RequestFailed(ErrorCode(answer.error.code),
                                f"DescribeConfigs: {answer.error.message}")
        result: dict[str, tuple[dict[str, str], int]] = {}
        for item in answer.results:
            if item.error.code != common_pb2.NONE:
                continue  # deleted meanwhile: the defaults stand
            own = {c.name: c.value for c in item.configs
                   if c.config_source == common_pb2.CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG}
            min_isr = next((int(c.value) for c in item.configs
                            if c.name == MIN_INSYNC_REPLICAS and c.value.isdigit()), 1)
            result[item.resource_name] = (own, min_isr)
        return result

    async def _reassignments(self, names: Sequence[str], deadline: Deadline,
                             ) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...]]]:
        """(topic, partition) -> (adding, removing) replicas of reassignments in progress."""
        if not names:
            return {}
        answer: controller_pb2.ListPartitionReassignmentsResponse = \
            await self.locator.controller_call(
                "ListPartitionReassignments", controller_pb2.ListPartitionReassignmentsRequest(
                    topics=[common_pb2.TopicPartitions(topic=n) for n in names]), deadline)
        if answer.error.code != common_pb2.NONE:
            raise RequestFailed(ErrorCode(answer.error.code),
                                f"ListPartitionReassignments: {answer.error.message}")
        return {(t.name, p.partition_index): (tuple(p.adding_replicas),
                                              tuple(p.removing_replicas))
                for t in answer.topics for p in t.partitions}

    # -- reassignment progress ---------------------------------------------------------------------

    async def ListPartitionReassignments(
            self, request: controller_pb2.ListPartitionReassignmentsRequest,
            context: Any) -> admin_pb2.ListPartitionReassignmentsProgressResponse:
        async def body(deadline: Deadline) -> admin_pb2.ListPartitionReassignmentsProgressResponse:
            return await self._reassignment_progress(request, deadline)
        return await self._run("ListPartitionReassignments", context,
                               admin_pb2.ListPartitionReassignmentsProgressResponse, body)

    async def _reassignment_progress(
            self, request: controller_pb2.ListPartitionReassignmentsRequest,
            deadline: Deadline) -> admin_pb2.ListPartitionReassignmentsProgressResponse:
        ongoing: controller_pb2.ListPartitionReassignmentsResponse = \
            await self.locator.controller_call("ListPartitionReassignments", request, deadline)
        response = Progress(error=ongoing.error, active_controller=ongoing.active_controller)
        if ongoing.error.code != common_pb2.NONE or not ongoing.topics:
            return response
        brokers = {b.broker_id: b for b in await self.locator.brokers(deadline)}
        metadata = await self.locator.metadata(
            [t.name for t in ongoing.topics], deadline,
            [b for b in brokers.values() if not b.fenced])
        state = {(t.name, p.partition_index): p for t in metadata.topics for p in t.partitions}
        # Which partitions to ask each broker about: the leader's and the adding replicas'.
        asks: dict[int, dict[str, set[int]]] = {}
        for topic in ongoing.topics:
            for p in topic.partitions:
                meta = state.get((topic.name, p.partition_index))
                ids = list(p.adding_replicas) + ([meta.leader_id] if meta is not None
                                                 and meta.leader_id >= 0 else [])
                for broker_id in ids:
                    asks.setdefault(broker_id, {}).setdefault(topic.name, set()).add(
                        p.partition_index)
        dirs = await self._log_dirs(asks, brokers, deadline)
        for topic in ongoing.topics:
            entry = Progress.TopicReassignmentProgress(name=topic.name)
            for p in topic.partitions:
                key = (topic.name, p.partition_index)
                meta = state.get(key)
                leader = meta.leader_id if meta is not None else -1
                isr = set(meta.isr_nodes) if meta is not None else set()
                leader_size, leader_end = _replica_size(dirs.get(leader), key)
                part = Progress.PartitionReassignmentProgress(
                    partition_index=p.partition_index, replicas=p.replicas,
                    adding_replicas=p.adding_replicas, removing_replicas=p.removing_replicas)
                for replica in p.adding_replicas:
                    answer = dirs.get(replica)
                    if isinstance(answer, common_pb2.Error):
                        part.progress.append(Progress.AddingReplicaProgress(
                            replica_id=replica, error=answer, size_bytes=-1,
                            leader_size_bytes=leader_size, bytes_behind=-1, log_end_offset=-1,
                            leader_log_end_offset=leader_end, in_sync=replica in isr))
                        continue
                    size, end = _replica_size(answer, key)
                    behind = -1 if size < 0 or leader_size < 0 else max(0, leader_size - size)
                    part.progress.append(Progress.AddingReplicaProgress(
                        replica_id=replica, error=error_proto(ErrorCode.NONE), size_bytes=size,
                        leader_size_bytes=leader_size, bytes_behind=behind, log_end_offset=end,
                        leader_log_end_offset=leader_end, in_sync=replica in isr))
                entry.partitions.append(part)
            response.topics.append(entry)
        return response

    async def _log_dirs(self, asks: Mapping[int, Mapping[str, set[int]]],
                        brokers: Mapping[int, BrokerAddress], deadline: Deadline,
                        ) -> dict[int, broker_pb2.DescribeLogDirsResponse | common_pb2.Error]:
        """Each broker's DescribeLogDirs answer for the partitions asked, or why there is none."""
        async def ask(broker_id: int, topics: Mapping[str, set[int]],
                      ) -> broker_pb2.DescribeLogDirsResponse | common_pb2.Error:
            broker = brokers.get(broker_id)
            if broker is None:
                return error_proto(ErrorCode.BROKER_ID_NOT_REGISTERED,
                                   f"broker {broker_id} is not registered")
            request = broker_pb2.DescribeLogDirsRequest(topics=[
                common_pb2.TopicPartitions(topic=name, partitions=sorted(parts))
                for name, parts in sorted(topics.items())])
            try:
                answer: broker_pb2.DescribeLogDirsResponse = await self.locator.broker_stub(
                    broker).DescribeLogDirs(
                        request, timeout=deadline.attempt(self.settings.request_timeout_ms
                                                          / 1000))
            except grpc.aio.AioRpcError as exc:
                code = (ErrorCode.REQUEST_TIMED_OUT
                        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                        else ErrorCode.BROKER_NOT_AVAILABLE)
                return error_proto(code, f"broker {broker_id} at {broker.target}: "
                                         f"{exc.code().name}")
            return answer
        ids = sorted(asks)
        answers = await asyncio.gather(*(ask(i, asks[i]) for i in ids))
        return dict(zip(ids, answers, strict=True))

    async def DescribeLogDirs(self, request: admin_pb2.AdminDescribeLogDirsRequest,
                              context: Any) -> admin_pb2.AdminDescribeLogDirsResponse:
        async def body(deadline: Deadline) -> admin_pb2.AdminDescribeLogDirsResponse:
            bad = ([f"broker id {i}" for i in request.broker_ids if i < 0]
                   + [f"partition {t.topic}-{p}" for t in request.topics
                      for p in t.partitions if p < 0])
            if bad:
                raise RequestFailed(ErrorCode.INVALID_REQUEST,
                                    f"DescribeLogDirs: negative {', '.join(bad[:5])}")
            brokers = {b.broker_id: b for b in await self.locator.brokers(deadline)}
            ids = list(dict.fromkeys(request.broker_ids)) or sorted(
                i for i, b in brokers.items() if not b.fenced)
            topics = {t.topic: set(t.partitions) for t in request.topics}
            asks = {i: topics for i in ids}
            if not topics:
                asks = {i: {} for i in ids}
            answers = await self._log_dirs(asks, brokers, deadline)
            response = admin_pb2.AdminDescribeLogDirsResponse()
            for broker_id in ids:
                answer = answers[broker_id]
                entry = admin_pb2.AdminDescribeLogDirsResponse.BrokerLogDirs(broker_id=broker_id)
                if isinstance(answer, common_pb2.Error):
                    entry.error.CopyFrom(answer)
                elif answer.error.code != common_pb2.NONE:
                    entry.error.CopyFrom(answer.error)
                else:
                    entry.error.CopyFrom(error_proto(ErrorCode.NONE))
                    entry.results.extend(answer.results)
                response.brokers.append(entry)
            return response
        return await self._run("DescribeLogDirs", context,
                               admin_pb2.AdminDescribeLogDirsResponse, body)

    # -- DeleteRecords --------------------------------------------------------------------------------

    async def DeleteRecords(self, request: broker_pb2.DeleteRecordsRequest,
                            context: Any) -> broker_pb2.DeleteRecordsResponse:
        async def body(deadline: Deadline) -> broker_pb2.DeleteRecordsResponse:
            return await self._delete_records(request, deadline)
        return await self._run("DeleteRecords", context, broker_pb2.DeleteRecordsResponse, body)

    async def _delete_records(self, request: broker_pb2.DeleteRecordsRequest,
                              deadline: Deadline) -> broker_pb2.DeleteRecordsResponse:
        Result = broker_pb2.DeleteRecordsResponse.DeleteRecordsPartitionResult
        order: list[tuple[str, int]] = []
        pending: dict[tuple[str, int], int] = {}
        results: dict[tuple[str, int], Any] = {}
        for topic in request.topics:
            for part in topic.partitions:
                key = (topic.name, part.partition_index)
                if key in pending or key in results:
                    pending.pop(key, None)
                    results[key] = Result(partition_index=key[1], low_watermark=-1, error=error_proto(
                        ErrorCode.INVALID_REQUEST, f"partition {key[0]}-{key[1]} given twice"))
                    continue
                order.append(key)
                pending[key] = part.offset
        last_error: dict[tuple[str, int], common_pb2.Error] = {}
        while pending:
            answer = await self.locator.metadata(sorted({name for name, _ in pending}), deadline)
            addresses = {b.node_id: endpoint_text(b.endpoint) for b in answer.brokers}
            leaders: dict[str, dict[tuple[str, int], int]] = {}
            for topic_meta in answer.topics:
                keys = [k for k in pending if k[0] == topic_meta.name]
                partitions = {p.partition_index: p for p in topic_meta.partitions}
                for key in keys:
                    found = partitions.get(key[1])
                    if topic_meta.error.code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION or (
                            found is None and topic_meta.error.code == common_pb2.NONE):
                        del pending[key]
                        results[key] = Result(partition_index=key[1], low_watermark=-1,
                                              error=error_proto(
                                                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                  f"partition {key[0]}-{key[1]} does not exist"))
                    elif found is None or found.leader_id not in addresses:
                        last_error[key] = error_proto(ErrorCode.LEADER_NOT_AVAILABLE,
                                                      f"no live leader for {key[0]}-{key[1]}")
                    else:
                        leaders.setdefault(addresses[found.leader_id], {})[key] = pending[key]
            replies = await asyncio.gather(*(self._delete_on_leader(target, asked, deadline)
                                             for target, asked in leaders.items()))
            for reply in replies:
                for key, result in reply.items():
                    if result.error.code in _DELETE_RECORDS_RETRIABLE:
                        last_error[key] = result.error
                    else:
                        del pending[key]
                        results[key] = result
            if not pending:
                break
            backoff_s = self.settings.retry_backoff_ms / 1000
            if deadline.remaining() <= backoff_s:
                for key in pending:
                    error = last_error.get(key) or error_proto(
                        ErrorCode.REQUEST_TIMED_OUT, f"no leader of {key[0]}-{key[1]} answered")
                    results[key] = Result(partition_index=key[1], low_watermark=-1, error=error)
                break
            await asyncio.sleep(backoff_s)
        response = broker_pb2.DeleteRecordsResponse(error=error_proto(ErrorCode.NONE))
        by_topic: dict[str, Any] = {}
        for key in dict.fromkeys([*order, *results]):
            if key not in results:
                continue
            entry = by_topic.get(key[0])
            if entry is None:
                entry = by_topic[key[0]] = response.topics.add(name=key[0])
            entry.partitions.append(results[key])
        return response

    async def _delete_on_leader(self, target: str, asked: Mapping[tuple[str, int], int],
                                deadline: Deadline) -> dict[tuple[str, int], Any]:
        """One BrokerService DeleteRecords to the leader at ``target``: each partition's
        result (an unreachable leader answers LEADER_NOT_AVAILABLE, retried by the caller)."""
        Result = broker_pb2.DeleteRecordsResponse.DeleteRecordsPartitionResult
        topics: dict[str, list[broker_pb2.DeleteRecordsRequest.DeleteRecordsPartition]] = {}
        for (name, index), offset in asked.items():
            topics.setdefault(name, []).append(
                broker_pb2.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=index,
                                                                       offset=offset))
        # The leader waits for its followers at most until a little before our deadline.
        wait_s = max(deadline.remaining() - ANSWER_MARGIN_S, 0.0)
        request = broker_pb2.DeleteRecordsRequest(timeout_ms=int(wait_s * 1000), topics=[
            broker_pb2.DeleteRecordsRequest.DeleteRecordsTopic(name=name, partitions=parts)
            for name, parts in topics.items()])
        stub = broker_pb2_grpc.BrokerServiceStub(self.locator.channel(target))
        try:
            answer: broker_pb2.DeleteRecordsResponse = await stub.DeleteRecords(
                request, timeout=max(deadline.remaining(), 0.001))
        except grpc.aio.AioRpcError as exc:
            return {key: Result(partition_index=key[1], low_watermark=-1, error=error_proto(
                ErrorCode.LEADER_NOT_AVAILABLE, f"leader at {target}: {exc.code().name}"))
                for key in asked}
        found: dict[tuple[str, int], Any] = {}
        for topic in answer.topics:
            for part in topic.partitions:
                key = (topic.name, part.partition_index)
                if key in asked:
                    result = Result()
                    result.CopyFrom(part)
                    found[key] = result
        for key in asked:
            found.setdefault(key, Result(partition_index=key[1], low_watermark=-1, error=error_proto(
                ErrorCode.UNKNOWN_SERVER_ERROR, f"the leader at {target} did not answer for it")))
        return found

    # -- the quorum ----------------------------------------------------------------------------------

    async def DescribeQuorum(self, request: raft_pb2.DescribeQuorumRequest,
                             context: Any) -> raft_pb2.DescribeQuorumResponse:
        async def body(deadline: Deadline) -> raft_pb2.DescribeQuorumResponse:
            _target, answer = await self.locator.describe_quorum(deadline)
            return answer
        return await self._run("DescribeQuorum", context, raft_pb2.DescribeQuorumResponse, body)

    async def QuorumHistory(self, request: admin_pb2.QuorumHistoryRequest,
                            context: Any) -> admin_pb2.QuorumHistoryResponse:
        async def body(deadline: Deadline) -> admin_pb2.QuorumHistoryResponse:
            if request.from_epoch < 0 or request.max_entries < 0:
                raise RequestFailed(ErrorCode.INVALID_REQUEST,
                                    "from_epoch and max_entries must not be negative")
            history = await self._read_metadata_log(deadline)
            return history_response(history, from_epoch=request.from_epoch,
                                    max_entries=request.max_entries)
        return await self._run("QuorumHistory", context, admin_pb2.QuorumHistoryResponse, body)

    async def _read_metadata_log(self, deadline: Deadline) -> quorum_history.QuorumHistory:
        """The raft leader's committed metadata log, fetched as an anonymous observer (replica
        -1, which the leader does not track) from the log start to the high watermark."""
        target, quorum = await self.locator.describe_quorum(deadline)
        stub = raft_pb2_grpc.RaftServiceStub(self.locator.channel(target))
        cluster_id = await self._cluster_id(deadline)
        chunks: list[bytes] = []
        fetch_offset, last_epoch = 0, 0  # the raft leader takes epoch 0 for an empty log
        while fetch_offset < quorum.high_watermark:
            try:
                answer: raft_pb2.RaftFetchResponse = await stub.Fetch(raft_pb2.RaftFetchRequest(
                    cluster_id=cluster_id, topic_partition=common_pb2.TopicPartition(
                        topic=METADATA_TOPIC, partition=0),
                    replica_id=-1, replica_epoch=-1, current_leader_epoch=quorum.leader_epoch,
                    fetch_offset=fetch_offset, last_fetched_epoch=last_epoch,
                    log_start_offset=-1, max_wait_ms=0, max_bytes=FETCH_MAX_BYTES),
                    timeout=deadline.attempt(self.settings.request_timeout_ms / 1000))
            except grpc.aio.AioRpcError as exc:
                raise RequestFailed(ErrorCode.NOT_CONTROLLER, f"Fetch of the metadata log from "
                                    f"{target}: {exc.code().name}") from None
            if answer.error.code != common_pb2.NONE:
                raise RequestFailed(ErrorCode(answer.error.code), f"Fetch of the metadata log "
                                    f"from {target}: {answer.error.message}")
            if answer.HasField("snapshot_id") and answer.snapshot_id.end_offset > fetch_offset:
                # Below the log start: the older epochs live only in the snapshot.
                fetch_offset = answer.snapshot_id.end_offset
                last_epoch = answer.snapshot_id.epoch
                continue
            if not answer.records:
                break
            chunks.append(answer.records)
            fetch_offset, last_epoch = _after_last_batch(answer.records)
        return quorum_history.build_history([("metadata-log", b"".join(chunks))])

    async def _cluster_id(self, deadline: Deadline) -> str:
        answer: controller_pb2.DescribeClusterResponse = await self.locator.controller_call(
            "DescribeCluster", controller_pb2.DescribeClusterRequest(), deadline)
        if answer.error.code != common_pb2.NONE:
            raise RequestFailed(ErrorCode(answer.error.code),
                                f"DescribeCluster: {answer.error.message}")
        return answer.cluster_id


_DELETE_RECORDS_RETRIABLE = frozenset({
    common_pb2.NOT_LEADER_OR_FOLLOWER, common_pb2.LEADER_NOT_AVAILABLE,
    common_pb2.UNKNOWN_LEADER_EPOCH, common_pb2.FENCED_LEADER_EPOCH,
})
"""Broker answers after which the admin looks the leader up again and resends."""


def _after_last_batch(records: bytes) -> tuple[int, int]:
    """(next offset, epoch of the last batch) of concatenated RecordBatch v2 bytes."""
    last = None
    for header in bh.iter_batches(memoryview(records)):
        last = header
    if last is None:
        raise RequestFailed(ErrorCode.CORRUPT_MESSAGE, "the metadata log fetch returned no "
                            "whole batch")
    return last.last_offset + 1, last.partition_leader_epoch


def _replica_size(answer: broker_pb2.DescribeLogDirsResponse | common_pb2.Error | None,
                  key: tuple[str, int]) -> tuple[int, int]:
    """(bytes on disk, log end offset) of partition ``key`` in a broker's DescribeLogDirs
    answer; (0, 0) when the broker answered without it (its replica is not created yet:
    nothing copied), (-1, -1) when there is no answer."""
    if answer is None or isinstance(answer, common_pb2.Error):
        return -1, -1
    name, index = key
    for result in answer.results:
        for topic in result.topics:
            if topic.name != name:
                continue
            for p in topic.partitions:
                if p.partition_index == index and not p.is_future_key:
                    return p.partition_size, p.log_end_offset
    return 0, 0


def history_response(history: quorum_history.QuorumHistory, *, from_epoch: int = 0,
                     max_entries: int = 0) -> admin_pb2.QuorumHistoryResponse:
    """QuorumHistory's answer from a parsed history: epochs at or above ``from_epoch``, the
    newest ``max_entries`` of them (0: all), oldest first."""
    entries = [e for e in history.epochs if e.epoch >= from_epoch]
    if max_entries > 0:
        entries = entries[-max_entries:]
    response = admin_pb2.QuorumHistoryResponse(
        error=error_proto(ErrorCode.NONE),
        log_start_offset=history.log_start_offset if history.log_start_offset is not None else 0)
    for entry in entries:
        response.changes.append(admin_pb2.QuorumHistoryResponse.LeaderChange(
            epoch=entry.epoch, leader_id=entry.leader_id, voters=entry.voters,
            granting_voters=entry.granting_voters, offset=entry.start_offset,
            timestamp_ms=entry.start_timestamp_ms,
            leaderless_ms=-1 if entry.leaderless_ms is None else entry.leaderless_ms))
    return response


def add_to_server(servicer: AdminServicer, server: Any) -> None:
    rpc_guard.add_service(
        lambda s: admin_pb2_grpc.add_AdminServiceServicer_to_server(servicer, s), server)


SERVICE_NAME = "kraftlog.v1.AdminService"


def serve_on(server: Any, settings: AdminSettings, *,
             interceptors: Sequence[Any] = ()) -> ClusterLocator:
    """Add the AdminService to another role's gRPC server, before it starts.

    A broker does this (KIP-590's forwarding): ``kraftlog topics --bootstrap-server
    BROKER`` then reaches the same servicer as ``kraftlog admin`` serves, which forwards
    controller writes to the active controller. The caller closes the returned locator
    when the server stops."""
    locator = ClusterLocator(settings, interceptors=interceptors)
    add_to_server(AdminServicer(locator), server)
    return locator
