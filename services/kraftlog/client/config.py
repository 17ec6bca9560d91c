"""Producer and consumer settings: typed values with Kafka's names, units and defaults.

:class:`ProducerConfig` and :class:`ConsumerConfig` are frozen values; build them
with keywords, or from Kafka-style properties (``bootstrap.servers``,
``acks``, ``linger.ms``, ...) with ``from_properties`` — what the CLI and the
PySpark data source's options use. Every bad value is a
:class:`kraftlog.errors.ConfigError` naming the key. Pure module.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kraftlog.errors import ConfigError
from kraftlog.security import config as security_config
from kraftlog.storage.compression import CompressionType

_HOST_PORT = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[^:\s\[\],]+):(?P<port>\d{1,5})$")


class Acks(enum.IntEnum):
    """``acks``: what the leader waits for before answering a produce."""

    NONE = 0
    """Answer before the append: no offsets, no durability guarantee."""
    LEADER = 1
    """After the leader's append."""
    ALL = -1
    """After every in-sync replica has the records (high watermark past them)."""

    @classmethod
    def parse(cls, value: str | int) -> Acks:
        text = str(value).strip().lower()
        if text in ("all", "-1"):
            return cls.ALL
        if text == "0":
            return cls.NONE
        if text == "1":
            return cls.LEADER
        raise ConfigError(f"acks={value!r} is invalid: use 0, 1, all or -1")


class OffsetReset(enum.Enum):
    """``auto.offset.reset``: where to start when there is no valid position."""

    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"


def parse_bootstrap_servers(value: str | Sequence[str], *, key: str = "bootstrap.servers"
                            ) -> tuple[str, ...]:
    """``host:port[,host:port...]`` (or a list of them); ConfigError naming a bad entry."""
    entries = [part for item in ([value] if isinstance(value, str) else value)
               for part in str(item).split(",")]
    servers = tuple(entry.strip() for entry in entries if entry.strip())
    if not servers:
        raise ConfigError(f"{key} is empty: give HOST:PORT[,HOST:PORT...]")
    for server in servers:
        match = _HOST_PORT.match(server)
        if match is None or not 0 < int(match.group("port")) < 65536:
            raise ConfigError(f"{key} entry {server!r} is not HOST:PORT (port 1-65535)")
    return servers


def parse_compression(value: str | CompressionType) -> CompressionType:
    if isinstance(value, CompressionType):
        codec = value
    else:
        try:
            codec = CompressionType[str(value).strip().upper()]
        except KeyError:
            raise ConfigError(f"compression.type={value!r} is invalid: use none, gzip, lz4 "
                              "or zstd") from None
    if codec is CompressionType.SNAPPY:
        raise ConfigError("compression.type=snappy is not supported by kraftlog: use gzip, "
                          "lz4 or zstd")
    return codec


MAX_IDEMPOTENT_IN_FLIGHT = 5
"""Kafka's bound on ``max.in.flight.requests.per.connection`` with idempotence (the
broker's ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``)."""


def _check_positive(name: str, value: int, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}={value!r} must be an integer >= {minimum}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig:
    """Producer settings. Times in milliseconds, sizes in bytes, as in Kafka."""

    bootstrap_servers: tuple[str, ...]
    """``bootstrap.servers``: brokers to ask for metadata first."""
    acks: Acks = Acks.ALL
    """``acks``: 0, 1 or all (Kafka 3.0+ default: all)."""
    linger_ms: int = 5
    """``linger.ms``: how long a non-full batch waits for more records (Kafka 4.0 default 5)."""
    batch_size: int = 16384
    """``batch.size``: a partition's batch is sent once its records reach this many bytes."""
    max_request_size: int = 1048576
    """``max.request.size``: bound on one record, and on one partition's data per request."""
    buffer_memory: int = 33554432
    """``buffer.memory``: bytes of unsent records before ``send`` blocks (up to max.block.ms)."""
    compression_type: CompressionType = CompressionType.NONE
    """``compression.type``: none, gzip, lz4 or zstd."""
    retries: int = 2147483647
    """``retries``: resends of a batch after a retriable error (bounded by delivery.timeout.ms)."""
    retry_backoff_ms: int = 100
    """``retry.backoff.ms``: wait before resending a batch or refreshing metadata."""
    request_timeout_ms: int = 30000
    """``request.timeout.ms``: one Produce RPC's deadline (also the acks=all wait)."""
    delivery_timeout_ms: int = 120000
    """``delivery.timeout.ms``: a record's whole budget, from send() to its acknowledgement."""
    max_block_ms: int = 60000
    """``max.block.ms``: how long send() waits for metadata or buffer space."""
    metadata_max_age_ms: int = 300000
    """``metadata.max.age.ms``: metadata older than this is refreshed."""
    enable_idempotence: bool = True
    """``enable.idempotence`` (KIP-98): a producer id from InitProducerId and a sequence
    number per batch and partition, so a retry after a lost answer is not written twice.
    Used with acks=all only (as Kafka's default: other acks turn it off)."""
    partitioner_adaptive_partitioning_enable: bool = True
    """``partitioner.adaptive.partitioning.enable`` (KIP-794): null-key records move to the
    next sticky partition with a probability that falls with the batches already queued
    for it, instead of uniformly."""
    security: tuple[tuple[str, str], ...] = ()
    """``security.protocol`` (PLAINTEXT or SSL) and the ``ssl.*`` settings (KIP-651 PEM:
    ``ssl.truststore.location``, ``ssl.keystore.location``, ...), as given; empty: the
    process default (:mod:`kraftlog.rpc`)."""
    max_in_flight_requests_per_connection: int = 5
    """``max.in.flight.requests.per.connection``: Produce requests a partition may have
    unanswered at once (each carries at most one batch of it when idempotent), counted
    from its oldest unanswered one. At most 5 with idempotence: the broker remembers a
    producer's last 5 batches per partition to recognise a retried one (KIP-98). Without
    idempotence, more than 1 can reorder a partition's records when a batch is retried."""

    @property
    def idempotent(self) -> bool:
        return self.enable_idempotence and self.acks is Acks.ALL

    def __post_init__(self) -> None:
        object.__setattr__(self, "bootstrap_servers",
                           parse_bootstrap_servers(self.bootstrap_servers))
        check_security(self.security)
        object.__setattr__(self, "acks", Acks.parse(self.acks))
        object.__setattr__(self, "compression_type", parse_compression(self.compression_type))
        for name in ("linger_ms", "retries", "retry_backoff_ms", "max_block_ms",
                     "metadata_max_age_ms"):
            _check_positive(name.replace("_", "."), getattr(self, name))
        for name in ("batch_size", "max_request_size", "buffer_memory", "request_timeout_ms",
                     "delivery_timeout_ms", "max_in_flight_requests_per_connection"):
            _check_positive(name.replace("_", "."), getattr(self, name), 1)
        if self.idempotent and self.max_in_flight_requests_per_connection > MAX_IDEMPOTENT_IN_FLIGHT:
            raise ConfigError(
                f"max.in.flight.requests.per.connection={self.max_in_flight_requests_per_connection}"
                f" must be at most {MAX_IDEMPOTENT_IN_FLIGHT} with enable.idempotence=true (the "
                f"broker keeps a producer's last {MAX_IDEMPOTENT_IN_FLIGHT} batches to detect "
                "retried ones); lower it, or set enable.idempotence=false")
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ConfigError(
                f"delivery.timeout.ms={self.delivery_timeout_ms} must be at least linger.ms + "
                f"request.timeout.ms = {self.linger_ms + self.request_timeout_ms}")

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> ProducerConfig:
        """From Kafka names (``bootstrap.servers``, ``linger.ms``, ...); unknown keys fail."""
        return cls(**_keywords(cls, properties))


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig:
    """Consumer settings. Times in milliseconds, sizes in bytes, as in Kafka."""

    bootstrap_servers: tuple[str, ...]
    """``bootstrap.servers``: brokers to ask for metadata first."""
    auto_offset_reset: OffsetReset = OffsetReset.LATEST
    """``auto.offset.reset``: earliest, latest or none (raise OffsetOutOfRangeError)."""
    fetch_min_bytes: int = 1
    """``fetch.min.bytes``: a broker answers a fetch once this much data is there..."""
    fetch_max_wait_ms: int = 500
    """``fetch.max.wait.ms``: ...or after this long."""
    fetch_max_bytes: int = 52428800
    """``fetch.max.bytes``: bound on one fetch response's data."""
    max_partition_fetch_bytes: int = 1048576
    """``max.partition.fetch.bytes``: bound per partition (one whole batch is always returned)."""
    max_poll_records: int = 500
    """``max.poll.records``: default bound on the records one poll() returns."""
    request_timeout_ms: int = 30000
    """``request.timeout.ms``: one RPC's deadline beyond its long-poll wait."""
    retry_backoff_ms: int = 100
    """``retry.backoff.ms``: wait after an error before refreshing metadata and retrying."""
    default_api_timeout_ms: int = 60000
    """``default.api.timeout.ms``: bound on blocking calls without their own timeout."""
    metadata_max_age_ms: int = 300000
    """``metadata.max.age.ms``: metadata older than this is refreshed."""
    check_crcs: bool = True
    """``check.crcs``: kept for Kafka compatibility; the decoder always checks CRCs."""
    group_id: str | None = None
    """``group.id``: the consumer group whose committed offsets ``commit()`` stores and a
    partition without a position starts from (no group membership: partitions are assigned
    by hand, as a Kafka consumer using ``assign``)."""
    enable_auto_commit: bool = True
    """``enable.auto.commit``: with a ``group.id``, commit the positions every
    ``auto.commit.interval.ms`` from ``poll()`` and at ``close()``."""
    auto_commit_interval_ms: int = 5000
    """``auto.commit.interval.ms``."""
    security: tuple[tuple[str, str], ...] = ()
    """``security.protocol`` and ``ssl.*`` settings, as for :class:`ProducerConfig`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "bootstrap_servers",
                           parse_bootstrap_servers(self.bootstrap_servers))
        check_security(self.security)
        if self.group_id is not None and (not isinstance(self.group_id, str)
                                          or not self.group_id):
            raise ConfigError(f"group.id={self.group_id!r} is invalid: give a non-empty string "
                              "(or leave it unset)")
        reset = self.auto_offset_reset
        if not isinstance(reset, OffsetReset):
            try:
                reset = OffsetReset(str(reset).strip().lower())
            except ValueError:
                raise ConfigError(f"auto.offset.reset={reset!r} is invalid: use earliest, "
                                  "latest or none") from None
            object.__setattr__(self, "auto_offset_reset", reset)
        for name in ("fetch_min_bytes", "fetch_max_wait_ms", "retry_backoff_ms",
                     "metadata_max_age_ms", "auto_commit_interval_ms"):
            _check_positive(name.replace("_", "."), getattr(self, name))
        for name in ("fetch_max_bytes", "max_partition_fetch_bytes", "max_poll_records",
                     "request_timeout_ms", "default_api_timeout_ms"):
            _check_positive(name.replace("_", "."), getattr(self, name), 1)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> ConsumerConfig:
        """From Kafka names (``bootstrap.servers``, ``auto.offset.reset``, ...)."""
        return cls(**_keywords(cls, properties))


def is_security_key(key: str) -> bool:
    return key == "security.protocol" or key.startswith("ssl.")


def check_security(security: Sequence[tuple[str, str]]) -> None:
    """Refuse bad ``security.protocol`` / ``ssl.*`` settings before any I/O."""
    get = security_config.mapping_lookup(dict(security))
    if security_config.client_protocol(get) is security_config.Protocol.SSL:
        security_config.client_ssl(get, what="security.protocol")


def _keywords(cls: type[Any], properties: Mapping[str, Any]) -> dict[str, Any]:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    security = tuple((key, str(raw)) for key, raw in properties.items() if is_security_key(key))
    if security:
        out["security"] = security
    for key, raw in properties.items():
        if is_security_key(key):
            continue
        name = key.replace(".", "_")
        field = fields.get(name)
        if field is None:
            raise ConfigError(f"unknown {cls.__name__} setting {key!r}")
        value: Any = raw
        if isinstance(raw, str) and field.type in ("int", int):
            try:
                value = int(raw.strip())
            except ValueError:
                raise ConfigError(f"{key}={raw!r} is not an integer") from None
        elif isinstance(raw, str) and field.type in ("bool", bool):
            if raw.strip().lower() not in ("true", "false"):
                raise ConfigError(f"{key}={raw!r} is not true or false")
            value = raw.strip().lower() == "true"
        out[name] = value
    if "bootstrap_servers" not in out:
        raise ConfigError("bootstrap.servers is required")
    return out
