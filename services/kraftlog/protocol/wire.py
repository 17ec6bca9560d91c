"""Kafka's wire primitives: the reader and writer every generated message codec uses.

Owns the byte layouts of Kafka's protocol types (org.apache.kafka.common.protocol.types):
fixed-width big-endian integers, unsigned varints, strings and bytes with an int16/int32
length or, in flexible versions (KIP-482), a "compact" unsigned-varint length plus one
(0 = null), arrays likewise, UUIDs as 16 bytes, and tagged-field sections (a count, then
tag, size and bytes per field, tags ascending).

Called by :mod:`kraftlog.protocol.generated` (the codecs of each message) and
:mod:`kraftlog.protocol.headers`. Pure: no I/O. A short or inconsistent buffer raises
:class:`MalformedMessage`, never an IndexError or struct.error: input is hostile.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import TypeVar

from kraftlog.ids import Uuid

T = TypeVar("T")

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

LARGE_BYTES = 4096
"""A bytes value at least this long is kept as its own part of the output (no copy into
the header buffer); a Fetch answer's records go to the socket as they came from the log."""
MAX_ARRAY_LENGTH = 1 << 24
"""An array claiming more elements than this is malformed (each element takes >= 1 byte,
and a frame is at most ``socket.request.max.bytes``)."""


class MalformedMessage(ValueError):
    """The bytes are not a valid encoding of the message at that version."""


class Reader:
    """Reads Kafka types from ``data`` starting at ``pos``."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.data = data if isinstance(data, memoryview) else memoryview(data)
        self.pos = pos
        self.end = len(self.data) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, size: int) -> int:
        start = self.pos
        if size < 0 or start + size > self.end:
            raise MalformedMessage(f"needs {size} bytes at offset {start}, has {self.end - start}")
        self.pos = start + size
        return start

    def int8(self) -> int:
        value: int = _I8.unpack_from(self.data, self._take(1))[0]
        return value

    def boolean(self) -> bool:
        return self.int8() != 0

    def int16(self) -> int:
        value: int = _I16.unpack_from(self.data, self._take(2))[0]
        return value

    def uint16(self) -> int:
        value: int = _U16.unpack_from(self.data, self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _I32.unpack_from(self.data, self._take(4))[0]
        return value

    def uint32(self) -> int:
        value: int = _U32.unpack_from(self.data, self._take(4))[0]
        return value

    def int64(self) -> int:
        value: int = _I64.unpack_from(self.data, self._take(8))[0]
        return value

    def float64(self) -> float:
        value: float = _F64.unpack_from(self.data, self._take(8))[0]
        return value

    def uuid(self) -> Uuid:
        start = self._take(16)
        return Uuid(bytes(self.data[start:start + 16]))

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= self.end:
                raise MalformedMessage("varint runs past the end")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise MalformedMessage("unsigned varint longer than 5 bytes")

    def _length(self, compact: bool, wide: bool) -> int:
        """A length prefix; -1 means null."""
        if compact:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def nullable_string(self, compact: bool) -> str | None:
        size = self._length(compact, wide=False)
        if size < 0:
            if size == -1:
                return None
            raise MalformedMessage(f"string length {size}")
        start = self._take(size)
        try:
            return str(self.data[start:start + size], "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedMessage(f"string is not UTF-8: {exc}") from None

    def string(self, compact: bool) -> str:
        value = self.nullable_string(compact)
        if value is None:
            raise MalformedMessage("null where a string is required")
        return value

    def nullable_blob(self, compact: bool) -> bytes | None:
        size = self._length(compact, wide=True)
        if size < 0:
            if size == -1:
                return None
            raise MalformedMessage(f"bytes length {size}")
        start = self._take(size)
        return bytes(self.data[start:start + size])

    def blob(self, compact: bool) -> bytes:
        value = self.nullable_blob(compact)
        if value is None:
            raise MalformedMessage("null where bytes are required")
        return value

    def array_length(self, compact: bool) -> int:
        """Elements that follow; -1 for a null array."""
        size = self._length(compact, wide=True)
        if size < -1 or size > MAX_ARRAY_LENGTH or size > self.remaining():
            raise MalformedMessage(f"array length {size} with {self.remaining()} bytes left")
        return size

    def array(self, compact: bool, element: Callable[[], T]) -> list[T]:
        size = self.array_length(compact)
        if size < 0:
            raise MalformedMessage("null where an array is required")
        return [element() for _ in range(size)]

    def nullable_array(self, compact: bool, element: Callable[[], T]) -> list[T] | None:
        size = self.array_length(compact)
        if size < 0:
            return None
        return [element() for _ in range(size)]

    def tagged_fields(self) -> list[tuple[int, Reader]]:
        """The tagged-field section: (tag, a reader over that field's bytes) in order."""
        count = self.uvarint()
        if count > self.remaining():
            raise MalformedMessage(f"{count} tagged fields with {self.remaining()} bytes left")
        fields = []
        last = -1
        for _ in range(count):
            tag = self.uvarint()
            if tag <= last:
                raise MalformedMessage(f"tagged field {tag} after {last}: tags must ascend")
            last = tag
            size = self.uvarint()
            start = self._take(size)
            fields.append((tag, Reader(self.data, start, start + size)))
        return fields

    def expect_end(self, what: str) -> None:
        if self.pos != self.end:
            raise MalformedMessage(f"{self.end - self.pos} bytes left over after {what}")


class Writer:
    """Builds an encoding as a list of parts (large bytes values are not copied)."""

    __slots__ = ("_buf", "_parts", "_size")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._parts: list[bytes | bytearray | memoryview] = []
        self._size = 0

    def size(self) -> int:
        return self._size + len(self._buf)

    def parts(self) -> list[bytes | bytearray | memoryview]:
        if self._buf:
            self._parts.append(self._buf)
            self._size += len(self._buf)
            self._buf = bytearray()
        return self._parts

    def getvalue(self) -> bytes:
        return b"".join(self.parts())

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) >= LARGE_BYTES:
            if self._buf:
                self._parts.append(self._buf)
                self._size += len(self._buf)
                self._buf = bytearray()
            self._parts.append(data)
            self._size += len(data)
        else:
            self._buf += data

    def int8(self, value: int) -> None:
        self._buf += _I8.pack(value)

    def boolean(self, value: bool) -> None:
        self._buf.append(1 if value else 0)

    def int16(self, value: int) -> None:
        self._buf += _I16.pack(value)

    def uint16(self, value: int) -> None:
        self._buf += _U16.pack(value)

    def int32(self, value: int) -> None:
        self._buf += _I32.pack(value)

    def uint32(self, value: int) -> None:
        self._buf += _U32.pack(value)

    def int64(self, value: int) -> None:
        self._buf += _I64.pack(value)

    def float64(self, value: float) -> None:
        self._buf += _F64.pack(value)

    def uuid(self, value: Uuid) -> None:
        self._buf += value.value

    def uvarint(self, value: int) -> None:
        if value < 0:
            raise ValueError(f"unsigned varint {value}")
        while value >= 0x80:
            self._buf.append((value & 0x7F) | 0x80)
            value >>= 7
        self._buf.append(value)

    def _length(self, size: int, compact: bool, wide: bool) -> None:
        if compact:
            self.uvarint(size + 1)
        elif wide:
            self.int32(size)
        else:
            self.int16(size)

    def nullable_string(self, value: str | None, compact: bool) -> None:
        if value is None:
            self._length(-1, compact, wide=False)
            return
        data = value.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes is longer than 32767")
        self._length(len(data), compact, wide=False)
        self._buf += data

    def string(self, value: str, compact: bool) -> None:
        self.nullable_string(value, compact)

    def nullable_blob(self, value: bytes | bytearray | memoryview | None, compact: bool) -> None:
        if value is None:
            self._length(-1, compact, wide=True)
            return
        self._length(len(value), compact, wide=True)
        self.raw(value)

    def blob(self, value: bytes | bytearray | memoryview, compact: bool) -> None:
        self.nullable_blob(value, compact)

    def array_length(self, size: int, compact: bool) -> None:
        self._length(size, compact, wide=True)

    def tagged_fields(self, fields: Sequence[tuple[int, Writer]]) -> None:
        """The tagged-field section; ``fields`` ascend by tag."""
        self.uvarint(len(fields))
        for tag, body in fields:
            self.uvarint(tag)
            self.uvarint(body.size())
            for part in body.parts():
                self.raw(part)
