"""The ``kraftlog`` data source's options, parsed and checked before any I/O.

Owns :class:`ReadOptions` and :class:`WriteOptions` and their parsers. Names and
meanings follow Spark's Kafka source (``startingOffsets``, ``endingOffsets``,
``startingTimestamp``, ``maxOffsetsPerTrigger``, ``failOnDataLoss``, ...), with
``bootstrap`` for the brokers (``kafka.bootstrap.servers`` is accepted too)::

    topic=t | topics=a,b | topicPattern=regex        exactly one of them
    startingOffsets=earliest|latest|{"t":{"0":23,"1":-2}}   (-2 earliest, -1 latest)
    endingOffsets=latest|{"t":{"0":50,"1":-1}}        batch only
    startingTimestamp=MS | startingOffsetsByTimestamp={"t":{"0":MS}}
    endingTimestamp=MS   | endingOffsetsByTimestamp={"t":{"0":MS}}
    maxRecordsPerPartition=N   maxOffsetsPerTrigger=N   failOnDataLoss=true|false
    kafkaConsumer.pollTimeoutMs=MS

Option names are case-insensitive (Spark's are). Every error is an
:class:`OptionError` whose message starts with the option's name. Called by
:mod:`kraftlog.pipeline.source` on the driver. Pure module: no I/O, no Spark.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kraftlog.client import config as client_config
from kraftlog.errors import ConfigError, KraftlogError
from kraftlog.ids import TopicPartition, validate_topic_name

EARLIEST = -2
"""In offsets JSON: the partition's log start offset (Kafka's convention)."""
LATEST = -1
"""In offsets JSON: the partition's high watermark at planning time."""

DEFAULT_POLL_TIMEOUT_MS = 120_000
"""``kafkaConsumer.pollTimeoutMs``: a task that gets no record for this long fails."""


class OptionError(KraftlogError, ValueError):
    """A data source option is missing, malformed or contradicts another. Names the option."""


class DataLossError(KraftlogError):
    """Requested offsets are gone (retention, truncation, deleted topic) and failOnDataLoss=true."""


class SubscriptionKind(enum.Enum):
    TOPIC = "topic"
    TOPICS = "topics"
    PATTERN = "topicPattern"


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    """Which topics to read: one, a list, or every topic matching a regex."""

    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    pattern: str = ""

    def matches(self, topic: str) -> bool:
        if self.kind is SubscriptionKind.PATTERN:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


class OffsetKind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    SPECIFIC = "specific"
    """Per-partition offsets from JSON (EARLIEST/LATEST allowed as values)."""
    TIMESTAMP = "timestamp"
    """One timestamp (ms) for every partition."""
    TIMESTAMPS = "timestamps"
    """Per-partition timestamps (ms) from JSON."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the brokers."""

    option: str
    """The option it came from, for error messages."""
    kind: OffsetKind
    offsets: Mapping[TopicPartition, int] | None = None
    """For SPECIFIC (offsets) and TIMESTAMPS (timestamps in ms)."""
    timestamp_ms: int = -1
    """For TIMESTAMP."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadOptions:
    """Everything a batch or streaming read needs, checked."""

    bootstrap_servers: tuple[str, ...]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    security: tuple[tuple[str, str], ...] = ()
    """``kafka.security.protocol`` and ``kafka.ssl.*`` options without the prefix."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteOptions:
    """A batch write: the brokers, an optional topic for every row, producer settings."""

    bootstrap_servers: tuple[str, ...]
    topic: str | None
    producer_properties: Mapping[str, str]
    """``kafka.``-prefixed options without the prefix (``linger.ms``, ``batch.size``, ...)."""


_READ_KEYS = {k.lower(): k for k in (
    "bootstrap", "kafka.bootstrap.servers", "topic", "topics", "topicPattern",
    "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "maxRecordsPerPartition",
    "maxOffsetsPerTrigger", "failOnDataLoss", "kafkaConsumer.pollTimeoutMs")}
_WRITE_PRODUCER_KEYS = ("linger.ms", "batch.size", "compression.type", "buffer.memory",
                        "max.request.size", "request.timeout.ms", "delivery.timeout.ms",
                        "retries", "retry.backoff.ms", "max.block.ms", "acks")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bootstrap(opts: Mapping[str, str]) -> tuple[str, ...]:
    value = opts.get("bootstrap") or opts.get("kafka.bootstrap.servers")
    if not value:
        raise OptionError("bootstrap: option is required (HOST:PORT[,HOST:PORT...] of brokers)")
    try:
        return client_config.parse_bootstrap_servers(value, key="bootstrap")
    except ConfigError as exc:
        raise OptionError(str(exc)) from None


def _positive_int(opts: Mapping[str, str], key: str, name: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"{name}: {raw!r} is not an integer") from None
    if value <= 0:
        raise OptionError(f"{name}: must be positive, got {value}")
    return value


def _bool(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"{name}: {raw!r} is not true or false")
    return text == "true"


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [kind for kind in SubscriptionKind if kind.value.lower() in opts]
    if len(given) != 1:
        listed = ", ".join(k.value for k in given) if given else "none"
        raise OptionError(f"topic/topics/topicPattern: give exactly one of them (given: {listed})")
    kind = given[0]
    text = opts[kind.value.lower()].strip()
    if kind is SubscriptionKind.PATTERN:
        try:
            re.compile(text)
        except re.error as exc:
            raise OptionError(f"topicPattern: {text!r} is not a valid regex: {exc}") from None
        if not text:
            raise OptionError("topicPattern: must not be empty")
        return Subscription(kind=kind, pattern=text)
    names = [t.strip() for t in text.split(",")] if kind is SubscriptionKind.TOPICS else [text]
    if not names or any(not n for n in names):
        raise OptionError(f"{kind.value}: {text!r} names an empty topic")
    for name in names:
        try:
            validate_topic_name(name)
        except ValueError as exc:
            raise OptionError(f"{kind.value}: {exc}") from None
    return Subscription(kind=kind, topics=tuple(dict.fromkeys(names)))


def parse_partition_json(text: str, option: str, *, minimum: int) -> dict[TopicPartition, int]:
    """``{"topic":{"0":23,"1":-2}}`` -> {TopicPartition: value}; OptionError naming ``option``."""
    try:
        document: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{option}: malformed JSON ({exc.msg} at char {exc.pos}); expected "
                          '{"topic":{"0":23,"1":-2}}') from None
    if not isinstance(document, dict) or not document:
        raise OptionError(f'{option}: expected a non-empty JSON object like '
                          f'{{"topic":{{"0":23}}}}, got {text!r}')
    out: dict[TopicPartition, int] = {}
    for topic, partitions in document.items():
        if not isinstance(partitions, dict) or not partitions:
            raise OptionError(f"{option}: topic {topic!r} must map to a non-empty object of "
                              "partition -> offset")
        for key, value in partitions.items():
            if not isinstance(key, str) or not re.fullmatch(r"0|[1-9][0-9]*", key):
                raise OptionError(f"{option}: partition {key!r} of topic {topic!r} is not a "
                                  "non-negative integer")
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise OptionError(f"{option}: value {value!r} for {topic}-{key} must be an "
                                  f"integer >= {minimum}")
            try:
                out[TopicPartition(topic=topic, partition=int(key))] = value
            except ValueError as exc:
                raise OptionError(f"{option}: {exc}") from None
    return out


def _timestamp(opts: Mapping[str, str], key: str, name: str) -> int:
    raw = opts[key]
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"{name}: {raw!r} is not a timestamp in milliseconds") from None
    if value < 0:
        raise OptionError(f"{name}: must be >= 0 (ms since the epoch), got {value}")
    return value


def parse_offset_spec(opts: Mapping[str, str], *, starting: bool, streaming: bool) -> OffsetSpec:
    """The start (or end) of a read; the precedence of Spark's Kafka source: a global
    timestamp, then per-partition timestamps, then offsets."""
    side = "starting" if starting else "ending"
    ts_key, by_ts_key, off_key = (f"{side}Timestamp", f"{side}OffsetsByTimestamp",
                                  f"{side}Offsets")
    if ts_key.lower() in opts:
        return OffsetSpec(option=ts_key, kind=OffsetKind.TIMESTAMP,
                          timestamp_ms=_timestamp(opts, ts_key.lower(), ts_key))
    if by_ts_key.lower() in opts:
        return OffsetSpec(option=by_ts_key, kind=OffsetKind.TIMESTAMPS,
                          offsets=parse_partition_json(opts[by_ts_key.lower()], by_ts_key,
                                                       minimum=0))
    raw = opts.get(off_key.lower())
    if raw is None:
        default = OffsetKind.LATEST if streaming or not starting else OffsetKind.EARLIEST
        return OffsetSpec(option=off_key, kind=default)
    text = raw.strip()
    if text.lower() == "earliest":
        if not starting:
            raise OptionError("endingOffsets: 'earliest' is not allowed (use latest or JSON)")
        return OffsetSpec(option=off_key, kind=OffsetKind.EARLIEST)
    if text.lower() == "latest":
        return OffsetSpec(option=off_key, kind=OffsetKind.LATEST)
    if not text.startswith("{"):
        raise OptionError(f"{off_key}: {raw!r} is not earliest, latest or a JSON object like "
                          '{"topic":{"0":23,"1":-2}}')
    offsets = parse_partition_json(text, off_key, minimum=EARLIEST if starting else LATEST)
    return OffsetSpec(option=off_key, kind=OffsetKind.SPECIFIC, offsets=offsets)


def _security(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``kafka.security.protocol`` / ``kafka.ssl.*`` as client settings, checked."""
    security = tuple((key[len("kafka."):], value) for key, value in sorted(opts.items())
                     if key.startswith("kafka.")
                     and client_config.is_security_key(key[len("kafka."):]))
    try:
        client_config.check_security(security)
    except ConfigError as exc:
        raise OptionError(f"kafka.{exc}") from None
    return security


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check every option of a read; OptionError naming the first bad one."""
    opts = _lower(options)
    security = _security(opts)
    unknown = sorted(set(opts) - set(_READ_KEYS) - {"path"}
                     - {f"kafka.{key}" for key, _ in security})
    if unknown:
        raise OptionError(f"{unknown[0]}: unknown option for reading format 'kraftlog' "
                          f"(known: {', '.join(sorted(_READ_KEYS.values()))})")
    if streaming and ("endingoffsets" in opts or "endingtimestamp" in opts
                      or "endingoffsetsbytimestamp" in opts):
        raise OptionError("endingOffsets: not allowed in a streaming read")
    if not streaming and "maxoffsetspertrigger" in opts:
        raise OptionError("maxOffsetsPerTrigger: only for streaming reads")
    subscription = parse_subscription(opts)
    starting = parse_offset_spec(opts, starting=True, streaming=streaming)
    ending = parse_offset_spec(opts, starting=False, streaming=streaming)
    poll = _positive_int(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs")
    return ReadOptions(
        bootstrap_servers=_bootstrap(opts), subscription=subscription, starting=starting,
        ending=ending,
        max_records_per_partition=_positive_int(opts, "maxrecordsperpartition",
                                                "maxRecordsPerPartition"),
        max_offsets_per_trigger=_positive_int(opts, "maxoffsetspertrigger",
                                              "maxOffsetsPerTrigger"),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        poll_timeout_ms=DEFAULT_POLL_TIMEOUT_MS if poll is None else poll,
        security=security)


def parse_write_options(options: Mapping[str, str], *, streaming: bool = False
                        ) -> WriteOptions:
    """Check the options of a write: ``bootstrap``, optional ``topic``, ``kafka.<producer key>``
    (and Spark's own ``checkpointLocation`` for a streaming write)."""
    opts = _lower(options)
    _security(opts)  # a bad kafka.ssl.* fails here, before Spark starts a task
    producer: dict[str, str] = {}
    for key, value in opts.items():
        if key in ("bootstrap", "kafka.bootstrap.servers", "topic", "path"):
            continue
        if streaming and key == "checkpointlocation":
            continue
        if key.startswith("kafka.") and (key[len("kafka."):] in _WRITE_PRODUCER_KEYS
                                         or client_config.is_security_key(key[len("kafka."):])):
            producer[key[len("kafka."):]] = value
            continue
        raise OptionError(f"{key}: unknown option for writing format 'kraftlog' (known: "
                          "bootstrap, topic, " + ", ".join(f"kafka.{k}" for k in
                                                           _WRITE_PRODUCER_KEYS)
                          + ", kafka.security.protocol, kafka.ssl.*)")
    acks = producer.pop("acks", "all").strip().lower()
    if acks not in ("all", "-1"):
        raise OptionError(f"kafka.acks: the kraftlog sink always produces with acks=all, "
                          f"got {acks!r}")
    topic = opts.get("topic")
    if topic is not None:
        try:
            validate_topic_name(topic.strip())
        except ValueError as exc:
            raise OptionError(f"topic: {exc}") from None
        topic = topic.strip()
    return WriteOptions(bootstrap_servers=_bootstrap(opts), topic=topic,
                        producer_properties=producer)
