"""controller/convert.py: every ControllerService request and response survives the wire.

The api dataclasses mirror controller.proto by field name; these tests hold both sides
to that (no field on one side only, except the server-filled ``active_controller``) and
round-trip random values of every message through protobuf bytes.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.controller import api, convert
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import Uuid
from kraftlog.v1 import controller_pb2

PAIRS = [(getattr(api, name), getattr(controller_pb2, name))
         for name in dir(controller_pb2)
         if (name.endswith("Request") or name.endswith("Response")) and hasattr(api, name)]

INT32 = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)
st.register_type_strategy(Uuid, st.binary(min_size=16, max_size=16).map(Uuid))
st.register_type_strategy(api.ApiError, st.builds(
    api.ApiError, code=st.sampled_from(list(ErrorCode)), message=st.text(max_size=20)))


def test_every_rpc_has_both_sides_with_the_same_fields() -> None:
    assert len(PAIRS) == 28, [c.__name__ for c, _ in PAIRS]
    for cls, message in PAIRS:
        ours = {f.name for f in dataclasses.fields(cls)}
        wire = set(message.DESCRIPTOR.fields_by_name) - {"active_controller"}
        assert ours == wire, f"{cls.__name__}: only in api {ours - wire}, only in proto {wire - ours}"


@pytest.mark.parametrize(("cls", "message"), PAIRS, ids=[c.__name__ for c, _ in PAIRS])
def test_random_values_round_trip_through_bytes(cls: type, message: type) -> None:
    @settings(max_examples=15, deadline=None)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        with st_int32():
            value = data.draw(st.from_type(cls))
        wire = convert.to_proto(value, message).SerializeToString()
        assert convert.from_proto(message.FromString(wire), cls) == value
    check()


class st_int32:
    """Temporarily make hypothesis draw int32 for ``int`` (every proto int field takes it)."""

    def __enter__(self) -> None:
        st.register_type_strategy(int, INT32)

    def __exit__(self, *exc: object) -> None:
        st.register_type_strategy(int, st.integers())


def test_an_unknown_enum_value_is_an_invalid_request_naming_the_field() -> None:
    proto = controller_pb2.ElectLeadersRequest(election_type=7)  # type: ignore[arg-type]
    with pytest.raises(convert.InvalidRequestError, match="election_type: unknown value 7"):
        convert.from_proto(proto, api.ElectLeadersRequest)


def test_replica_list_presence_tells_cancel_from_an_empty_target() -> None:
    request = api.AlterPartitionReassignmentsRequest(topics=(api.ReassignableTopic(
        name="t", partitions=(api.ReassignablePartition(partition_index=0, replicas=None),
                              api.ReassignablePartition(partition_index=1, replicas=()),
                              api.ReassignablePartition(partition_index=2,
                                                        replicas=(3, 1, 2)))),))
    wire = convert.to_proto(request, controller_pb2.AlterPartitionReassignmentsRequest)
    partitions = wire.topics[0].partitions  # type: ignore[attr-defined]
    assert [p.HasField("replicas") for p in partitions] == [False, True, True]
    assert convert.from_proto(wire, api.AlterPartitionReassignmentsRequest) == request
