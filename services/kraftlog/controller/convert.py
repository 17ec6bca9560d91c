"""Protobuf <-> the controller's plain request/response values, by field name.

:mod:`kraftlog.controller.api` mirrors ``controller.proto`` field for field, so one
reflective converter serves every ControllerService RPC instead of fourteen
hand-written pairs that could drift. Owns :func:`from_proto` (wire -> value, with
validation of what the wire cannot express: enum values, ids) and :func:`to_proto`.

Type mapping (the value side is read from the dataclass annotations):

- ``int`` / ``str`` / ``bool``: as is; an ``IntEnum`` is checked against its members;
- :class:`~kraftlog.storage.uuid.Uuid` <-> ``kraftlog.v1.Uuid`` (unset = ZERO_UUID);
- :class:`~kraftlog.controller.api.ApiError` <-> ``kraftlog.v1.Error``;
- a dataclass <-> a message; ``tuple[X, ...]`` <-> ``repeated X``;
- ``X | None`` <-> a field with presence: ``optional`` scalars and message fields;
  ``tuple[int, ...] | None`` <-> ``ReplicaList`` (unset = None, set = the list).

Bad input raises :class:`InvalidRequestError` naming the field path; callers answer
INVALID_REQUEST. Edge module: imports protobuf.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any, TypeVar, Union, get_args, get_origin

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from kraftlog.controller import api
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import KraftlogError
from kraftlog.storage.uuid import ZERO_UUID, Uuid
from kraftlog.v1 import common_pb2

T = TypeVar("T")



class InvalidRequestError(KraftlogError):
    """A request the wire could carry but that makes no sense (unknown enum value, ...)."""


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional_inner(hint: Any) -> Any | None:
    """``X`` for ``X | None``, else None."""
    if get_origin(hint) in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(get_args(hint)) == 2:
            return args[0]
    return None


def _is_repeated(field: Any) -> bool:
    repeated = getattr(field, "is_repeated", None)  # protobuf >= 5.x
    if repeated is None:
        return bool(field.label == FieldDescriptor.LABEL_REPEATED)
    return bool(repeated)


# -- wire -> value ----------------------------------------------------------------------------------

def from_proto(message: Message, cls: type[T], path: str = "") -> T:
    """Build ``cls`` (an api dataclass) from ``message``; InvalidRequestError on bad input."""
    descriptor = message.DESCRIPTOR
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        field = descriptor.fields_by_name.get(f.name)
        if field is None:
            continue  # the value's default stands (e.g. a field the proto does not carry)
        where = f"{path}.{f.name}" if path else f.name
        hint = _hints(typing.cast(type, cls))[f.name]
        inner = _optional_inner(hint)
        if inner is not None:
            if not message.HasField(f.name):
                kwargs[f.name] = None
                continue
            hint = inner
        kwargs[f.name] = _value_from_proto(getattr(message, f.name), hint, field, where)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(f"{path or cls.__name__}: {exc}") from None


def _value_from_proto(raw: Any, hint: Any, field: Any, where: str) -> Any:
    if get_origin(hint) is tuple:
        (item_hint, _ellipsis) = get_args(hint)
        if field.message_type is not None and field.message_type.full_name == \
                "kraftlog.v1.ReplicaList":
            return tuple(_scalar(v, item_hint, f"{where}.replicas") for v in raw.replicas)
        if not _is_repeated(field):
            raise InvalidRequestError(f"{where}: expected a list")
        return tuple(_item(v, item_hint, field, f"{where}[{i}]") for i, v in enumerate(raw))
    return _item(raw, hint, field, where)


def _item(raw: Any, hint: Any, field: Any, where: str) -> Any:
    if hint is Uuid:
        return Uuid.from_bits(raw.most_significant_bits, raw.least_significant_bits)
    if hint is api.ApiError:
        try:
            code = ErrorCode(raw.code)
        except ValueError:
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        return api.ApiError(code=code, message=raw.message)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return from_proto(raw, hint, where)
    return _scalar(raw, hint, where)


def _scalar(raw: Any, hint: Any, where: str) -> Any:
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(raw)
        except ValueError:
            known = ", ".join(f"{m.name}={m.value}" for m in hint)
            raise InvalidRequestError(f"{where}: unknown value {raw} (known: {known})") from None
    return raw


# -- value -> wire ----------------------------------------------------------------------------------

def to_proto(value: Any, message_cls: type[Message]) -> Message:
    """The ``message_cls`` message carrying ``value`` (an api dataclass)."""
    message = message_cls()
    _fill(message, value)
    return message


def _fill(message: Message, value: Any) -> None:
    descriptor = message.DESCRIPTOR
    for f in dataclasses.fields(value):
        field = descriptor.fields_by_name.get(f.name)
        if field is None:
            continue
        item = getattr(value, f.name)
        if item is None:
            continue  # no presence
        target = getattr(message, f.name)
        if isinstance(item, tuple):
            if field.message_type is not None and field.message_type.full_name == \
                    "kraftlog.v1.ReplicaList":
                target.SetInParent()
                target.replicas.extend(int(v) for v in item)
            elif field.message_type is not None:
                for element in item:
                    _fill_message(target.add(), element)
            else:
                target.extend(v.value if isinstance(v, enum.Enum) else v for v in item)
        elif field.message_type is not None:
            _fill_message(target, item)
        elif isinstance(item, enum.Enum):
            setattr(message, f.name, int(item.value))
        else:
            setattr(message, f.name, item)


def _fill_message(target: Any, item: Any) -> None:
    if isinstance(item, Uuid):
        target.most_significant_bits = item.most_significant_bits & ((1 << 64) - 1)
        target.least_significant_bits = item.least_significant_bits & ((1 << 64) - 1)
    elif isinstance(item, api.ApiError):
        target.code = int(item.code)
        target.message = item.message
    else:
        target.SetInParent()
        _fill(target, item)


def error_proto(code: ErrorCode, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=int(code), message=message)  # type: ignore[arg-type]



__all__ = ["ZERO_UUID", "InvalidRequestError", "error_proto", "from_proto", "to_proto"]
