"""ControllerService over gRPC: protobuf in, a QuorumController event, protobuf out.

Owns :class:`ControllerServicer`. Every RPC converts its request with
:mod:`kraftlog.controller.convert` (a request the wire can carry but that makes no
sense gets INVALID_REQUEST naming the field), runs one write or read event on the
:class:`~kraftlog.controller.driver.QuorumController`, and converts the answer.
Every response carries ``active_controller``; on a standby, or when leadership is
lost mid-operation, the answer is NOT_CONTROLLER with that hint (never a gRPC error:
expected outcomes travel as error codes, STYLE.md rule 7). A caller's deadline
becomes REQUEST_TIMED_OUT (the write may still commit, as in Kafka).

With mTLS on, a BrokerRegistration, BrokerHeartbeat, AlterPartition or
AllocateProducerIds that names broker N is refused with CLUSTER_AUTHORIZATION_FAILED
unless the caller's certificate is broker N's (``kraftlog.security.broker.principal``,
default CN ``broker-N``): one client certificate cannot keep a dead broker alive or shrink
another's ISR.

Edge module: grpc and protobuf live here, the rules in the managers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from google.protobuf.message import Message

from kraftlog import errors, rpc_guard
from kraftlog.controller import api, convert
from kraftlog.controller.driver import QuorumController
from kraftlog.controller.state import ControllerState
from kraftlog.error_codes import ErrorCode
from kraftlog.security import principal, tls
from kraftlog.v1 import common_pb2, controller_pb2, controller_pb2_grpc

logger = logging.getLogger(__name__)

DEFAULT_DEADLINE_S = 30.0
"""Used when the caller set no deadline: no RPC waits forever."""


def _endpoint_proto(endpoint: str) -> common_pb2.Endpoint | None:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return common_pb2.Endpoint(host=host.strip("[]"), port=int(port),
                               listener_name="CONTROLLER", security_protocol="PLAINTEXT")


class ControllerServicer(controller_pb2_grpc.ControllerServiceServicer):
    """Answers ControllerService on every quorum member; only the active one acts."""

    def __init__(self, controller: QuorumController, *, cluster_id: str,
                 endpoint_of: Callable[[int], str],
                 broker_identity: principal.NodePrincipal | None = None) -> None:
        self.controller = controller
        # With mTLS: the principal broker N must present to register, heartbeat, alter
        # its partitions' ISR or allocate producer ids as broker N (beyond Kafka).
        self._broker_identity = broker_identity
        self.cluster_id = cluster_id
        self._endpoint_of = endpoint_of
        # (leader id, epoch, hint): only ever CopyFrom'd into responses, never changed.
        self._hint_cache: tuple[int, int, common_pb2.LeaderHint] | None = None

    # -- plumbing ----------------------------------------------------------------------------------

    def _hint(self) -> common_pb2.LeaderHint:
        """The active controller as this node knows it; built once per (leader, epoch)."""
        controller = self.controller
        leader, epoch = controller.leader_id, controller.epoch
        cached = self._hint_cache
        if cached is not None and cached[0] == leader and cached[1] == epoch:
            return cached[2]
        hint = common_pb2.LeaderHint(leader_id=leader, leader_epoch=epoch)
        endpoint = _endpoint_proto(self._endpoint_of(leader)) if leader >= 0 else None
        if endpoint is not None:
            hint.endpoint.CopyFrom(endpoint)
        self._hint_cache = (leader, epoch, hint)
        return hint

    def _error_response(self, response_cls: type[Message], code: ErrorCode,
                        message: str) -> Message:
        response = response_cls()
        response.error.CopyFrom(convert.error_proto(code, message))  # type: ignore[attr-defined]
        response.active_controller.CopyFrom(self._hint())  # type: ignore[attr-defined]
        return response

    def _impersonation(self, rpc: str, broker_id: int,
                       response_cls: type[Message]) -> Message | None:
        """The refusal when an authenticated caller speaks as a broker it is not."""
        peer = tls.current_peer()
        if peer is None or self._broker_identity is None or \
                self._broker_identity.matches(peer, broker_id):
            return None
        logger.warning("event=impersonation_refused rpc=%s broker_id=%d principal=%r "
                       "expected=%r", rpc, broker_id, peer.principal,
                       self._broker_identity.expected(broker_id))
        return self._error_response(response_cls, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                    f"{rpc}: {peer.principal} may not act as broker "
                                    f"{broker_id}")

    async def _serve(self, rpc: str, request: Message, request_cls: type[Any],
                     response_cls: type[Message],
                     run: Callable[[Any], Awaitable[Any]], context: Any) -> Any:
        try:
            value = convert.from_proto(request, request_cls)
        except convert.InvalidRequestError as exc:
            return self._error_response(response_cls, ErrorCode.INVALID_REQUEST,
                                        rpc_guard.public_message(f"{rpc}: {exc}"))
        remaining = context.time_remaining() if context is not None else None
        timeout_s = DEFAULT_DEADLINE_S if remaining is None else max(remaining, 0.0)
        try:
            async with asyncio.timeout(timeout_s):
                answer = await run(value)
        except TimeoutError:
            return self._error_response(response_cls, ErrorCode.REQUEST_TIMED_OUT,
                                        f"{rpc} did not commit within {timeout_s:.3f} s")
        except errors.NotLeaderError as exc:
            return self._error_response(response_cls, ErrorCode.NOT_CONTROLLER, str(exc))
        except api.RequestError as exc:
            return self._error_response(response_cls, exc.error.code, exc.error.message)
        except errors.KraftlogError as exc:
            logger.warning("event=controller_rpc_failed rpc=%s error=%r", rpc, str(exc))
            return self._error_response(response_cls, ErrorCode.UNKNOWN_SERVER_ERROR,
                                        rpc_guard.public_message(f"{rpc}: {exc}"))
        response = convert.to_proto(answer, response_cls)
        response.active_controller.CopyFrom(self._hint())  # type: ignore[attr-defined]
        return response

    def _write(self, rpc: str, operation: Callable[[ControllerState, Any, int, int], Any]
               ) -> Callable[[Any], Awaitable[Any]]:
        async def run(value: Any) -> Any:
            return await self.controller.write(
                rpc, lambda state, next_offset, now_ms: operation(state, value, next_offset,
                                                                  now_ms))
        return run

    def _read(self, rpc: str, operation: Callable[[ControllerState, Any, int], Any]
              ) -> Callable[[Any], Awaitable[Any]]:
        async def run(value: Any) -> Any:
            return await self.controller.read(
                rpc, lambda state, epoch: operation(state, value, epoch))
        return run

    # -- broker-facing ------------------------------------------------------------------------------

    async def BrokerRegistration(self, request: controller_pb2.BrokerRegistrationRequest,
                                 context: Any) -> Any:
        refused = self._impersonation("BrokerRegistration", request.broker_id, controller_pb2.BrokerRegistrationResponse)
        if refused is not None:
            return refused
        if request.cluster_id != self.cluster_id:
            return self._error_response(
                controller_pb2.BrokerRegistrationResponse, ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"broker {request.broker_id} belongs to cluster {request.cluster_id!r}, this "
                f"controller to {self.cluster_id!r}")
        return await self._serve(
            "BrokerRegistration", request, api.BrokerRegistrationRequest,
            controller_pb2.BrokerRegistrationResponse,
            self._write("BrokerRegistration",
                        lambda s, v, offset, now: s.register_broker(v, now, offset)), context)

    async def BrokerHeartbeat(self, request: controller_pb2.BrokerHeartbeatRequest,
                              context: Any) -> Any:
        refused = self._impersonation("BrokerHeartbeat", request.broker_id, controller_pb2.BrokerHeartbeatResponse)
        if refused is not None:
            return refused
        controller = self.controller
        return await self._serve(
            "BrokerHeartbeat", request, api.BrokerHeartbeatRequest,
            controller_pb2.BrokerHeartbeatResponse,
            self._write("BrokerHeartbeat",
                        lambda s, v, _offset, now: s.process_heartbeat(
                            v, now, controller.committed_offset)), context)

    async def UnregisterBroker(self, request: controller_pb2.UnregisterBrokerRequest,
                               context: Any) -> Any:
        return await self._serve(
            "UnregisterBroker", request, api.UnregisterBrokerRequest,
            controller_pb2.UnregisterBrokerResponse,
            self._write("UnregisterBroker", lambda s, v, _o, _n: s.unregister_broker(v)),
            context)

    async def AlterPartition(self, request: controller_pb2.AlterPartitionRequest,
                             context: Any) -> Any:
        refused = self._impersonation("AlterPartition", request.broker_id, controller_pb2.AlterPartitionResponse)
        if refused is not None:
            return refused
        return await self._serve(
            "AlterPartition", request, api.AlterPartitionRequest,
            controller_pb2.AlterPartitionResponse,
            self._write("AlterPartition", lambda s, v, _o, _n: s.alter_partition(v)), context)

    async def AllocateProducerIds(self, request: controller_pb2.AllocateProducerIdsRequest,
                                  context: Any) -> Any:
        refused = self._impersonation("AllocateProducerIds", request.broker_id, controller_pb2.AllocateProducerIdsResponse)
        if refused is not None:
            return refused
        return await self._serve(
            "AllocateProducerIds", request, api.AllocateProducerIdsRequest,
            controller_pb2.AllocateProducerIdsResponse,
            self._write("AllocateProducerIds", lambda s, v, _o, _n: s.allocate_producer_ids(v)),
            context)

    # -- admin-facing -------------------------------------------------------------------------------

    async def CreateTopics(self, request: controller_pb2.CreateTopicsRequest,
                           context: Any) -> Any:
        return await self._serve(
            "CreateTopics", request, api.CreateTopicsRequest,
            controller_pb2.CreateTopicsResponse,
            self._write("CreateTopics", lambda s, v, _o, _n: s.create_topics(v)), context)

    async def DeleteTopics(self, request: controller_pb2.DeleteTopicsRequest,
                           context: Any) -> Any:
        return await self._serve(
            "DeleteTopics", request, api.DeleteTopicsRequest,
            controller_pb2.DeleteTopicsResponse,
            self._write("DeleteTopics", lambda s, v, _o, _n: s.delete_topics(v)), context)

    async def CreatePartitions(self, request: controller_pb2.CreatePartitionsRequest,
                               context: Any) -> Any:
        return await self._serve(
            "CreatePartitions", request, api.CreatePartitionsRequest,
            controller_pb2.CreatePartitionsResponse,
            self._write("CreatePartitions", lambda s, v, _o, _n: s.create_partitions(v)),
            context)

    async def AlterPartitionReassignments(
            self, request: controller_pb2.AlterPartitionReassignmentsRequest,
            context: Any) -> Any:
        return await self._serve(
            "AlterPartitionReassignments", request, api.AlterPartitionReassignmentsRequest,
            controller_pb2.AlterPartitionReassignmentsResponse,
            self._write("AlterPartitionReassignments",
                        lambda s, v, _o, _n: s.alter_partition_reassignments(v)), context)

    async def ListPartitionReassignments(
            self, request: controller_pb2.ListPartitionReassignmentsRequest,
            context: Any) -> Any:
        return await self._serve(
            "ListPartitionReassignments", request, api.ListPartitionReassignmentsRequest,
            controller_pb2.ListPartitionReassignmentsResponse,
            self._read("ListPartitionReassignments",
                       lambda s, v, epoch: s.list_partition_reassignments(v, epoch)), context)

    async def ElectLeaders(self, request: controller_pb2.ElectLeadersRequest,
                           context: Any) -> Any:
        return await self._serve(
            "ElectLeaders", request, api.ElectLeadersRequest,
            controller_pb2.ElectLeadersResponse,
            self._write("ElectLeaders", lambda s, v, _o, _n: s.elect_leaders(v)), context)

    async def IncrementalAlterConfigs(
            self, request: controller_pb2.IncrementalAlterConfigsRequest,
            context: Any) -> Any:
        return await self._serve(
            "IncrementalAlterConfigs", request, api.IncrementalAlterConfigsRequest,
            controller_pb2.IncrementalAlterConfigsResponse,
            self._write("IncrementalAlterConfigs",
                        lambda s, v, _o, _n: s.incremental_alter_configs(v)), context)

    async def DescribeConfigs(self, request: controller_pb2.DescribeConfigsRequest,
                              context: Any) -> Any:
        return await self._serve(
            "DescribeConfigs", request, api.DescribeConfigsRequest,
            controller_pb2.DescribeConfigsResponse,
            self._read("DescribeConfigs",
                       lambda s, v, epoch: s.describe_configs(v, epoch)), context)

    async def DescribeCluster(self, request: controller_pb2.DescribeClusterRequest,
                              context: Any) -> Any:
        node_id = self.controller.node_id
        response = await self._serve(
            "DescribeCluster", request, api.DescribeClusterRequest,
            controller_pb2.DescribeClusterResponse,
            self._read("DescribeCluster",
                       lambda s, v, epoch: s.describe_cluster(v, epoch, controller_id=node_id)),
            context)
        if not response.error.code:
            response.cluster_id = self.cluster_id
        return response


def add_to_server(servicer: ControllerServicer, server: Any) -> None:
    rpc_guard.add_service(
        lambda s: controller_pb2_grpc.add_ControllerServiceServicer_to_server(servicer, s), server)
