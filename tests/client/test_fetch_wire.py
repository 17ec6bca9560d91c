"""fetch_wire reads a FetchResponse's bytes as protobuf does, records left in place."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.client import fetch_wire
from kraftlog.v1 import broker_pb2, common_pb2

_I32 = st.integers(-(1 << 31), (1 << 31) - 1)
_I64 = st.integers(-(1 << 63), (1 << 63) - 1)
_TEXT = st.text(max_size=12)
_ERRORS = st.none() | st.builds(common_pb2.Error, code=st.integers(0, 120), message=_TEXT)
_HINTS = st.none() | st.builds(common_pb2.LeaderHint, leader_id=_I32, leader_epoch=_I32)
_PARTITIONS = st.lists(st.tuples(_I32, _ERRORS, _I64, _I64, _I64, st.booleans(), _HINTS,
                                 st.binary(max_size=300)), max_size=4)


def build(error: common_pb2.Error | None,
          topics: list[tuple[str, list[tuple[object, ...]]]]) -> broker_pb2.FetchResponse:
    response = broker_pb2.FetchResponse()
    if error is not None:
        response.error.CopyFrom(error)
    for name, parts in topics:
        topic = response.responses.add(topic=name)
        topic.topic_id.most_significant_bits = 7
        for index, perr, hw, lso, lstart, diverged, hint, records in parts:
            part = topic.partitions.add(partition_index=index, high_watermark=hw,
                                        last_stable_offset=lso, log_start_offset=lstart,
                                        records=records)
            if perr is not None:
                part.error.CopyFrom(perr)
            if diverged:
                part.diverging_epoch.epoch = 3
                part.diverging_epoch.end_offset = 99
            if hint is not None:
                part.current_leader.CopyFrom(hint)
    return response


def assert_same_as_protobuf(data: bytes, answer: fetch_wire.FetchAnswer) -> None:
    response = broker_pb2.FetchResponse.FromString(data)
    assert (answer.error_code, answer.error_message) == (response.error.code,
                                                         response.error.message)
    expected = [(t.topic, p) for t in response.responses for p in t.partitions]
    assert len(answer.partitions) == len(expected)
    for got, (topic, part) in zip(answer.partitions, expected, strict=True):
        assert (got.topic, got.partition_index, got.error_code, got.error_message,
                got.high_watermark, got.log_start_offset) == (
            topic, part.partition_index, part.error.code, part.error.message,
            part.high_watermark, part.log_start_offset)
        assert data[got.records_start:got.records_end] == part.records
        assert got.current_leader == (
            part.current_leader if part.HasField("current_leader") else None)


@settings(max_examples=200, deadline=None)
@given(error=_ERRORS, topics=st.lists(st.tuples(_TEXT, _PARTITIONS), max_size=3))
def test_what_protobuf_reads_and_records_in_place(
        error: common_pb2.Error | None, topics: list[tuple[str, list[tuple[object, ...]]]]) -> None:
    data = build(error, topics).SerializeToString()
    assert_same_as_protobuf(data, fetch_wire.parse_fetch_response(data))


@settings(max_examples=300, deadline=None)
@given(topics=st.lists(st.tuples(_TEXT, _PARTITIONS), min_size=1, max_size=2), data=st.data())
def test_cut_or_garbled_answers_raise_value_error_or_read_as_protobuf_does(
        topics: list[tuple[str, list[tuple[object, ...]]]], data: st.DataObject) -> None:
    """Never another exception. What protobuf accepts reads the same (except the group wire
    types, which a Fetch answer never has); what it refuses may still read, when the
    damage is in a field this reader skips (the topic id, the diverging epoch)."""
    whole = build(None, topics).SerializeToString()
    cut = whole[:data.draw(st.integers(0, max(0, len(whole) - 1)))]
    garbled = bytearray(whole)
    garbled[data.draw(st.integers(0, len(garbled) - 1))] = data.draw(st.integers(0, 255))
    for candidate in (cut, bytes(garbled)):
        try:
            broker_pb2.FetchResponse.FromString(candidate)
            protobuf_ok = True
        except Exception:
            protobuf_ok = False
        try:
            answer = fetch_wire.parse_fetch_response(candidate)
        except ValueError as exc:
            assert not protobuf_ok or "wire type" in str(exc), (candidate, exc)
            continue
        if protobuf_ok:
            assert_same_as_protobuf(candidate, answer)


def test_unknown_fields_are_skipped_and_bad_bytes_refused() -> None:
    known = build(None, [("t", [(0, None, 5, 5, 0, False, None, b"rec")])]).SerializeToString()
    # Field 15 varint, field 16 fixed64, field 17 fixed32, field 18 bytes: all unknown.
    extra = bytes([15 << 3, 1, (16 << 3 | 1) & 0x7F | 0x80, 1]) + b"\x00" * 8
    extra += bytes([(17 << 3 | 5) & 0x7F | 0x80, 1]) + b"\x00" * 4
    extra += bytes([(18 << 3 | 2) & 0x7F | 0x80, 1, 2]) + b"zz"
    message = broker_pb2.FetchResponse.FromString(extra + known)
    assert len(message.responses) == 1
    answer = fetch_wire.parse_fetch_response(extra + known)
    [part] = answer.partitions
    assert (extra + known)[part.records_start:part.records_end] == b"rec"
    with pytest.raises(ValueError, match="wire type 3"):
        fetch_wire.parse_fetch_response(bytes([1 << 3 | 3]))
    with pytest.raises(ValueError, match="field number 0"):
        fetch_wire.parse_fetch_response(b"\x00\x00")
    with pytest.raises(ValueError, match="runs past"):
        fetch_wire.parse_fetch_response(bytes([2 << 3 | 2, 50]) + b"x")
    with pytest.raises(ValueError, match="longer than 10 bytes"):
        fetch_wire.parse_fetch_response(bytes([1 << 3]) + b"\xff" * 11)
