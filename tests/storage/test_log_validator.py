"""The leader's LogValidator against hand-damaged batches, and as a property over the encoder's.

Each damaged batch carries a valid CRC (recomputed after the damage), as a buggy or hostile
producer would send it: only record-level parsing can find the problem.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftlog.error_codes import ErrorCode
from kraftlog.errors import CorruptRecordError
from kraftlog.storage import batch_header as bh
from kraftlog.storage import compression as codecs
from kraftlog.storage import log_validator as lv
from kraftlog.storage import record_batch as rb
from kraftlog.storage import varint

NOW = 1_700_000_000_000
CREATE = lv.ValidationConfig()


def record(index: int, *, key: bytes | None = b"k", value: bytes | None = b"v",
           ts_delta: int = 0, offset_delta: int | None = None,
           headers: list[tuple[bytes | None, bytes | None]] | None = None,
           header_count: int | None = None, length_adjust: int = 0) -> bytes:
    """One v2 record, with knobs to damage it."""
    enc = varint.encode_varint
    body = bytearray(b"\x00")
    body += varint.encode_varlong(ts_delta)
    body += enc(index if offset_delta is None else offset_delta)
    for field in (key, value):
        body += enc(-1) if field is None else enc(len(field)) + field
    items = headers or []
    body += enc(len(items) if header_count is None else header_count)
    for h_key, h_value in items:
        body += enc(-1) if h_key is None else enc(len(h_key)) + h_key
        body += enc(-1) if h_value is None else enc(len(h_value)) + h_value
    return enc(len(body) + length_adjust) + bytes(body)


def seal(section: bytes, *, count: int, last_offset_delta: int | None = None,
         codec: rb.CompressionType = rb.CompressionType.NONE, attributes: int = 0,
         base_timestamp: int = NOW, max_timestamp: int = NOW, producer_id: int = -1,
         producer_epoch: int = -1, base_sequence: int = -1, magic: int = bh.MAGIC) -> bytes:
    """A batch around ``section`` (already compressed when ``codec`` says so), CRC computed."""
    header = bytearray(bh.HEADER_SIZE)
    bh.HEADER.pack_into(header, 0, 0, bh.MIN_BATCH_LENGTH + len(section), -1, magic, 0,
                      int(codec) | attributes, count - 1 if last_offset_delta is None else last_offset_delta,
                      base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count)
    batch = bytes(header) + section
    crc = crc32c.crc32c(batch[bh.ATTRIBUTES_OFFSET:])
    return batch[:bh.CRC_OFFSET] + struct.pack(">I", crc) + batch[bh.CRC_OFFSET + 4:]


def reseal(batch: bytes | bytearray) -> bytes:
    """``batch`` with its CRC recomputed (after a test damaged it)."""
    crc = crc32c.crc32c(bytes(batch[bh.ATTRIBUTES_OFFSET:]))
    return bytes(batch[:bh.CRC_OFFSET]) + struct.pack(">I", crc) + bytes(batch[bh.CRC_OFFSET + 4:])


def good(count: int = 3, **kwargs: object) -> bytes:
    return seal(b"".join(record(i) for i in range(count)), count=count, **kwargs)  # type: ignore[arg-type]


def check(buf: bytes, config: lv.ValidationConfig = CREATE) -> lv.Rejection | None:
    return lv.validate_batches(buf, config, now_ms=NOW)


def refused(buf: bytes, error: ErrorCode, config: lv.ValidationConfig = CREATE) -> lv.Rejection:
    rejection = check(buf, config)
    assert rejection is not None, "the batch was accepted"
    assert rejection.error is error, rejection
    # What the validator refuses, a consumer could not have read either (or it is a policy).
    return rejection


# ------------------------------------------------------------------ what passes


@pytest.mark.parametrize("codec", [c for c in rb.CompressionType if c is not rb.CompressionType.SNAPPY])
def test_the_encoders_batches_pass_with_every_codec(codec: rb.CompressionType) -> None:
    records = [rb.RecordInput(key=None if i % 3 == 0 else b"k%d" % i, value=None if i == 4 else b"v" * i,
                              headers=(rb.Header(key="h", value=b"x"), rb.Header(key="n", value=None))
                              if i % 2 else (), timestamp_ms=NOW - 5 + i) for i in range(200)]
    batch = rb.build_batch(records, compression=codec)
    assert check(batch + batch) is None


def test_hand_built_records_pass_so_the_damage_below_is_what_fails() -> None:
    assert check(good()) is None
    assert check(good(1)) is None


# ------------------------------------------------------------------ frame and header


def test_a_bad_crc_magic_or_partial_batch_is_corrupt_message() -> None:
    batch = bytearray(good())
    batch[-1] ^= 0xFF
    assert "CRC" in refused(bytes(batch), ErrorCode.CORRUPT_MESSAGE).message
    refused(good(magic=1), ErrorCode.CORRUPT_MESSAGE)
    refused(good()[:-3], ErrorCode.CORRUPT_MESSAGE)
    refused(good() + good()[:20], ErrorCode.CORRUPT_MESSAGE)
    refused(b"", ErrorCode.CORRUPT_MESSAGE)


def test_garbage_records_behind_a_valid_crc_are_invalid_record() -> None:
    # CRC-valid bytes that are no records at all.
    rejection = refused(seal(bytes(range(7, 207)), count=5), ErrorCode.INVALID_RECORD)
    assert rejection.record_errors and rejection.message.startswith("batch 0 (at byte 0)")


def test_lz4_flag_over_bytes_that_are_not_lz4_is_corrupt_message() -> None:
    # Valid records under an lz4 flag: the section is not lz4.
    section = b"".join(record(i) for i in range(3))
    rejection = refused(seal(section, count=3, codec=rb.CompressionType.LZ4), ErrorCode.CORRUPT_MESSAGE)
    assert "LZ4" in rejection.message


@pytest.mark.parametrize("codec", [rb.CompressionType.GZIP, rb.CompressionType.ZSTD])
def test_other_codecs_over_bytes_they_did_not_write_are_corrupt_message(codec: rb.CompressionType) -> None:
    refused(seal(b"".join(record(i) for i in range(3)), count=3, codec=codec), ErrorCode.CORRUPT_MESSAGE)


@pytest.mark.parametrize("codec", [rb.CompressionType.GZIP, rb.CompressionType.LZ4, rb.CompressionType.ZSTD])
def test_a_compressed_batch_is_parsed_record_by_record(codec: rb.CompressionType) -> None:
    section = record(0) + record(1, offset_delta=7) + record(2)
    rejection = refused(seal(codecs.compress(codec, section), count=3, codec=codec), ErrorCode.INVALID_RECORD)
    assert rejection.record_errors[0].batch_index == 1


def test_snappy_and_unknown_codecs_are_refused() -> None:
    refused(good(codec=rb.CompressionType.SNAPPY), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
    refused(good(attributes=6), ErrorCode.CORRUPT_MESSAGE)


@pytest.mark.parametrize("kwargs", [
    {"count": 3, "last_offset_delta": 1},
    {"count": 3, "last_offset_delta": 5},
])
def test_count_and_last_offset_delta_must_agree(kwargs: dict[str, int]) -> None:
    section = b"".join(record(i) for i in range(3))
    refused(seal(section, **kwargs), ErrorCode.INVALID_RECORD)  # type: ignore[arg-type]


def test_zero_records_is_invalid_record() -> None:
    refused(seal(b"", count=0, last_offset_delta=-1), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"attributes": bh.CONTROL_FLAG_MASK}, "control"),
    ({"attributes": bh.TRANSACTIONAL_FLAG_MASK, "producer_id": 5, "producer_epoch": 0, "base_sequence": 0},
     "transactional"),
    ({"producer_id": 5, "producer_epoch": -1, "base_sequence": 0}, "epoch"),
    ({"producer_id": 5, "producer_epoch": 0, "base_sequence": -1}, "sequence"),
    ({"producer_id": -7}, "producer id"),
])
def test_header_fields_a_client_may_not_send(kwargs: dict[str, int], words: str) -> None:
    assert words in refused(good(**kwargs), ErrorCode.INVALID_RECORD).message  # type: ignore[arg-type]


def test_an_idempotent_batch_passes() -> None:
    assert check(good(producer_id=5, producer_epoch=0, base_sequence=0)) is None


# ------------------------------------------------------------------ records


def test_a_declared_count_above_the_records_is_invalid_record() -> None:
    section = b"".join(record(i) for i in range(2))
    rejection = refused(seal(section, count=3), ErrorCode.INVALID_RECORD)
    assert "ends after 2 of 3" in rejection.message


def test_records_beyond_the_declared_count_are_invalid_record() -> None:
    section = b"".join(record(i) for i in range(3))
    assert "follow the 2 records" in refused(seal(section, count=2), ErrorCode.INVALID_RECORD).message


def test_offset_deltas_must_run_from_zero() -> None:
    section = record(0) + record(1, offset_delta=2) + record(2, offset_delta=1)
    rejection = refused(seal(section, count=3), ErrorCode.INVALID_RECORD)
    assert rejection.record_errors == (lv.RecordError(batch_index=1, message="record 1 has offset delta 2, "
                                                                             "expected 1"),)
    refused(seal(record(0, offset_delta=-1), count=1), ErrorCode.INVALID_RECORD)
    refused(seal(record(0, offset_delta=300), count=1), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("adjust", [-1, 1, 100])
def test_a_record_length_that_does_not_match_its_fields(adjust: int) -> None:
    section = record(0) + record(1, length_adjust=adjust) + record(2)
    refused(seal(section, count=3), ErrorCode.INVALID_RECORD)


def test_zero_or_negative_record_lengths() -> None:
    refused(seal(varint.encode_varint(0) + record(1), count=2), ErrorCode.INVALID_RECORD)
    refused(seal(varint.encode_varint(-3) + b"\x00" * 5, count=1), ErrorCode.INVALID_RECORD)


def test_truncated_and_overlong_varints() -> None:
    # The section ends inside the first record's length varint.
    refused(seal(b"\xff\xff", count=1), ErrorCode.INVALID_RECORD)
    # A 6-byte varint (an int32 takes at most 5) as the offset delta.
    body = b"\x00\x00" + b"\xff" * 5 + b"\x01" + b"\x01\x01\x00"
    refused(seal(varint.encode_varint(len(body)) + body, count=1), ErrorCode.INVALID_RECORD)
    # A key length whose varint runs into the end of the data.
    body = b"\x00\x00\x00" + b"\x80\x80"
    refused(seal(varint.encode_varint(len(body)) + body, count=1), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize(("field", "size"), [("key", -2), ("value", -5), ("key", 50), ("value", 50)])
def test_key_and_value_lengths(field: str, size: int) -> None:
    enc = varint.encode_varint
    key = enc(size) if field == "key" else enc(1) + b"k"
    value = enc(size) if field == "value" else enc(1) + b"v"
    body = b"\x00\x00\x00" + key + value + b"\x00"
    refused(seal(enc(len(body)) + body, count=1), ErrorCode.INVALID_RECORD)


def test_header_counts_and_header_keys() -> None:
    refused(seal(record(0, header_count=-1), count=1), ErrorCode.INVALID_RECORD)
    refused(seal(record(0, header_count=3, headers=[(b"a", b"b")]), count=1), ErrorCode.INVALID_RECORD)
    refused(seal(record(0, header_count=1_000_000_000), count=1), ErrorCode.INVALID_RECORD)
    refused(seal(record(0, headers=[(None, b"x")]), count=1), ErrorCode.INVALID_RECORD)
    refused(seal(record(0, headers=[(b"\xff\xfe", b"x")]), count=1), ErrorCode.INVALID_RECORD)
    assert check(seal(record(0, headers=[(b"h", None), (b"", b"")]), count=1)) is None


def test_the_bad_batch_is_named_when_the_first_one_is_good() -> None:
    first = good()
    rejection = refused(first + seal(record(0, offset_delta=4), count=1), ErrorCode.INVALID_RECORD)
    assert rejection.message.startswith(f"batch 1 (at byte {len(first)})")


# ------------------------------------------------------------------ policy: keys, timestamps, sizes


def test_a_compacted_topic_refuses_keyless_records_each_named() -> None:
    section = record(0) + record(1, key=None) + record(2) + record(3, key=None)
    batch = seal(section, count=4)
    assert check(batch) is None
    rejection = refused(batch, ErrorCode.INVALID_RECORD, lv.ValidationConfig(compacted=True))
    assert [e.batch_index for e in rejection.record_errors] == [1, 3]


def test_create_time_bounds_name_each_record_out_of_range() -> None:
    config = lv.ValidationConfig(timestamp_before_max_ms=1000, timestamp_after_max_ms=100)
    base = NOW - 2000
    deltas = [0, 1500, 2000, 2101, 2050]
    section = b"".join(record(i, ts_delta=d) for i, d in enumerate(deltas))
    batch = seal(section, count=5, base_timestamp=base, max_timestamp=base + 2101)
    rejection = refused(batch, ErrorCode.INVALID_TIMESTAMP, config)
    assert [e.batch_index for e in rejection.record_errors] == [0, 3]
    assert check(batch) is None  # no bounds by default


def test_no_timestamp_is_not_out_of_range() -> None:
    config = lv.ValidationConfig(timestamp_before_max_ms=1000)
    assert check(seal(record(0), count=1, base_timestamp=-1, max_timestamp=-1), config) is None


def test_a_producer_may_not_claim_log_append_time_on_a_create_time_topic() -> None:
    batch = good(attributes=bh.TIMESTAMP_TYPE_MASK)
    rejection = refused(batch, ErrorCode.INVALID_TIMESTAMP)
    assert len(rejection.record_errors) == 3
    log_append = lv.ValidationConfig(timestamp_type=bh.TimestampType.LOG_APPEND_TIME,
                                     timestamp_before_max_ms=0, timestamp_after_max_ms=0)
    # On a LogAppendTime topic the leader overwrites the timestamps: none is checked.
    assert check(batch, log_append) is None
    assert check(good(base_timestamp=5, max_timestamp=5), log_append) is None


def test_the_headers_max_timestamp_must_be_the_records_largest() -> None:
    section = record(0) + record(1, ts_delta=9) + record(2, ts_delta=-4)
    assert check(seal(section, count=3, max_timestamp=NOW + 9)) is None
    refused(seal(section, count=3, max_timestamp=NOW + 8), ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("codec", [rb.CompressionType.GZIP, rb.CompressionType.LZ4, rb.CompressionType.ZSTD])
def test_too_large_after_decompression_is_message_too_large(codec: rb.CompressionType) -> None:
    batch = rb.build_batch([rb.RecordInput(key=b"k", value=b"\x00" * 5000, timestamp_ms=NOW)], compression=codec)
    assert len(batch) < 1000
    refused(batch, ErrorCode.MESSAGE_TOO_LARGE, lv.ValidationConfig(max_message_bytes=4000))
    assert check(batch, lv.ValidationConfig(max_message_bytes=6000)) is None


# ------------------------------------------------------------------ property


_records = st.lists(st.builds(
    rb.RecordInput,
    key=st.one_of(st.none(), st.binary(max_size=20)),
    value=st.one_of(st.none(), st.binary(max_size=300)),
    headers=st.lists(st.builds(rb.Header, key=st.text(max_size=5), value=st.one_of(st.none(), st.binary(max_size=5))),
                     max_size=2).map(tuple),
    timestamp_ms=st.integers(NOW - 10_000, NOW + 10_000)), min_size=1, max_size=40)
_codecs = st.sampled_from([c for c in rb.CompressionType if c is not rb.CompressionType.SNAPPY])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, codec=_codecs, producer=st.booleans())
def test_the_producers_batches_always_pass(records: list[rb.RecordInput], codec: rb.CompressionType,
                                           producer: bool) -> None:
    builder = rb.RecordsBuilder()
    for r in records:
        assert r.timestamp_ms is not None
        builder.append(r.key, r.value, r.headers, r.timestamp_ms)
    ids = {"producer_id": 7, "producer_epoch": 1, "base_sequence": 3} if producer else {}
    batch = builder.build(compression=codec, **ids)
    assert check(batch) is None
    assert check(rb.build_batch(records, compression=codec)) is None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, codec=_codecs, data=st.data())
def test_flipped_record_bytes_are_refused_or_still_decode(records: list[rb.RecordInput],
                                                          codec: rb.CompressionType, data: st.DataObject) -> None:
    """Random damage to the (uncompressed) records section, CRC recomputed: the validator refuses
    it, or what it accepts decodes in full, as a consumer will decode it. Never an exception."""
    batch = rb.build_batch(records, compression=rb.CompressionType.NONE)
    section = bytearray(batch[bh.RECORDS_OFFSET:])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(section) - 1))
        section[at] ^= data.draw(st.integers(1, 255))
    if codec is not rb.CompressionType.NONE:
        damaged = seal(codecs.compress(codec, bytes(section)), count=len(records), codec=codec,
                       base_timestamp=bh.HEADER.unpack_from(batch)[7], max_timestamp=bh.HEADER.unpack_from(batch)[8])
    else:
        damaged = reseal(batch[:bh.RECORDS_OFFSET] + section)
    rejection = check(damaged)
    if rejection is None:
        decoded = rb.decode_batches(damaged)
        assert [r.offset for r in decoded[0].records] == list(range(len(records)))
    else:
        assert rejection.error in (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP)
        with pytest.raises(CorruptRecordError):
            if rejection.error is ErrorCode.INVALID_TIMESTAMP:
                raise CorruptRecordError("a policy refusal, not damage")
            _decode_strictly(damaged)


def _decode_strictly(batch: bytes) -> None:
    """What the validator refuses as damage, a reader refuses too (or it would misnumber records)."""
    decoded = rb.decode_batches(batch)[0]
    offsets = [r.offset for r in decoded.records]
    timestamps = [r.timestamp_ms for r in decoded.records]
    if offsets != list(range(len(offsets))) or max(timestamps) != decoded.max_timestamp:
        raise CorruptRecordError("offsets or the max timestamp are wrong")
