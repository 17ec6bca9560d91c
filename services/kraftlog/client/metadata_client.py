"""The client's view of the cluster: broker channels and a metadata cache with refresh.

Owns :class:`BrokerChannels` (one gRPC channel and BrokerService stub per
``host:port``, created lazily so a process can fork before using a client) and
:class:`MetadataCache`: it bootstraps from ``bootstrap.servers``, asks one broker
at a time for Metadata (known brokers first, then the bootstrap list), and keeps
topics -> partitions -> leader, leader epoch, replicas, ISR, plus the brokers'
endpoints. Callers mark it stale (:meth:`MetadataCache.request_update`) after
NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION,
LEADER_NOT_AVAILABLE or a connection error; the next lookup refreshes it, never
more often than ``retry.backoff.ms``, and every wait is bounded by the caller's
deadline (``time.monotonic()`` seconds).

Used by :mod:`kraftlog.client.producer` and :mod:`kraftlog.client.consumer`.
Thread-safe (one lock). Edge module: grpc and the clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import grpc

from kraftlog import rpc
from kraftlog.client import errors as client_errors
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition
from kraftlog.security import tls
from kraftlog.telemetry import grpc_tracing
from kraftlog.v1 import broker_pb2, broker_pb2_grpc, common_pb2

NO_LEADER = -1
MAX_METADATA_RPC_S = 5.0
"""One Metadata RPC's bound; a dead address costs at most this before the next is tried."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionInfo:
    """One partition as the answering broker's metadata image has it."""

    topic: str
    partition: int
    leader_id: int
    """-1 when the partition has no leader (LEADER_NOT_AVAILABLE)."""
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicInfo:
    """A topic's partitions, indexed by partition id (ids are 0..n-1)."""

    name: str
    partitions: tuple[PartitionInfo, ...]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True, kw_only=True)
class Leader:
    """Where to send a partition's requests."""

    broker_id: int
    address: str
    leader_epoch: int


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def address_of(host: str, port: int) -> str:
    """``host:port`` as channels are keyed (an IPv6 host in brackets)."""
    return _address(host, port)


def rpc_error_text(exc: grpc.RpcError) -> str:
    """``UNAVAILABLE`` and the like: the gRPC status name, for error messages."""
    code = exc.code() if hasattr(exc, "code") else None
    return code.name if code is not None else type(exc).__name__


FETCH_METHOD = "/kraftlog.v1.BrokerService/Fetch"


class BrokerChannels:
    """Lazily created channels and stubs, one per broker address. Thread-safe."""

    def __init__(self, *, retry_backoff_ms: int = 100,
                 client_tls: tls.ClientTls | None = None) -> None:
        self._retry_backoff_ms = max(1, retry_backoff_ms)
        self._client_tls = client_tls  # None: the process default (kraftlog.rpc)
        self._lock = threading.Lock()
        self._stubs: dict[str, tuple[grpc.Channel, broker_pb2_grpc.BrokerServiceStub,
                                     grpc.UnaryUnaryMultiCallable]] = {}
        self._closed = False

    def _entry(self, address: str) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerServiceStub,
                                            grpc.UnaryUnaryMultiCallable]:
        with self._lock:
            if self._closed:
                raise client_errors.ClientClosedError("the client is closed")
            entry = self._stubs.get(address)
            if entry is None:
                channel = grpc.intercept_channel(
                    rpc.sync_channel(address, options=rpc.channel_options(
                        retry_backoff_ms=self._retry_backoff_ms), client_tls=self._client_tls),
                    grpc_tracing.SyncDataPathClientInterceptor())
                raw_fetch = channel.unary_unary(
                    FETCH_METHOD, request_serializer=broker_pb2.FetchRequest.SerializeToString,
                    response_deserializer=None)
                entry = (channel, broker_pb2_grpc.BrokerServiceStub(channel), raw_fetch)
                self._stubs[address] = entry
            return entry

    def stub(self, address: str) -> broker_pb2_grpc.BrokerServiceStub:
        return self._entry(address)[1]

    def raw_fetch(self, address: str) -> grpc.UnaryUnaryMultiCallable:
        """BrokerService.Fetch answering the response's bytes, unparsed (the consumer
        reads them with :mod:`.fetch_wire`)."""
        return self._entry(address)[2]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            entries = list(self._stubs.values())
            self._stubs.clear()
        for channel, _stub, _raw in entries:
            channel.close()


class MetadataCache:
    """Topics, partition leaders and broker endpoints, refreshed on demand. See module doc."""

    def __init__(self, bootstrap_servers: Sequence[str], channels: BrokerChannels, *,
                 retry_backoff_ms: int = 100, metadata_max_age_ms: int = 300000) -> None:
        self.bootstrap_servers = tuple(bootstrap_servers)
        self._channels = channels
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._max_age_s = metadata_max_age_ms / 1000
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._brokers: dict[int, str] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._topic_errors: dict[str, tuple[ErrorCode, str]] = {}
        self._wanted: set[str] = set()
        self._stale = True
        self._unreachable: set[str] = set()
        """Addresses whose last request failed at the transport: asked last."""
        self._updated_at = float("-inf")
        self._last_attempt = float("-inf")
        self.cluster_id = ""

    # -- reading ------------------------------------------------------------------------------

    def brokers(self) -> dict[int, str]:
        with self._lock:
            return dict(self._brokers)

    def cached_topic(self, topic: str) -> TopicInfo | None:
        with self._lock:
            return self._topics.get(topic)

    def leader(self, tp: TopicPartition) -> Leader | None:
        """The partition's leader and its address, None when unknown (refresh and retry)."""
        with self._lock:
            info = self._topics.get(tp.topic)
            if info is None or tp.partition >= len(info.partitions):
                return None
            part = info.partitions[tp.partition]
            address = self._brokers.get(part.leader_id)
            if part.leader_id == NO_LEADER or address is None:
                return None
            return Leader(broker_id=part.leader_id, address=address,
                          leader_epoch=part.leader_epoch)

    def topic(self, topic: str, *, deadline: float) -> TopicInfo:
        """The topic's partitions, refreshing (and waiting for it to exist) until ``deadline``.

        Raises UnknownTopicError if brokers keep answering UNKNOWN_TOPIC_OR_PARTITION
        (or another topic error) until the deadline, BrokersUnavailableError when no
        broker answered at all.
        """
        # The common case (a known topic, fresh metadata) without the lock: send() calls
        # this once per record. Each read is of one attribute, atomic under the GIL, and
        # a topic in _topics is in _wanted already (it got there by being wanted).
        info = self._topics.get(topic)
        if info is not None and topic in self._wanted and (
                time.monotonic() - self._updated_at < self._max_age_s):
            return info
        with self._lock:
            self._wanted.add(topic)
            info = self._topics.get(topic)
            fresh = time.monotonic() - self._updated_at < self._max_age_s
        if info is not None and fresh:
            return info
        answered = False
        while True:
            try:
                self.refresh(deadline=deadline, force=info is None)
                answered = True
            except client_errors.BrokersUnavailableError:
                # A broker already said what is wrong with the topic: that is the
                # better error than a last attempt cut short by the deadline.
                if not answered:
                    raise
            with self._lock:
                info = self._topics.get(topic)
                failure = self._topic_errors.get(topic)
            if info is not None:
                return info
            if time.monotonic() + self._retry_backoff_s >= deadline:
                code, message = failure or (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "")
                raise client_errors.error_for(code, message, topic=topic,
                                              context="after waiting for metadata")
            time.sleep(self._retry_backoff_s)

    # -- refreshing ---------------------------------------------------------------------------

    def request_update(self) -> None:
        """Mark the cache stale: the next :meth:`maybe_refresh` asks a broker again."""
        with self._lock:
            self._stale = True

    def apply_leader_hint(self, tp: TopicPartition, hint: common_pb2.LeaderHint) -> bool:
        """Take a NOT_LEADER_OR_FOLLOWER answer's ``current_leader`` (KIP-951) at once.

        Only a hint naming a live leader, with an endpoint, at a leader epoch newer
        than the cached one is taken; returns whether it was. The cache stays marked
        stale so a full refresh still follows.
        """
        if hint.leader_id < 0 or not hint.HasField("endpoint") or not hint.endpoint.port:
            return False
        address = _address(hint.endpoint.host, hint.endpoint.port)
        with self._lock:
            info = self._topics.get(tp.topic)
            if info is None or tp.partition >= len(info.partitions):
                return False
            current = info.partitions[tp.partition]
            if hint.leader_epoch <= current.leader_epoch:
                return False
            parts = list(info.partitions)
            parts[tp.partition] = dataclasses.replace(
                current, leader_id=hint.leader_id, leader_epoch=hint.leader_epoch)
            self._topics[tp.topic] = TopicInfo(name=info.name, partitions=tuple(parts))
            self._brokers.setdefault(hint.leader_id, address)
            return True

    def report_unreachable(self, address: str) -> None:
        """A request to ``address`` failed at the transport: the leaders it held may have
        moved, so mark the cache stale, and ask other brokers for metadata first."""
        with self._lock:
            self._unreachable.add(address)
            self._stale = True

    def maybe_refresh(self, *, deadline: float) -> bool:
        """Refresh if stale (or old) and the backoff since the last attempt has passed.

        Returns whether a refresh was attempted. Errors reaching every broker are
        swallowed here (the caller's own retries and deadline decide); use
        :meth:`refresh` to see them.
        """
        with self._lock:
            due = self._stale or time.monotonic() - self._updated_at >= self._max_age_s
            if not due or time.monotonic() - self._last_attempt < self._retry_backoff_s:
                return False
        with contextlib.suppress(client_errors.BrokersUnavailableError):
            self.refresh(deadline=deadline)
        return True

    def refresh(self, *, deadline: float, force: bool = True,
                topics: Iterable[str] = ()) -> None:
        """Ask a broker for the wanted topics' metadata; BrokersUnavailableError if none answers."""
        with self._refresh_lock:
            with self._lock:
                self._wanted.update(topics)
                if not force and not self._stale and (
                        time.monotonic() - self._updated_at < self._max_age_s):
                    return
                self._last_attempt = time.monotonic()
                wanted = sorted(self._wanted)
                known = list(dict.fromkeys(self._brokers.values()))
                unreachable = set(self._unreachable)
            candidates = list(dict.fromkeys([*known, *self.bootstrap_servers]))
            candidates.sort(key=lambda address: address in unreachable)  # stable
            failures: dict[str, str] = {}
            for address in candidates:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    failures.setdefault(address, "not tried: deadline passed")
                    continue
                try:
                    answer = self._channels.stub(address).Metadata(
                        broker_pb2.MetadataRequest(topics=wanted),
                        timeout=min(remaining, MAX_METADATA_RPC_S))
                except grpc.RpcError as exc:
                    failures[address] = rpc_error_text(exc)
                    with self._lock:
                        self._unreachable.add(address)
                    continue
                with self._lock:
                    self._unreachable.discard(address)
                self._apply(answer, wanted)
                return
            raise client_errors.BrokersUnavailableError(failures, "metadata")

    def _apply(self, answer: broker_pb2.MetadataResponse, wanted: Sequence[str]) -> None:
        brokers = {b.node_id: _address(b.endpoint.host, b.endpoint.port) for b in answer.brokers}
        topics: dict[str, TopicInfo] = {}
        topic_errors: dict[str, tuple[ErrorCode, str]] = {}
        for topic in answer.topics:
            code = client_errors.code_of(topic.error.code)
            if code is not ErrorCode.NONE:
                topic_errors[topic.name] = (code, topic.error.message)
                continue
            parts = sorted(topic.partitions, key=lambda p: p.partition_index)
            if [p.partition_index for p in parts] != list(range(len(parts))) or not parts:
                topic_errors[topic.name] = (ErrorCode.LEADER_NOT_AVAILABLE,
                                            f"topic {topic.name!r} has no complete partition list yet")
                continue
            topics[topic.name] = TopicInfo(name=topic.name, partitions=tuple(
                PartitionInfo(topic=topic.name, partition=p.partition_index,
                              leader_id=p.leader_id if p.error.code == 0 else NO_LEADER,
                              leader_epoch=p.leader_epoch, replicas=tuple(p.replica_nodes),
                              isr=tuple(p.isr_nodes), offline_replicas=tuple(p.offline_replicas))
                for p in parts))
        with self._lock:
            if brokers:
                self._brokers = brokers
            for name in wanted:
                if name in topics:
                    self._topics[name] = topics[name]
                    self._topic_errors.pop(name, None)
                else:
                    self._topics.pop(name, None)
                    if name in topic_errors:
                        self._topic_errors[name] = topic_errors[name]
            self.cluster_id = answer.cluster_id
            self._stale = False
            self._updated_at = time.monotonic()
