"""Committed-offset placement, record formats and caches (pure cores: group_offsets, group_coordinator).

The hash and the record bytes are checked against values computed by hand from
Java's ``String.hashCode`` and Kafka's OffsetCommitKey v1 / OffsetCommitValue v3
layouts, so a log written here reads in Kafka and the other way round.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.broker import group_coordinator as gc
from kraftlog.broker import group_offsets as go
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import CorruptRecordError
from kraftlog.ids import TopicPartition
from kraftlog.storage import record_batch as rb

TP0 = TopicPartition(topic="events", partition=0)
TP1 = TopicPartition(topic="events", partition=1)


# -- placement ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Aa", 2112), ("BB", 2112),                   # Java's classic collision
    ("polygenelubricants", -2147483648),           # hashes to Integer.MIN_VALUE
    ("\U0001F600", 0xD83D * 31 + 0xDE00),          # a surrogate pair: two UTF-16 units
    ("é", 0xE9),
])
def test_java_string_hash_matches_java(text: str, expected: int) -> None:
    assert go.java_string_hash(text) == expected


def test_java_string_hash_wraps_like_a_signed_int() -> None:
    # Computed the long way with Python integers, then reduced to int32.
    text = "consumer-group-with-a-long-name-1234567890"
    value = 0
    for ch in text:
        value = value * 31 + ord(ch)
    value &= 0xFFFFFFFF
    assert go.java_string_hash(text) == (value - 2**32 if value >= 2**31 else value)
    assert -(2**31) <= go.java_string_hash(text) < 2**31


def test_partition_for_is_kafka_abs_of_the_hash_mod_the_partition_count() -> None:
    assert go.kafka_abs(-(2**31)) == 0  # Utils.abs, not Math.abs (which stays negative)
    assert go.kafka_abs(-5) == 5
    assert go.partition_for("polygenelubricants", 50) == 0
    assert go.partition_for("hello", 50) == 99162322 % 50
    assert go.partition_for("Aa", 50) == go.partition_for("BB", 50) == 2112 % 50
    negative = "my-group"  # hashCode is negative: abs before the modulo
    assert go.java_string_hash(negative) < 0
    assert go.partition_for(negative, 50) == abs(go.java_string_hash(negative)) % 50
    with pytest.raises(ValueError, match="positive"):
        go.partition_for("g", 0)


# -- record formats ---------------------------------------------------------------------------------

def test_offset_key_is_kafka_offset_commit_key_version_1_byte_for_byte() -> None:
    key = go.OffsetKey(group="g1", topic="events", partition=7)
    expected = (bytes.fromhex("0001") + bytes.fromhex("0002") + b"g1"
                + bytes.fromhex("0006") + b"events" + bytes.fromhex("00000007"))
    assert go.encode_offset_key(key) == expected
    assert go.decode_key(expected) == key
    # Version 0 has the same layout and is read too.
    assert go.decode_key(bytes.fromhex("0000") + expected[2:]) == key


def test_offset_value_is_kafka_offset_commit_value_version_3_byte_for_byte() -> None:
    value = go.OffsetAndMetadata(offset=5, leader_epoch=2, metadata="m", commit_timestamp_ms=1000)
    expected = bytes.fromhex("0003" "0000000000000005" "00000002" "0001" "6d" "00000000000003e8")
    assert go.encode_offset_value(value) == expected
    assert go.decode_offset_value(expected, record_offset=9) == go.OffsetAndMetadata(
        offset=5, leader_epoch=2, metadata="m", commit_timestamp_ms=1000, record_offset=9)


def test_older_value_versions_are_read() -> None:
    v1 = struct.pack(">hqh", 1, 42, 2) + b"md" + struct.pack(">qq", 1234, 99999)
    assert go.decode_offset_value(v1) == go.OffsetAndMetadata(
        offset=42, leader_epoch=-1, metadata="md", commit_timestamp_ms=1234)
    v2 = struct.pack(">hqh", 2, 43, 0) + struct.pack(">q", 77)
    assert go.decode_offset_value(v2).offset == 43
    assert go.decode_offset_value(v2).commit_timestamp_ms == 77


@pytest.mark.parametrize(("data", "match"), [
    (bytes.fromhex("0009") + b"\x00\x01g", "unknown key version 9"),
    (bytes.fromhex("0001") + b"\x00\x05g", "truncated"),
    (go.encode_offset_key(go.OffsetKey(group="g", topic="t", partition=0)) + b"x", "trailing"),
    (bytes.fromhex("0001ffff"), "null string"),
])
def test_malformed_keys_are_corrupt_records(data: bytes, match: str) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        go.decode_key(data)


def test_group_metadata_keys_are_skipped_and_unknown_values_refused() -> None:
    assert go.decode_key(struct.pack(">hh", 2, 1) + b"g") is None
    with pytest.raises(CorruptRecordError, match="unsupported version 4"):
        go.decode_offset_value(struct.pack(">hq", 4, 1))


def test_strings_longer_than_a_kafka_string_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 32767"):
        go.encode_offset_value(go.OffsetAndMetadata(offset=1, metadata="x" * 40000,
                                                    commit_timestamp_ms=0))


# -- cache and load -------------------------------------------------------------------------------

def _batch(base_offset: int, *entries: tuple[go.OffsetKey, go.OffsetAndMetadata | None]) -> bytes:
    return rb.build_batch([go.commit_record(k, v) for k, v in entries], base_offset=base_offset,
                          now_ms=1)


def test_replay_keeps_the_last_value_per_key_and_tombstones_delete() -> None:
    k0 = go.OffsetKey(group="g", topic="events", partition=0)
    k1 = go.OffsetKey(group="g", topic="events", partition=1)
    other = go.OffsetKey(group="h", topic="events", partition=0)
    log = (_batch(0, (k0, go.OffsetAndMetadata(offset=1, commit_timestamp_ms=10)),
                  (k1, go.OffsetAndMetadata(offset=2, commit_timestamp_ms=10)))
           + _batch(2, (k0, go.OffsetAndMetadata(offset=5, metadata="x", leader_epoch=3,
                                                 commit_timestamp_ms=20)),
                    (other, go.OffsetAndMetadata(offset=9, commit_timestamp_ms=20)))
           + _batch(4, (k1, None))
           + rb.build_batch([rb.RecordInput(key=struct.pack(">hh", 2, 1) + b"g", value=b"m")],
                            base_offset=5))
    cache = go.OffsetCache(3)
    summary = cache.replay_batches(rb.decode_batches(log))
    assert summary == go.LoadSummary(records=4, tombstones=1, skipped=1, next_offset=6)
    assert cache.offsets("g") == {TP0: go.OffsetAndMetadata(
        offset=5, metadata="x", leader_epoch=3, commit_timestamp_ms=20, record_offset=2)}
    assert cache.offsets("g", [TP0, TP1])[TP1] is None
    assert cache.offsets("h")[TP0] is not None and cache.offsets("h")[TP0].offset == 9  # type: ignore[union-attr]
    assert cache.group_count == 2 and cache.offset_count == 2
    assert cache.offsets("nobody") == {}


def test_out_of_order_acknowledgements_cannot_roll_an_offset_back() -> None:
    cache = go.OffsetCache(0)
    newer = go.OffsetAndMetadata(offset=7, commit_timestamp_ms=2, record_offset=11)
    older = go.OffsetAndMetadata(offset=5, commit_timestamp_ms=1, record_offset=10)
    assert cache.put("g", TP0, newer)
    assert not cache.put("g", TP0, older)  # acknowledged after, written before
    assert cache.get("g", TP0) == newer
    assert not cache.delete("g", TP0, record_offset=10)  # a tombstone older than the value
    assert cache.delete("g", TP0, record_offset=12)
    assert cache.get("g", TP0) is None and cache.group_count == 0


def test_expired_offsets_are_those_committed_retention_ago() -> None:
    cache = go.OffsetCache(0)
    cache.put("g", TP0, go.OffsetAndMetadata(offset=1, commit_timestamp_ms=1000, record_offset=0))
    cache.put("g", TP1, go.OffsetAndMetadata(offset=1, commit_timestamp_ms=5000, record_offset=1))
    assert cache.expired(now_ms=5999, retention_ms=5000) == []
    assert cache.expired(now_ms=6000, retention_ms=5000) == [
        (go.OffsetKey(group="g", topic="events", partition=0), 0)]


# -- coordinator state --------------------------------------------------------------------------

def _state(partitions: int = 4) -> gc.GroupCoordinatorState:
    return gc.GroupCoordinatorState(broker_id=1, config=gc.GroupCoordinatorConfig(
        offsets_topic_num_partitions=partitions))


def _group_on(state: gc.GroupCoordinatorState, partition: int) -> str:
    return next(g for g in (f"g{i}" for i in range(1000)) if state.partition_for(g) == partition)


def test_a_led_partition_loads_then_serves_and_unloads_when_leadership_goes() -> None:
    state = _state()
    group = _group_on(state, 2)
    assert state.lookup(group).error is ErrorCode.NOT_COORDINATOR
    plan = state.plan({2: 5}, now_ms=0)
    assert plan.load == ((2, 5),) and plan.unloaded == ()
    assert state.lookup(group).error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    owned = state.loading(2, 5)
    assert owned is not None and state.loading(2, 4) is None
    assert state.plan({2: 5}, now_ms=1) == gc.Plan()  # level-triggered: nothing new
    assert state.complete_load(owned)
    lookup = state.lookup(group)
    assert lookup.error is ErrorCode.NONE and lookup.owned is owned and state.is_current(owned)
    plan = state.plan({}, now_ms=2)  # became follower / replica removed
    assert plan.unloaded == (owned,) and not state.is_current(owned)
    assert state.lookup(group).error is ErrorCode.NOT_COORDINATOR


def test_a_new_leader_epoch_reloads_and_a_superseded_load_is_dropped() -> None:
    state = _state()
    state.plan({1: 3}, now_ms=0)
    first = state.loading(1, 3)
    assert first is not None
    plan = state.plan({1: 4}, now_ms=1)
    assert plan.unloaded == (first,) and plan.load == ((1, 4),)
    assert not state.complete_load(first)  # the epoch-3 load finishes late: ignored
    second = state.loading(1, 4)
    assert second is not None and state.complete_load(second)
    state.fail_load(first)  # no effect on the current entry
    assert state.is_current(second)


def test_failed_load_is_retried_by_the_next_plan() -> None:
    state = _state()
    state.plan({0: 1}, now_ms=0)
    owned = state.loading(0, 1)
    assert owned is not None
    state.fail_load(owned)
    assert state.plan({0: 1}, now_ms=1).load == ((0, 1),)


def test_partition_count_follows_the_existing_topic() -> None:
    state = _state(50)
    state.set_partition_count(3)
    assert state.num_partitions == 3 and state.partition_for("polygenelubricants") == 0
    state.set_partition_count(0)
    assert state.num_partitions == 3


def test_commit_validation_errors_per_partition() -> None:
    existing = {TP0, TP1}
    check = gc.validate_commit([
        gc.CommitEntry(topic="events", partition=0, offset=5, metadata="ok"),
        gc.CommitEntry(topic="events", partition=1, offset=5, metadata="x" * 11),
        gc.CommitEntry(topic="events", partition=9, offset=5),
        gc.CommitEntry(topic="bad name!", partition=0, offset=5),
        gc.CommitEntry(topic="events", partition=0, offset=6),
    ], metadata_max_bytes=10, partition_exists=lambda tp: tp in existing)
    assert check.accepted == {}
    codes = {where: code for where, (code, _m) in check.errors.items()}
    assert codes == {("events", 0): ErrorCode.INVALID_REQUEST,
                     ("events", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE,
                     ("events", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     ("bad name!", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    check = gc.validate_commit([gc.CommitEntry(topic="events", partition=0, offset=-1),
                                gc.CommitEntry(topic="events", partition=1, offset=0,
                                               leader_epoch=-2)],
                               metadata_max_bytes=10, partition_exists=lambda tp: True)
    assert {c for c, _m in check.errors.values()} == {ErrorCode.INVALID_REQUEST}
    good = gc.validate_commit([gc.CommitEntry(topic="events", partition=1, offset=0)],
                              metadata_max_bytes=0, partition_exists=lambda tp: True)
    assert list(good.accepted) == [TP1] and good.errors == {}


def test_group_checks_and_append_error_mapping() -> None:
    assert gc.check_group("", generation_id=None, member_id="")[0] is ErrorCode.INVALID_GROUP_ID
    assert gc.check_group("g", generation_id=None, member_id="")[0] is ErrorCode.NONE
    assert (gc.check_group("é" * 20_000, generation_id=None, member_id="")[0]
            is ErrorCode.INVALID_GROUP_ID)
    assert gc.check_group("g", generation_id=-1, member_id="m")[0] is ErrorCode.NONE
    assert gc.check_group("g", generation_id=3, member_id="m")[0] is ErrorCode.ILLEGAL_GENERATION
    assert gc.commit_error_for_append(ErrorCode.NOT_LEADER_OR_FOLLOWER) is ErrorCode.NOT_COORDINATOR
    assert (gc.commit_error_for_append(ErrorCode.NOT_ENOUGH_REPLICAS)
            is ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert (gc.commit_error_for_append(ErrorCode.MESSAGE_TOO_LARGE)
            is ErrorCode.INVALID_COMMIT_OFFSET_SIZE)
    assert gc.commit_error_for_append(ErrorCode.REQUEST_TIMED_OUT) is ErrorCode.REQUEST_TIMED_OUT


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match=r"offsets\.topic\.num\.partitions"):
        gc.GroupCoordinatorConfig(offsets_topic_num_partitions=0)


# -- model check: the cache equals a replay of the log, whatever the acknowledgement order ---------

_keys = st.sampled_from([go.OffsetKey(group=g, topic="events", partition=p)
                         for g in ("a", "b") for p in (0, 1)])
_ops = st.lists(st.tuples(_keys, st.one_of(st.none(), st.integers(0, 1000))), min_size=1,
                max_size=30)


@settings(max_examples=150, deadline=None)
@given(ops=_ops, order=st.randoms(use_true_random=False))
def test_cache_applied_in_any_ack_order_equals_a_reload_of_the_log(
        ops: list[tuple[go.OffsetKey, int | None]], order: random.Random) -> None:
    # The log: one record per op at consecutive offsets (commits and tombstones).
    log = rb.build_batch([go.commit_record(k, None if v is None else go.OffsetAndMetadata(
        offset=v, commit_timestamp_ms=v)) for k, v in ops])
    reloaded = go.OffsetCache(0)
    reloaded.replay_batches(rb.decode_batches(log))
    # A dict model: the last op per key wins, a tombstone deletes.
    model: dict[go.OffsetKey, int] = {}
    for key, value in ops:
        if value is None:
            model.pop(key, None)
        else:
            model[key] = value
    assert {(g, tp): v.offset for g, offsets in reloaded.items() for tp, v in offsets.items()} == {
        (k.group, TopicPartition(topic=k.topic, partition=k.partition)): v
        for k, v in model.items()}
    # The live cache: acknowledgements (put / delete with their record offsets) arrive in
    # any order among commits. A tombstone is never appended while a commit of its key is
    # in flight (the driver's expiry skips such keys), so tombstones ack in log order here.
    live = go.OffsetCache(0)
    acks = list(enumerate(ops))
    if all(value is not None for _key, value in ops):
        order.shuffle(acks)
    for record_offset, (key, value) in acks:
        tp = TopicPartition(topic=key.topic, partition=key.partition)
        if value is None:
            live.delete(key.group, tp, record_offset=record_offset)
        else:
            live.put(key.group, tp, go.OffsetAndMetadata(offset=value, commit_timestamp_ms=value,
                                                         record_offset=record_offset))
    assert {g: dict(o) for g, o in live.items()} == {g: dict(o) for g, o in reloaded.items()}
