"""Random operation sequences keep the partition invariants (hypothesis).

After every committed operation: leader ∈ ISR ⊆ replicas, the leader is an unfenced
broker (or there is none), indexes agree with partitions, leader and partition
epochs never go down; at the end a standby replaying the log has the same state,
and reverting to a mid-run snapshot restores what was there.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kraftlog.controller import api
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.controller.partition_change import TopicIdPartition
from kraftlog.controller.state import ControllerState
from tests.controller.harness import Harness, check_invariants

BROKERS = st.integers(min_value=1, max_value=5)
TOPICS = st.sampled_from(["t0", "t1", "t2"])

OPERATIONS = st.one_of(
    st.tuples(st.just("register"), BROKERS, st.integers(0, 2), st.booleans()),
    st.tuples(st.just("heartbeat"), BROKERS, st.booleans(), st.booleans()),
    st.tuples(st.just("advance"), st.integers(0, 12_000)),
    st.tuples(st.just("create"), TOPICS, st.integers(1, 3), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("delete"), TOPICS),
    st.tuples(st.just("isr"), TOPICS, st.integers(0, 2), st.sets(BROKERS)),
    st.tuples(
        st.just("reassign"),
        TOPICS,
        st.integers(0, 2),
        st.lists(BROKERS, min_size=1, max_size=4, unique=True),
    ),
    st.tuples(st.just("cancel"), TOPICS, st.integers(0, 2)),
    st.tuples(st.just("elect"), st.sampled_from(list(api.ElectionType))),
    st.tuples(st.just("rebalance")),
    st.tuples(st.just("unclean"), TOPICS, st.booleans()),
    st.tuples(st.just("unregister"), BROKERS),
)


def _run(h: Harness, op: tuple[object, ...]) -> None:
    state = h.state
    kind = op[0]
    if kind == "register":
        _, broker_id, generation, clean = op
        assert isinstance(broker_id, int) and isinstance(generation, int)
        previous = h.epochs.get(broker_id, -1) if clean else -1
        h.register(
            broker_id,
            rack=f"r{broker_id % 3}",
            generation=generation,
            previous_broker_epoch=previous,
        )
    elif kind == "heartbeat":
        _, broker_id, want_fence, want_shut_down = op
        assert isinstance(broker_id, int)
        if broker_id in h.epochs:
            h.heartbeat(broker_id, want_fence=bool(want_fence), want_shut_down=bool(want_shut_down))
    elif kind == "advance":
        assert isinstance(op[1], int)
        h.advance(op[1])
        while h.apply(state.maybe_fence_stale_brokers(h.now_ms)):
            pass
    elif kind == "create":
        _, name, partitions, rf, min_isr_two = op
        assert isinstance(name, str) and isinstance(partitions, int) and isinstance(rf, int)
        h.create_topic(
            name,
            partitions=partitions,
            replication_factor=rf,
            configs={"min.insync.replicas": "2" if min_isr_two else "1"},
        )
    elif kind == "delete":
        h.apply(
            state.delete_topics(
                api.DeleteTopicsRequest(topics=(api.DeleteTopicState(name=str(op[1])),))
            )
        )
    elif kind == "isr":
        _, name, partition_id, members = op
        assert isinstance(name, str) and isinstance(partition_id, int) and isinstance(members, set)
        topic_id = state.replication.topics_by_name.get(name)
        if (
            topic_id is None
            or TopicIdPartition(topic_id, partition_id) not in state.replication.partitions
        ):
            return
        partition = h.partition(name, partition_id)
        if partition.leader == -1:
            return
        proposal = [
            partition.leader,
            *sorted(b for b in members if b in partition.replicas and b != partition.leader),
        ]
        h.alter_partition(name, partition_id, proposal)
    elif kind == "reassign":
        _, name, partition_id, target = op
        assert isinstance(name, str) and isinstance(partition_id, int) and isinstance(target, list)
        h.reassign(name, partition_id, target)
    elif kind == "cancel":
        _, name, partition_id = op
        assert isinstance(name, str) and isinstance(partition_id, int)
        h.reassign(name, partition_id, None)
    elif kind == "elect":
        election_type = op[1]
        assert isinstance(election_type, api.ElectionType)
        h.apply(state.elect_leaders(api.ElectLeadersRequest(election_type=election_type)))
    elif kind == "rebalance":
        h.apply(state.maybe_balance_partition_leaders())
    elif kind == "unclean":
        _, name, enabled = op
        if state.replication.topic_exists(str(name)):
            h.set_topic_config(
                str(name), "unclean.leader.election.enable", "true" if enabled else "false"
            )
    elif kind == "unregister":
        broker_id = op[1]
        assert isinstance(broker_id, int)
        h.apply(state.unregister_broker(api.UnregisterBrokerRequest(broker_id=broker_id)))
        h.epochs.pop(broker_id, None)


def _snapshot(state: ControllerState) -> tuple[object, ...]:
    return (
        dict(state.cluster.registrations.items()),
        dict(state.replication.topics.items()),
        dict(state.replication.partitions.items()),
        state.replication.leaderless_partitions(),
        state.replication.imbalanced_partitions(),
        {b: state.replication.partitions_with_broker_in_isr(b) for b in range(1, 6)},
        {b: state.replication.partitions_led_by(b) for b in range(1, 6)},
    )


EXAMPLES = int(os.environ.get("KRAFTLOG_CONTROLLER_EXAMPLES", "100"))
"""Raise for a soak: ``KRAFTLOG_CONTROLLER_EXAMPLES=5000 pytest tests/controller``."""


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    elr=st.booleans(),
    seed=st.integers(0, 1000),
    operations=st.lists(OPERATIONS, min_size=1, max_size=40),
)
# Found by this test once; kept as pinned examples.
# Several brokers fenced in one operation used to compute conflicting partition changes.
@example(elr=False, seed=0, operations=[("create", "t0", 1, 2, False), ("advance", 9001)])
# A reassignment shrinking below min.insync.replicas put a removed replica in the ELR.
@example(elr=True, seed=0, operations=[("create", "t0", 1, 2, True), ("reassign", "t0", 0, [1])])
def test_random_operations_keep_partition_invariants(
    elr: bool, seed: int, operations: list[tuple[object, ...]]
) -> None:
    h = Harness(ControllerConfig(eligible_leader_replicas_enable=elr), seed=seed)
    h.bootstrap()
    h.start_brokers({1: "r1", 2: "r2", 3: "r0"})
    epochs: dict[TopicIdPartition, tuple[int, int]] = {}
    middle = len(operations) // 2
    mark: tuple[int, tuple[object, ...]] | None = None
    for index, op in enumerate(operations):
        if index == middle:
            mark = (h.committed, _snapshot(h.state))
        _run(h, op)
        check_invariants(h.state)
        for tp, partition in h.state.replication.partitions.items():
            before = epochs.get(tp, (0, 0))
            assert partition.leader_epoch >= before[0] and partition.partition_epoch >= before[1]
            epochs[tp] = (partition.leader_epoch, partition.partition_epoch)
    standby = ControllerState(h.state.config)
    for offset, record in h.log:
        standby.replay(record, offset)
    assert _snapshot(standby) == _snapshot(h.state)
    if mark is not None:
        h.state.registry.revert_to_snapshot(mark[0])
        assert _snapshot(h.state) == mark[1]
