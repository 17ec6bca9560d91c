"""One varint reader (kraftlog.storage.varint) and the inline copies that must agree with it.

``varint.decode_varint`` / ``decode_varlong`` read one- and two-byte varints without a
loop and fall back on the general loop for the rest; the record decoder's fast path and
the log validator's scan copy that case inline for speed, and the cleaner calls the
reader. Records whose fields take every width from one byte to the most a field can
take must come out the same through all of them.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.storage import batch_header as bh
from kraftlog.storage import cleaner, log_validator, varint
from kraftlog.storage import record_batch as rb

# Values either side of each varint width (1 byte up to 63, 2 up to 8191, 3 up to 1048575, ...).
_EDGES = sorted({sign * edge + step for edge in (0, 63, 64, 8191, 8192, 1 << 20, 1 << 27, 1 << 30)
                 for sign in (1, -1) for step in (-1, 0, 1)})


@pytest.mark.parametrize("value", [v for v in _EDGES if varint.INT32_MIN <= v <= varint.INT32_MAX])
def test_decode_varint_fast_path_agrees_with_the_general_loop(value: int) -> None:
    encoded = varint.encode_varint(value)
    buf = b"\x7f" + encoded + b"\x81\x01"  # a varint before and after: reads stop at the right byte
    assert varint.decode_varint(buf, 1) == (value, 1 + len(encoded))
    assert varint.decode_varlong(buf, 1) == (value, 1 + len(encoded))
    raw, end = varint.decode_unsigned(buf, 1, len(buf))
    assert ((raw >> 1) ^ -(raw & 1), end) == (value, 1 + len(encoded))
    for cut in range(1, len(encoded)):  # truncated inside the varint: the position is named
        with pytest.raises(ValueError, match="at byte 1"):
            varint.decode_varint(buf[:1 + cut], 1)


def test_a_two_byte_varint_cut_after_its_first_byte_is_truncated() -> None:
    with pytest.raises(ValueError, match="truncated varint at byte 0"):
        varint.decode_varint(b"\x80", 0)
    with pytest.raises(ValueError, match="truncated varlong at byte 2"):
        varint.decode_varlong(b"\x00\x00\xff", 2)


_KEYS = st.one_of(st.none(), st.sampled_from([0, 1, 63, 64, 200, 8191, 8192]).map(bytes))
_VALUES = st.one_of(st.none(), st.sampled_from([0, 1, 63, 64, 8191, 8192, 20_000]).map(bytes))
_HEADERS = st.lists(st.builds(rb.Header, key=st.sampled_from(["", "h", "x" * 70]),
                              value=st.one_of(st.none(), st.sampled_from([b"", b"v" * 9000]))),
                    max_size=2).map(tuple)
_DELTAS = st.sampled_from([v for v in _EDGES if abs(v) < 1 << 40])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_KEYS, _VALUES, _HEADERS, _DELTAS), min_size=1, max_size=6))
def test_inline_readers_agree_with_the_varint_reader(
        fields: list[tuple[bytes | None, bytes | None, tuple[rb.Header, ...], int]]) -> None:
    base_timestamp = 1_700_000_000_000
    batch = rb.build_batch([rb.RecordInput(key=key, value=value, headers=headers,
                                           timestamp_ms=base_timestamp + delta)
                            for key, value, headers, delta in fields])
    header = bh.BatchHeader(batch)
    section = bytes(header.records_view)
    count = len(fields)
    first = base_timestamp + fields[0][3]

    # The reference: the general decoder, one varint.decode_* call per field.
    general = rb._decode_records_general(section, count, 0, first, None)
    assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in general] == [
        (key, value, headers, base_timestamp + delta) for key, value, headers, delta in fields]
    # The decoder's inline fast path (from a copy of the section and in place).
    assert rb._decode_records(section, count, 0, first, None) == general
    assert list(rb.decode_batches(batch)[0].records) == general
    # The cleaner's walk.
    parsed = cleaner._parse_records(section, count)
    assert [(first + p[4], p[5], p[6], p[7]) for p in parsed] == [
        (r.timestamp_ms, r.offset, r.key, r.value is None) for r in general]
    # The validator's inline scan accepts it and finds the same timestamps.
    assert log_validator.validate_batches(batch, log_validator.ValidationConfig(),
                                          now_ms=base_timestamp) is None
    low, high, keyless = log_validator._scan_records(section, 0, len(section), count, True)
    deltas = [r.timestamp_ms - first for r in general]
    assert (low, high) == (min(deltas), max(deltas))
    assert keyless == [r.offset for r in general if r.key is None]
