"""The record codec's fast paths agree with the general ones and with Kafka's record layout.

``record_batch._encode_records`` and ``_decode_records`` take a shortcut for the
common record (no headers, small varints) and fall back to the field-by-field
``_encode_record`` / ``_decode_record`` otherwise. These properties pin that the
shortcut changes nothing: the same bytes as an independent encoder written from
Kafka's ``DefaultRecord.writeTo`` layout, the same records or the same error
(message and byte) as the general decoder, on valid and on mutated sections.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kraftlog.errors import CorruptRecordError
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.storage.batch_header import TimestampType
from kraftlog.storage.record_batch import Header, RecordInput


def kafka_varlong(value: int) -> bytes:
    """Zigzag + base-128, least significant group first (Kafka's ``ByteUtils.writeVarlong``),
    written here without kraftlog's varint module."""
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        if raw < 0x80:
            out.append(raw)
            return bytes(out)
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7


def kafka_records_section(records: list[RecordInput], timestamps: list[int]) -> bytes:
    """``DefaultRecord.writeTo`` for each record: length, attributes, timestamp delta,
    offset delta, key, value, headers (each length -1 for null)."""
    out = bytearray()
    for index, record in enumerate(records):
        body = bytearray(b"\x00")
        body += kafka_varlong(timestamps[index] - timestamps[0])
        body += kafka_varlong(index)
        for field in (record.key, record.value):
            body += kafka_varlong(-1) if field is None else kafka_varlong(len(field)) + field
        body += kafka_varlong(len(record.headers))
        for header in record.headers:
            key = header.key.encode("utf-8")
            body += kafka_varlong(len(key)) + key
            body += (kafka_varlong(-1) if header.value is None
                     else kafka_varlong(len(header.value)) + header.value)
        out += kafka_varlong(len(body)) + body
    return bytes(out)


# Sizes around every varint byte boundary the fast paths care about: 1 byte up to 63,
# 2 bytes up to 8191, the 16384-entry table, and beyond it.
_SIZES = st.sampled_from([0, 1, 63, 64, 127, 128, 8191, 8192, 16383, 16384, 20000]) | st.integers(0, 40)
_field = st.none() | _SIZES.flatmap(lambda n: st.binary(min_size=n, max_size=n))
_headers = st.lists(st.builds(Header, key=st.text(max_size=6), value=st.none() | st.binary(max_size=8)),
                    max_size=2).map(tuple)
_timestamps = st.none() | st.integers(-1, 1 << 45) | st.sampled_from(
    [1_700_000_000_000 + d for d in (-20000, -8193, -1, 0, 1, 8191, 8192, 16383, 16384, 1 << 33)])
_records = st.lists(
    st.builds(RecordInput, key=_field, value=_field,
              headers=st.just(()) | _headers, timestamp_ms=_timestamps),
    min_size=1, max_size=6,
)


def _timestamps_of(records: list[RecordInput], log_append_time: bool, now_ms: int) -> list[int]:
    return [now_ms if log_append_time or r.timestamp_ms is None else r.timestamp_ms for r in records]


@settings(max_examples=150, deadline=None)
@given(records=_records, log_append_time=st.booleans(), now_ms=st.integers(0, 1 << 45))
@example(records=[RecordInput(value=b"x" * 1024, timestamp_ms=1_700_000_000_005),
                  RecordInput(timestamp_ms=1_700_000_000_000),
                  RecordInput(key=b"", value=b"", headers=(Header(key="h", value=None),))],
         log_append_time=False, now_ms=1_700_000_000_001)
def test_fast_encoder_writes_kafkas_layout_and_the_general_encoders_bytes(
        records: list[RecordInput], log_append_time: bool, now_ms: int) -> None:
    fast, base, top = rb._encode_records(records, log_append_time=log_append_time, now_ms=now_ms,
                                         is_control=False)
    general, g_base, g_top = rb._encode_records_general(
        records, log_append_time=log_append_time, now_ms=now_ms, is_control=False)
    timestamps = _timestamps_of(records, log_append_time, now_ms)
    assert b"".join(fast) == b"".join(general) == kafka_records_section(records, timestamps)
    assert (base, top) == (g_base, g_top) == (timestamps[0], max(timestamps))


def test_the_varint_table_holds_every_small_encoding() -> None:
    table = rb.varint.NON_NEGATIVE
    assert len(table) == rb.varint.NON_NEGATIVE_TABLE_SIZE
    assert all(table[n] == kafka_varlong(n) == rb.varint.encode_varint(n) for n in range(len(table)))


def test_fast_encoder_past_the_offset_delta_table() -> None:
    """Offset deltas of 16384 and more leave the table; the bytes still follow Kafka's layout."""
    records = [RecordInput(value=b"v", timestamp_ms=5) for _ in range(rb.varint.NON_NEGATIVE_TABLE_SIZE + 3)]
    fast, _, _ = rb._encode_records(records, log_append_time=False, now_ms=0, is_control=False)
    assert b"".join(fast) == kafka_records_section(records, [5] * len(records))
    [batch] = rb.decode_batches(rb.build_batch(records, base_offset=7))
    assert [r.offset for r in batch.records] == list(range(7, 7 + len(records)))


def test_fast_encoder_keeps_the_general_checks() -> None:
    with pytest.raises(ValueError, match=r"records\[1\].value must be bytes"):
        rb.build_batch([RecordInput(value=b"ok"), RecordInput(value="text")])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"records\[1\].timestamp_ms"):
        rb.build_batch([RecordInput(value=b"ok"), RecordInput(timestamp_ms=1 << 63)])
    with pytest.raises(ValueError, match=r"records\[1\] timestamp delta"):
        rb.build_batch([RecordInput(timestamp_ms=-(1 << 63)), RecordInput(timestamp_ms=(1 << 63) - 1)])
    with pytest.raises(ValueError, match=r"records\[0\] must be a RecordInput"):
        rb.build_batch([(None, b"v", (), 0)])  # type: ignore[list-item]
    # bytearray and memoryview fields take the general path and encode as bytes.
    assert rb.build_batch([RecordInput(key=bytearray(b"k"), value=memoryview(b"v"))]) == rb.build_batch(
        [RecordInput(key=b"k", value=b"v")])


def _decode_both(data: bytes, count: int) -> tuple[object, object]:
    outcomes: list[object] = []
    for decoder in (rb._decode_records, rb._decode_records_general):
        try:
            outcomes.append(decoder(data, count, 100, 1_700_000_000_000, None))
        except rb._RecordsCorrupt as exc:
            outcomes.append((str(exc), exc.offset))
    return outcomes[0], outcomes[1]


@settings(max_examples=150, deadline=None)
@given(records=_records, now_ms=st.integers(0, 1 << 45))
def test_fast_decoder_returns_what_the_general_one_does(records: list[RecordInput], now_ms: int) -> None:
    parts, _, _ = rb._encode_records_general(records, log_append_time=False, now_ms=now_ms, is_control=False)
    data = b"".join(parts)
    fast, general = _decode_both(data, len(records))
    assert fast == general
    assert isinstance(fast, list) and all(type(r) is rb.Record for r in fast)


@settings(max_examples=300, deadline=None)
@given(records=_records, data=st.data())
@example(records=[RecordInput(key=b"k", value=b"v" * 200)], data=None)
def test_fast_decoder_fails_like_the_general_one_on_mutated_sections(
        records: list[RecordInput], data: st.DataObject | None) -> None:
    parts, _, _ = rb._encode_records_general(records, log_append_time=False, now_ms=0, is_control=False)
    section = bytearray(b"".join(parts))
    if data is None:  # the example's 2-byte value length (bytes 7-8), made to run past the record
        section[8] = 0x7F
    else:
        for _ in range(data.draw(st.integers(1, 3))):
            section[data.draw(st.integers(0, len(section) - 1))] = data.draw(st.integers(0, 255))
        section = section[: data.draw(st.integers(0, len(section)))]
    count = len(records) if data is None else data.draw(st.integers(0, len(records) + 1))
    fast, general = _decode_both(bytes(section), count)
    assert fast == general


def test_overlong_but_legal_varints_decode_the_same_way() -> None:
    # Record: length 8, attributes, ts delta 0 written as 2 bytes, offset delta 0,
    # key null, value length 1 written as 2 bytes, "v", header count 0.
    section = bytes([16, 0, 0x80, 0x00, 0, 1, 0x82, 0x00]) + b"v" + b"\x00"
    section = bytes([2 * (len(section) - 1)]) + section[1:]
    fast, general = _decode_both(section, 1)
    assert fast == general == [rb.Record(offset=100, timestamp_ms=1_700_000_000_000, key=None, value=b"v")]


def test_a_corrupt_fast_path_record_names_its_byte() -> None:
    records = [RecordInput(value=b"x" * 1000, timestamp_ms=1) for _ in range(3)]
    data = bytearray(rb.build_batch(records))
    second = bh.RECORDS_OFFSET + (len(data) - bh.RECORDS_OFFSET) // 3
    data[second + 1] = 0x7F  # the high byte of record 1's 2-byte length: past the section's end
    struct.pack_into(">I", data, bh.CRC_OFFSET, bh.BatchHeader(bytes(data)).compute_crc())
    with pytest.raises(CorruptRecordError, match="record 1 has invalid length") as info:
        rb.decode_batches(bytes(data))
    assert info.value.position == second


def test_log_append_time_batches_decode_every_record_at_the_batch_time() -> None:
    data = rb.build_batch([RecordInput(value=b"a", timestamp_ms=5), RecordInput(value=b"b")],
                          timestamp_type=TimestampType.LOG_APPEND_TIME, now_ms=77)
    [batch] = rb.decode_batches(data)
    assert [r.timestamp_ms for r in batch.records] == [77, 77]


class _Tagged(NamedTuple):
    """A caller's own record type: a Record's five fields, then its own."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    source: str
    epoch: int


@settings(max_examples=100, deadline=None)
@given(records=_records, now_ms=st.integers(0, 1 << 45), mutate=st.none() | st.integers(0, 1 << 20))
def test_records_decoded_as_a_callers_type_are_records_plus_the_tail(
        records: list[RecordInput], now_ms: int, mutate: int | None) -> None:
    data = bytearray(rb.build_batch(records, base_offset=40, now_ms=now_ms))
    if mutate is not None:  # a record byte changed and the CRC fixed: same error both ways
        data[bh.RECORDS_OFFSET + mutate % (len(data) - bh.RECORDS_OFFSET)] ^= 0x41
        struct.pack_into(">I", data, bh.CRC_OFFSET, bh.BatchHeader(bytes(data)).compute_crc())
    [header] = bh.iter_batches(bytes(data))
    try:
        [expected] = rb.decode_batches(bytes(data))
    except CorruptRecordError as exc:
        with pytest.raises(CorruptRecordError) as info:
            rb.decode_batch_records(header, _Tagged, ("t", 3))
        assert (str(info.value), info.value.position) == (str(exc), exc.position)
        return
    tagged = rb.decode_batch_records(header, _Tagged, ("t", 3))
    assert [type(r) for r in tagged] == [_Tagged] * len(records)
    assert tagged == [_Tagged(*r, "t", 3) for r in expected.records]
    assert tagged[-1].source == "t" and tagged[-1].epoch == 3
    if mutate is None:
        assert [r.offset for r in tagged] == list(range(40, 40 + len(records)))


@settings(max_examples=200, deadline=None)
@given(records=_records, prefix=st.binary(max_size=40), suffix=st.binary(max_size=40),
       mutate=st.none() | st.integers(0, 1 << 20), flip=st.integers(1, 255))
def test_a_batch_inside_a_bytes_buffer_decodes_in_place_as_from_a_copy(
        records: list[RecordInput], prefix: bytes, suffix: bytes, mutate: int | None,
        flip: int) -> None:
    """Records sliced straight out of a larger ``bytes`` (a Fetch answer) are what a copy of
    the batch decodes to, and a corrupt record fails the same way: the bytes around the
    batch are never read as part of it."""
    batch = bytearray(rb.build_batch(records, base_offset=7))
    if mutate is not None:  # a record byte changed and the CRC fixed
        batch[bh.RECORDS_OFFSET + mutate % (len(batch) - bh.RECORDS_OFFSET)] ^= flip
        struct.pack_into(">I", batch, bh.CRC_OFFSET, bh.BatchHeader(bytes(batch)).compute_crc())
    whole = prefix + bytes(batch) + suffix
    start, end = len(prefix), len(prefix) + len(batch)
    [in_place] = bh.iter_batches(whole, start, end)
    [copied] = bh.iter_batches(bytearray(whole), start, end)  # not bytes: decoded from a copy

    def outcome(header: bh.BatchHeader) -> object:
        try:
            return rb.decode_batch_records(header, _Tagged, ("t", 3))
        except CorruptRecordError as exc:
            return (str(exc), exc.position)

    assert outcome(in_place) == outcome(copied)
    if mutate is None:
        decoded = outcome(in_place)
        assert isinstance(decoded, list)
        assert [(r.key, r.value) for r in decoded] == [(r.key, r.value) for r in records]
        assert all(r.value is None or type(r.value) is bytes for r in decoded)


def test_iter_batches_stops_at_the_given_end() -> None:
    one = rb.build_batch([RecordInput(value=b"a")])
    two = rb.build_batch([RecordInput(value=b"b")], base_offset=1)
    data = b"xx" + one + two
    assert [h.base_offset for h in bh.iter_batches(data, 2)] == [0, 1]
    assert [h.base_offset for h in bh.iter_batches(data, 2, 2 + len(one))] == [0]
    assert [h.base_offset for h in bh.iter_batches(data, 2, 2 + len(one) + 5)] == [0]
    with pytest.raises(ValueError, match="outside"):
        list(bh.iter_batches(data, 2, len(data) + 1))


def test_decode_batch_records_checks_the_crc() -> None:
    data = bytearray(rb.build_batch([RecordInput(value=b"v")]))
    data[-1] ^= 1
    [header] = bh.iter_batches(bytes(data))
    with pytest.raises(CorruptRecordError, match="CRC"):
        rb.decode_batch_records(header, _Tagged, ("t", 0))
