"""Hostile protobuf requests for handler tests: every field set to edge values, at random.

Imported as ``tests.proto_fuzz``. :func:`hostile` fills a
message of any type from its descriptor: integers at their limits and around zero,
empty / huge / odd strings, unknown enum numbers, empty and oversize repeated fields,
nested messages to a bounded depth. :class:`FakeContext` stands in for a grpc.aio
servicer context when a test calls a handler directly: ``abort`` raises
:class:`Aborted` with the status it was given.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_INT32 = (0, 1, -1, -2, 2**31 - 1, -(2**31), 7, 101, 1000)
_INT64 = (*_INT32, 2**63 - 1, -(2**63), 2**40)
_UINT32 = (0, 1, 2**32 - 1, 7)
_UINT64 = (0, 1, 2**64 - 1, 2**40)
_STRINGS = ("", "a", "x" * 300, "../../etc/passwd", "t\x00", "__consumer_offsets",
            "__cluster_metadata", "demo", ".", "..", "é" * 10)
_INT_TYPES = {
    FieldDescriptor.TYPE_INT32: _INT32, FieldDescriptor.TYPE_SINT32: _INT32,
    FieldDescriptor.TYPE_SFIXED32: _INT32, FieldDescriptor.TYPE_INT64: _INT64,
    FieldDescriptor.TYPE_SINT64: _INT64, FieldDescriptor.TYPE_SFIXED64: _INT64,
    FieldDescriptor.TYPE_UINT32: _UINT32, FieldDescriptor.TYPE_FIXED32: _UINT32,
    FieldDescriptor.TYPE_UINT64: _UINT64, FieldDescriptor.TYPE_FIXED64: _UINT64,
}
OVERSIZE = 2000
"""Length of an oversize repeated field."""


class Aborted(Exception):
    def __init__(self, code: Any, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details


class FakeContext:
    """The parts of grpc.aio.ServicerContext the servers use."""

    def __init__(self, time_remaining_s: float | None = 5.0) -> None:
        self._time_remaining_s = time_remaining_s
        self.metadata: tuple[tuple[str, str], ...] = ()

    def time_remaining(self) -> float | None:
        return self._time_remaining_s

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code: Any, details: str = "") -> None:
        raise Aborted(code, details)

    def set_code(self, code: Any) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details


@dataclass(frozen=True, slots=True)
class _Extra:
    strings: tuple[str, ...]
    ints: tuple[int, ...]


def error_messages(message: Message) -> list[str]:
    """The ``message`` text of every ``kraftlog.v1.Error`` anywhere in ``message``."""
    found: list[str] = []
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE or field.message_type.GetOptions().map_entry:
            continue
        for item in (value if field.is_repeated else (value,)):
            if field.message_type.full_name == "kraftlog.v1.Error":
                found.append(item.message)
            else:
                found.extend(error_messages(item))
    return found


def _scalar(field: FieldDescriptor, rng: random.Random, extra: _Extra) -> Any:
    if field.type in _INT_TYPES:
        if extra.ints and rng.random() < 0.5:
            return rng.choice(extra.ints)
        return rng.choice(_INT_TYPES[field.type])
    if field.type == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if field.type == FieldDescriptor.TYPE_STRING:
        if extra.strings and rng.random() < 0.5:
            return rng.choice(extra.strings)
        return rng.choice(_STRINGS)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return rng.choice((b"", b"\x00" * 3, rng.randbytes(rng.randrange(1, 200))))
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return rng.choice((0.0, -1.0, 1e30, float("nan")))
    if field.type == FieldDescriptor.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return rng.choice((*numbers, -1, 99, 2**31 - 1))
    raise TypeError(f"no hostile values for {field.full_name}")


def hostile(message_cls: type[Message], rng: random.Random, *, depth: int = 3,
            oversize: bool = True, strings: tuple[str, ...] = (),
            ints: tuple[int, ...] = ()) -> Message:
    """A ``message_cls`` with each field left unset or set to an edge value; ``strings`` and
    ``ints`` (names and ids the server knows) are mixed in half of the time, so requests
    reach past the first lookup."""
    message = message_cls()
    _fill(message, rng, depth, oversize, _Extra(strings, ints))
    return message


def _fill(message: Message, rng: random.Random, depth: int, oversize: bool,
          extra: _Extra) -> None:
    for field in message.DESCRIPTOR.fields:
        if rng.random() < 0.25:
            continue  # unset
        is_message = field.type == FieldDescriptor.TYPE_MESSAGE
        if is_message and depth <= 0:
            continue
        if field.is_repeated:
            if is_message and field.message_type.GetOptions().map_entry:
                continue  # maps: none in the request messages that matter here
            count = rng.choice((0, 1, 2, 3, OVERSIZE if oversize else 3))
            container = getattr(message, field.name)
            if is_message:
                items = [container.add() for _ in range(min(count, 50 if depth > 1 else count))]
                for item in items:
                    _fill(item, rng, depth - 1, False, extra)
            else:
                values = [_scalar(field, rng, extra) for _ in range(count)]
                if rng.random() < 0.3 and values:
                    values = [values[0]] * len(values)  # duplicates
                container.extend(values)
        elif is_message:
            _fill(getattr(message, field.name), rng, depth - 1, oversize, extra)
            if not getattr(message, field.name).ListFields():
                getattr(message, field.name).SetInParent()
        else:
            try:
                setattr(message, field.name, _scalar(field, rng, extra))
            except ValueError:  # a closed enum refusing an unknown number
                setattr(message, field.name, field.enum_type.values[0].number)
