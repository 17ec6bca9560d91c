"""Tests of kraftlog.storage.batch_header and record_batch (RecordBatch v2) and kraftlog.storage.varint."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.errors import CorruptRecordError, KraftlogError, UnsupportedCompressionTypeError
from kraftlog.storage import batch_header as bh
from kraftlog.storage import compression, varint
from kraftlog.storage import record_batch as rb
from kraftlog.storage.batch_header import TimestampType
from kraftlog.storage.record_batch import CompressionType, Header, RecordInput

REAL_CODECS = (
    CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD,
)


def reference_crc32c(data: bytes) -> int:
    """Bit-at-a-time CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): independent of crc32c."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def recompute_crc(buf: bytearray, position: int = 0) -> None:
    """Re-seal a hand-edited batch so that only the edit itself is under test."""
    length = struct.unpack_from(">i", buf, position + 8)[0]
    crc = crc32c.crc32c(bytes(buf[position + 21 : position + 12 + length]))
    struct.pack_into(">I", buf, position + 17, crc)


def batch_of(count: int, *, base_offset: int = 0, ts: int = 1000, **kwargs: object) -> bytes:
    records = [RecordInput(key=b"k%d" % i, value=b"v" * i, timestamp_ms=ts + i) for i in range(count)]
    return rb.build_batch(records, base_offset=base_offset, **kwargs)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- varint


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"), (-1, "01"), (1, "02"), (-64, "7f"), (63, "7e"), (64, "8001"),
        (300, "d804"), (-(1 << 31), "ffffffff0f"), ((1 << 31) - 1, "feffffff0f"),
    ],
)
def test_varint_known_answers(value: int, encoded: str) -> None:
    raw = bytes.fromhex(encoded)
    assert varint.encode_varint(value) == raw
    assert varint.decode_varint(raw, 0) == (value, len(raw))
    assert varint.size_of_varint(value) == len(raw)


def test_varlong_extremes() -> None:
    low = varint.encode_varlong(-(1 << 63))
    assert low == b"\xff" * 9 + b"\x01"
    assert varint.decode_varlong(low, 0) == (-(1 << 63), 10)
    high = varint.encode_varlong((1 << 63) - 1)
    assert varint.decode_varlong(high, 0) == ((1 << 63) - 1, 10)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_varlong_round_trip(value: int) -> None:
    encoded = b"\xaa" + varint.encode_varlong(value)
    assert varint.decode_varlong(encoded, 1) == (value, len(encoded))


def test_varint_rejects_bad_input_with_position() -> None:
    with pytest.raises(ValueError, match="truncated varint at byte 1"):
        varint.decode_varint(b"\x00\x80\x80", 1)
    with pytest.raises(ValueError, match="longer than 5 bytes"):
        varint.decode_varint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(ValueError, match="overflows"):
        varint.decode_varint(b"\xff\xff\xff\xff\x1f", 0)
    with pytest.raises(ValueError, match="longer than 10 bytes"):
        varint.decode_varlong(b"\xff" * 10 + b"\x01", 0)
    with pytest.raises(ValueError, match="does not fit in int32"):
        varint.encode_varint(1 << 31)
    with pytest.raises(ValueError, match="does not fit in int64"):
        varint.encode_varlong(1 << 63)


# ----------------------------------------------------------------------------- known answer

# Two records written out field by field from Kafka's message-format docs.
# Record 0: key "k", value "hello", timestamp 1000 (delta 0), offset delta 0, no headers.
_RECORD_0 = bytes.fromhex("18" "00" "00" "00" "02" "6b" "0a" "68656c6c6f" "00")
# Record 1: null key, empty value, timestamp 1003 (delta 3 -> zigzag 6), offset delta 1,
# one header "h" with a null value.
_RECORD_1 = bytes.fromhex("12" "00" "06" "02" "01" "00" "02" "02" "68" "01")
_CRC_RANGE = bytes.fromhex(
    "0000"                  # attributes: no compression, CreateTime, not transactional/control
    "00000001"              # lastOffsetDelta
    "00000000000003e8"      # baseTimestamp 1000
    "00000000000003eb"      # maxTimestamp 1003
    "ffffffffffffffff"      # producerId -1
    "ffff"                  # producerEpoch -1
    "ffffffff"              # baseSequence -1
    "00000002"              # recordCount
) + _RECORD_0 + _RECORD_1
_KNOWN_CRC = 0x2E76C900


def _known_batch() -> bytes:
    return (
        bytes.fromhex("0000000000000000")   # baseOffset 0
        + struct.pack(">i", len(_CRC_RANGE) + 9)   # batchLength: epoch + magic + crc + the rest
        + bytes.fromhex("ffffffff" "02")      # partitionLeaderEpoch -1, magic 2
        + struct.pack(">I", _KNOWN_CRC)
        + _CRC_RANGE
    )


def test_reference_crc32c_matches_the_standard_check_value() -> None:
    assert reference_crc32c(b"123456789") == 0xE3069283  # the CRC-32C catalogue check value


def test_known_answer_batch_crc_and_bytes() -> None:
    assert reference_crc32c(_CRC_RANGE) == _KNOWN_CRC
    expected = _known_batch()
    assert len(expected) == 84
    built = rb.build_batch(
        [
            RecordInput(key=b"k", value=b"hello", timestamp_ms=1000),
            RecordInput(key=None, value=b"", headers=(Header(key="h", value=None),),
                        timestamp_ms=1003),
        ],
    )
    assert built == expected


def test_known_answer_header_view_and_decode() -> None:
    data = _known_batch()
    header = bh.BatchHeader(data)
    assert (header.base_offset, header.batch_length, header.partition_leader_epoch) == (0, 72, -1)
    assert (header.magic, header.crc, header.attributes) == (2, _KNOWN_CRC, 0)
    assert (header.last_offset_delta, header.base_timestamp, header.max_timestamp) == (1, 1000, 1003)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.record_count == 2
    assert header.compression is CompressionType.NONE
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert not header.is_transactional and not header.is_control and not header.has_delete_horizon
    assert (header.last_offset, header.next_offset, header.size_in_bytes) == (1, 2, 84)
    assert header.compute_crc() == _KNOWN_CRC
    assert header.is_valid()
    assert bytes(header.view) == data
    assert bytes(header.records_view) == _RECORD_0 + _RECORD_1

    [batch] = rb.decode_batches(data)
    assert batch.records == (
        rb.Record(offset=0, timestamp_ms=1000, key=b"k", value=b"hello"),
        rb.Record(offset=1, timestamp_ms=1003, key=None, value=b"",
                  headers=(Header(key="h", value=None),)),
    )
    assert (batch.base_offset, batch.last_offset, batch.size_in_bytes, batch.crc) == (
        0, 1, 84, _KNOWN_CRC,
    )


def test_attribute_bits_follow_the_documented_layout() -> None:
    data = batch_of(1, compression=CompressionType.ZSTD, timestamp_type=TimestampType.LOG_APPEND_TIME,
                    is_transactional=True)
    assert bh.BatchHeader(data).attributes == 0x04 | 0x08 | 0x10
    control = rb.build_batch(
        [RecordInput(key=rb.encode_control_record_key(rb.ControlRecordType.LEADER_CHANGE),
                     value=b"\x00")],
        is_control=True,
    )
    header = bh.BatchHeader(control)
    assert header.attributes == 0x20 and header.is_control
    [batch] = rb.decode_batches(control)
    assert batch.is_control
    assert rb.decode_control_record_key(batch.records[0].key) is rb.ControlRecordType.LEADER_CHANGE


# ----------------------------------------------------------------------------- round trip

_bytes_or_none = st.none() | st.binary(max_size=24)
_headers = st.lists(
    st.builds(Header, key=st.text(max_size=8), value=_bytes_or_none), max_size=3
).map(tuple)
_records = st.lists(
    st.builds(
        RecordInput,
        key=_bytes_or_none,
        value=_bytes_or_none,
        headers=_headers,
        timestamp_ms=st.none() | st.integers(min_value=-1, max_value=1 << 45),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=80, deadline=None)
@given(
    records=_records,
    codec=st.sampled_from(REAL_CODECS),
    timestamp_type=st.sampled_from(TimestampType),
    base_offset=st.integers(min_value=0, max_value=1 << 50),
    epoch=st.integers(min_value=-1, max_value=(1 << 31) - 1),
    now_ms=st.integers(min_value=0, max_value=1 << 45),
    producer_id=st.integers(min_value=-1, max_value=1 << 40),
    producer_epoch=st.integers(min_value=-1, max_value=(1 << 15) - 1),
    base_sequence=st.integers(min_value=-1, max_value=1 << 20),
    is_transactional=st.booleans(),
)
def test_build_then_decode_round_trips(
    records: list[RecordInput],
    codec: CompressionType,
    timestamp_type: TimestampType,
    base_offset: int,
    epoch: int,
    now_ms: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool,
) -> None:
    data = rb.build_batch(
        records, base_offset=base_offset, partition_leader_epoch=epoch, compression=codec,
        timestamp_type=timestamp_type, now_ms=now_ms, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence,
        is_transactional=is_transactional,
    )
    header = bh.BatchHeader(data)
    header.validate()
    [batch] = rb.decode_batches(data)
    expected_ts = [
        now_ms if timestamp_type is TimestampType.LOG_APPEND_TIME or r.timestamp_ms is None
        else r.timestamp_ms
        for r in records
    ]
    assert batch.compression is codec
    assert batch.timestamp_type is timestamp_type
    assert batch.is_transactional is is_transactional
    assert (batch.base_offset, batch.partition_leader_epoch) == (base_offset, epoch)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        producer_id, producer_epoch, base_sequence,
    )
    assert batch.record_count == len(records) == batch.last_offset_delta + 1
    assert batch.base_timestamp == expected_ts[0]
    assert batch.max_timestamp == header.max_timestamp == max(expected_ts)
    assert batch.size_in_bytes == len(data)
    for index, (given_record, got) in enumerate(zip(records, batch.records, strict=True)):
        assert got.offset == base_offset + index
        assert got.timestamp_ms == expected_ts[index]
        assert got.key == given_record.key
        assert got.value == given_record.value
        assert got.headers == given_record.headers
    scan = bh.scan_valid_prefix(data)
    assert scan.error is None and scan.valid_bytes == len(data)


_long_bytes = st.none() | st.binary(max_size=24) | st.integers(16380, 16400).map(lambda n: b"k" * n)


@settings(max_examples=80, deadline=None)
@given(
    records=st.lists(
        st.builds(RecordInput, key=_long_bytes, value=_long_bytes, headers=_headers,
                  timestamp_ms=st.integers(min_value=0, max_value=1 << 45)),
        min_size=1, max_size=8),
    far_stamps=st.booleans(),
    codec=st.sampled_from(REAL_CODECS),
    base_offset=st.integers(min_value=0, max_value=1 << 50),
    producer_id=st.integers(min_value=-1, max_value=1 << 40),
    producer_epoch=st.integers(min_value=-1, max_value=(1 << 15) - 1),
    base_sequence=st.integers(min_value=-1, max_value=1 << 20),
)
def test_records_builder_builds_what_build_batch_builds(
    records: list[RecordInput], far_stamps: bool, codec: CompressionType, base_offset: int,
    producer_id: int, producer_epoch: int, base_sequence: int,
) -> None:
    """Appending record by record (the producer's path) gives build_batch's bytes: the fast
    path (small fields, small positive deltas) and the general one (headers, long fields,
    earlier or far timestamps) alike."""
    if not far_stamps:  # mostly the fast path: stamps within 16 s after the first
        records = [r._replace(timestamp_ms=records[0].timestamp_ms + i)
                   for i, r in enumerate(records)]
    builder = rb.RecordsBuilder()
    for r in records:
        assert r.timestamp_ms is not None
        before = builder.size
        assert builder.append(r.key, r.value, r.headers, r.timestamp_ms) == (
            builder.size - before)
    assert builder.count == len(records)
    assert builder.size == sum(len(part) for part in builder.parts)
    expected = rb.build_batch(records, base_offset=base_offset, compression=codec,
                              producer_id=producer_id, producer_epoch=producer_epoch,
                              base_sequence=base_sequence)
    assert builder.build(base_offset=base_offset, compression=codec, producer_id=producer_id,
                         producer_epoch=producer_epoch, base_sequence=base_sequence) == expected
    # Built again (a retry under a new producer id): the records stay, the header changes.
    again = rb.decode_batches(builder.build(producer_id=7, producer_epoch=0, base_sequence=0))
    assert [r.value for r in again[0].records] == [r.value for r in records]
    assert again[0].producer_id == 7


def test_records_builder_refuses_what_build_batch_refuses() -> None:
    builder = rb.RecordsBuilder()
    with pytest.raises(ValueError, match="at least one record"):
        builder.build()
    with pytest.raises(ValueError, match="key"):
        builder.append("text", b"v", (), 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="headers"):
        builder.append(None, b"v", ("h",), 0)  # type: ignore[arg-type]
    assert builder.count == 0 and builder.size == 0 and not builder.parts
    builder.append(None, b"v", (), 5)
    with pytest.raises(ValueError, match="producer_epoch"):
        builder.build(producer_epoch=1 << 15)


@pytest.mark.parametrize("codec", REAL_CODECS, ids=lambda c: c.name)
def test_large_batches_round_trip_in_every_codec(codec: CompressionType) -> None:
    records = [RecordInput(key=b"%06d" % i, value=b"x" * (i % 300), timestamp_ms=i)
               for i in range(2000)]
    data = rb.build_batch(records, compression=codec, base_offset=10)
    [batch] = rb.decode_batches(data)
    assert [r.offset for r in batch.records] == list(range(10, 2010))
    assert batch.records[-1].value == b"x" * (1999 % 300)


# ----------------------------------------------------------------------------- header patching


def test_patching_base_offset_and_epoch_keeps_the_crc_valid() -> None:
    buf = bytearray(batch_of(3, compression=CompressionType.LZ4))
    crc_before = bh.BatchHeader(buf).crc
    header = bh.BatchHeader(memoryview(buf))
    header.set_base_offset(1_000_000)
    header.set_partition_leader_epoch(42)
    assert header.crc == crc_before
    header.validate()
    [batch] = rb.decode_batches(buf)
    assert [r.offset for r in batch.records] == [1_000_000, 1_000_001, 1_000_002]
    assert batch.partition_leader_epoch == 42


def test_set_max_timestamp_switches_to_log_append_time_and_reseals_the_crc() -> None:
    buf = bytearray(batch_of(3, compression=CompressionType.GZIP, ts=500))
    records_before = bytes(bh.BatchHeader(buf).records_view)
    header = bh.BatchHeader(buf)
    header.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 9_999)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 9_999
    assert header.compression is CompressionType.GZIP
    assert bytes(header.records_view) == records_before  # never recompressed
    assert header.crc == reference_crc32c(bytes(buf[21:]))
    header.validate()
    [batch] = rb.decode_batches(buf)
    assert [r.timestamp_ms for r in batch.records] == [9_999] * 3

    # Back to CreateTime: the records' own timestamps reappear.
    header.set_max_timestamp(TimestampType.CREATE_TIME, 502)
    header.validate()
    assert [r.timestamp_ms for r in rb.decode_batches(buf)[0].records] == [500, 501, 502]


def test_set_max_timestamp_is_a_no_op_when_nothing_changes() -> None:
    data = batch_of(2, ts=7)
    buf = bytearray(data)
    bh.BatchHeader(buf).set_max_timestamp(TimestampType.CREATE_TIME, 8)
    assert bytes(buf) == data


def test_patching_a_read_only_buffer_is_refused() -> None:
    header = bh.BatchHeader(batch_of(1))
    with pytest.raises(TypeError, match="read-only"):
        header.set_base_offset(5)
    with pytest.raises(TypeError, match="read-only"):
        header.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 5)


def test_patch_values_out_of_range_are_refused() -> None:
    header = bh.BatchHeader(bytearray(batch_of(1)))
    with pytest.raises(ValueError, match="partition_leader_epoch"):
        header.set_partition_leader_epoch(1 << 31)
    with pytest.raises(ValueError, match="base_offset"):
        header.set_base_offset(1 << 63)


def test_header_view_at_a_position_inside_a_larger_buffer() -> None:
    first, second = batch_of(2), batch_of(3, base_offset=2)
    buf = bytearray(first + second)
    header = bh.BatchHeader(buf, len(first))
    assert (header.position, header.base_offset, header.record_count) == (len(first), 2, 3)
    header.validate()
    header.set_partition_leader_epoch(9)
    assert bh.BatchHeader(buf, 0).partition_leader_epoch == -1
    assert "base_offset=2" in repr(header)


def test_header_view_of_too_few_bytes_names_the_position() -> None:
    with pytest.raises(CorruptRecordError, match="truncated batch header at byte 3") as info:
        bh.BatchHeader(b"\x00" * 40, 3)
    assert info.value.position == 3


# ----------------------------------------------------------------------------- corruption


def test_flipping_any_byte_in_the_crc_range_is_detected() -> None:
    data = batch_of(3, compression=CompressionType.NONE)
    for index in range(bh.ATTRIBUTES_OFFSET, len(data)):
        buf = bytearray(data)
        buf[index] ^= 0x01
        header = bh.BatchHeader(buf)
        assert not header.is_valid(), f"flip at byte {index} went unnoticed"
        with pytest.raises(CorruptRecordError, match=r"fails its CRC|compression codec"):
            header.validate()
        with pytest.raises(CorruptRecordError):
            rb.decode_batches(buf)
        assert bh.scan_valid_prefix(buf).valid_bytes == 0


def test_flipping_the_crc_itself_is_detected() -> None:
    for index in range(bh.CRC_OFFSET, bh.ATTRIBUTES_OFFSET):
        buf = bytearray(batch_of(1))
        buf[index] ^= 0x80
        with pytest.raises(CorruptRecordError, match=r"stored 0x[0-9a-f]{8}, computed"):
            bh.BatchHeader(buf).validate()


def test_bad_magic_is_reported_everywhere() -> None:
    buf = bytearray(batch_of(1) * 2)
    second = len(buf) // 2
    buf[second + bh.MAGIC_OFFSET] = 1
    with pytest.raises(CorruptRecordError, match=f"batch at byte {second} has unsupported magic 1"):
        list(bh.iter_batches(buf))
    with pytest.raises(CorruptRecordError, match="unsupported magic 1"):
        bh.BatchHeader(buf, second).validate()
    scan = bh.scan_valid_prefix(buf)
    assert scan.valid_bytes == second and scan.batch_count == 1
    assert scan.error is not None and "magic" in scan.error


def test_unknown_codec_with_a_valid_crc_is_an_unsupported_compression_type() -> None:
    buf = bytearray(batch_of(1))
    struct.pack_into(">h", buf, bh.ATTRIBUTES_OFFSET, 6)
    recompute_crc(buf)
    with pytest.raises(UnsupportedCompressionTypeError, match="unknown compression codec id 6"):
        bh.BatchHeader(buf).validate()
    with pytest.raises(UnsupportedCompressionTypeError, match="unknown compression codec id 6"):
        rb.decode_batches(buf)
    with pytest.raises(UnsupportedCompressionTypeError, match="at byte 0 has unknown compression codec id 6"):
        bh.stamp_batches(buf, first_offset=0, leader_epoch=0)
    # Still a CorruptRecordError for the recovery scan and older callers.
    assert issubclass(UnsupportedCompressionTypeError, CorruptRecordError)


def test_record_count_mismatch_is_corrupt() -> None:
    for count, message in ((3, "section ends after 2"), (1, "record count mismatch")):
        buf = bytearray(batch_of(2))
        struct.pack_into(">i", buf, bh.RECORDS_COUNT_OFFSET, count)
        recompute_crc(buf)
        with pytest.raises(CorruptRecordError, match=message):
            rb.decode_batches(buf)


def test_record_field_errors_name_the_absolute_byte() -> None:
    data = batch_of(1, base_offset=0)  # record: key "k0", empty value
    buf = bytearray(data + data)
    second = len(data)
    key_length_at = second + bh.RECORDS_OFFSET + 4  # length, attributes, ts delta, offset delta
    assert buf[key_length_at] == 4  # zigzag(2)
    buf[key_length_at] = 0x05  # zigzag -3: an impossible length
    recompute_crc(buf, second)
    with pytest.raises(CorruptRecordError, match="invalid key length -3") as info:
        rb.decode_batches(buf)
    assert info.value.position == key_length_at + 1
    assert f"batch at byte {second}" in str(info.value)


def test_compressed_record_errors_name_the_batch() -> None:
    records = [RecordInput(key=b"k", value=b"v")]
    plain = rb.build_batch(records)
    section = bytearray(plain[bh.RECORDS_OFFSET:])
    section[0] = 0x7E  # record length 63: runs past the section
    packed = compression.compress(CompressionType.ZSTD, bytes(section))
    buf = bytearray(plain[: bh.RECORDS_OFFSET] + packed)
    struct.pack_into(">i", buf, bh.LENGTH_OFFSET, len(buf) - bh.LOG_OVERHEAD)
    struct.pack_into(">h", buf, bh.ATTRIBUTES_OFFSET, int(CompressionType.ZSTD))
    recompute_crc(buf)
    with pytest.raises(CorruptRecordError, match="decompressed ZSTD records section") as info:
        rb.decode_batches(buf)
    assert info.value.position == 0


def test_corrupt_compressed_section_is_reported_with_the_batch() -> None:
    buf = bytearray(batch_of(5, compression=CompressionType.GZIP))
    buf[-3] ^= 0xFF  # inside the gzip trailer
    recompute_crc(buf)
    with pytest.raises(CorruptRecordError, match=r"batch at byte 0 \(base offset 0\): GZIP"):
        rb.decode_batches(buf)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_decoder_never_leaks_anything_but_corrupt_record_error(data: st.DataObject) -> None:
    """Mutate the records section, re-seal the CRC, and decode: only CorruptRecordError may escape."""
    codec = data.draw(st.sampled_from(REAL_CODECS))
    batch = bytearray(batch_of(data.draw(st.integers(1, 4)), compression=codec))
    edits = data.draw(st.lists(
        st.tuples(st.integers(bh.RECORDS_OFFSET, len(batch) - 1), st.integers(0, 255)),
        min_size=1, max_size=4,
    ))
    for index, value in edits:
        batch[index] = value
    cut = data.draw(st.integers(bh.HEADER_SIZE, len(batch)))
    batch = batch[:cut]
    struct.pack_into(">i", batch, bh.LENGTH_OFFSET, len(batch) - bh.LOG_OVERHEAD)
    recompute_crc(batch)
    with contextlib.suppress(CorruptRecordError):
        rb.decode_batches(batch)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_crashes_the_readers(garbage: bytes) -> None:
    scan = bh.scan_valid_prefix(garbage)
    assert 0 <= scan.valid_bytes <= len(garbage)
    with contextlib.suppress(CorruptRecordError):
        rb.decode_batches(garbage)
    try:
        for header in bh.iter_batches(garbage):
            header.is_valid()
    except CorruptRecordError:
        pass


# ----------------------------------------------------------------------------- iteration & scan


def _three_batches() -> tuple[bytes, list[int]]:
    batches = [batch_of(2, base_offset=0), batch_of(1, base_offset=2, ts=5000),
               batch_of(4, base_offset=3, compression=CompressionType.LZ4)]
    return b"".join(batches), [len(b) for b in batches]


def test_iter_batches_walks_whole_batches_and_stops_cleanly_at_any_truncation() -> None:
    data, sizes = _three_batches()
    boundaries = [0, sizes[0], sizes[0] + sizes[1], sum(sizes)]
    for cut in range(len(data) + 1):
        headers = list(bh.iter_batches(data[:cut]))
        whole = max(i for i, b in enumerate(boundaries) if b <= cut)
        assert [h.position for h in headers] == boundaries[:whole]
        for header in headers:
            header.validate()

        scan = bh.scan_valid_prefix(data[:cut])
        assert scan.valid_bytes == boundaries[whole]
        assert scan.batch_count == whole
        assert (scan.error is None) == (cut in boundaries)
        if 0 < cut < len(data) and cut not in boundaries:
            assert scan.error is not None and f"at byte {boundaries[whole]}" in scan.error


def test_iter_batches_from_a_position_and_zero_copy_views() -> None:
    data, sizes = _three_batches()
    headers = list(bh.iter_batches(memoryview(data), sizes[0]))
    assert [h.base_offset for h in headers] == [2, 3]
    assert headers[0].view.obj is data  # a slice of the caller's buffer, not a copy


def test_iter_batches_rejects_an_impossible_length() -> None:
    data, sizes = _three_batches()
    buf = bytearray(data)
    struct.pack_into(">i", buf, sizes[0] + bh.LENGTH_OFFSET, 48)
    walked = bh.iter_batches(buf)
    assert next(walked).position == 0
    with pytest.raises(CorruptRecordError, match=f"batch at byte {sizes[0]} has invalid batch length 48"):
        next(walked)


def test_scan_valid_prefix_summarises_a_clean_log() -> None:
    data, _sizes = _three_batches()
    scan = bh.scan_valid_prefix(data)
    assert scan == bh.ScanResult(valid_bytes=len(data), batch_count=3, first_offset=0,
                                 last_offset=6, max_timestamp=5000, record_count=7, error=None)
    empty = bh.scan_valid_prefix(b"")
    assert empty == bh.ScanResult(valid_bytes=0, batch_count=0, first_offset=None,
                                  last_offset=None, max_timestamp=-1, record_count=0, error=None)


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        (b"\x00" * 4096, "invalid batch length 0"),
        (b"\x00" * 7, "only 7 bytes remain"),
        (b"\xff" * 100, "invalid batch length -1"),
        (b"\x00" * 8 + b"\x00\x10\x00\x00" + b"\x01" * 80, "bytes declared"),
    ],
    ids=["zero-filled", "torn-header", "ff-garbage", "huge-length"],
)
def test_scan_valid_prefix_stops_at_garbage_tails(tail: bytes, reason: str) -> None:
    data, _sizes = _three_batches()
    scan = bh.scan_valid_prefix(data + tail)
    assert scan.valid_bytes == len(data) and scan.batch_count == 3 and scan.last_offset == 6
    assert scan.error is not None and reason in scan.error


def test_scan_valid_prefix_stops_at_a_bad_crc_unless_told_not_to_check() -> None:
    data, sizes = _three_batches()
    buf = bytearray(data)
    buf[sizes[0] + bh.RECORDS_OFFSET + 2] ^= 0x40
    scan = bh.scan_valid_prefix(buf)
    assert scan.valid_bytes == sizes[0] and scan.batch_count == 1 and scan.last_offset == 1
    assert scan.error is not None and "fails its CRC" in scan.error
    unchecked = bh.scan_valid_prefix(buf, check_crc=False)
    assert unchecked.valid_bytes == len(buf) and unchecked.error is None


def test_scan_valid_prefix_requires_increasing_offsets() -> None:
    data = batch_of(2, base_offset=10) + batch_of(1, base_offset=11)
    scan = bh.scan_valid_prefix(data)
    assert scan.batch_count == 1 and scan.last_offset == 11
    assert scan.error is not None and "not above the previous batch's last offset 11" in scan.error
    gap = batch_of(2, base_offset=10) + batch_of(1, base_offset=50)  # gaps are fine (compaction)
    assert bh.scan_valid_prefix(gap).error is None


def test_scan_valid_prefix_counts_from_its_start_position() -> None:
    data, sizes = _three_batches()
    scan = bh.scan_valid_prefix(data, sizes[0])
    assert scan.valid_bytes == sizes[1] + sizes[2]
    assert (scan.first_offset, scan.last_offset, scan.batch_count) == (2, 6, 2)


def test_decode_batches_tail_handling() -> None:
    data, sizes = _three_batches()
    cut = data[: sizes[0] + 20]
    with pytest.raises(CorruptRecordError, match=f"incomplete batch at byte {sizes[0]}") as info:
        rb.decode_batches(cut)
    assert info.value.position == sizes[0]
    assert len(rb.decode_batches(cut, allow_truncated_tail=True)) == 1
    assert [b.base_offset for b in rb.decode_batches(data)] == [0, 2, 3]


# ----------------------------------------------------------------------------- stamping


def test_stamp_batches_assigns_consecutive_offsets_and_the_epoch() -> None:
    batches = [batch_of(3, ts=100), batch_of(1, ts=900), batch_of(2, ts=50,
               compression=CompressionType.ZSTD)]
    buf = bytearray(b"".join(batches))
    result = bh.stamp_batches(buf, first_offset=500, leader_epoch=7)
    s0, s1, s2 = (len(b) for b in batches)
    assert result == bh.StampResult(first_offset=500, last_offset=505, batch_count=3,
                                    record_count=6, max_timestamp=900,
                                    offset_of_max_timestamp=503,
                                    batches=((500, 502, 0, s0, 102, 7),
                                             (503, 503, s0, s1, 900, 7),
                                             (504, 505, s0 + s1, s2, 51, 7)))
    headers = list(bh.iter_batches(buf))
    assert [(h.base_offset, h.last_offset) for h in headers] == [(500, 502), (503, 503), (504, 505)]
    assert {h.partition_leader_epoch for h in headers} == {7}
    for header in headers:
        header.validate()
    offsets = [r.offset for b in rb.decode_batches(buf) for r in b.records]
    assert offsets == list(range(500, 506))


def test_stamp_batches_accepts_a_writable_memoryview_slice() -> None:
    backing = bytearray(b"junk" + batch_of(2) + b"junk")
    view = memoryview(backing)[4:-4]
    result = bh.stamp_batches(view, first_offset=0, leader_epoch=3)
    assert result.last_offset == 1
    assert bh.BatchHeader(backing, 4).partition_leader_epoch == 3


def test_stamp_batches_without_timestamps_reports_minus_one() -> None:
    buf = bytearray(rb.build_batch([RecordInput(value=b"a", timestamp_ms=-1)]))
    result = bh.stamp_batches(buf, first_offset=0, leader_epoch=0)
    assert (result.max_timestamp, result.offset_of_max_timestamp) == (-1, -1)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b.clear(), "empty"),
        (lambda b: b.extend(b"\x00" * 10), "partial batch at byte"),
        (lambda b: b.extend(b"\x00" * 70), "invalid batch length 0"),
        (lambda b: b.__delitem__(slice(-1, None)), "partial batch at byte"),
        (lambda b: b.__setitem__(-1, b[-1] ^ 1), "fails its CRC"),
        (lambda b: b.__setitem__(bh.MAGIC_OFFSET, 0), "unsupported magic 0"),
        (lambda b: b.extend(batch_of(1)[:30]), "partial batch at byte"),
    ],
    ids=["empty", "short-tail", "zero-tail", "cut", "bad-crc", "bad-magic", "partial-header"],
)
def test_stamp_batches_rejects_bad_input_and_changes_nothing(mutate, message) -> None:  # type: ignore[no-untyped-def]
    buf = bytearray(batch_of(2) + batch_of(3))
    mutate(buf)
    before = bytes(buf)
    with pytest.raises(CorruptRecordError, match=message):
        bh.stamp_batches(buf, first_offset=100, leader_epoch=1)
    assert bytes(buf) == before


def test_stamp_range_stops_at_the_first_batch_boundary_past_stop_and_continues_from_there() -> None:
    batches = [batch_of(2), batch_of(1), batch_of(3), batch_of(1)]
    buf = bytearray(b"".join(batches))
    sizes = [len(b) for b in batches]
    head = bh.stamp_range(buf, 0, sizes[0] + 1, next_offset=10, leader_epoch=2)
    assert (head.end, head.first_offset, head.next_offset, head.batch_count) == (sizes[0] + sizes[1], 10, 13, 2)
    tail = bh.stamp_range(buf, head.end, len(buf), next_offset=head.next_offset, leader_epoch=2)
    assert (tail.end, tail.next_offset, tail.record_count) == (len(buf), 17, 4)
    assert [(h.base_offset, h.partition_leader_epoch) for h in bh.iter_batches(buf)] == [
        (10, 2), (12, 2), (13, 2), (16, 2)]
    bh.unstamp(buf, tail)
    bh.unstamp(buf, head)
    assert bytes(buf) == b"".join(batches)


def test_stamp_range_plans_kafka_index_entries_from_the_cursor() -> None:
    batches = [batch_of(2, ts=100), batch_of(1, ts=50), batch_of(3, ts=300), batch_of(1, ts=200)]
    buf = bytearray(b"".join(batches))
    sizes = [len(b) for b in batches]
    cursor = bh.IndexCursor(base_offset=5, position=1000, interval_bytes=sizes[0], bytes_since_entry=sizes[0] + 1,
                            max_timestamp=60, offset_of_max_timestamp=7, last_indexed_timestamp=60)
    stamped = bh.stamp_range(buf, 0, len(buf), next_offset=20, leader_epoch=0, cursor=cursor)
    # Batch 0 (offsets 20-21) is indexed at once: more than interval bytes since the last entry.
    # Then each batch once more than interval bytes (batch 0's size) were appended since the
    # last entry: not batch 1 (exactly interval bytes since), batch 2 (23-25), batch 3 (26).
    assert stamped.index_offsets == [21 - 5, 25 - 5, 26 - 5]
    assert stamped.index_positions == [1000, 1000 + sizes[0] + sizes[1], 1000 + sizes[0] + sizes[1] + sizes[2]]
    # The time index gets (max timestamp so far, its offset) when it grew past the last entry.
    assert (stamped.time_index_timestamps, stamped.time_index_offsets) == ([101, 302], [21, 25])
    assert (stamped.max_timestamp, stamped.offset_of_max_timestamp) == (302, 25)
    assert stamped.cursor == cursor._replace(bytes_since_entry=sizes[3], max_timestamp=302,
                                             offset_of_max_timestamp=25, last_indexed_timestamp=302)
    assert stamped.start_cursor == cursor


def test_stamp_batches_past_int64_offsets_is_refused_and_changes_nothing() -> None:
    buf = bytearray(batch_of(2) + batch_of(3))
    before = bytes(buf)
    with pytest.raises(ValueError, match="leaves no room"):
        bh.stamp_batches(buf, first_offset=varint.INT64_MAX - 3, leader_epoch=0)
    assert bytes(buf) == before


def test_stamp_batches_rejects_inconsistent_counts() -> None:
    for count, delta in ((0, -1), (3, 1)):
        buf = bytearray(batch_of(2))
        struct.pack_into(">i", buf, bh.RECORDS_COUNT_OFFSET, count)
        struct.pack_into(">i", buf, bh.LAST_OFFSET_DELTA_OFFSET, delta)
        recompute_crc(buf)
        with pytest.raises(CorruptRecordError, match=f"record count {count}"):
            bh.stamp_batches(buf, first_offset=0, leader_epoch=0)


def test_stamp_batches_argument_errors() -> None:
    with pytest.raises(TypeError, match="writable"):
        bh.stamp_batches(memoryview(batch_of(1)), first_offset=0, leader_epoch=0)
    with pytest.raises(ValueError, match="first_offset"):
        bh.stamp_batches(bytearray(batch_of(1)), first_offset=-1, leader_epoch=0)
    with pytest.raises(ValueError, match="leader_epoch"):
        bh.stamp_batches(bytearray(batch_of(1)), first_offset=0, leader_epoch=1 << 31)
    with pytest.raises(ValueError, match="no room"):
        bh.stamp_batches(bytearray(batch_of(2)), first_offset=(1 << 63) - 1, leader_epoch=0)


# ----------------------------------------------------------------------------- encoder input


def test_build_batch_rejects_bad_arguments_by_name() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        rb.build_batch([])
    with pytest.raises(ValueError, match="producer_epoch"):
        rb.build_batch([RecordInput()], producer_epoch=1 << 15)
    with pytest.raises(ValueError, match="base_sequence"):
        rb.build_batch([RecordInput()], base_sequence=1 << 31)
    with pytest.raises(ValueError, match=r"records\[1\].timestamp_ms"):
        rb.build_batch([RecordInput(), RecordInput(timestamp_ms=1 << 63)])
    with pytest.raises(ValueError, match=r"records\[0\].key must be bytes"):
        rb.build_batch([RecordInput(key="text")])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="control record key"):
        rb.build_batch([RecordInput(key=b"ab")], is_control=True)
    with pytest.raises(KraftlogError, match="snappy"):
        rb.build_batch([RecordInput()], compression=CompressionType.SNAPPY)


def test_snappy_batches_from_elsewhere_are_reported_not_decoded() -> None:
    buf = bytearray(batch_of(1))
    struct.pack_into(">h", buf, bh.ATTRIBUTES_OFFSET, int(CompressionType.SNAPPY))
    recompute_crc(buf)
    bh.BatchHeader(buf).validate()  # a broker may still store and serve it
    with pytest.raises(UnsupportedCompressionTypeError, match="SNAPPY-compressed, which kraftlog cannot"):
        rb.decode_batches(buf)


def test_control_record_keys() -> None:
    key = rb.encode_control_record_key(rb.ControlRecordType.SNAPSHOT_HEADER)
    assert key == b"\x00\x00\x00\x03"
    assert rb.decode_control_record_key(key) is rb.ControlRecordType.SNAPSHOT_HEADER
    assert rb.decode_control_record_key(b"\x00\x00\x00\x63") is rb.ControlRecordType.UNKNOWN
    with pytest.raises(CorruptRecordError, match="at least 4 bytes"):
        rb.decode_control_record_key(b"\x00")
    with pytest.raises(CorruptRecordError, match="negative version"):
        rb.decode_control_record_key(b"\xff\xff\x00\x01")
    with pytest.raises(ValueError, match="UNKNOWN"):
        rb.encode_control_record_key(rb.ControlRecordType.UNKNOWN)


def test_positions_must_be_non_negative_and_past_the_end_is_empty() -> None:
    data = batch_of(1)
    with pytest.raises(ValueError, match="position"):
        list(bh.iter_batches(data, -1))
    with pytest.raises(ValueError, match="position"):
        bh.scan_valid_prefix(data, -5)
    assert list(bh.iter_batches(data, len(data) + 10)) == []
    assert bh.scan_valid_prefix(data, len(data) + 10).valid_bytes == 0
    with pytest.raises(CorruptRecordError, match="truncated batch at byte 0"):
        _ = bh.BatchHeader(data[:-1]).view
