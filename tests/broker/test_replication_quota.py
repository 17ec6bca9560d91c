"""KIP-73 replication quotas, pure: the sampled rate, the bound, throttled-replica parsing and
matching, and the configs taken from a metadata image. Fake time throughout (``now_ms``)."""

from __future__ import annotations

import pytest

from kraftlog.broker import replication_quota as rq
from kraftlog.ids import TopicPartition
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r

T0 = 1_000_000
KIB = 1024
MIB = 1024 * 1024


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic=topic, partition=partition)


# ---------------------------------------------------------------------------- parsing


def test_throttled_replicas_keep_only_entries_naming_this_broker() -> None:
    value = "0:101, 1:102,2:101 ,3:103"
    assert rq.parse_throttled_replicas(value, 101).partitions == frozenset({0, 2})
    assert rq.parse_throttled_replicas(value, 102).partitions == frozenset({1})
    assert rq.parse_throttled_replicas(value, 104).is_empty


def test_throttled_replicas_star_means_every_partition_and_empty_none() -> None:
    star = rq.parse_throttled_replicas(" * ", 7)
    assert star.all_partitions and star.contains(0) and star.contains(99)
    assert rq.parse_throttled_replicas("", 7).is_empty
    assert not rq.parse_throttled_replicas("  ", 7).contains(0)


@pytest.mark.parametrize("value", ["0", "0:", ":1", "a:1", "0:1,x", "0:-1", "*,0:1"])
def test_malformed_throttled_replicas_raise_with_the_entry(value: str) -> None:
    with pytest.raises(ValueError, match="partition:brokerId"):
        rq.parse_throttled_replicas(value, 1)


def test_rate_parses_non_negative_integers_only() -> None:
    assert rq.parse_rate(" 1048576 ") == MIB
    assert rq.parse_rate("0") == 0
    for bad in ("-1", "1.5", "fast", ""):
        with pytest.raises(ValueError, match="bytes/s"):
            rq.parse_rate(bad)


def test_config_names_are_kafkas() -> None:
    assert rq.QuotaType.LEADER.rate_config == "leader.replication.throttled.rate"
    assert rq.QuotaType.FOLLOWER.rate_config == "follower.replication.throttled.rate"
    assert rq.QuotaType.LEADER.replicas_config == "leader.replication.throttled.replicas"
    assert rq.QuotaType.FOLLOWER.replicas_config == "follower.replication.throttled.replicas"


# ---------------------------------------------------------------------------- the sampled rate


def test_rate_is_measured_over_at_least_samples_minus_one_windows() -> None:
    rate = rq.SampledRate(rq.QuotaWindow(samples=11, sample_ms=1000))
    rate.record(10_000, T0)
    # Kafka's Rate.windowSize: a young window counts as 10 full windows.
    assert rate.window_ms(T0) == 10_000
    assert rate.measure(T0) == pytest.approx(1000.0)
    assert rate.window_ms(T0 + 12_000) == 10_000  # the old sample expired and was reset
    assert rate.measure(T0 + 12_000) == 0.0


def test_samples_expire_after_samples_times_window() -> None:
    rate = rq.SampledRate(rq.QuotaWindow(samples=2, sample_ms=1000))
    rate.record(1000, T0)
    rate.record(1000, T0 + 1500)  # second sample
    assert rate.measure(T0 + 1500) == pytest.approx(2000 / 1.5)
    # At T0 + 2000 the first sample is 2 windows old: reset, only the second counts, over
    # the time since it started, stretched to one full window.
    assert rate.measure(T0 + 2000) == pytest.approx(1000 / 1.5)
    rate.record(500, T0 + 2600)  # recycles the oldest sample slot
    assert rate.measure(T0 + 2600) == pytest.approx(1500 / 1.1)


def test_quota_window_rejects_empty_windows() -> None:
    with pytest.raises(ValueError, match="sample"):
        rq.QuotaWindow(samples=0)
    with pytest.raises(ValueError, match="sample"):
        rq.QuotaWindow(sample_ms=0)


# ---------------------------------------------------------------------------- the quota


def quota(bound: int, *, samples: int = 2, sample_ms: int = 1000,
          kind: rq.QuotaType = rq.QuotaType.LEADER) -> rq.ReplicationQuota:
    return rq.ReplicationQuota(kind, window=rq.QuotaWindow(samples=samples, sample_ms=sample_ms),
                               rate_bytes_per_s=bound)


def test_unset_quota_is_never_exceeded() -> None:
    q = rq.ReplicationQuota(rq.QuotaType.LEADER)
    assert q.bound == rq.UNLIMITED_RATE
    q.record(1 << 40, T0)
    assert not q.is_quota_exceeded(T0)
    assert q.throttle_time_ms(T0) == 0


def test_quota_is_exceeded_above_the_bound_until_the_rate_falls() -> None:
    q = quota(1000)
    q.record(1000, T0)
    assert not q.is_quota_exceeded(T0)  # exactly at the bound is acceptable (upper bound)
    q.record(1000, T0 + 100)
    assert q.is_quota_exceeded(T0 + 100)
    # 2000 bytes over the 1.1 s window (0.1 s elapsed + one full window's minimum):
    # Kafka's throttle time (rate - bound) / bound * window = 0.818 * 1100 ms.
    assert q.throttle_time_ms(T0 + 100) == 900
    assert q.is_quota_exceeded(T0 + 1900)  # 2000 B / 1.9 s
    assert not q.is_quota_exceeded(T0 + 2000)  # 2000 B / 2 s, or the first sample expired
    assert q.throttle_time_ms(T0 + 2000) == 0
    assert q.recorded_bytes == 2000


def test_zero_rate_lets_one_fetch_through_per_window_span() -> None:
    q = quota(0)
    assert not q.is_quota_exceeded(T0)
    q.record(1, T0)
    assert q.is_quota_exceeded(T0 + 1)
    assert q.throttle_time_ms(T0 + 1) == 1000
    assert not q.is_quota_exceeded(T0 + 2000)


def test_update_quota_rejects_a_negative_rate() -> None:
    q = quota(10)
    q.update_quota(20)
    assert q.bound == 20
    with pytest.raises(ValueError, match=r"follower\.replication\.throttled\.rate"):
        quota(10, kind=rq.QuotaType.FOLLOWER).update_quota(-1)


def transfer_ms(q: rq.ReplicationQuota, *, total: int, chunk: int, step_ms: int) -> int:
    """Fake time to move ``total`` bytes in ``chunk``s, one try every ``step_ms``, only while
    the quota is not exceeded (as a leader answering a follower every ``step_ms``)."""
    now_ms, moved = T0, 0
    while moved < total:
        if not q.is_quota_exceeded(now_ms):
            q.record(chunk, now_ms)
            moved += chunk
        now_ms += step_ms
        assert now_ms - T0 < 10 * (total * 1000 // q.bound + 10_000), "transfer stalls"
    return now_ms - T0


@pytest.mark.parametrize(("samples", "chunk"), [(2, 64 * KIB), (2, 256 * KIB), (11, 64 * KIB)])
def test_transfer_takes_size_over_rate_minus_the_window_credit(samples: int, chunk: int) -> None:
    total, bound = 24 * MIB, 1 * MIB
    elapsed_ms = transfer_ms(quota(bound, samples=samples), total=total, chunk=chunk, step_ms=10)
    ideal_ms = total * 1000 // bound
    credit_ms = (samples - 1) * 1000  # the minimum window lets that much pass at once
    assert ideal_ms - credit_ms - 1000 <= elapsed_ms <= ideal_ms + 500, elapsed_ms


def test_unthrottled_transfer_is_limited_only_by_fetch_pace() -> None:
    elapsed_ms = transfer_ms(rq.ReplicationQuota(rq.QuotaType.LEADER, rate_bytes_per_s=10**12),
                             total=24 * MIB, chunk=64 * KIB, step_ms=10)
    assert elapsed_ms == 384 * 10


# ---------------------------------------------------------------------------- matching


def test_is_throttled_matches_topic_and_partition() -> None:
    q = quota(1000)
    q.mark_throttled("a", rq.parse_throttled_replicas("0:1,2:1,1:2", 1))
    q.mark_throttled("b", rq.ALL_PARTITIONS)
    assert q.is_throttled(tp("a", 0)) and q.is_throttled(tp("a", 2))
    assert not q.is_throttled(tp("a", 1))
    assert q.is_throttled(tp("b", 7))
    assert not q.is_throttled(tp("c", 0))
    q.remove_throttle("b")
    q.mark_throttled("a", rq.NO_PARTITIONS)
    assert q.throttled == {}


def test_in_sync_replicas_are_never_throttled() -> None:
    q = quota(1000)
    q.mark_throttled("a", rq.ALL_PARTITIONS)
    q.record(5000, T0)
    assert q.should_throttle(tp("a", 0), in_sync=False, now_ms=T0)
    assert not q.should_throttle(tp("a", 0), in_sync=True, now_ms=T0)
    assert not q.should_throttle(tp("other", 0), in_sync=False, now_ms=T0)
    assert not q.should_throttle(tp("a", 0), in_sync=False, now_ms=T0 + 5000)


# ---------------------------------------------------------------------------- from the image


def configs_image(*records: r.ConfigRecord) -> im.ConfigsImage:
    delta = dl.MetadataDelta(im.EMPTY)
    for offset, record in enumerate(records):
        delta.replay(record, offset, 1)
    return delta.apply().configs


def broker_config(name: str, key: str, value: str | None) -> r.ConfigRecord:
    return r.ConfigRecord(resource_type=r.ConfigResourceType.BROKER, resource_name=name,
                          name=key, value=value)


def topic_config(topic: str, key: str, value: str | None) -> r.ConfigRecord:
    return r.ConfigRecord(resource_type=r.ConfigResourceType.TOPIC, resource_name=topic,
                          name=key, value=value)


def test_broker_resource_wins_over_the_cluster_default() -> None:
    configs = configs_image(
        broker_config("", "leader.replication.throttled.rate", "1000"),
        broker_config("5", "leader.replication.throttled.rate", "2000"),
        broker_config("", "follower.replication.throttled.rate", "3000"))
    leader, follower = quota(1), quota(1, kind=rq.QuotaType.FOLLOWER)
    assert leader.apply_configs(configs, 5) == []
    assert follower.apply_configs(configs, 5) == []
    assert (leader.bound, follower.bound) == (2000, 3000)
    assert leader.apply_configs(configs, 6) == []
    assert leader.bound == 1000  # no own resource: the cluster default


def test_throttled_replicas_come_from_topic_configs_per_side() -> None:
    configs = configs_image(
        topic_config("moving", "leader.replication.throttled.replicas", "0:4,1:4,0:5"),
        topic_config("moving", "follower.replication.throttled.replicas", "0:6,1:6"),
        topic_config("all", "leader.replication.throttled.replicas", "*"),
        topic_config("quiet", "min.insync.replicas", "2"))
    leader, follower = quota(1), quota(1, kind=rq.QuotaType.FOLLOWER)
    leader.apply_configs(configs, 4)
    follower.apply_configs(configs, 4)
    assert dict(leader.throttled) == {"moving": rq.ThrottledPartitions(partitions=frozenset({0, 1})),
                                      "all": rq.ALL_PARTITIONS}
    assert follower.throttled == {}  # broker 4 adds no replica
    follower.apply_configs(configs, 6)
    assert follower.is_throttled(tp("moving", 1)) and not follower.is_throttled(tp("all", 0))
    assert leader.bound == rq.UNLIMITED_RATE  # no rate configured: throttled but unlimited


def test_removing_the_configs_lifts_the_throttle() -> None:
    before = configs_image(
        broker_config("4", "leader.replication.throttled.rate", "100"),
        topic_config("moving", "leader.replication.throttled.replicas", "*"))
    q = quota(1)
    q.apply_configs(before, 4)
    q.record(10_000, T0)
    assert q.should_throttle(tp("moving", 0), in_sync=False, now_ms=T0)
    q.apply_configs(configs_image(), 4)
    assert q.bound == rq.UNLIMITED_RATE and q.throttled == {}
    assert not q.should_throttle(tp("moving", 0), in_sync=False, now_ms=T0)


def test_unusable_values_are_reported_and_count_as_unset() -> None:
    configs = configs_image(
        broker_config("4", "leader.replication.throttled.rate", "lots"),
        broker_config("", "leader.replication.throttled.rate", "500"),
        topic_config("bad", "leader.replication.throttled.replicas", "0-4"),
        topic_config("good", "leader.replication.throttled.replicas", "0:4"))
    q = quota(1)
    problems = q.apply_configs(configs, 4)
    assert len(problems) == 2 and "lots" in problems[0] and "'0-4'" in problems[1]
    assert q.bound == 500  # the broker's own value is unusable: the cluster default applies
    assert dict(q.throttled) == {"good": rq.ThrottledPartitions(partitions=frozenset({0}))}
