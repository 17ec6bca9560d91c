"""kraftlog.broker.readiness: which partitions keep a broker from being roll-ready."""

from __future__ import annotations

import pytest

from kraftlog.broker import readiness
from kraftlog.ids import Uuid
from kraftlog.metadata import image as im

ME = 2


def _image(**partitions: im.PartitionRegistration) -> im.MetadataImage:
    """One topic per keyword, each with a single partition 0."""
    topics = {}
    ids = {}
    for index, (name, registration) in enumerate(sorted(partitions.items())):
        topic_id = Uuid(bytes([index + 1]) * 16)
        topics[topic_id] = im.TopicImage(name=name, topic_id=topic_id,
                                         partitions=im.frozen_map({0: registration}))
        ids[name] = topic_id
    return im.MetadataImage(topics=im.TopicsImage(topics=im.frozen_map(topics),
                                                  ids_by_name=im.frozen_map(ids)))


def _reg(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int = 1, *,
         adding: tuple[int, ...] = (), removing: tuple[int, ...] = ()) -> im.PartitionRegistration:
    return im.PartitionRegistration(replicas=replicas, isr=isr, leader=leader,
                                    adding_replicas=adding, removing_replicas=removing)


def _lagging(image: im.MetadataImage) -> list[str]:
    return sorted(p.topic_name for p in readiness.out_of_sync(image, ME))


def test_a_follower_out_of_the_isr_lags_and_one_in_it_does_not() -> None:
    image = _image(behind=_reg((1, 2, 3), (1, 3)), synced=_reg((1, 2, 3), (1, 2, 3)),
                   elsewhere=_reg((1, 3, 4), (1, 3)))
    assert _lagging(image) == ["behind"]


def test_the_isr_complete_without_a_reassignment_replica_does_not_wait_for_it() -> None:
    # Adding (still copying) or removing: no one's min ISR counts on this broker.
    image = _image(adding=_reg((1, 3, 2), (1, 3), adding=(2,)),
                   removing=_reg((1, 3, 2), (1, 3), removing=(2,)),
                   target=_reg((1, 2, 3), (1, 3), adding=(3,), removing=(4,)))
    assert _lagging(image) == ["target"]


def test_a_partition_without_a_leader_cannot_take_the_broker_back_and_is_not_waited_for() -> None:
    image = _image(leaderless=_reg((1, 2), (1,), leader=-1))
    assert _lagging(image) == []


def test_gate_waits_for_the_isr_then_opens() -> None:
    gate = readiness.InSyncGate(timeout_ms=10_000)
    assert gate.update(now_ms=0, base_ready=False, lagging=0) is False
    assert gate.update(now_ms=100, base_ready=True, lagging=3) is False
    assert gate.next_deadline_ms() == 10_100
    assert gate.update(now_ms=5_000, base_ready=True, lagging=1) is False
    assert gate.update(now_ms=6_000, base_ready=True, lagging=0) is True
    assert gate.next_deadline_ms() is None and not gate.timed_out


def test_gate_opens_after_the_timeout_so_one_lagging_replica_cannot_block_a_roll() -> None:
    gate = readiness.InSyncGate(timeout_ms=10_000)
    assert gate.update(now_ms=1_000, base_ready=True, lagging=1) is False
    assert gate.update(now_ms=10_999, base_ready=True, lagging=1) is False
    assert gate.update(now_ms=11_000, base_ready=True, lagging=1) is True
    assert gate.timed_out and gate.next_deadline_ms() is None
    # A later shrink after catching up starts a new spell, with a new full timeout.
    assert gate.update(now_ms=12_000, base_ready=True, lagging=0) is True
    assert gate.update(now_ms=13_000, base_ready=True, lagging=1) is False
    assert gate.next_deadline_ms() == 23_000


def test_gate_closes_when_base_readiness_goes_and_restarts_the_clock() -> None:
    gate = readiness.InSyncGate(timeout_ms=1_000)
    gate.update(now_ms=0, base_ready=True, lagging=1)
    assert gate.update(now_ms=900, base_ready=False, lagging=0) is False  # fenced
    assert gate.update(now_ms=1_500, base_ready=True, lagging=1) is False
    assert gate.update(now_ms=2_500, base_ready=True, lagging=1) is True


def test_zero_timeout_means_base_readiness_only_and_negative_is_refused() -> None:
    assert readiness.InSyncGate(timeout_ms=0).update(now_ms=5, base_ready=True, lagging=4)
    with pytest.raises(ValueError, match="timeout_ms"):
        readiness.InSyncGate(timeout_ms=-1)
