"""Kafka's reassignment plan JSON and the proposing of plans (``reassign generate``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.admin import reassign_plan as rp

KAFKA_PLAN = ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3],'
              '"log_dirs":["any","any","any"]},{"topic":"t","partition":1,"replicas":[2,3,1]}]}')


def test_parses_kafkas_plan_and_prints_it_back() -> None:
    plan = rp.parse_plan(KAFKA_PLAN)
    assert plan.partitions == (rp.PartitionMove(topic="t", partition=0, replicas=(1, 2, 3)),
                               rp.PartitionMove(topic="t", partition=1, replicas=(2, 3, 1)))
    again = json.loads(plan.to_json())
    assert again["version"] == 1
    assert again["partitions"][1] == {"topic": "t", "partition": 1, "replicas": [2, 3, 1],
                                      "log_dirs": ["any", "any", "any"]}
    assert rp.parse_plan(plan.to_json()) == plan


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not valid JSON"),
    ("[]", "expected a JSON object"),
    ('{"version":2,"partitions":[]}', "\"version\" must be 1, not 2"),
    ('{"version":1,"partitions":[]}', "nothing to reassign"),
    ('{"version":1,"partitions":[{"topic":"","partition":0,"replicas":[1]}]}',
     "partitions[0].topic: must be a non-empty string"),
    ('{"version":1,"partitions":[{"topic":"t","partition":-1,"replicas":[1]}]}',
     "partitions[0].partition: must be an integer >= 0"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}',
     "duplicate broker(s) [1]"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":["1"]}]}',
     "'1' is not a broker id"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[]}]}',
     "must be a non-empty list"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],'
     '"log_dirs":["/d"]}]}', "only \"any\" is supported"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
     '{"topic":"t","partition":0,"replicas":[2]}]}', "t-0 appears twice"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replica":[1]}]}',
     "unknown field(s) ['replica']"),
])
def test_bad_plans_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(rp.PlanError) as caught:
        rp.parse_plan(text, source="plan.json")
    assert message in str(caught.value) and str(caught.value).startswith("plan.json")


def test_topics_to_move_file() -> None:
    assert rp.parse_topics_to_move('{"version":1,"topics":[{"topic":"a"},{"topic":"b"},'
                                   '{"topic":"a"}]}') == ("a", "b")
    for bad in ('{"topics":[]}', '{"topics":[{"name":"a"}]}', "1"):
        with pytest.raises(rp.PlanError):
            rp.parse_topics_to_move(bad)


def test_check_against_cluster() -> None:
    current = {("t", 0): [1, 2], ("t", 1): [2, 3]}
    rp.check_against_cluster(rp.parse_plan(KAFKA_PLAN), brokers=[1, 2, 3], partitions=current)
    with pytest.raises(rp.PlanError, match=r"broker\(s\) \[4\] do not exist"):
        rp.check_against_cluster(rp.Plan(partitions=(rp.PartitionMove(
            topic="t", partition=0, replicas=(1, 4)),)), brokers=[1, 2, 3], partitions=current)
    with pytest.raises(rp.PlanError, match="unknown topic 'u'"):
        rp.check_against_cluster(rp.Plan(partitions=(rp.PartitionMove(
            topic="u", partition=0, replicas=(1,)),)), brokers=[1], partitions=current)
    with pytest.raises(rp.PlanError, match="has no partition 7"):
        rp.check_against_cluster(rp.Plan(partitions=(rp.PartitionMove(
            topic="t", partition=7, replicas=(1,)),)), brokers=[1], partitions=current)


def test_a_balanced_assignment_on_the_same_brokers_does_not_move() -> None:
    current = {("t", p): [1 + (p + i) % 3 for i in range(3)] for p in range(6)}
    plan = rp.propose(current, brokers=[1, 2, 3])
    assert {(m.topic, m.partition): list(m.replicas) for m in plan.partitions} == current


def test_moving_to_new_brokers_keeps_what_it_can() -> None:
    current = {("t", p): [1, 2] for p in range(4)}
    plan = rp.propose(current, brokers=[1, 2, 3, 4])
    load = {b: sum(b in m.replicas for m in plan.partitions) for b in (1, 2, 3, 4)}
    assert load == {1: 2, 2: 2, 3: 2, 4: 2}
    moved = sum(len(set(m.replicas) - {1, 2}) for m in plan.partitions)
    assert moved == 4  # the least possible: half of the 8 replicas must reach 3 and 4
    leaders = [m.replicas[0] for m in plan.partitions]
    assert max(leaders.count(b) for b in (1, 2, 3, 4)) == 1


def test_racks_are_spread() -> None:
    current = {("t", p): [1] for p in range(2)}
    plan = rp.propose({k: [1, 2] for k in current}, brokers=[3, 4, 5, 6],
                      racks={3: "a", 4: "a", 5: "b", 6: "b"})
    for move in plan.partitions:
        assert len({"a" if b in (3, 4) else "b" for b in move.replicas}) == 2


def test_replication_factor_above_broker_count() -> None:
    with pytest.raises(rp.PlanError, match="replication factor 3 but only 2 broker"):
        rp.propose({("t", 0): [1, 2, 3]}, brokers=[1, 2])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 12), st.lists(st.integers(1, 8), min_size=1,
                                                         max_size=8, unique=True),
       st.randoms(use_true_random=False))
def test_proposals_are_valid_and_balanced(factor: int, partitions: int, targets: list[int],
                                          rng: object) -> None:
    import random
    assert isinstance(rng, random.Random)
    current = {("t", p): rng.sample(range(1, 9), factor) for p in range(partitions)}
    if factor > len(targets):
        with pytest.raises(rp.PlanError):
            rp.propose(current, brokers=targets)
        return
    plan = rp.propose(current, brokers=targets)
    assert [(m.topic, m.partition) for m in plan.partitions] == sorted(current)
    for move in plan.partitions:
        assert len(move.replicas) == factor == len(set(move.replicas))
        assert set(move.replicas) <= set(targets)
    load = [sum(b in m.replicas for m in plan.partitions) for b in targets]
    assert max(load) - min(load) <= 1
    assert rp.parse_plan(plan.to_json()) == plan


# -- propose_decommission ----------------------------------------------------------------------


def test_decommission_replaces_only_the_leaving_replica_in_its_place() -> None:
    current = {("t", 0): (6, 4), ("t", 1): (5, 6), ("t", 2): (4, 5), ("u", 0): (6, 5, 4)}
    with pytest.raises(rp.PlanError, match="u-0 has 3 replicas"):
        rp.propose_decommission(current, broker=6, brokers=[4, 5, 6])
    del current[("u", 0)]
    plan = rp.propose_decommission(current, broker=6, brokers=[4, 5, 6])
    # t-2 does not touch 6 and stays out of the plan; the leader's place goes to 5.
    assert [(m.topic, m.partition, m.replicas) for m in plan.partitions] == [
        ("t", 0, (5, 4)), ("t", 1, (5, 4))]


def test_decommission_prefers_a_new_rack_then_the_least_loaded_broker() -> None:
    current = {("t", 0): (1, 2), ("t", 1): (1, 3), ("t", 2): (4, 2)}
    racks = {1: "a", 2: "a", 3: "b", 4: "c"}
    plan = rp.propose_decommission(current, broker=1, brokers=[1, 2, 3, 4], racks=racks)
    # t-0 keeps 2 (rack a): 3 (b) and 4 (c) are new racks holding one replica each: 3.
    # t-1 keeps 3 (rack b): 2 (a) and 4 (c) are new racks; 2 holds two replicas, 4 one: 4.
    assert {(m.topic, m.partition): m.replicas for m in plan.partitions} == {
        ("t", 0): (3, 2), ("t", 1): (4, 3)}
    assert rp.propose_decommission(current, broker=9, brokers=[1, 2, 3, 4]).partitions == ()
