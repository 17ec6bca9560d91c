"""Striped rack-aware placement."""

from __future__ import annotations

import collections
import random

import pytest

from kraftlog.controller import api, replica_placer
from kraftlog.error_codes import ErrorCode

B = replica_placer.UsableBroker


def test_rack_alternated_order_interleaves_racks() -> None:
    brokers = [
        B(broker_id=i, rack=r) for i, r in [(1, "a"), (2, "a"), (3, "b"), (4, "c"), (5, "b")]
    ]
    assert [b.broker_id for b in replica_placer.rack_alternated(brokers)] == [1, 3, 4, 2, 5]


@pytest.mark.parametrize("seed", range(5))
def test_replicas_distinct_racks_distinct_and_leaders_spread(seed: int) -> None:
    brokers = [B(broker_id=i, rack="abc"[i % 3]) for i in range(9)]
    placements = replica_placer.place(
        num_partitions=90, replication_factor=3, brokers=brokers, rng=random.Random(seed)
    )
    leaders = collections.Counter(p[0] for p in placements)
    assert set(leaders.values()) == {10}
    followers = collections.Counter(b for p in placements for b in p)
    assert max(followers.values()) - min(followers.values()) <= 3
    for replicas in placements:
        assert len(set(replicas)) == 3 and len({brokers[b].rack for b in replicas}) == 3


def test_more_replicas_than_racks_still_uses_distinct_brokers() -> None:
    brokers = [B(broker_id=i, rack="ab"[i % 2]) for i in range(4)]
    for replicas in replica_placer.place(
        num_partitions=8, replication_factor=4, brokers=brokers, rng=random.Random(1)
    ):
        assert sorted(replicas) == [0, 1, 2, 3]


def test_not_enough_brokers_is_invalid_replication_factor() -> None:
    with pytest.raises(api.RequestError) as info:
        replica_placer.place(
            num_partitions=1, replication_factor=2, brokers=[B(broker_id=1)], rng=random.Random(0)
        )
    assert info.value.error.code == ErrorCode.INVALID_REPLICATION_FACTOR
    with pytest.raises(api.RequestError, match="fenced"):
        replica_placer.place(
            num_partitions=1, replication_factor=1, brokers=[], rng=random.Random(0)
        )
