"""ControllerService against hostile requests: error codes in the answer, state untouched.

A real :class:`ControllerServicer` over a real :class:`QuorumController` and
:class:`ControllerState`; the raft below is a fake that commits every proposal at once
(the records go through the real codec). Handlers are called directly with
:mod:`proto_fuzz`'s edge-value requests and with hand-made bad ones (wrong cluster id,
unknown or stale brokers, impossible replication factors, oversize counts, unknown enum
numbers); each must answer a response, and the refused ones must write no record.
"""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, TypeVar

from google.protobuf import symbol_database

from kraftlog.controller import driver, server
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.controller.feature_control import METADATA_VERSION
from kraftlog.controller.result import ControllerResult
from kraftlog.controller.state import ControllerState
from kraftlog.metadata import record_convert
from kraftlog.metadata import records as mr
from kraftlog.raft import consensus
from kraftlog.raft import epoch_state as es
from kraftlog.security import principal, tls
from kraftlog.v1 import common_pb2, controller_pb2
from tests import proto_fuzz

T = TypeVar("T")
CLUSTER_ID = "c1"
BROKERS = (101, 102, 103)
CT = controller_pb2.CreateTopicsRequest


class CommittingRaft:
    """A raft leader whose every proposal commits on the next loop turn."""

    def __init__(self) -> None:
        self.next_offset = 1
        self.listener: driver.ControllerRaftListener | None = None

    def leader_next_offset(self, epoch: int) -> int | None:
        return None  # no raft control records between the controller's writes here

    def propose_nowait(self, records: Sequence[bytes], *, epoch: int | None = None) -> int:
        first = self.next_offset
        self.next_offset += len(records)
        batch = consensus.CommittedBatch(base_offset=first, last_offset=self.next_offset - 1,
                                         epoch=3, append_timestamp_ms=0, records=tuple(records))
        assert self.listener is not None
        asyncio.get_running_loop().call_soon(self.listener.handle_commit, [batch])
        return self.next_offset - 1

    async def call(self, fn: Any) -> Any:
        state = es.LeaderState(es.Epoch(3), local_id=es.NodeId(1), voters=[1, 2, 3],
                               epoch_start_offset=0, check_quorum_deadline_ms=0)
        state.next_offset = self.next_offset  # type: ignore[attr-defined]
        return fn(SimpleNamespace(quorum=SimpleNamespace(state=state)), 0)

    def leader_and_epoch(self) -> tuple[int, int]:
        return 1, 3


def _activate(state: Any, now_ms: int) -> ControllerResult[None] | None:
    state.activate(now_ms)
    if METADATA_VERSION in state.features.finalized():
        return None
    return ControllerResult(records=tuple(state.bootstrap_records()), response=None,
                            is_atomic=True)


def _decode(value: bytes, offset: int) -> mr.MetadataRecord:
    return record_convert.decode(value, offset=offset)


class Cluster:
    """An active controller with three registered, unfenced brokers."""

    def __init__(self) -> None:
        self.raft = CommittingRaft()
        self.controller = driver.QuorumController(
            node_id=1, state_factory=lambda: ControllerState(ControllerConfig()),
            raft=self.raft, encode=record_convert.encode, decode=_decode,
            endpoint_of=lambda n: f"h{n}:9093", on_activate=_activate)
        self.servicer = server.ControllerServicer(self.controller, cluster_id=CLUSTER_ID,
                                                  endpoint_of=lambda n: f"h{n}:9093")
        self.epochs: dict[int, int] = {}

    async def start(self) -> None:
        self.controller.start()
        listener = self.controller.raft_listener()
        self.raft.listener = listener
        listener.handle_leader_change(1, 3)
        for _ in range(50):
            await asyncio.sleep(0)
        for broker in BROKERS:
            answer = await self.call("BrokerRegistration", registration(broker))
            assert answer.error.code == common_pb2.NONE, answer
            self.epochs[broker] = answer.broker_epoch
        for broker in BROKERS:
            answer = await self.call("BrokerHeartbeat", controller_pb2.BrokerHeartbeatRequest(
                broker_id=broker, broker_epoch=self.epochs[broker],
                current_metadata_offset=10**9))
            assert answer.error.code == common_pb2.NONE and not answer.is_fenced, answer

    async def call(self, rpc: str, request: Any) -> Any:
        return await getattr(self.servicer, rpc)(request, proto_fuzz.FakeContext(5.0))

    def written(self) -> int:
        return self.raft.next_offset


def registration(broker: int, cluster_id: str = CLUSTER_ID) -> Any:
    return controller_pb2.BrokerRegistrationRequest(
        broker_id=broker, cluster_id=cluster_id,
        incarnation_id=common_pb2.Uuid(most_significant_bits=abs(broker), least_significant_bits=1),
        features=[common_pb2.SupportedFeature(name="metadata.version", min_supported_version=1,
                                              max_supported_version=1)])


def run(scenario: Any) -> Any:
    async def main() -> Any:
        cluster = Cluster()
        await cluster.start()
        try:
            return await asyncio.wait_for(scenario(cluster), 120)
        finally:
            await cluster.controller.stop()
    return asyncio.run(main())


def test_random_edge_value_requests_answer_error_codes_on_every_rpc() -> None:
    rng = random.Random(23)
    service = controller_pb2.DESCRIPTOR.services_by_name["ControllerService"]

    async def scenario(cluster: Cluster) -> dict[str, collections.Counter[str]]:
        codes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for method in service.methods:
            request_cls = symbol_database.Default().GetSymbol(method.input_type.full_name)
            for _ in range(40):
                request = proto_fuzz.hostile(request_cls, rng, strings=("demo", CLUSTER_ID),
                                             ints=(*BROKERS, 0, 1, 3))
                answer = await cluster.call(method.name, request)
                codes[method.name][common_pb2.ErrorCode.Name(answer.error.code)] += 1
                for message in proto_fuzz.error_messages(answer):
                    assert "/tmp/" not in message and "Traceback" not in message, message
        return codes

    codes = run(scenario)
    assert set(codes) == {m.name for m in service.methods}
    assert all(sum(c.values()) == 40 for c in codes.values())


def test_refused_requests_write_nothing() -> None:
    async def scenario(cluster: Cluster) -> None:
        before = cluster.written()

        async def refused(rpc: str, request: Any, code: int) -> None:
            answer = await cluster.call(rpc, request)
            errors = [answer.error.code] if answer.error.code else []
            for field in ("topics", "results", "responses"):
                for item in getattr(answer, field, ()):
                    if item.HasField("error") and item.error.code:
                        errors.append(item.error.code)
                    for part in getattr(item, "partitions", ()):
                        if part.error.code:
                            errors.append(part.error.code)
            assert errors and set(errors) == {code}, (rpc, answer)
            assert cluster.written() == before, f"{rpc} wrote records"

        await refused("BrokerRegistration", registration(104, cluster_id="other"),
                      common_pb2.INCONSISTENT_CLUSTER_ID)
        await refused("BrokerRegistration", registration(-5), common_pb2.INVALID_REGISTRATION)
        await refused("BrokerHeartbeat", controller_pb2.BrokerHeartbeatRequest(
            broker_id=999, broker_epoch=1), common_pb2.BROKER_ID_NOT_REGISTERED)
        await refused("BrokerHeartbeat", controller_pb2.BrokerHeartbeatRequest(
            broker_id=101, broker_epoch=cluster.epochs[101] + 1000, want_fence=True),
            common_pb2.STALE_BROKER_EPOCH)
        await refused("AlterPartition", controller_pb2.AlterPartitionRequest(
            broker_id=101, broker_epoch=-7), common_pb2.STALE_BROKER_EPOCH)
        await refused("AllocateProducerIds", controller_pb2.AllocateProducerIdsRequest(
            broker_id=999, broker_epoch=0), common_pb2.BROKER_ID_NOT_REGISTERED)
        await refused("UnregisterBroker", controller_pb2.UnregisterBrokerRequest(
            broker_id=999), common_pb2.BROKER_ID_NOT_REGISTERED)
        await refused("CreateTopics", CT(topics=[CT.CreatableTopic(
            name="a", num_partitions=1, replication_factor=4)]),
            common_pb2.INVALID_REPLICATION_FACTOR)
        await refused("CreateTopics", CT(topics=[CT.CreatableTopic(
            name="b", num_partitions=2**31 - 1, replication_factor=1)]),
            common_pb2.POLICY_VIOLATION)
        await refused("CreateTopics", CT(topics=[CT.CreatableTopic(
            name="../x", num_partitions=1, replication_factor=1)]),
            common_pb2.INVALID_TOPIC_EXCEPTION)
        await refused("CreateTopics", CT(topics=[CT.CreatableTopic(
            name="c", num_partitions=-1, replication_factor=-1, assignments=[
                CT.CreatableReplicaAssignment(partition_index=0, broker_ids=[101, 999])])]),
            common_pb2.INVALID_REPLICA_ASSIGNMENT)
        describe = controller_pb2.DescribeConfigsRequest(resources=[
            controller_pb2.DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=99, resource_name="demo")])  # type: ignore[arg-type]
        await refused("DescribeConfigs", describe, common_pb2.INVALID_REQUEST)
        # The brokers are as they were: registered and unfenced.
        for broker in BROKERS:
            answer = await cluster.call("BrokerHeartbeat", controller_pb2.BrokerHeartbeatRequest(
                broker_id=broker, broker_epoch=cluster.epochs[broker],
                current_metadata_offset=10**9))
            assert answer.error.code == common_pb2.NONE and not answer.is_fenced

    run(scenario)


def test_broker_rpcs_naming_another_broker_are_refused_with_mtls() -> None:
    """With mTLS, a heartbeat, registration, AlterPartition or producer-id allocation
    naming broker N from a certificate that is not broker N's writes nothing; broker N's
    own certificate still gets through."""
    def peer(name: str) -> principal.Peer:
        return principal.Peer(subject=f"CN={name},O=kraftlog", common_name=name,
                              principal=f"User:CN={name},O=kraftlog")

    async def scenario(cluster: Cluster) -> None:
        guarded = server.ControllerServicer(
            cluster.controller, cluster_id=CLUSTER_ID, endpoint_of=lambda n: f"h{n}:9093",
            broker_identity=principal.NodePrincipal.parse("CN:broker-{id}", key="k"))
        broker = BROKERS[0]
        heartbeat = controller_pb2.BrokerHeartbeatRequest(
            broker_id=broker, broker_epoch=cluster.epochs[broker],
            current_metadata_offset=10**9, want_shut_down=True)
        requests = (("BrokerHeartbeat", heartbeat), ("BrokerRegistration", registration(broker)),
                    ("AlterPartition", controller_pb2.AlterPartitionRequest(broker_id=broker)),
                    ("AllocateProducerIds",
                     controller_pb2.AllocateProducerIdsRequest(broker_id=broker)))
        tls.set_current_peer(peer(f"broker-{BROKERS[1]}"))
        before = cluster.written()
        for rpc, request in requests:
            answer = await getattr(guarded, rpc)(request, proto_fuzz.FakeContext(5.0))
            assert answer.error.code == common_pb2.CLUSTER_AUTHORIZATION_FAILED, (rpc, answer)
        assert cluster.written() == before
        tls.set_current_peer(peer(f"broker-{broker}"))
        answer = await guarded.BrokerHeartbeat(heartbeat, proto_fuzz.FakeContext(5.0))
        assert answer.error.code == common_pb2.NONE

    run(scenario)
