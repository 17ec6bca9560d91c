"""Hostile input against a live cluster: every RPC of every service, fuzzed.

A ``kraftlog dev`` cluster (3 controllers, 3 brokers, the admin service) gets a topic
``keep`` with records acknowledged (acks=all) before the fuzzing starts. Then, for
``KRAFTLOG_FUZZ_SECONDS`` (default 75), hypothesis draws calls of every method of
RaftService, ControllerService, BrokerService, AdminService and gRPC health, on every
port that serves them:

- messages built from the contracts' descriptors, each field drawn from values inside
  and outside its range (ids of real and unknown nodes, epochs around the live ones,
  offsets, sizes, enum numbers Kafka never defined, empty and huge strings, record
  batches valid, damaged after their CRC, or random bytes, repeated fields empty or
  long);
- random bytes in place of a message (an undecodable request);
- the fuzzer's own earlier requests replayed, in a different order, to other nodes;
- inter-node messages forged with the live cluster's ids, epochs and cluster id
  (Vote, BeginQuorumEpoch, EndQuorumEpoch, replica Fetch, heartbeats).

Invariants, checked on every call and at the end:

- no process exits (every node's pid stays alive);
- every answer is a defined outcome: gRPC OK with every error code in the response one
  Kafka defines, or INVALID_ARGUMENT (undecodable), DEADLINE_EXCEEDED (a long poll held
  to the fuzzer's deadline), RESOURCE_EXHAUSTED (over the message size limit); never
  UNKNOWN or INTERNAL (a handler that raised) nor UNAVAILABLE (a node gone); no error
  text names a server file;
- afterwards the cluster serves: a quorum leader, every broker registered and
  unfenced, a new topic takes records and gives them back;
- every record acknowledged before the fuzzing is still at its offset, byte for byte.

What the fuzzer leaves out, on purpose: without authentication (not built yet) anyone may
do what an operator may, so it never names the ``keep`` topic or its id, never
unregisters a live broker, never alters configs of the live brokers or the cluster
default (``log.retention.ms=1`` there would delete ``keep`` legitimately), and keeps
raft epochs it sends with a real voter's id below the live epoch + 1,000 (a voter's
message with epoch 2^31-1 is indistinguishable from the voter's own and would exhaust
the epoch space, in Kafka as here). Partition counts stay small (a legitimate request
for 100,000 partitions is a load test's business, not input validation's).

A soak: ``KRAFTLOG_FUZZ_SECONDS=1800 .venv/bin/python -m pytest e2e/test_rpc_fuzz.py``.
The calls per RPC and what was seen are printed (``-s``) and written to
``$KRAFTLOG_FUZZ_REPORT`` when set.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import re
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import crc32c
import grpc
import pytest
from google.protobuf import descriptor as pb_descriptor
from google.protobuf import message as pb_message
from google.protobuf import message_factory
from grpc_health.v1 import health_pb2
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kraftlog import client
from kraftlog.error_codes import ErrorCode
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.v1 import admin_pb2, admin_pb2_grpc, broker_pb2, common_pb2, controller_pb2, raft_pb2
from tests.dev_cluster import DevCluster

pytestmark = pytest.mark.slow

FUZZ_SECONDS = float(os.environ.get("KRAFTLOG_FUZZ_SECONDS", "75"))
CALL_DEADLINE_S = 2.0
KEEP = "keep"
KEEP_PARTITIONS = 3
KEEP_RECORDS = 600
CONTROLLERS = (1, 2, 3)
BROKERS = (101, 102, 103)

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
DEFINED_CODES = frozenset(int(code) for code in ErrorCode)
ALLOWED_STATUS = frozenset({grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT,
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                            grpc.StatusCode.RESOURCE_EXHAUSTED})
UNSERVED: dict[str, str] = {}
"""Methods in the contracts that a node answers UNIMPLEMENTED on purpose, with that text."""
METADATA_PARTITION = common_pb2.TopicPartition(topic="__cluster_metadata", partition=0)
SERVER_PATH = re.compile(r"(/work/|/site-packages/|\.py\b|Traceback)")

_FD = pb_descriptor.FieldDescriptor
_SERVICES = {
    "raft": raft_pb2.DESCRIPTOR.services_by_name["RaftService"],
    "controller": controller_pb2.DESCRIPTOR.services_by_name["ControllerService"],
    "broker": broker_pb2.DESCRIPTOR.services_by_name["BrokerService"],
    "admin": admin_pb2.DESCRIPTOR.services_by_name["AdminService"],
}


# -- what the fuzzer knows of the live cluster ------------------------------------------------


@dataclass(kw_only=True)
class Live:
    """Ids, epochs and names of the running cluster, refreshed now and then."""

    cluster_id: str
    raft_epoch: int
    keep_topic_id: tuple[int, int]
    topics: list[str] = field(default_factory=lambda: ["fz-a", "fz-b"])
    history: list[tuple[str, str, bytes]] = field(default_factory=list)
    """Requests sent (service, method, bytes), for replays."""


def _fixed(values: list[int], lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([v for v in values if lo <= v <= hi]),
                     st.integers(lo, hi))


def _int_range(fd: Any) -> tuple[int, int]:
    if fd.type in (_FD.TYPE_UINT32, _FD.TYPE_FIXED32):
        return 0, (1 << 32) - 1
    if fd.type in (_FD.TYPE_UINT64, _FD.TYPE_FIXED64):
        return 0, (1 << 64) - 1
    if fd.type in (_FD.TYPE_INT64, _FD.TYPE_SINT64, _FD.TYPE_SFIXED64):
        return INT64
    return INT32


def _batch(values: list[bytes], *, damage: int | None) -> bytes:
    """A RecordBatch v2 of ``values``; ``damage``: a records byte to flip, the CRC made
    to match again (what a CRC check alone lets through)."""
    builder = rb.RecordsBuilder()
    for value in values:
        builder.append(None, value, (), int(time.time() * 1000))
    raw = bytearray(builder.build())
    if damage is not None and len(raw) > bh.HEADER_SIZE:
        at = bh.HEADER_SIZE + damage % (len(raw) - bh.HEADER_SIZE)
        raw[at] ^= 0xFF
        struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


class Fuzzer:
    """Strategies for every request message, from the contracts' descriptors."""

    def __init__(self, live: Live) -> None:
        self.live = live

    # Field values by what the field is called: the fields that matter to the cores.
    def _int_field(self, fd: Any, service: str, method: str) -> st.SearchStrategy[int]:
        lo, hi = _int_range(fd)
        name = fd.name
        live = self.live
        if name.endswith("epoch") and service == "raft":
            # Real voters' ids are in the id pools: keep the epochs they carry finite.
            return _fixed([-1, 0, live.raft_epoch - 1, live.raft_epoch, live.raft_epoch + 1,
                           live.raft_epoch + 5], lo, min(hi, live.raft_epoch + 1000))
        if name.endswith("epoch"):
            return _fixed([-2, -1, 0, 1, 2, live.raft_epoch, hi], lo, hi)
        if method == "UnregisterBroker" and name == "broker_id":
            return _fixed([-1, 0, 4, 999, hi], lo, hi).filter(lambda v: v not in BROKERS)
        if name.endswith("_id") or name.endswith("_ids") or name in ("leader", "replicas", "isr"):
            return _fixed([-2, -1, 0, *CONTROLLERS, 4, *BROKERS, 104, 999, hi], lo, hi)
        if "partitions" in name or name in ("count", "replication_factor"):
            return _fixed([-2, -1, 0, 1, 2, 3, 4], lo, min(hi, 8))
        if "timeout" in name or name.endswith("_ms") or "wait" in name:
            return _fixed([-1, 0, 1, 10, 100, 1000], lo, min(hi, 3000))
        if "offset" in name or "sequence" in name or "watermark" in name:
            return _fixed([-2, -1, 0, 1, 5, 100, 600, 1 << 31, hi], lo, hi)
        if "bytes" in name or "size" in name:
            return _fixed([-1, 0, 1, 100, 1 << 20, hi], lo, hi)
        return _fixed([-1, 0, 1, 2, hi], lo, hi)

    def _string_field(self, fd: Any) -> st.SearchStrategy[str]:
        name = fd.name
        if "cluster_id" in name:
            return st.sampled_from([self.live.cluster_id, "", "not-the-cluster", "A" * 22])
        if name in ("name", "topic", "topic_name", "topics") or "topic" in name:
            return st.one_of(st.sampled_from([*self.live.topics, "", "fz-new", "__consumer_offsets",
                                              "__cluster_metadata", "x" * 300, "bad/name", "ü",
                                              ".", ".."]),
                             st.text(max_size=20)).filter(lambda s: s != KEEP)
        if "config" in name or name in ("key", "value"):
            return st.sampled_from(["", "retention.ms", "cleanup.policy", "compact", "-1", "abc",
                                    "min.insync.replicas", "segment.bytes", "9" * 40, "x" * 500])
        return st.one_of(st.sampled_from(["", "127.0.0.1", "fz", "0", "x" * 1000]),
                         st.text(max_size=30))

    def _bytes_field(self, fd: Any) -> st.SearchStrategy[bytes]:
        if "record" in fd.name:
            values = st.lists(st.binary(max_size=40), min_size=1, max_size=5)
            return st.one_of(
                st.binary(max_size=200),
                st.builds(lambda v: _batch(v, damage=None), values),
                st.builds(lambda v, d: _batch(v, damage=d), values, st.integers(0, 1 << 16)),
                st.builds(lambda v, cut: _batch(v, damage=None)[:cut], values,
                          st.integers(0, 80)))
        return st.binary(max_size=64)

    def _scalar(self, fd: Any, service: str, method: str) -> st.SearchStrategy[Any]:
        t = fd.type
        if t == _FD.TYPE_BOOL:
            return st.booleans()
        if t == _FD.TYPE_STRING:
            return self._string_field(fd)
        if t == _FD.TYPE_BYTES:
            return self._bytes_field(fd)
        if t in (_FD.TYPE_DOUBLE, _FD.TYPE_FLOAT):
            return st.floats(allow_nan=True, allow_infinity=True, width=32)
        if t == _FD.TYPE_ENUM:
            defined = [v.number for v in fd.enum_type.values]
            return st.one_of(st.sampled_from(defined), st.integers(-5, 200))
        return self._int_field(fd, service, method)

    def message(self, desc: Any, service: str, method: str,
                depth: int = 0) -> st.SearchStrategy[pb_message.Message]:
        cls = message_factory.GetMessageClass(desc)
        if desc.full_name == "kraftlog.v1.Uuid" or desc.name == "Uuid":
            keep = self.live.keep_topic_id
            halves = [f for f in desc.fields][:2]
            return st.builds(lambda hi, lo: cls(**{halves[0].name: hi, halves[1].name: lo}),
                             *(_fixed([0, 1], *_int_range(f)) for f in halves)).filter(
                lambda m: tuple(getattr(m, f.name) for f in desc.fields)[:2] != keep)

        @st.composite
        def build(draw: Callable[..., Any]) -> pb_message.Message:
            msg = cls()
            for fd in desc.fields:
                if not draw(st.booleans()) and depth > 0:
                    continue
                if fd.type == _FD.TYPE_MESSAGE:
                    if depth >= 3:
                        continue
                    sub = self.message(fd.message_type, service, method, depth + 1)
                    if fd.is_repeated:
                        if fd.message_type.GetOptions().map_entry:
                            continue
                        for item in draw(st.lists(sub, max_size=3)):
                            getattr(msg, fd.name).add().CopyFrom(item)
                    else:
                        getattr(msg, fd.name).CopyFrom(draw(sub))
                    continue
                value = self._scalar(fd, service, method)
                if fd.is_repeated:
                    size = draw(st.sampled_from([0, 1, 2, 3, 200]))
                    getattr(msg, fd.name).extend(draw(st.lists(value, min_size=size,
                                                               max_size=size)))
                else:
                    with contextlib.suppress(ValueError, TypeError):
                        setattr(msg, fd.name, draw(value))
            return msg

        return build()


# -- the calls ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Call:
    service: str
    method: str
    target: str
    payload: bytes
    """The serialized request (or random bytes)."""
    kind: str
    """"message", "raw", "replay" or "forged"."""


class Observations:
    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.statuses: collections.Counter[str] = collections.Counter()
        self.kinds: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()
        self.failures: list[str] = []


def _walk_codes(msg: pb_message.Message) -> Iterator[tuple[str, int, str]]:
    """Every (field path, error code, error text) in a response."""
    for fd, value in msg.ListFields():
        if fd.type == _FD.TYPE_MESSAGE:
            items = value if fd.is_repeated else [value]
            for item in items:
                if isinstance(item, pb_message.Message):
                    if item.DESCRIPTOR.full_name == "kraftlog.v1.Error":
                        yield fd.name, item.code, item.message
                    else:
                        yield from _walk_codes(item)
        elif fd.type == _FD.TYPE_ENUM and fd.enum_type.full_name == "kraftlog.v1.ErrorCode":
            for code in (value if fd.is_repeated else [value]):
                yield fd.name, code, ""


class Cluster:
    """The dev cluster's ports by service, and a channel per port."""

    def __init__(self, dev: DevCluster) -> None:
        self.dev = dev
        controllers = [dev.controller(n) for n in CONTROLLERS]
        brokers = [dev.broker(n) for n in BROKERS]
        self.targets = {"raft": controllers, "controller": controllers, "broker": brokers,
                        "admin": [dev.admin, *brokers], "health": [*controllers, *brokers,
                                                                   dev.admin]}
        self._channels: dict[str, grpc.Channel] = {}

    def channel(self, target: str) -> grpc.Channel:
        if target not in self._channels:
            self._channels[target] = grpc.insecure_channel(target, options=[
                ("grpc.max_receive_message_length", 64 << 20)])
        return self._channels[target]

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    def pids(self) -> dict[str, int]:
        return {p.stem: int(p.read_text()) for p in self.dev.directory.glob("*.pid")}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def perform(cluster: Cluster, call: Call, seen: Observations) -> None:
    """Send one call and check its answer; failures are collected, not raised."""
    if call.service == "health":
        path = "/grpc.health.v1.Health/Check"
        output: Any = None
    else:
        desc = _SERVICES[call.service].methods_by_name[call.method]
        path = f"/{_SERVICES[call.service].full_name}/{call.method}"
        output = message_factory.GetMessageClass(desc.output_type)
    label = f"{call.service}.{call.method}"
    seen.calls[label] += 1
    seen.kinds[call.kind] += 1
    channel = cluster.channel(call.target)
    answers: list[bytes] = []
    try:
        if call.service != "health" and _SERVICES[call.service].methods_by_name[
                call.method].client_streaming:
            stream = channel.stream_stream(path, request_serializer=lambda b: b,
                                           response_deserializer=lambda b: b)
            responses = stream(iter([call.payload, call.payload]), timeout=CALL_DEADLINE_S)
            for index, answer in enumerate(responses):
                answers.append(answer)
                if index >= 2:
                    responses.cancel()
                    break
        else:
            unary = channel.unary_unary(path, request_serializer=lambda b: b,
                                        response_deserializer=lambda b: b)
            answers.append(unary(call.payload, timeout=CALL_DEADLINE_S))
        status = grpc.StatusCode.OK
        detail = ""
    except grpc.RpcError as exc:
        status = exc.code()
        detail = exc.details() or ""
    seen.statuses[f"{label}:{status.name}"] += 1
    if status is grpc.StatusCode.CANCELLED and answers:
        status = grpc.StatusCode.OK  # the fuzzer ended a stream it had enough of
    if status is grpc.StatusCode.NOT_FOUND and call.service == "health":
        status = grpc.StatusCode.OK  # gRPC health's answer for a service it does not know
    if (status is grpc.StatusCode.UNIMPLEMENTED and label in UNSERVED
            and detail == UNSERVED[label]):
        status = grpc.StatusCode.OK
    if status not in ALLOWED_STATUS:
        seen.failures.append(f"{label} to {call.target} ({call.kind}): gRPC {status.name} "
                             f"{detail[:300]!r}; request {call.payload[:120].hex()}")
    if SERVER_PATH.search(detail):
        seen.failures.append(f"{label}: the error text names server internals: {detail[:300]!r}")
    for raw in answers:
        if output is None:
            continue
        try:
            response = output.FromString(raw)
        except pb_message.DecodeError as exc:
            seen.failures.append(f"{label}: undecodable answer ({exc})")
            continue
        for where, code, text in _walk_codes(response):
            if code not in DEFINED_CODES:
                seen.failures.append(f"{label}: {where} carries error code {code}, not Kafka's")
            elif code:
                seen.errors[ErrorCode(code).name] += 1
            if text and SERVER_PATH.search(text):
                seen.failures.append(f"{label}: {where} text names server internals: {text!r}")


def method_strategies(fuzzer: Fuzzer, cluster: Cluster) -> list[st.SearchStrategy[Call]]:
    """One strategy per method of every service: well-formed messages to its ports."""
    return [st.builds(
        lambda msg, target, s=service, m=mdesc.name: Call(
            service=s, method=m, target=target, payload=msg.SerializeToString(),
            kind="message"),
        fuzzer.message(mdesc.input_type, service, mdesc.name),
        st.sampled_from(cluster.targets[service]))
        for service, sdesc in _SERVICES.items() for mdesc in sdesc.methods]


def call_strategy(fuzzer: Fuzzer, cluster: Cluster) -> st.SearchStrategy[Call]:
    live = fuzzer.live
    per_method = method_strategies(fuzzer, cluster)
    methods = [(s, m.name) for s, sdesc in _SERVICES.items() for m in sdesc.methods]
    raw = st.builds(lambda sm, target, data: Call(service=sm[0], method=sm[1], target=target,
                                                   payload=data, kind="raw"),
                    st.sampled_from(methods), st.sampled_from(cluster.targets["broker"]
                                                              + cluster.targets["raft"]),
                    st.binary(min_size=1, max_size=300))
    raw = raw.filter(lambda c: c.target in cluster.targets[c.service])

    def replay(index: int, target_index: int) -> Call | None:
        if not live.history:
            return None
        service, method, payload = live.history[index % len(live.history)]
        targets = cluster.targets[service]
        return Call(service=service, method=method, target=targets[target_index % len(targets)],
                    payload=payload, kind="replay")

    replays = st.builds(replay, st.integers(0, 1 << 20), st.integers(0, 10)).filter(
        lambda c: c is not None)
    forged = st.builds(lambda c: c, st.deferred(lambda: _forged(live, cluster)))
    health = st.builds(lambda target, name: Call(
        service="health", method="Check", target=target,
        payload=health_pb2.HealthCheckRequest(service=name).SerializeToString(),
        kind="message"),
        st.sampled_from(cluster.targets["health"]), st.text(max_size=40))
    # About 60% well-formed messages of every method, 10% each of the rest (a flat one_of
    # would weigh each of the ~50 methods like each of the other kinds).
    kinds: dict[str, st.SearchStrategy[Any]] = {
        "message": st.one_of(*per_method), "raw": raw, "replay": replays, "forged": forged,
        "health": health}
    return st.sampled_from(["message"] * 6 + ["raw", "replay", "forged", "health"]).flatmap(
        kinds.__getitem__)


def _forged(live: Live, cluster: Cluster) -> st.SearchStrategy[Call]:
    """Inter-node messages with the live cluster's ids, epochs and cluster id."""
    voter = st.sampled_from(CONTROLLERS)
    epoch = st.integers(max(0, live.raft_epoch - 2), live.raft_epoch + 3)
    target = st.sampled_from(cluster.targets["raft"])

    def vote(candidate: int, e: int, pre: bool, offset: int, to: str) -> Call:
        request = raft_pb2.VoteRequest()
        _set(request, cluster_id=live.cluster_id, candidate_id=candidate,
             voter_id=_node_of(cluster, to), candidate_epoch=e, last_offset_epoch=e,
             last_offset=offset, pre_vote=pre)
        request.topic_partition.CopyFrom(METADATA_PARTITION)
        return Call(service="raft", method="Vote", target=to,
                    payload=request.SerializeToString(), kind="forged")

    def begin(leader: int, e: int, to: str) -> Call:
        request = raft_pb2.BeginQuorumEpochRequest()
        _set(request, cluster_id=live.cluster_id, leader_id=leader, leader_epoch=e,
             voter_id=_node_of(cluster, to))
        request.topic_partition.CopyFrom(METADATA_PARTITION)
        return Call(service="raft", method="BeginQuorumEpoch", target=to,
                    payload=request.SerializeToString(), kind="forged")

    def end(leader: int, e: int, to: str) -> Call:
        request = raft_pb2.EndQuorumEpochRequest()
        _set(request, cluster_id=live.cluster_id, leader_id=leader, leader_epoch=e)
        request.topic_partition.CopyFrom(METADATA_PARTITION)
        return Call(service="raft", method="EndQuorumEpoch", target=to,
                    payload=request.SerializeToString(), kind="forged")

    def fetch(replica: int, e: int, offset: int, to: str) -> Call:
        request = raft_pb2.RaftFetchRequest()
        _set(request, cluster_id=live.cluster_id, replica_id=replica, current_leader_epoch=e,
             fetch_offset=offset, last_fetched_epoch=e, max_wait_ms=0)
        request.topic_partition.CopyFrom(METADATA_PARTITION)
        return Call(service="raft", method="Fetch", target=to,
                    payload=request.SerializeToString(), kind="forged")

    def heartbeat(broker: int, e: int, to: str) -> Call:
        request = controller_pb2.BrokerHeartbeatRequest()
        _set(request, broker_id=broker, broker_epoch=e, want_fence=False,
             want_shut_down=False)
        return Call(service="controller", method="BrokerHeartbeat", target=to,
                    payload=request.SerializeToString(), kind="forged")

    offsets = st.sampled_from([-1, 0, 1, 100, 1 << 40])
    return st.one_of(
        st.builds(vote, voter, epoch, st.booleans(), offsets, target),
        st.builds(begin, voter, epoch, target),
        st.builds(end, voter, epoch, target),
        st.builds(fetch, st.sampled_from([*CONTROLLERS, *BROKERS, 7]), epoch, offsets, target),
        st.builds(heartbeat, st.sampled_from(BROKERS), st.integers(-1, 1000), target))


def _node_of(cluster: Cluster, target: str) -> int:
    """The controller id listening at ``target``."""
    return CONTROLLERS[cluster.targets["raft"].index(target)]


def _set(message: pb_message.Message, **values: Any) -> None:
    """Set the fields the contract has (names differ a little between contracts)."""
    names = {f.name for f in message.DESCRIPTOR.fields}
    for name, value in values.items():
        if name in names:
            setattr(message, name, value)


# -- the test ----------------------------------------------------------------------------------


def _produce_keep(dev: DevCluster) -> dict[tuple[int, int], bytes]:
    config = client.ProducerConfig(bootstrap_servers=(dev.broker(101),), acks=client.Acks.ALL,
                                   linger_ms=5)
    acked: dict[tuple[int, int], bytes] = {}
    with client.Producer(config) as producer:
        futures = [(producer.send(KEEP, b"keep-%05d" % i + os.urandom(40),
                                  partition=i % KEEP_PARTITIONS)) for i in range(KEEP_RECORDS)]
        producer.flush(60_000)
        for future in futures:
            meta = future.result(timeout=10)
            acked[(meta.partition, meta.offset)] = b""
    # Read back what was acknowledged (values are random: take them from the log).
    return _read_all(dev, KEEP, KEEP_PARTITIONS)


def _read_all(dev: DevCluster, topic: str, partitions: int) -> dict[tuple[int, int], bytes]:
    config = client.ConsumerConfig(bootstrap_servers=tuple(dev.broker(b) for b in BROKERS),
                                   auto_offset_reset=client.OffsetReset.EARLIEST)
    seen: dict[tuple[int, int], bytes] = {}
    with contextlib.closing(client.Consumer(config)) as consumer:
        consumer.assign([client.TopicPartition(topic=topic, partition=p)
                         for p in range(partitions)])
        deadline = time.monotonic() + 60
        ends = consumer.end_offsets(consumer.assignment())
        while time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=500):
                seen[(record.partition, record.offset)] = record.value or b""
            positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
            if all(positions[tp] >= end for tp, end in ends.items()):
                break
    return seen


def _live(dev: DevCluster) -> Live:
    with grpc.insecure_channel(dev.admin) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        quorum = admin.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=10)
        topics = admin.DescribeTopics(admin_pb2.DescribeTopicsRequest(topics=[KEEP]), timeout=10)
        cluster = admin.DescribeCluster(controller_pb2.DescribeClusterRequest(), timeout=10)
    [keep] = topics.topics
    halves = tuple(getattr(keep.topic_id, f.name) for f in keep.topic_id.DESCRIPTOR.fields)
    return Live(cluster_id=cluster.cluster_id, raft_epoch=max(1, quorum.leader_epoch),
                keep_topic_id=(int(halves[0]), int(halves[1])))


def _serving(dev: DevCluster) -> str | None:
    """Why the cluster is not serving yet, None when it is."""
    status = dev.status()
    down = [n for n in status.get("nodes", []) if n.get("state") != "running"]
    if down:
        return f"not running: {down}"
    try:
        with grpc.insecure_channel(dev.admin) as channel:
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            quorum = admin.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=10)
            cluster = admin.DescribeCluster(controller_pb2.DescribeClusterRequest(
                include_fenced_brokers=True), timeout=10)
    except grpc.RpcError as exc:
        return f"admin: {exc.code().name} {exc.details()}"
    if quorum.leader_id < 0:
        return "no quorum leader"
    brokers = {b.broker_id: b.is_fenced for b in cluster.brokers}
    if sorted(brokers) != list(BROKERS) or any(brokers.values()):
        return f"brokers (id: fenced) {brokers}"
    return None


def test_every_rpc_fuzzed_against_a_live_cluster(tmp_path: Any) -> None:
    dev = DevCluster(tmp_path / "dev")
    cluster: Cluster | None = None
    seen = Observations()
    try:
        dev.up()
        created = dev.cli("topics", "create", "--topic", KEEP, "--partitions",
                          str(KEEP_PARTITIONS), "--replication-factor", "3", "--config",
                          "min.insync.replicas=2")
        assert created.returncode == 0, created.stderr
        before = _produce_keep(dev)
        assert len(before) == KEEP_RECORDS, len(before)
        cluster = Cluster(dev)
        pids = cluster.pids()
        live = _live(dev)
        fuzzer = Fuzzer(live)
        strategy = call_strategy(fuzzer, cluster)
        deadline = time.monotonic() + FUZZ_SECONDS
        rng = random.Random()

        def check(call: Call) -> None:
            if time.monotonic() >= deadline:
                return
            perform(cluster, call, seen)
            if call.kind == "message" and call.service != "health" and rng.random() < 0.2:
                live.history.append((call.service, call.method, call.payload))
                del live.history[:-500]
            dead = [name for name, pid in pids.items() if not _alive(pid)]
            assert not dead, f"{dead} exited after {call}"

        def runner(calls: st.SearchStrategy[Call], examples: int) -> Callable[[], None]:
            return settings(max_examples=examples, deadline=None, database=None,
                            phases=[Phase.generate], suppress_health_check=list(HealthCheck),
                            derandomize=False)(given(call=calls)(check))

        # First every method a few times (a random mix may miss one in a short run), then
        # the mix of every kind of call until the time is up.
        for per_method in method_strategies(fuzzer, cluster):
            runner(per_method, 4)()
        one = runner(strategy, 150)
        while time.monotonic() < deadline:
            one()
            with contextlib.suppress(Exception):
                live.raft_epoch = _live(dev).raft_epoch
        report = {"seconds": FUZZ_SECONDS, "calls": dict(sorted(seen.calls.items())),
                  "kinds": dict(seen.kinds), "error_codes": dict(seen.errors.most_common()),
                  "statuses": dict(sorted(seen.statuses.items())),
                  "failures": seen.failures[:50]}
        print(json.dumps(report, indent=1))
        if os.environ.get("KRAFTLOG_FUZZ_REPORT"):
            with open(os.environ["KRAFTLOG_FUZZ_REPORT"], "w") as out:
                json.dump(report, out, indent=1)
        assert all(seen.calls[f"{s}.{m.name}"] > 0 for s, d in _SERVICES.items()
                   for m in d.methods), seen.calls
        # The cluster serves again, and what was acknowledged is still there.
        why: str | None = "not checked"
        settle = time.monotonic() + 90
        while time.monotonic() < settle:
            why = _serving(dev)
            if why is None:
                break
            time.sleep(1)
        assert why is None, why
        dead = [name for name, pid in pids.items() if not _alive(pid)]
        assert not dead, dead
        after = _read_all(dev, KEEP, KEEP_PARTITIONS)
        missing = [key for key in before if after.get(key) != before[key]]
        assert not missing, f"{len(missing)} acknowledged records changed or gone: {missing[:10]}"
        config = client.ProducerConfig(bootstrap_servers=(dev.broker(102),), acks=client.Acks.ALL)
        assert dev.cli("topics", "create", "--topic", "after-fuzz", "--partitions", "1",
                       "--replication-factor", "3").returncode == 0
        with client.Producer(config) as producer:
            producer.send("after-fuzz", b"still serving").result(timeout=30)
        assert list(_read_all(dev, "after-fuzz", 1).values()) == [b"still serving"]
        assert not seen.failures, "\n".join(seen.failures[:30])
    finally:
        if cluster is not None:
            cluster.close()
        if seen.failures or os.environ.get("KRAFTLOG_FUZZ_KEEP_LOGS"):
            print(dev.logs())
        dev.destroy()
