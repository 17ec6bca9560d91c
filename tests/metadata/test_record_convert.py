"""record_convert: every record round-trips through protobuf bytes unchanged, presence included,
and bytes that are not one known MetadataRecord are rejected naming the offset."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from kraftlog.errors import CorruptRecordError
from kraftlog.ids import Uuid
from kraftlog.metadata import record_convert as rc
from kraftlog.metadata import records as r
from kraftlog.v1 import common_pb2, metadata_pb2
from tests.metadata import model as mm

TOPIC_ID = Uuid(bytes(range(16)))


@pytest.mark.parametrize("record_type", r.RECORD_TYPES, ids=lambda t: t.__name__)
@settings(max_examples=60, deadline=None)
@given(data=mm.st.data())
def test_every_record_type_round_trips(record_type: type[r.MetadataRecord],
                                       data: mm.st.DataObject) -> None:
    record = data.draw(mm.RECORD_STRATEGIES[record_type])
    decoded = rc.decode(rc.encode(record), offset=7)
    assert decoded == record
    assert type(decoded) is record_type


@pytest.mark.parametrize("field", ["isr", "replicas", "removing_replicas", "adding_replicas",
                                   "eligible_leader_replicas", "last_known_elr"])
def test_partition_change_keeps_unset_apart_from_empty(field: str) -> None:
    unset = r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0)
    empty = r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0,
                                    **{field: ()})  # type: ignore[arg-type]
    assert getattr(rc.decode(rc.encode(unset), offset=0), field) is None
    assert getattr(rc.decode(rc.encode(empty), offset=0), field) == ()
    assert rc.encode(unset) != rc.encode(empty)


def test_optional_scalars_keep_presence_even_at_their_zero_value() -> None:
    change = r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0, leader=0,
                                     leader_recovery_state=r.LeaderRecoveryState.RECOVERED)
    assert rc.decode(rc.encode(change), offset=0) == change
    flags = r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=2, fenced=False,
                                             in_controlled_shutdown=False)
    assert rc.decode(rc.encode(flags), offset=0) == flags
    no_flags = r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=2)
    assert rc.decode(rc.encode(no_flags), offset=0) == no_flags


def test_config_value_none_deletes_and_empty_string_is_a_value() -> None:
    for value in (None, ""):
        record = r.ConfigRecord(resource_type=r.ConfigResourceType.TOPIC, resource_name="t",
                                name="retention.ms", value=value)
        assert rc.decode(rc.encode(record), offset=0).value == value  # type: ignore[union-attr]


def test_uuid_halves_travel_as_kafka_msb_lsb() -> None:
    uuid = Uuid.from_bits(-1, 5)
    message = metadata_pb2.MetadataRecord.FromString(
        rc.encode(r.RemoveTopicRecord(topic_id=uuid)))
    assert message.remove_topic_record.topic_id.most_significant_bits == 2**64 - 1
    assert message.remove_topic_record.topic_id.least_significant_bits == 5


def test_garbage_bytes_are_a_corrupt_record_naming_the_offset() -> None:
    with pytest.raises(CorruptRecordError, match="offset 4242"):
        rc.decode(b"\xff\xff\xff\xff", offset=4242)


def test_an_unset_oneof_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="offset 9: no record type set"):
        rc.decode(b"", offset=9)
    # A field number from the future parses as an unknown field and leaves the oneof unset.
    with pytest.raises(CorruptRecordError, match="offset 10"):
        rc.decode(bytes([0xF8, 0x06, 0x01]), offset=10)  # field 111, varint 1


def test_an_unknown_enum_number_is_corrupt() -> None:
    message = metadata_pb2.MetadataRecord(partition_record=metadata_pb2.PartitionRecord(
        topic_id=common_pb2.Uuid(), leader_recovery_state=7))  # type: ignore[arg-type]
    with pytest.raises(CorruptRecordError, match=r"offset 3.*unknown enum value 7"):
        rc.decode(message.SerializeToString(), offset=3)
    config = metadata_pb2.MetadataRecord(config_record=metadata_pb2.ConfigRecord(
        resource_type=3))  # type: ignore[arg-type]
    with pytest.raises(CorruptRecordError, match="offset 4"):
        rc.decode(config.SerializeToString(), offset=4)


def test_encode_refuses_a_value_that_is_not_a_record() -> None:
    with pytest.raises(TypeError):
        rc.encode(object())  # type: ignore[arg-type]


def test_encode_all_keeps_order() -> None:
    records: list[r.MetadataRecord] = [r.NoOpRecord(), r.RemoveTopicRecord(topic_id=TOPIC_ID)]
    assert [rc.decode(b, offset=0) for b in rc.encode_all(records)] == records
