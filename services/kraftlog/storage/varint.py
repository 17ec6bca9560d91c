"""Kafka's zigzag varint / varlong encoding (the record fields of RecordBatch v2).

Owns the variable-length integer codec used inside a v2 record: record length,
timestamp delta, offset delta, key/value/header lengths and the header count
(KIP-98 introduced the format; Kafka's ``ByteUtils.writeVarint`` /
``readVarlong``). Values are zigzag-mapped (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...)
and written 7 bits at a time, least significant group first, with the high bit
of each byte meaning "more follows".

This is the one varint reader. :func:`decode_varint` / :func:`decode_varlong` read the
one- and two-byte varints (nearly every field) without a loop; :func:`decode_unsigned`
is the general loop they fall back on, and protobuf's plain varints
(:mod:`kraftlog.client.fetch_wire`) use it directly. Called by
:mod:`kraftlog.storage.record_batch` (encoding, and the general record decoder), the
cleaner, and :mod:`kraftlog.storage.log_validator` for the varints its inline reader
leaves (a leader parses a client's records once before appending them; followers,
fetches and reads touch only batch headers).

Two loops keep an inline copy of the one- and two-byte case:
``record_batch._decode_records`` (a consumer's decode) and
``log_validator._scan_records`` (a leader's check of every produced record). There a
call per field costs about 1.3-2x the inline read, five fields a record, on loops of
about a microsecond per record; each copy reads exactly what :func:`decode_varint`
reads and hands anything longer to it (tests/storage/test_varint_readers.py holds
them together).

Decoders raise :class:`ValueError` with the byte position; the record decoder
turns that into a :class:`~kraftlog.errors.CorruptRecordError`.
"""

from __future__ import annotations

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

MAX_VARINT_BYTES = 5
"""An int32 needs at most 5 groups of 7 bits (Kafka rejects a longer varint)."""
MAX_VARLONG_BYTES = 10
"""An int64 needs at most 10 groups of 7 bits."""

# One-byte encodings cover -64..63, which is nearly every header count, attribute
# and small delta; a table saves the loop for them.
_SMALL: dict[int, bytes] = {n: bytes(((n << 1) ^ (n >> 63),)) for n in range(-64, 64)}


NON_NEGATIVE_TABLE_SIZE = 1 << 14
"""How many non-negative values :data:`NON_NEGATIVE` holds (0 .. 16383: one to three bytes)."""


def _zigzag_bytes(value: int) -> bytes:
    # (n << 1) ^ (n >> 63) is the 64-bit zigzag map; for an n that fits in 32 bits it
    # equals the 32-bit map too, so one function serves varint and varlong.
    zz = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zz > 0x7F:
        out.append((zz & 0x7F) | 0x80)
        zz >>= 7
    out.append(zz)
    return bytes(out)


# zigzag(n) = 2n for n >= 0: one byte below 64, two below 8192, three below 16384
# (written out per width: a loop per entry made importing this module ~10x slower).
NON_NEGATIVE: tuple[bytes, ...] = tuple(
    [bytes((n << 1,)) for n in range(64)]
    + [bytes((((n << 1) & 0x7F) | 0x80, n >> 6)) for n in range(64, 8192)]
    + [bytes((((n << 1) & 0x7F) | 0x80, ((n >> 6) & 0x7F) | 0x80, n >> 13))
       for n in range(8192, NON_NEGATIVE_TABLE_SIZE)])
"""``NON_NEGATIVE[n]`` is the varint (and varlong) encoding of ``n`` for 0 <= n < 16384.

The record encoder's fast path: record lengths, key/value lengths up to 16 KiB,
offset deltas and small timestamp deltas are one tuple index instead of a call
(~600 KB per process, built once at import in a few milliseconds)."""


def encode_varint(value: int) -> bytes:
    """Encode a signed int32 as a zigzag varint. Raises ValueError outside int32."""
    small = _SMALL.get(value)
    if small is not None:
        return small
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint value {value} does not fit in int32")
    return _zigzag_bytes(value)


def encode_varlong(value: int) -> bytes:
    """Encode a signed int64 as a zigzag varlong. Raises ValueError outside int64."""
    small = _SMALL.get(value)
    if small is not None:
        return small
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong value {value} does not fit in int64")
    return _zigzag_bytes(value)


def size_of_varint(value: int) -> int:
    """Bytes :func:`encode_varint` / :func:`encode_varlong` would write for ``value``."""
    zz = (value << 1) ^ (value >> 63)
    size = 1
    while zz > 0x7F:
        zz >>= 7
        size += 1
    return size


def decode_unsigned(buf: bytes, position: int, end: int, *, max_bytes: int = 10,
                    what: str = "varint") -> tuple[int, int]:
    """A plain (not zigzag) base-128 varint at ``position``, read no further than ``end``:
    ``(value, next_position)`` (protobuf's wire format uses these). Raises ValueError
    naming the byte when it runs past ``end`` or is longer than ``max_bytes``."""
    raw = 0
    shift = 0
    pos = position
    for _ in range(max_bytes):
        if pos >= end:
            raise ValueError(f"truncated {what} at byte {position}")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return raw, pos
        shift += 7
    raise ValueError(f"{what} at byte {position} is longer than {max_bytes} bytes")


def _decode(buf: bytes, position: int, max_bytes: int, limit: int, what: str) -> tuple[int, int]:
    raw, pos = decode_unsigned(buf, position, len(buf), max_bytes=max_bytes, what=what)
    if raw > limit:
        raise ValueError(f"{what} at byte {position} overflows its width")
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varint(buf: bytes, position: int) -> tuple[int, int]:
    """Decode a zigzag int32 at ``position``; return ``(value, next_position)``.

    Raises ValueError (naming the position) when the input ends mid-varint, the
    varint is longer than 5 bytes, or its value does not fit in 32 bits.
    """
    try:  # fast path: one or two bytes (values -8192..8191), no loop
        byte = buf[position]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), position + 1
        high = buf[position + 1]
        if high < 0x80:
            raw = (byte & 0x7F) | (high << 7)
            return (raw >> 1) ^ -(raw & 1), position + 2
    except IndexError:
        pass  # the general reader says where the input ends
    return _decode(buf, position, MAX_VARINT_BYTES, 0xFFFF_FFFF, "varint")


def decode_varlong(buf: bytes, position: int) -> tuple[int, int]:
    """Decode a zigzag int64 at ``position``; return ``(value, next_position)``.

    Raises ValueError (naming the position) like :func:`decode_varint`, with a
    10-byte / 64-bit limit.
    """
    try:  # the fast path of decode_varint
        byte = buf[position]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), position + 1
        high = buf[position + 1]
        if high < 0x80:
            raw = (byte & 0x7F) | (high << 7)
            return (raw >> 1) ^ -(raw & 1), position + 2
    except IndexError:
        pass
    return _decode(buf, position, MAX_VARLONG_BYTES, 0xFFFF_FFFF_FFFF_FFFF, "varlong")
