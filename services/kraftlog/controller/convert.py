"""Protobuf <-> the controller's plain request/response values, by field name.

:mod:`kraftlog.controller.api` mirrors ``controller.proto`` field for field, so one
reflective converter serves every ControllerService RPC instead of fourteen
hand-written pairs that could drift. Owns :func:`from_proto` (wire -> value, with
validation of what the wire cannot express: enum values, ids) and :func:`to_proto`.

Type mapping (the value side is read from the dataclass annotations):

- ``int`` / ``str`` / ``bool``: as is; an ``IntEnum`` is checked against its members;
- :class:`~kraftlog.ids.Uuid` <-> ``kraftlog.v1.Uuid`` (unset = ZERO_UUID);
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
from kraftlog.ids import ZERO_UUID, Uuid
from kraftlog.metadata import record_convert
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
#
# Each (api class, message type) pair is planned once: which fields the message carries, whether
# the field has presence, and the function that converts its wire value (None: taken as is).
# The reflection (dataclass fields, type hints, descriptors) then costs nothing per request;
# it used to be a third of a small request's Python time on the active controller.

_Convert = typing.Callable[[Any, str], Any]
"""(wire value, field path) -> value; the path only feeds error messages."""


@dataclasses.dataclass(frozen=True, slots=True)
class _FromField:
    name: str
    optional: bool  # ``X | None``: unset on the wire is None
    convert: _Convert | None  # None: the wire value as is


_FROM_PLANS: dict[tuple[type, Any], tuple[_FromField, ...]] = {}


def _from_plan(cls: type, descriptor: Any) -> tuple[_FromField, ...]:
    plan = _FROM_PLANS.get((cls, descriptor))
    if plan is None:
        plan = _FROM_PLANS[(cls, descriptor)] = _make_from_plan(cls, descriptor)
    return plan


def _make_from_plan(cls: type, descriptor: Any) -> tuple[_FromField, ...]:
    plan = []
    for f in dataclasses.fields(cls):
        field = descriptor.fields_by_name.get(f.name)
        if field is None:
            continue  # the value's default stands (e.g. a field the proto does not carry)
        hint = _hints(cls)[f.name]
        inner = _optional_inner(hint)
        plan.append(_FromField(name=f.name, optional=inner is not None,
                               convert=_value_converter(hint if inner is None else inner, field)))
    return tuple(plan)


def from_proto(message: Message, cls: type[T], path: str = "") -> T:
    """Build ``cls`` (an api dataclass) from ``message``; InvalidRequestError on bad input."""
    kwargs: dict[str, Any] = {}
    for f in _from_plan(cls, message.DESCRIPTOR):
        name = f.name
        if f.optional and not message.HasField(name):
            kwargs[name] = None
            continue
        raw = getattr(message, name)
        kwargs[name] = raw if f.convert is None else f.convert(
            raw, f"{path}.{name}" if path else name)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(f"{path or cls.__name__}: {exc}") from None


def _value_converter(hint: Any, field: Any) -> _Convert | None:
    if get_origin(hint) is tuple:
        (item_hint, _ellipsis) = get_args(hint)
        if field.message_type is not None and field.message_type.full_name == \
                "kraftlog.v1.ReplicaList":
            scalar = _scalar_converter(item_hint)
            if scalar is None:
                return lambda raw, _where: tuple(raw.replicas)
            return lambda raw, where: tuple(scalar(v, f"{where}.replicas") for v in raw.replicas)
        if not _is_repeated(field):
            def not_a_list(_raw: Any, where: str) -> Any:
                raise InvalidRequestError(f"{where}: expected a list")
            return not_a_list
        item = _item_converter(item_hint)
        if item is None:
            return lambda raw, _where: tuple(raw)
        return lambda raw, where: tuple(item(v, f"{where}[{i}]") for i, v in enumerate(raw))
    return _item_converter(hint)


def _item_converter(hint: Any) -> _Convert | None:
    if hint is Uuid:
        return lambda raw, _where: record_convert.uuid_from_proto(raw)
    if hint is api.ApiError:
        return _api_error
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        cls = hint
        return lambda raw, where: from_proto(raw, cls, where)
    return _scalar_converter(hint)


def _api_error(raw: Any, _where: str) -> api.ApiError:
    try:
        code = ErrorCode(raw.code)
    except ValueError:
        code = ErrorCode.UNKNOWN_SERVER_ERROR
    return api.ApiError(code=code, message=raw.message)


def _scalar_converter(hint: Any) -> _Convert | None:
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        enum_cls = hint

        def to_enum(raw: Any, where: str) -> Any:
            try:
                return enum_cls(raw)
            except ValueError:
                known = ", ".join(f"{m.name}={m.value}" for m in enum_cls)
                raise InvalidRequestError(
                    f"{where}: unknown value {raw} (known: {known})") from None
        return to_enum
    return None


# -- value -> wire ----------------------------------------------------------------------------------

class _Wire(enum.Enum):
    """How a field's value goes onto the message (planned once per value type and message)."""

    SCALAR = 0
    MESSAGE = 1
    REPLICA_LIST = 2


_TO_PLANS: dict[tuple[type, Any], tuple[tuple[str, _Wire], ...]] = {}


def _to_plan(value_type: type, descriptor: Any) -> tuple[tuple[str, _Wire], ...]:
    plan = _TO_PLANS.get((value_type, descriptor))
    if plan is None:
        plan = _TO_PLANS[(value_type, descriptor)] = _make_to_plan(value_type, descriptor)
    return plan


def _make_to_plan(value_type: type, descriptor: Any) -> tuple[tuple[str, _Wire], ...]:
    plan = []
    for f in dataclasses.fields(value_type):
        field = descriptor.fields_by_name.get(f.name)
        if field is None:
            continue
        if field.message_type is None:
            wire = _Wire.SCALAR
        elif field.message_type.full_name == "kraftlog.v1.ReplicaList":
            wire = _Wire.REPLICA_LIST
        else:
            wire = _Wire.MESSAGE
        plan.append((f.name, wire))
    return tuple(plan)


def to_proto(value: Any, message_cls: type[Message]) -> Message:
    """The ``message_cls`` message carrying ``value`` (an api dataclass)."""
    message = message_cls()
    _fill(message, value)
    return message


def _fill(message: Message, value: Any) -> None:
    for name, wire in _to_plan(type(value), message.DESCRIPTOR):
        item = getattr(value, name)
        if item is None:
            continue  # no presence
        if isinstance(item, tuple):
            target = getattr(message, name)
            if wire is _Wire.REPLICA_LIST:
                target.SetInParent()
                target.replicas.extend(int(v) for v in item)
            elif wire is _Wire.MESSAGE:
                for element in item:
                    _fill_message(target.add(), element)
            else:
                target.extend(v.value if isinstance(v, enum.Enum) else v for v in item)
        elif wire is not _Wire.SCALAR:
            _fill_message(getattr(message, name), item)
        elif isinstance(item, enum.Enum):
            setattr(message, name, int(item.value))
        else:
            setattr(message, name, item)


def _fill_message(target: Any, item: Any) -> None:
    if isinstance(item, Uuid):
        target.CopyFrom(record_convert.uuid_to_proto(item))
    elif isinstance(item, api.ApiError):
        target.code = int(item.code)
        target.message = item.message
    else:
        target.SetInParent()
        _fill(target, item)


def error_proto(code: ErrorCode, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=int(code), message=message)  # type: ignore[arg-type]



__all__ = ["ZERO_UUID", "InvalidRequestError", "error_proto", "from_proto", "to_proto"]
