"""The balance job's greedy (jobs_balance_plan), on hand-made aggregates: no Spark, no cluster.

Checks the rules of the module docstring: bytes even out with no overshoot, the
cheapest useful bytes move (hot partitions cost more), racks are never doubled up
when they allow otherwise, fenced brokers receive nothing, leaders even out by
reordering only, the threshold stops the greedy, and the plan is Kafka's JSON.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys

import pytest

from kraftlog.admin import reassign_plan as rp
from kraftlog.pipeline import jobs_balance_plan as jbp

MB = 1_000_000


def load(topic: str, partition: int, replicas: tuple[int, ...], size: int,
         rate: float = 0.0) -> jbp.PartitionLoad:
    return jbp.PartitionLoad(topic=topic, partition=partition, replicas=replicas,
                             leader=replicas[0], size_bytes=size, rate_bytes_per_s=rate)


def brokers(*ids: int, racks: dict[int, str] | None = None,
            fenced: tuple[int, ...] = ()) -> list[jbp.BrokerInfo]:
    return [jbp.BrokerInfo(broker_id=b, rack=(racks or {}).get(b, ""), live=b not in fenced)
            for b in ids]


def check_valid(result: jbp.BalanceResult, loads: list[jbp.PartitionLoad],
                infos: list[jbp.BrokerInfo]) -> None:
    """Every partition keeps its replica count, no broker twice, only known brokers."""
    known = {b.broker_id for b in infos}
    for p in loads:
        after = result.assignment[(p.topic, p.partition)]
        assert len(after) == len(p.replicas)
        assert len(set(after)) == len(after)
        assert set(after) <= known
    parsed = rp.parse_plan(result.plan.to_json())
    assert parsed == result.plan


def test_skewed_bytes_even_out_moving_only_what_is_needed() -> None:
    # 4 brokers; everything heavy on 1 and 2, a little on 3 and 4.
    loads = [load("heavy", i, (1, 2), 10 * MB) for i in range(4)]
    loads += [load("light", i, (3, 4), 1 * MB) for i in range(4)]
    infos = brokers(1, 2, 3, 4)
    result = jbp.plan_balance(loads, infos)
    check_valid(result, loads, infos)
    assert result.before.bytes_by_broker == {1: 40 * MB, 2: 40 * MB, 3: 4 * MB, 4: 4 * MB}
    assert result.before.ratio == 10.0
    # 22 MB each is level: brokers 1 and 2 must shed 18 MB each, so at least 36 MB move.
    # Two heavy replicas each way (20/20/24/24), then light ones the other way close the
    # last 4 MB gap: 44 MB, never more.
    assert result.after.bytes_by_broker == dict.fromkeys((1, 2, 3, 4), 22 * MB)
    assert result.after.ratio == 1.0
    assert 36 * MB <= result.bytes_moved <= 44 * MB
    heavy = [m for m in result.moves if m.topic == "heavy"]
    assert len(heavy) == 4
    assert all(m.source in (1, 2) and m.destination in (3, 4) for m in heavy)
    assert result.after.leaders_by_broker == dict.fromkeys((1, 2, 3, 4), 2)
    document = json.loads(result.plan.to_json())
    assert document["version"] == 1
    assert all(e["log_dirs"] == ["any"] * len(e["replicas"]) for e in document["partitions"])


def test_racks_are_never_doubled_up_when_they_allow_otherwise() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    # Replicas on racks a and b; all the data on 1 (rack a) and 3 (rack b).
    loads = [load("t", i, (1, 3), 8 * MB) for i in range(4)]
    infos = brokers(1, 2, 3, 4, racks=racks)
    result = jbp.plan_balance(loads, infos)
    check_valid(result, loads, infos)
    assert result.moves, "the skew should move something"
    for replicas in result.assignment.values():
        assert len({racks[b] for b in replicas}) == 2, replicas
    # 1 -> 2 stays in rack a, 3 -> 4 in rack b: bytes end level.
    assert result.after.ratio == 1.0
    # Without racks, the same input may pair brokers freely (and still balances).
    free = jbp.plan_balance(loads, brokers(1, 2, 3, 4))
    assert free.after.ratio == 1.0


def test_a_partition_already_sharing_a_rack_may_move_within_it() -> None:
    # Only one rack has room: racks do not allow two distinct racks per partition.
    racks = {1: "a", 2: "a", 3: "a"}
    loads = [load("t", i, (1, 2), 5 * MB) for i in range(3)]
    result = jbp.plan_balance(loads, brokers(1, 2, 3, racks=racks))
    assert result.moves and result.after.ratio < result.before.ratio


def test_hot_partitions_cost_more_to_move() -> None:
    # Same sizes; partition 0 takes writes. The cold one moves.
    loads = [load("t", 0, (1,), 10 * MB, rate=1 * MB), load("t", 1, (1,), 10 * MB),
             load("u", 0, (2,), 1 * MB)]
    result = jbp.plan_balance(loads, brokers(1, 2))
    assert [(m.topic, m.partition) for m in result.moves] == [("t", 1)]


def test_fenced_brokers_receive_nothing_and_threshold_stops_the_greedy() -> None:
    loads = [load("t", i, (1,), 10 * MB) for i in range(3)] + [load("u", 0, (2,), 9 * MB)]
    result = jbp.plan_balance(loads, brokers(1, 2, 3, fenced=(3,)))
    assert all(m.destination == 2 for m in result.moves)
    # 30 vs 9: one move (20 vs 19). Another would only swap the gap.
    assert result.after.bytes_by_broker[1] == 20 * MB
    # A near-balanced cluster: nothing clears a 10 % threshold.
    near = [load("t", 0, (1,), 10 * MB), load("t", 1, (2,), 9 * MB),
            load("t", 2, (2,), 1 * MB)]
    quiet = jbp.plan_balance(near, brokers(1, 2),
                             jbp.BalanceSettings(min_improvement_ratio=0.10))
    assert quiet.plan.partitions == () and quiet.bytes_moved == 0
    assert jbp.plan_balance(near, brokers(1, 2), jbp.BalanceSettings(max_moves=0)).moves == ()


def test_leaders_even_out_by_reordering_without_moving_data() -> None:
    # Bytes are level (every broker holds every partition) but broker 1 leads all 6.
    loads = [load("t", i, (1, 2, 3), 1 * MB) for i in range(6)]
    result = jbp.plan_balance(loads, brokers(1, 2, 3))
    assert result.moves == () and result.bytes_moved == 0
    assert result.before.leaders_by_broker == {1: 6, 2: 0, 3: 0}
    assert result.after.leaders_by_broker == {1: 2, 2: 2, 3: 2}
    for move in result.plan.partitions:
        assert sorted(move.replicas) == [1, 2, 3]


def test_ratio_and_bad_input() -> None:
    assert jbp.bytes_ratio({1: 5, 2: 0}) == math.inf
    assert jbp.bytes_ratio({1: 0, 2: 0}) == 1.0
    with pytest.raises(jbp.BalanceInputError, match="no live broker"):
        jbp.plan_balance([], brokers(1, fenced=(1,)))
    with pytest.raises(jbp.BalanceInputError, match=r"t-0: replica\(s\) on unknown broker"):
        jbp.plan_balance([load("t", 0, (9,), 1)], brokers(1))
    with pytest.raises(jbp.BalanceInputError, match="min improvement ratio"):
        jbp.BalanceSettings(min_improvement_ratio=1.5)


def test_the_plan_is_deterministic() -> None:
    loads = [load("t", i, (1 + i % 2, 3), (i + 1) * MB) for i in range(8)]
    infos = brokers(1, 2, 3, 4, 5)
    assert jbp.plan_balance(loads, infos) == jbp.plan_balance(list(reversed(loads)), infos)


def test_balance_fails_fast_without_starting_spark_when_the_admin_is_unreachable() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "kraftlog", "pipeline", "balance",
                           "--bootstrap-admin", f"127.0.0.1:{port}"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("kraftlog: error: cannot reach the admin service")
    assert "\n" not in done.stderr.strip() and "Spark" not in done.stderr
