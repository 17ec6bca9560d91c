"""The pure parts of ``kraftlog reassign`` / ``leader-election``: throttle configs,
verify's per-partition status, progress bars, argument parsing."""

from __future__ import annotations

import pytest

from kraftlog import errors
from kraftlog.admin import reassign_plan as rp
from kraftlog.admin import reassign_throttles as rt
from kraftlog.tools import reassign_commands as rc
from kraftlog.v1 import admin_pb2

P = admin_pb2.ListPartitionReassignmentsProgressResponse


def plan(*moves: tuple[str, int, tuple[int, ...]]) -> rp.Plan:
    return rp.Plan(partitions=tuple(rp.PartitionMove(topic=t, partition=p, replicas=r)
                                    for t, p, r in moves))


def test_throttles_cover_current_replicas_as_leaders_and_adding_ones_as_followers() -> None:
    current = {("t", 0): (1, 2), ("t", 1): (2, 3), ("u", 0): (1, 2)}
    moves = plan(("t", 0, (1, 4)), ("t", 1, (2, 3)), ("u", 0, (3, 4)))
    assert rt.throttled_replicas(moves, current) == {
        "t": ("0:1,0:2", "0:4"), "u": ("0:1,0:2", "0:3,0:4")}
    assert rt.throttled_brokers(moves, current) == [1, 2, 3, 4]
    # A partition the plan leaves as it is needs no throttle.
    assert rt.throttled_replicas(plan(("t", 1, (2, 3))), current) == {}


def test_move_statuses() -> None:
    current = {("t", 0): (1, 2, 3), ("t", 1): (2, 3), ("t", 2): (1, 2)}
    progress = P(topics=[P.TopicReassignmentProgress(name="t", partitions=[
        P.PartitionReassignmentProgress(
            partition_index=0, replicas=[1, 2, 3], adding_replicas=[3], removing_replicas=[1],
            progress=[P.AddingReplicaProgress(replica_id=3, size_bytes=300,
                                              leader_size_bytes=1000, bytes_behind=700)])])])
    statuses = rc.move_statuses(plan(("t", 0, (2, 3)), ("t", 1, (2, 3)), ("t", 2, (3, 4))),
                                current, progress)
    assert [(s.name, s.state) for s in statuses] == [
        ("t-0", "in progress"), ("t-1", "complete"), ("t-2", "failed")]
    assert (statuses[0].copied_bytes, statuses[0].total_bytes) == (300, 1000)
    assert "the plan wants 3,4" in statuses[2].detail
    lines = rc.format_statuses(statuses, rates={"t-0": 100.0})
    assert "[#########---------------------]  30.0%" in lines[0]
    assert "300 B / 1000 B" in lines[0] and "ETA 7s" in lines[0]
    assert lines[1] == "t-1  complete"


def test_progress_bar_and_bytes() -> None:
    assert rc.progress_bar(0, 0, width=4) == "[####] 100.0%"
    assert rc.progress_bar(5, 10, width=4) == "[##--]  50.0%"
    assert rt.human_bytes(3 * 1024 * 1024) == "3.0 MiB"


@pytest.mark.parametrize(("text", "message"), [
    ("", "broker ids like 1,2,3"), ("1,x", "broker ids like 1,2,3"),
    ("1,2,1", "broker(s) [1] twice")])
def test_bad_broker_lists(text: str, message: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        rc.parse_broker_list(text)
    assert message in str(caught.value)


def test_election_json() -> None:
    assert rc.parse_election_json('{"partitions":[{"topic":"t","partition":0},'
                                  '{"topic":"t","partition":2}]}', "f") == {"t": [0, 2]}
    for bad, message in (("{", "not valid JSON"), ('{"partitions":[]}', "expected"),
                         ('{"partitions":[{"topic":"t"}]}', "partitions[0] must be"),
                         ('{"partitions":[{"topic":"t","partition":0},'
                          '{"topic":"t","partition":0}]}', "t-0 appears twice")):
        with pytest.raises(errors.ConfigError) as caught:
            rc.parse_election_json(bad, "f")
        assert message in str(caught.value)
