"""Replication quotas (KIP-73): byte-rate throttles on the leader and follower side of replication.

Owns :class:`ReplicationQuota` (Kafka's ``ReplicationQuotaManager``): a byte rate
measured over a sliding window of samples (:class:`SampledRate`, Kafka's ``Rate``
over a ``SampledStat``), an upper bound on it, and the set of partitions it
applies to on this broker; plus the parsing of the four dynamic configs that
drive it, read from the metadata image:

- broker configs ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate`` (bytes/s): the broker's own resource
  (its id) wins over the cluster default (the empty resource name); unset means
  unlimited (Kafka's ``Long.MAX_VALUE``);
- topic configs ``leader.replication.throttled.replicas`` and
  ``follower.replication.throttled.replicas``: ``*`` or ``partition:brokerId,...``.
  As in Kafka's ``TopicConfigHandler.parseThrottledPartitions`` a broker keeps the
  entries that name *itself*: a leader throttles the partitions listed with its
  own id in the leader list (the reassignment tool lists the existing replicas,
  any of which may lead), a follower the partitions listed with its own id in
  the follower list (the tool lists the replicas being added).

How the quotas are used (Kafka's ReplicaManager / ReplicaFetcherThread): a leader
answers a follower's fetch of a throttled partition with no records while the
leader quota is exceeded and the follower is not in the ISR, and records the bytes
it sends for throttled partitions; a follower leaves a throttled partition out of
its fetch while the follower quota is exceeded and it is not caught up, and records
the bytes it appends for throttled partitions. Consumers are never throttled.

Callers: :mod:`kraftlog.broker.replica_manager` (leader side),
:mod:`kraftlog.broker.fetcher_driver` (follower side), :mod:`kraftlog.server.broker_server`
(config updates from each metadata image). Pure: time comes in as ``now_ms``; no
clock, asyncio or grpc. Single-threaded.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from kraftlog.ids import TopicPartition
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r

logger = logging.getLogger(__name__)

LEADER_REPLICATION_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_REPLICATION_THROTTLED_RATE = "follower.replication.throttled.rate"
LEADER_REPLICATION_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICATION_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"

UNLIMITED_RATE = 2**63 - 1
"""The rate of an unset throttle, bytes/s (Kafka's ``Long.MAX_VALUE``): never exceeded."""
DEFAULT_QUOTA_WINDOW_NUM = 11
"""``replication.quota.window.num``: samples kept in memory."""
DEFAULT_QUOTA_WINDOW_SIZE_SECONDS = 1
"""``replication.quota.window.size.seconds``: the time span of each sample."""

_BROKER = r.ConfigResourceType.BROKER
_TOPIC = r.ConfigResourceType.TOPIC


class QuotaType(enum.Enum):
    """Which side of replication a quota limits (Kafka's ``QuotaType`` names)."""

    LEADER = "LeaderReplication"
    FOLLOWER = "FollowerReplication"

    @property
    def rate_config(self) -> str:
        """The broker config holding this quota's bound."""
        return (LEADER_REPLICATION_THROTTLED_RATE if self is QuotaType.LEADER
                else FOLLOWER_REPLICATION_THROTTLED_RATE)

    @property
    def replicas_config(self) -> str:
        """The topic config listing the replicas this quota applies to."""
        return (LEADER_REPLICATION_THROTTLED_REPLICAS if self is QuotaType.LEADER
                else FOLLOWER_REPLICATION_THROTTLED_REPLICAS)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThrottledPartitions:
    """The partitions of one topic a quota applies to on this broker."""

    all_partitions: bool = False
    """``*``: every partition of the topic."""
    partitions: frozenset[int] = frozenset()

    def contains(self, partition: int) -> bool:
        return self.all_partitions or partition in self.partitions

    @property
    def is_empty(self) -> bool:
        return not self.all_partitions and not self.partitions

    def describe(self) -> str:
        return "*" if self.all_partitions else ",".join(map(str, sorted(self.partitions)))


NO_PARTITIONS = ThrottledPartitions()
ALL_PARTITIONS = ThrottledPartitions(all_partitions=True)


def parse_throttled_replicas(value: str, broker_id: int) -> ThrottledPartitions:
    """The partitions ``value`` throttles on ``broker_id`` (Kafka's ``parseThrottledPartitions``).

    ``""`` throttles none, ``*`` all; otherwise ``value`` is a comma-separated list
    of ``partition:brokerId`` entries and only those naming ``broker_id`` count.
    Raises ValueError naming the first malformed entry.
    """
    text = value.strip()
    if not text:
        return NO_PARTITIONS
    if text == "*":
        return ALL_PARTITIONS
    partitions: set[int] = set()
    for raw in text.split(","):
        entry = raw.strip()
        partition, sep, broker = entry.partition(":")
        partition, broker = partition.strip(), broker.strip()
        if not sep or not partition.isdigit() or not broker.isdigit():
            raise ValueError(f"throttled replica entry {entry!r} is not partition:brokerId or *")
        if int(broker) == broker_id:
            partitions.add(int(partition))
    return ThrottledPartitions(partitions=frozenset(partitions))


def parse_rate(value: str) -> int:
    """A ``*.replication.throttled.rate`` value in bytes/s; ValueError unless an integer >= 0."""
    text = value.strip()
    if not text.isdigit():
        raise ValueError(f"replication throttle rate {value!r} is not a number of bytes/s >= 0")
    return int(text)


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaWindow:
    """How the measured rate is sampled (Kafka's quota ``MetricConfig``)."""

    samples: int = DEFAULT_QUOTA_WINDOW_NUM
    """``replication.quota.window.num``."""
    sample_ms: int = DEFAULT_QUOTA_WINDOW_SIZE_SECONDS * 1000
    """``replication.quota.window.size.seconds``, in ms."""

    def __post_init__(self) -> None:
        if self.samples < 1 or self.sample_ms < 1:
            raise ValueError(f"quota window needs >= 1 sample of >= 1 ms, got {self.samples} "
                             f"x {self.sample_ms} ms")


class _Sample:
    __slots__ = ("start_ms", "value")

    def __init__(self, start_ms: int) -> None:
        self.start_ms = start_ms
        self.value = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.value = 0


class SampledRate:
    """A byte rate over the last ``samples`` windows (Kafka's ``Rate`` over ``SampledStat``).

    ``record`` adds to the current sample, starting the next one (recycling the
    oldest) once the current one is ``sample_ms`` old. ``measure`` first resets
    samples older than ``samples * sample_ms``, then divides their sum by the time
    since the oldest sample started -- but never by less than ``samples - 1`` full
    windows, so a burst right after a quiet period cannot show a huge rate, and the
    first ``(samples - 1) * sample_ms * bound`` bytes pass before the bound bites
    (Kafka's behaviour too).
    """

    def __init__(self, window: QuotaWindow) -> None:
        self.window = window
        self._samples: list[_Sample] = []
        self._current = 0

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % self.window.samples
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def record(self, value: int, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window.sample_ms:
            sample = self._advance(now_ms)
        sample.value += value

    def _purge_obsolete(self, now_ms: int) -> None:
        expire_age_ms = self.window.samples * self.window.sample_ms
        for sample in self._samples:
            if now_ms - sample.start_ms >= expire_age_ms:
                sample.reset(now_ms)

    def window_ms(self, now_ms: int) -> int:
        """The time span the rate is measured over now, ms (Kafka's ``Rate.windowSize``)."""
        self._purge_obsolete(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed_ms = now_ms - oldest
        full_windows = elapsed_ms // self.window.sample_ms
        min_full_windows = self.window.samples - 1
        if full_windows < min_full_windows:
            elapsed_ms += (min_full_windows - full_windows) * self.window.sample_ms
        return max(elapsed_ms, 1)

    def measure(self, now_ms: int) -> float:
        """Bytes per second over :meth:`window_ms`."""
        window_ms = self.window_ms(now_ms)
        total = sum(s.value for s in self._samples)
        return total * 1000.0 / window_ms


class ReplicationQuota:
    """One side's quota on this broker: bound, measured rate and throttled partitions."""

    def __init__(self, quota_type: QuotaType, *, window: QuotaWindow | None = None,
                 rate_bytes_per_s: int = UNLIMITED_RATE) -> None:
        self.quota_type = quota_type
        self._rate = SampledRate(window or QuotaWindow())
        self._bound = rate_bytes_per_s
        self._throttled: dict[str, ThrottledPartitions] = {}
        self.recorded_bytes = 0
        """Bytes of throttled partitions recorded since start (a counter metric)."""

    # -- configuration ------------------------------------------------------------------------

    @property
    def bound(self) -> int:
        """The rate limit, bytes/s (:data:`UNLIMITED_RATE` when unset)."""
        return self._bound

    @property
    def window(self) -> QuotaWindow:
        return self._rate.window

    def update_quota(self, rate_bytes_per_s: int) -> None:
        if rate_bytes_per_s < 0:
            raise ValueError(f"{self.quota_type.rate_config} must be >= 0, got {rate_bytes_per_s}")
        self._bound = rate_bytes_per_s

    def mark_throttled(self, topic: str, partitions: ThrottledPartitions) -> None:
        if partitions.is_empty:
            self._throttled.pop(topic, None)
        else:
            self._throttled[topic] = partitions

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    @property
    def throttled(self) -> Mapping[str, ThrottledPartitions]:
        """Topic -> throttled partitions on this broker (topics with none are absent)."""
        return self._throttled

    # -- the data path ------------------------------------------------------------------------

    def is_throttled(self, tp: TopicPartition) -> bool:
        """This partition's replication traffic counts against (and is held back by) the quota."""
        partitions = self._throttled.get(tp.topic)
        return partitions is not None and partitions.contains(tp.partition)

    def is_quota_exceeded(self, now_ms: int) -> bool:
        """The measured rate is above the bound (an unset bound is never exceeded)."""
        if self._bound >= UNLIMITED_RATE:
            return False
        return self._rate.measure(now_ms) > self._bound

    def record(self, num_bytes: int, now_ms: int) -> None:
        """Count ``num_bytes`` of throttled-partition traffic at ``now_ms``."""
        if num_bytes <= 0:
            return
        self._rate.record(num_bytes, now_ms)
        self.recorded_bytes += num_bytes

    def rate(self, now_ms: int) -> float:
        """The measured rate of throttled traffic, bytes/s."""
        return self._rate.measure(now_ms)

    def throttle_time_ms(self, now_ms: int) -> int:
        """How long until the rate falls back to the bound, ms; 0 when it is not exceeded.

        Kafka's ``ClientQuotaManager.throttleTime``: (rate - bound) / bound times the
        measurement window. A bound of 0 waits one sample window.
        """
        if self._bound >= UNLIMITED_RATE:
            return 0
        window_ms = self._rate.window_ms(now_ms)
        rate = self._rate.measure(now_ms)
        if rate <= self._bound:
            return 0
        if self._bound == 0:
            return self._rate.window.sample_ms
        return max(1, round((rate - self._bound) / self._bound * window_ms))

    def should_throttle(self, tp: TopicPartition, *, in_sync: bool, now_ms: int) -> bool:
        """Hold ``tp`` back now: throttled here, its replica not in sync, and the quota exceeded.

        Kafka's ``shouldLeaderThrottle`` / ``shouldFollowerThrottle``: an in-sync
        replica is never throttled, so a throttle cannot push a replica out of the ISR.
        """
        return not in_sync and self.is_throttled(tp) and self.is_quota_exceeded(now_ms)

    # -- from the metadata image ---------------------------------------------------------------

    def apply_configs(self, configs: im.ConfigsImage, broker_id: int) -> list[str]:
        """Take the bound and throttled partitions from the image's dynamic configs.

        Returns one message per value it could not use (the controller validates
        them, so these only come from a log written by something else); such a
        value counts as unset. Logs one line when the effective throttle changes.
        """
        problems: list[str] = []
        rate = UNLIMITED_RATE
        for name in (str(broker_id), ""):
            value = configs.configs(im.ConfigResource(
                resource_type=_BROKER, resource_name=name)).get(self.quota_type.rate_config)
            if value is None:
                continue
            try:
                rate = parse_rate(value)
            except ValueError as exc:
                problems.append(f"broker resource {name!r}: {exc}")
                continue
            break
        throttled: dict[str, ThrottledPartitions] = {}
        for resource, values in configs.resources.items():
            if resource.resource_type is not _TOPIC:
                continue
            value = values.get(self.quota_type.replicas_config)
            if value is None:
                continue
            try:
                partitions = parse_throttled_replicas(value, broker_id)
            except ValueError as exc:
                problems.append(f"topic {resource.resource_name}: "
                                f"{self.quota_type.replicas_config}: {exc}")
                continue
            if not partitions.is_empty:
                throttled[resource.resource_name] = partitions
        changed = rate != self._bound or throttled != self._throttled
        self._bound = rate
        self._throttled = throttled
        if changed:
            logger.info("broker=%d event=replication_throttle quota=%s rate=%s throttled=%s",
                        broker_id, self.quota_type.value,
                        "unlimited" if rate >= UNLIMITED_RATE else rate,
                        ";".join(f"{t}:{p.describe()}" for t, p in sorted(throttled.items()))
                        or "-")
        return problems

