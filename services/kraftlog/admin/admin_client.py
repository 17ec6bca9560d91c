"""AdminClient: the typed asyncio client of the AdminService (Kafka's Admin, KIP-117).

Owns :class:`AdminClient`, its input values (:class:`NewTopic`, :class:`NewPartitions`,
:class:`ConfigResource`, :class:`ConfigChange`) and the :class:`AdminError` tree. Used
by the ``kraftlog topics|cluster`` commands (:mod:`.topic_commands`) and the
``reassign`` / ``leader-election`` tools.

The shape of the API, for every method:

- inputs are plain Python values and the frozen dataclasses below (never protobuf);
- the answer is the AdminService's protobuf response message, unchanged (its
  fields are documented in ``protos/kraftlog/v1/admin.proto`` and ``controller.proto``);
- every call has a deadline: ``timeout_ms`` of the call, else the client's;
- failures raise an :class:`AdminError` subclass carrying the Kafka error
  (``code``, ``error_name``, ``message``): a whole-request error in the response, an
  unreachable admin service (:class:`AdminUnreachableError`, naming the address) or
  a passed deadline (:class:`AdminTimeoutError`);
- per-item errors (per topic, partition, resource or broker) raise too, unless the
  call passes ``check=False``: then they stay in the response, and
  :func:`item_errors` lists them. With ``check=True`` the exception is the first
  failure's class and ``failures`` holds all of them.

Example::

    async with AdminClient("127.0.0.1:19090") as admin:
        await admin.create_topics([NewTopic(name="t", num_partitions=3, replication_factor=2)])
        described = await admin.describe_topics(["t"])

Edge module: grpc and protobuf.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
import grpc.aio

from kraftlog import errors, rpc
from kraftlog.admin import topic_health
from kraftlog.error_codes import ErrorCode
from kraftlog.v1 import admin_pb2, admin_pb2_grpc, broker_pb2, common_pb2, controller_pb2, raft_pb2

DEFAULT_ADMIN = "127.0.0.1:19090"
DEFAULT_TIMEOUT_MS = 30_000

T = TypeVar("T")


# -- errors ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class ItemError:
    """One failed item of a batch answer."""

    resource: str
    """What failed, as an operator names it: ``topic 't'``, ``partition t-0``, ``broker 4``."""
    code: ErrorCode
    message: str


class AdminError(errors.KraftlogError):
    """An admin call failed. ``code`` is the Kafka error; ``failures`` every failed item."""

    def __init__(self, code: ErrorCode, message: str, *,
                 failures: Sequence[ItemError] = ()) -> None:
        # str() ends with Kafka's error name, so scripts and people can match on it.
        super().__init__(f"{message} ({code.name})")
        self.code = code
        self.message = message
        self.failures = tuple(failures)

    @property
    def error_name(self) -> str:
        """Kafka's name of the error, e.g. ``UNKNOWN_TOPIC_OR_PARTITION``."""
        return self.code.name


class AdminUnreachableError(AdminError):
    """The AdminService itself could not be reached (its address is in the message)."""


class AdminTimeoutError(AdminError):
    """The call's deadline passed (REQUEST_TIMED_OUT)."""


class ClusterUnavailableError(AdminError):
    """The admin service could not find an active controller or a live broker."""


class UnknownTopicError(AdminError):
    """UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID."""


class TopicExistsError(AdminError):
    """TOPIC_ALREADY_EXISTS."""


class InvalidRequestError(AdminError):
    """The request was refused as invalid (INVALID_REQUEST, INVALID_TOPIC_EXCEPTION,
    POLICY_VIOLATION and the more specific subclasses)."""


class InvalidReplicationFactorError(InvalidRequestError):
    """INVALID_REPLICATION_FACTOR, e.g. more replicas than brokers."""


class InvalidPartitionsError(InvalidRequestError):
    """INVALID_PARTITIONS."""


class InvalidReplicaAssignmentError(InvalidRequestError):
    """INVALID_REPLICA_ASSIGNMENT."""


class InvalidConfigError(InvalidRequestError):
    """INVALID_CONFIG (unknown name or bad value)."""


class ReassignmentError(AdminError):
    """NO_REASSIGNMENT_IN_PROGRESS / REASSIGNMENT_IN_PROGRESS."""


class ElectionError(AdminError):
    """ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE."""


class BrokerError(AdminError):
    """BROKER_ID_NOT_REGISTERED, KAFKA_STORAGE_ERROR, LOG_DIR_NOT_FOUND."""


_ERROR_CLASSES: dict[ErrorCode, type[AdminError]] = {
    ErrorCode.REQUEST_TIMED_OUT: AdminTimeoutError,
    ErrorCode.NOT_CONTROLLER: ClusterUnavailableError,
    ErrorCode.BROKER_NOT_AVAILABLE: ClusterUnavailableError,
    ErrorCode.LEADER_NOT_AVAILABLE: ClusterUnavailableError,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: UnknownTopicError,
    ErrorCode.UNKNOWN_TOPIC_ID: UnknownTopicError,
    ErrorCode.TOPIC_ALREADY_EXISTS: TopicExistsError,
    ErrorCode.INVALID_REQUEST: InvalidRequestError,
    ErrorCode.INVALID_TOPIC_EXCEPTION: InvalidRequestError,
    ErrorCode.POLICY_VIOLATION: InvalidRequestError,
    ErrorCode.INVALID_REPLICATION_FACTOR: InvalidReplicationFactorError,
    ErrorCode.INVALID_PARTITIONS: InvalidPartitionsError,
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: InvalidReplicaAssignmentError,
    ErrorCode.INVALID_CONFIG: InvalidConfigError,
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: ReassignmentError,
    ErrorCode.REASSIGNMENT_IN_PROGRESS: ReassignmentError,
    ErrorCode.ELECTION_NOT_NEEDED: ElectionError,
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: ElectionError,
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: ElectionError,
    ErrorCode.BROKER_ID_NOT_REGISTERED: BrokerError,
    ErrorCode.KAFKA_STORAGE_ERROR: BrokerError,
    ErrorCode.LOG_DIR_NOT_FOUND: BrokerError,
}


def _code(raw: int) -> ErrorCode:
    try:
        return ErrorCode(raw)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def error_for(code: ErrorCode, message: str, *,
              failures: Sequence[ItemError] = ()) -> AdminError:
    """The :class:`AdminError` subclass for ``code``."""
    return _ERROR_CLASSES.get(code, AdminError)(code, message, failures=failures)


def item_errors(response: Any) -> list[ItemError]:
    """Every failed item of an AdminService response (empty when all succeeded)."""
    found: list[ItemError] = []

    def add(resource: str, error: common_pb2.Error) -> None:
        if error.code != common_pb2.NONE:
            found.append(ItemError(resource=resource, code=_code(error.code),
                                   message=error.message or _code(error.code).name))

    if isinstance(response, controller_pb2.CreateTopicsResponse):
        for t in response.topics:
            add(f"topic {t.name!r}", t.error)
    elif isinstance(response, controller_pb2.DeleteTopicsResponse):
        for d in response.responses:
            add(f"topic {d.name!r}", d.error)
    elif isinstance(response, admin_pb2.DescribeTopicsResponse):
        for td in response.topics:
            add(f"topic {td.name!r}", td.error)
    elif isinstance(response, controller_pb2.CreatePartitionsResponse):
        for r in response.results:
            add(f"topic {r.name!r}", r.error)
    elif isinstance(response, controller_pb2.AlterPartitionReassignmentsResponse):
        for rt in response.responses:
            for p in rt.partitions:
                add(f"partition {rt.name}-{p.partition_index}", p.error)
    elif isinstance(response, controller_pb2.ElectLeadersResponse):
        for er in response.replica_election_results:
            for pr in er.partition_result:
                add(f"partition {er.topic}-{pr.partition_id}", pr.error)
    elif isinstance(response, controller_pb2.DescribeConfigsResponse):
        for dc in response.results:
            add(f"{_resource_label(dc.resource_type)} {dc.resource_name!r}", dc.error)
    elif isinstance(response, controller_pb2.IncrementalAlterConfigsResponse):
        for ac in response.responses:
            add(f"{_resource_label(ac.resource_type)} {ac.resource_name!r}", ac.error)
    elif isinstance(response, admin_pb2.AdminDescribeLogDirsResponse):
        for b in response.brokers:
            add(f"broker {b.broker_id}", b.error)
    elif isinstance(response, broker_pb2.DeleteRecordsResponse):
        for dt in response.topics:
            for dp in dt.partitions:
                add(f"partition {dt.name}-{dp.partition_index}", dp.error)
    return found


def describe_failures(failures: Sequence[ItemError]) -> str:
    """``topic 't': why; topic 'u': why`` (at most three, then how many more)."""
    shown = [f"{f.resource}: {f.message}" for f in failures[:3]]
    if len(failures) > 3:
        shown.append(f"and {len(failures) - 3} more")
    return "; ".join(shown)


# -- inputs ---------------------------------------------------------------------------------------

class ResourceType(enum.Enum):
    """Config resources (Kafka's ConfigResource.Type, with its ids)."""

    TOPIC = common_pb2.CONFIG_RESOURCE_TYPE_TOPIC
    BROKER = common_pb2.CONFIG_RESOURCE_TYPE_BROKER


def _resource_label(raw: int) -> str:
    if raw == common_pb2.CONFIG_RESOURCE_TYPE_TOPIC:
        return "topic"
    return "broker" if raw == common_pb2.CONFIG_RESOURCE_TYPE_BROKER else "resource"


class ConfigOp(enum.Enum):
    """IncrementalAlterConfigs operations."""

    SET = controller_pb2.CONFIG_OPERATION_SET
    DELETE = controller_pb2.CONFIG_OPERATION_DELETE
    APPEND = controller_pb2.CONFIG_OPERATION_APPEND
    SUBTRACT = controller_pb2.CONFIG_OPERATION_SUBTRACT


class ElectionType(enum.Enum):
    PREFERRED = common_pb2.ELECTION_TYPE_PREFERRED
    UNCLEAN = common_pb2.ELECTION_TYPE_UNCLEAN


HealthFilter = topic_health.HealthFilter
"""kafka-topics --describe's partition filters (values = ``PartitionHealthFilter``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTopic:
    """A topic to create. -1 counts take the controller's defaults (``num.partitions``,
    ``default.replication.factor``); ``assignments`` (partition -> broker ids) replaces both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class NewPartitions:
    """Grow ``topic`` to ``total_count`` partitions; ``assignments`` optionally places the new
    ones (one broker list per new partition)."""

    topic: str
    total_count: int
    assignments: Sequence[Sequence[int]] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigResource:
    type: ResourceType
    name: str
    """Topic name, or broker id as text ("" = the cluster-wide broker default)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigChange:
    name: str
    value: str = ""
    op: ConfigOp = ConfigOp.SET


def _topic_partitions(partitions: Mapping[str, Sequence[int]] | None,
                      ) -> list[common_pb2.TopicPartitions]:
    """{topic: [partition, ...]} -> TopicPartitions; an empty list means every partition."""
    return [common_pb2.TopicPartitions(topic=t, partitions=list(p))
            for t, p in (partitions or {}).items()]


# -- the client -----------------------------------------------------------------------------------

def split_targets(target: str | Sequence[str]) -> tuple[str, ...]:
    """``"h1:p1,h2:p2"`` (or a sequence of addresses) -> the distinct addresses, in order."""
    parts = target.split(",") if isinstance(target, str) else list(target)
    found = tuple(dict.fromkeys(p.strip() for p in parts if p.strip()))
    if not found:
        raise errors.ConfigError(f"no admin address in {target!r}")
    return found


class AdminClient:
    """An asyncio client of the AdminService. Create it inside the event loop that uses it;
    use as ``async with``, or call :meth:`close`. Not thread-safe.

    ``target`` is one address or several (``"h1:p1,h2:p2"``, or a sequence): ``kraftlog
    admin`` processes or brokers, which all serve the AdminService (a bootstrap list, as
    Kafka's ``--bootstrap-server``). A call goes to the address that answered last; one
    that cannot be reached (UNAVAILABLE) or does not serve the AdminService
    (UNIMPLEMENTED: a controller's port, say) passes the call to the next, within the
    call's deadline. Only those two: the call never reached a servicer, so nothing can
    have been done twice."""

    def __init__(self, target: str | Sequence[str] = DEFAULT_ADMIN, *,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        if timeout_ms <= 0:
            raise errors.ConfigError(f"timeout_ms must be positive, got {timeout_ms}")
        self.targets = split_targets(target)
        self.timeout_ms = timeout_ms
        self._current = 0
        self._stubs: dict[str, admin_pb2_grpc.AdminServiceStub] = {}
        self._channels: list[grpc.aio.Channel] = []

    @property
    def target(self) -> str:
        """The address calls go to first (the one that answered last)."""
        return self.targets[self._current]

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        channels, self._channels = self._channels, []
        self._stubs.clear()
        for channel in channels:
            await channel.close()

    def _stub(self, target: str) -> admin_pb2_grpc.AdminServiceStub:
        stub = self._stubs.get(target)
        if stub is None:
            channel = rpc.aio_channel(target, options=rpc.channel_options(retry_backoff_ms=100))
            self._channels.append(channel)
            stub = self._stubs[target] = admin_pb2_grpc.AdminServiceStub(channel)
        return stub

    async def _send(self, rpc: str, request: Any, timeout_s: float) -> Any:
        """The call on the first address that serves the AdminService (see the class doc)."""
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + timeout_s
        skipped: list[tuple[str, grpc.StatusCode, str]] = []
        count = len(self.targets)
        for step in range(count):
            index = (self._current + step) % count
            target = self.targets[index]
            remaining = give_up_at - loop.time()
            if remaining <= 0:
                break
            try:
                response = await getattr(self._stub(target), rpc)(request, timeout=remaining)
            except grpc.aio.AioRpcError as exc:
                status = exc.code()
                if status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED):
                    skipped.append((target, status, exc.details() or status.name))
                    continue
                if status == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise AdminTimeoutError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"{rpc} got no answer from the admin service at {target} within "
                        f"{timeout_s:g} s") from None
                raise AdminError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"{rpc} failed at the admin service {target}: {status.name}: "
                                 f"{exc.details()}") from None
            self._current = index
            return response
        if not skipped:
            raise AdminTimeoutError(ErrorCode.REQUEST_TIMED_OUT,
                                    f"{rpc}: the deadline of {timeout_s:g} s passed")
        if all(status == grpc.StatusCode.UNIMPLEMENTED for _, status, _ in skipped):
            raise AdminUnreachableError(
                ErrorCode.UNSUPPORTED_VERSION,
                "no AdminService at " + ", ".join(t for t, _, _ in skipped)
                + " (a controller's port? give a broker or a 'kraftlog admin' address)")
        if len(skipped) == 1:
            target, _, details = skipped[0]
            raise AdminUnreachableError(
                ErrorCode.NETWORK_EXCEPTION,
                f"cannot reach the admin service at {target}: {details}")
        reasons = [f"{t} ({'no AdminService' if status == grpc.StatusCode.UNIMPLEMENTED else d})"
                   for t, status, d in skipped]
        raise AdminUnreachableError(
            ErrorCode.NETWORK_EXCEPTION,
            "cannot reach the admin service at any of " + "; ".join(reasons))

    async def _call(self, rpc: str, request: Any, timeout_ms: int | None, *,
                    check: bool) -> Any:
        timeout_s = (timeout_ms if timeout_ms is not None else self.timeout_ms) / 1000
        response = await self._send(rpc, request, timeout_s)
        if response.error.code != common_pb2.NONE:
            code = _code(response.error.code)
            raise error_for(code, response.error.message or f"{rpc} failed: {code.name}")
        if check:
            failures = item_errors(response)
            if failures:
                raise error_for(failures[0].code, describe_failures(failures),
                                failures=failures)
        return response

    # -- topics ----------------------------------------------------------------------------------

    async def create_topics(self, topics: Sequence[NewTopic], *, validate_only: bool = False,
                            timeout_ms: int | None = None, check: bool = True,
                            ) -> controller_pb2.CreateTopicsResponse:
        """Create ``topics``; returns when the brokers know them (or the admin gave up
        waiting for that, within the deadline)."""
        C = controller_pb2.CreateTopicsRequest
        request = C(validate_only=validate_only, timeout_ms=self._server_timeout(timeout_ms))
        for topic in topics:
            request.topics.append(C.CreatableTopic(
                name=topic.name, num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                assignments=[C.CreatableReplicaAssignment(partition_index=p,
                                                          broker_ids=list(ids))
                             for p, ids in sorted(topic.assignments.items())],
                configs=[C.CreatableTopicConfig(name=k, value=v)
                         for k, v in topic.configs.items()]))
        answer: controller_pb2.CreateTopicsResponse = await self._call(
            "CreateTopics", request, timeout_ms, check=check)
        return answer

    async def delete_topics(self, names: Sequence[str], *, timeout_ms: int | None = None,
                            check: bool = True) -> controller_pb2.DeleteTopicsResponse:
        request = controller_pb2.DeleteTopicsRequest(
            timeout_ms=self._server_timeout(timeout_ms),
            topics=[controller_pb2.DeleteTopicsRequest.DeleteTopicState(name=n) for n in names])
        answer: controller_pb2.DeleteTopicsResponse = await self._call(
            "DeleteTopics", request, timeout_ms, check=check)
        return answer

    async def describe_topics(self, names: Sequence[str] = (), *,
                              health_filter: HealthFilter = HealthFilter.ALL,
                              exclude_internal: bool = False, timeout_ms: int | None = None,
                              check: bool = True) -> admin_pb2.DescribeTopicsResponse:
        """Topics (all when ``names`` is empty) with their partitions after
        ``health_filter``; an unknown name raises :class:`UnknownTopicError` (``check``)."""
        request = admin_pb2.DescribeTopicsRequest(
            topics=list(names), health_filter=health_filter.value,  # type: ignore[arg-type]
            exclude_internal=exclude_internal)
        answer: admin_pb2.DescribeTopicsResponse = await self._call(
            "DescribeTopics", request, timeout_ms, check=check)
        return answer

    async def list_topics(self, *, exclude_internal: bool = False,
                          timeout_ms: int | None = None) -> admin_pb2.ListTopicsResponse:
        answer: admin_pb2.ListTopicsResponse = await self._call(
            "ListTopics", admin_pb2.ListTopicsRequest(exclude_internal=exclude_internal),
            timeout_ms, check=False)
        return answer

    async def create_partitions(self, increases: Sequence[NewPartitions], *,
                                validate_only: bool = False, timeout_ms: int | None = None,
                                check: bool = True) -> controller_pb2.CreatePartitionsResponse:
        C = controller_pb2.CreatePartitionsRequest
        request = C(validate_only=validate_only, timeout_ms=self._server_timeout(timeout_ms),
                    topics=[C.CreatePartitionsTopic(
                        name=i.topic, count=i.total_count,
                        assignments=[C.CreatePartitionsAssignment(broker_ids=list(a))
                                     for a in i.assignments]) for i in increases])
        answer: controller_pb2.CreatePartitionsResponse = await self._call(
            "CreatePartitions", request, timeout_ms, check=check)
        return answer

    # -- reassignments and elections ---------------------------------------------------------------

    async def alter_partition_reassignments(
            self, targets: Mapping[tuple[str, int], Sequence[int] | None], *,
            allow_replication_factor_change: bool = False, timeout_ms: int | None = None,
            check: bool = True) -> controller_pb2.AlterPartitionReassignmentsResponse:
        """Start (or change) reassignments: (topic, partition) -> target replicas, in
        preference order; ``None`` cancels that partition's reassignment."""
        R = controller_pb2.AlterPartitionReassignmentsRequest
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), replicas in targets.items():
            entry = R.ReassignablePartition(partition_index=partition)
            if replicas is not None:
                entry.replicas.CopyFrom(common_pb2.ReplicaList(replicas=list(replicas)))
            by_topic.setdefault(topic, []).append(entry)
        request = R(timeout_ms=self._server_timeout(timeout_ms),
                    allow_replication_factor_change=allow_replication_factor_change,
                    topics=[R.ReassignableTopic(name=t, partitions=p)
                            for t, p in by_topic.items()])
        answer: controller_pb2.AlterPartitionReassignmentsResponse = await self._call(
            "AlterPartitionReassignments", request, timeout_ms, check=check)
        return answer

    async def list_partition_reassignments(
            self, partitions: Mapping[str, Sequence[int]] | None = None, *,
            timeout_ms: int | None = None,
            ) -> admin_pb2.ListPartitionReassignmentsProgressResponse:
        """Reassignments in progress ({topic: [partition...]}, [] = all of the topic;
        None = all), with bytes behind per adding replica."""
        request = controller_pb2.ListPartitionReassignmentsRequest(
            timeout_ms=self._server_timeout(timeout_ms), topics=_topic_partitions(partitions))
        answer: admin_pb2.ListPartitionReassignmentsProgressResponse = await self._call(
            "ListPartitionReassignments", request, timeout_ms, check=False)
        return answer

    async def cancel_partition_reassignments(
            self, partitions: Mapping[str, Sequence[int]] | None = None, *,
            timeout_ms: int | None = None, check: bool = True,
            ) -> controller_pb2.AlterPartitionReassignmentsResponse:
        """Cancel the named reassignments (None: every one in progress)."""
        request = admin_pb2.CancelPartitionReassignmentsRequest(
            timeout_ms=self._server_timeout(timeout_ms), topics=_topic_partitions(partitions))
        answer: controller_pb2.AlterPartitionReassignmentsResponse = await self._call(
            "CancelPartitionReassignments", request, timeout_ms, check=check)
        return answer

    async def elect_leaders(self, election_type: ElectionType,
                            partitions: Mapping[str, Sequence[int]] | None = None, *,
                            timeout_ms: int | None = None, check: bool = True,
                            ) -> controller_pb2.ElectLeadersResponse:
        """Preferred or unclean election for the named partitions (None: all). Kafka
        answers ELECTION_NOT_NEEDED for a partition already led by its preferred replica;
        pass ``check=False`` to read those per partition."""
        request = controller_pb2.ElectLeadersRequest(
            election_type=election_type.value,
            topic_partitions=_topic_partitions(partitions),
            timeout_ms=self._server_timeout(timeout_ms))
        answer: controller_pb2.ElectLeadersResponse = await self._call(
            "ElectLeaders", request, timeout_ms, check=check)
        return answer

    # -- cluster, quorum, configs, log dirs --------------------------------------------------------

    async def describe_cluster(self, *, include_fenced_brokers: bool = False,
                               timeout_ms: int | None = None,
                               ) -> controller_pb2.DescribeClusterResponse:
        answer: controller_pb2.DescribeClusterResponse = await self._call(
            "DescribeCluster", controller_pb2.DescribeClusterRequest(
                include_fenced_brokers=include_fenced_brokers), timeout_ms, check=False)
        return answer

    async def unregister_broker(self, broker_id: int, *, timeout_ms: int | None = None,
                                ) -> controller_pb2.UnregisterBrokerResponse:
        """Remove a (stopped) broker's registration; a running broker registers again."""
        answer: controller_pb2.UnregisterBrokerResponse = await self._call(
            "UnregisterBroker", controller_pb2.UnregisterBrokerRequest(broker_id=broker_id),
            timeout_ms, check=False)
        return answer

    async def describe_quorum(self, *, timeout_ms: int | None = None,
                              ) -> raft_pb2.DescribeQuorumResponse:
        answer: raft_pb2.DescribeQuorumResponse = await self._call(
            "DescribeQuorum", raft_pb2.DescribeQuorumRequest(), timeout_ms, check=False)
        return answer

    async def quorum_history(self, *, from_epoch: int = 0, max_entries: int = 0,
                             timeout_ms: int | None = None) -> admin_pb2.QuorumHistoryResponse:
        answer: admin_pb2.QuorumHistoryResponse = await self._call(
            "QuorumHistory", admin_pb2.QuorumHistoryRequest(from_epoch=from_epoch,
                                                            max_entries=max_entries),
            timeout_ms, check=False)
        return answer

    async def describe_configs(self, resources: Sequence[ConfigResource], *,
                               keys: Sequence[str] = (), include_synonyms: bool = False,
                               include_documentation: bool = False,
                               timeout_ms: int | None = None, check: bool = True,
                               ) -> controller_pb2.DescribeConfigsResponse:
        """Every config of each resource (or only ``keys``), with its source."""
        D = controller_pb2.DescribeConfigsRequest
        request = D(include_synonyms=include_synonyms,
                    include_documentation=include_documentation,
                    resources=[D.DescribeConfigsResource(
                        resource_type=r.type.value,
                        resource_name=r.name, configuration_keys=list(keys))
                        for r in resources])
        answer: controller_pb2.DescribeConfigsResponse = await self._call(
            "DescribeConfigs", request, timeout_ms, check=check)
        return answer

    async def incremental_alter_configs(
            self, changes: Mapping[ConfigResource, Sequence[ConfigChange]], *,
            validate_only: bool = False, timeout_ms: int | None = None, check: bool = True,
            ) -> controller_pb2.IncrementalAlterConfigsResponse:
        I = controller_pb2.IncrementalAlterConfigsRequest  # noqa: E741
        request = I(validate_only=validate_only, resources=[I.AlterConfigsResource(
            resource_type=r.type.value,
            resource_name=r.name, configs=[I.AlterableConfig(
                name=c.name, value=c.value,
                config_operation=c.op.value)
                for c in items]) for r, items in changes.items()])
        answer: controller_pb2.IncrementalAlterConfigsResponse = await self._call(
            "IncrementalAlterConfigs", request, timeout_ms, check=check)
        return answer

    async def describe_log_dirs(self, broker_ids: Sequence[int] = (),
                                partitions: Mapping[str, Sequence[int]] | None = None, *,
                                timeout_ms: int | None = None, check: bool = True,
                                ) -> admin_pb2.AdminDescribeLogDirsResponse:
        """Log dirs of ``broker_ids`` (empty: every live broker), optionally only
        ``partitions``; one entry per broker, with its own error."""
        request = admin_pb2.AdminDescribeLogDirsRequest(
            broker_ids=list(broker_ids), topics=_topic_partitions(partitions))
        answer: admin_pb2.AdminDescribeLogDirsResponse = await self._call(
            "DescribeLogDirs", request, timeout_ms, check=check)
        return answer

    async def delete_records(self, offsets: Mapping[tuple[str, int], int], *,
                             timeout_ms: int | None = None, check: bool = True,
                             ) -> broker_pb2.DeleteRecordsResponse:
        """Delete the records of each ``(topic, partition)`` below its offset (-1: the high
        watermark), as ``kafka-delete-records`` does; each partition's answer carries its
        new low watermark (every live replica's log start offset reached it) or its error."""
        topics: dict[str, list[broker_pb2.DeleteRecordsRequest.DeleteRecordsPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(broker_pb2.DeleteRecordsRequest.DeleteRecordsPartition(
                partition_index=partition, offset=offset))
        request = broker_pb2.DeleteRecordsRequest(
            timeout_ms=self._server_timeout(timeout_ms), topics=[
                broker_pb2.DeleteRecordsRequest.DeleteRecordsTopic(name=name, partitions=parts)
                for name, parts in topics.items()])
        answer: broker_pb2.DeleteRecordsResponse = await self._call(
            "DeleteRecords", request, timeout_ms, check=check)
        return answer

    def _server_timeout(self, timeout_ms: int | None) -> int:
        """The ``timeout_ms`` request field: the call's own deadline."""
        return timeout_ms if timeout_ms is not None else self.timeout_ms
