"""The metadata log's wire form: :mod:`.records` values <-> serialized ``kraftlog.v1.MetadataRecord``.

Owns :func:`encode` and :func:`decode`, lossless both ways for every field,
including presence: ``None`` versus an empty tuple in
:class:`~kraftlog.metadata.records.PartitionChangeRecord` (an unset versus an
empty ``ReplicaList``), the ``optional`` bools and ints, and ``value=None`` in
:class:`~kraftlog.metadata.records.ConfigRecord`.

Callers: the controller (encodes the records its managers generate before
proposing them to raft), whoever builds a :class:`~kraftlog.metadata.loader.MetadataLoader`
(passes :func:`decode` in, so the loader stays pure), and the snapshot helpers
(pass :func:`encode`). An edge module (STYLE.md rule 1): the only place in
``metadata/`` that imports protobuf. No I/O, no clock, no replay logic.

Bad bytes (unparseable protobuf, an unset oneof, an enum number this version
does not know) raise :class:`~kraftlog.errors.CorruptRecordError` naming the
record's log offset: committed metadata is trusted, so this is corruption.

Decoding is on the snapshot-load path (a snapshot of 100,000 partitions loads in well
under 5 s; bench/metadata.py measures it), hence the per-type dispatch tables and the Uuid cache: a snapshot
repeats each topic id once per partition.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf.message import DecodeError

from kraftlog.errors import CorruptRecordError
from kraftlog.ids import Uuid
from kraftlog.metadata import records as r
from kraftlog.v1 import common_pb2, metadata_pb2

_ProtoUuid = common_pb2.Uuid
_ReplicaList = common_pb2.ReplicaList


# -- small shared pieces -------------------------------------------------------------------------

def uuid_to_proto(uuid: Uuid) -> common_pb2.Uuid:
    """``kraftlog.v1.Uuid`` of ``uuid``: the one Uuid-to-protobuf conversion every module uses."""
    # fixed64 holds the halves unsigned; Uuid's properties are Java's signed longs.
    value = uuid.value
    return _ProtoUuid(most_significant_bits=int.from_bytes(value[:8], "big"),
                      least_significant_bits=int.from_bytes(value[8:], "big"))


@functools.lru_cache(maxsize=65536)
def _uuid_from_bits(most_significant_bits: int, least_significant_bits: int) -> Uuid:
    return Uuid.from_bits(most_significant_bits, least_significant_bits)


def uuid_from_proto(uuid: common_pb2.Uuid) -> Uuid:
    """The Uuid of a ``kraftlog.v1.Uuid`` (cached: topic ids repeat on every hot path)."""
    return _uuid_from_bits(uuid.most_significant_bits, uuid.least_significant_bits)


def _ints(values: Any) -> tuple[int, ...]:
    # Slicing a upb repeated field into a list first is twice as fast as tuple(values), and
    # the emptiness test skips both for the usual empty lists (snapshot load hot path).
    return tuple(values[:]) if values else ()


def _replica_list(replicas: tuple[int, ...] | None) -> common_pb2.ReplicaList | None:
    # An empty ReplicaList passed to the constructor is still "set": presence survives.
    return None if replicas is None else _ReplicaList(replicas=replicas)


def _endpoint_to_proto(endpoint: r.Endpoint) -> common_pb2.Endpoint:
    return common_pb2.Endpoint(host=endpoint.host, port=endpoint.port,
                               listener_name=endpoint.listener_name,
                               security_protocol=endpoint.security_protocol)


def _feature_to_proto(feature: r.SupportedFeature) -> common_pb2.SupportedFeature:
    return common_pb2.SupportedFeature(name=feature.name,
                                       min_supported_version=feature.min_supported_version,
                                       max_supported_version=feature.max_supported_version)


# -- encode --------------------------------------------------------------------------------------

def _encode_register_broker(record: r.RegisterBrokerRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(register_broker_record=metadata_pb2.RegisterBrokerRecord(
        broker_id=record.broker_id, incarnation_id=uuid_to_proto(record.incarnation_id),
        broker_epoch=record.broker_epoch,
        endpoints=[_endpoint_to_proto(e) for e in record.endpoints],
        features=[_feature_to_proto(f) for f in record.features], rack=record.rack,
        fenced=record.fenced, in_controlled_shutdown=record.in_controlled_shutdown,
        log_dirs=[uuid_to_proto(d) for d in record.log_dirs]))


def _encode_unregister_broker(record: r.UnregisterBrokerRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        unregister_broker_record=metadata_pb2.UnregisterBrokerRecord(
            broker_id=record.broker_id, broker_epoch=record.broker_epoch))


def _encode_broker_registration_change(
        record: r.BrokerRegistrationChangeRecord) -> metadata_pb2.MetadataRecord:
    # proto3 `optional`: passing None to the constructor leaves the field unset.
    return metadata_pb2.MetadataRecord(
        broker_registration_change_record=metadata_pb2.BrokerRegistrationChangeRecord(
            broker_id=record.broker_id, broker_epoch=record.broker_epoch,
            fenced=record.fenced, in_controlled_shutdown=record.in_controlled_shutdown))


def _encode_fence_broker(record: r.FenceBrokerRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(fence_broker_record=metadata_pb2.FenceBrokerRecord(
        broker_id=record.broker_id, broker_epoch=record.broker_epoch))


def _encode_unfence_broker(record: r.UnfenceBrokerRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(unfence_broker_record=metadata_pb2.UnfenceBrokerRecord(
        broker_id=record.broker_id, broker_epoch=record.broker_epoch))


def _encode_topic(record: r.TopicRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(topic_record=metadata_pb2.TopicRecord(
        name=record.name, topic_id=uuid_to_proto(record.topic_id)))


def _encode_remove_topic(record: r.RemoveTopicRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(remove_topic_record=metadata_pb2.RemoveTopicRecord(
        topic_id=uuid_to_proto(record.topic_id)))


def _encode_partition(record: r.PartitionRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(partition_record=metadata_pb2.PartitionRecord(
        partition_id=record.partition_id, topic_id=uuid_to_proto(record.topic_id),
        replicas=record.replicas, isr=record.isr,
        removing_replicas=record.removing_replicas, adding_replicas=record.adding_replicas,
        leader=record.leader,
        leader_recovery_state=int(record.leader_recovery_state),  # type: ignore[arg-type]
        leader_epoch=record.leader_epoch, partition_epoch=record.partition_epoch,
        eligible_leader_replicas=record.eligible_leader_replicas,
        last_known_elr=record.last_known_elr))


def _encode_partition_change(record: r.PartitionChangeRecord) -> metadata_pb2.MetadataRecord:
    recovery = record.leader_recovery_state
    return metadata_pb2.MetadataRecord(
        partition_change_record=metadata_pb2.PartitionChangeRecord(
            partition_id=record.partition_id, topic_id=uuid_to_proto(record.topic_id),
            leader=record.leader, isr=_replica_list(record.isr),
            replicas=_replica_list(record.replicas),
            removing_replicas=_replica_list(record.removing_replicas),
            adding_replicas=_replica_list(record.adding_replicas),
            leader_recovery_state=None if recovery is None else int(recovery),  # type: ignore[arg-type]
            eligible_leader_replicas=_replica_list(record.eligible_leader_replicas),
            last_known_elr=_replica_list(record.last_known_elr)))


def _encode_config(record: r.ConfigRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(config_record=metadata_pb2.ConfigRecord(
        resource_type=int(record.resource_type),  # type: ignore[arg-type]
        resource_name=record.resource_name, name=record.name, value=record.value))


def _encode_feature_level(record: r.FeatureLevelRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(feature_level_record=metadata_pb2.FeatureLevelRecord(
        name=record.name, feature_level=record.feature_level))


def _encode_no_op(record: r.NoOpRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(no_op_record=metadata_pb2.NoOpRecord())


def _encode_producer_ids(record: r.ProducerIdsRecord) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(producer_ids_record=metadata_pb2.ProducerIdsRecord(
        broker_id=record.broker_id, broker_epoch=record.broker_epoch,
        next_producer_id=record.next_producer_id))


_ENCODERS: dict[type[Any], Callable[[Any], metadata_pb2.MetadataRecord]] = {
    r.RegisterBrokerRecord: _encode_register_broker,
    r.UnregisterBrokerRecord: _encode_unregister_broker,
    r.BrokerRegistrationChangeRecord: _encode_broker_registration_change,
    r.FenceBrokerRecord: _encode_fence_broker,
    r.UnfenceBrokerRecord: _encode_unfence_broker,
    r.TopicRecord: _encode_topic,
    r.RemoveTopicRecord: _encode_remove_topic,
    r.PartitionRecord: _encode_partition,
    r.PartitionChangeRecord: _encode_partition_change,
    r.ConfigRecord: _encode_config,
    r.FeatureLevelRecord: _encode_feature_level,
    r.NoOpRecord: _encode_no_op,
    r.ProducerIdsRecord: _encode_producer_ids,
}


def to_proto(record: r.MetadataRecord) -> metadata_pb2.MetadataRecord:
    """``record`` as the protobuf oneof (for tools that show records, e.g. ``log dump``)."""
    encoder = _ENCODERS.get(type(record))
    if encoder is None:
        raise TypeError(f"not a metadata record: {record!r}")
    return encoder(record)


def encode(record: r.MetadataRecord) -> bytes:
    """The bytes of ``record`` as one serialized ``kraftlog.v1.MetadataRecord``."""
    return to_proto(record).SerializeToString()


def encode_all(records: Iterable[r.MetadataRecord]) -> list[bytes]:
    """:func:`encode` of each record, in order (a controller batch, a snapshot chunk)."""
    return [encode(record) for record in records]


# -- decode --------------------------------------------------------------------------------------

def _decode_register_broker(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    p = m.register_broker_record
    return r.RegisterBrokerRecord(
        broker_id=p.broker_id, incarnation_id=uuid_from_proto(p.incarnation_id),
        broker_epoch=p.broker_epoch,
        endpoints=tuple(r.Endpoint(listener_name=e.listener_name, host=e.host, port=e.port,
                                   security_protocol=e.security_protocol)
                        for e in p.endpoints),
        features=tuple(r.SupportedFeature(name=f.name,
                                          min_supported_version=f.min_supported_version,
                                          max_supported_version=f.max_supported_version)
                       for f in p.features),
        rack=p.rack, fenced=p.fenced, in_controlled_shutdown=p.in_controlled_shutdown,
        log_dirs=tuple(uuid_from_proto(d) for d in p.log_dirs))


def _decode_unregister_broker(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    p = m.unregister_broker_record
    return r.UnregisterBrokerRecord(broker_id=p.broker_id, broker_epoch=p.broker_epoch)


def _decode_broker_registration_change(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    p = m.broker_registration_change_record
    return r.BrokerRegistrationChangeRecord(
        broker_id=p.broker_id, broker_epoch=p.broker_epoch,
        fenced=p.fenced if p.HasField("fenced") else None,
        in_controlled_shutdown=(p.in_controlled_shutdown
                                if p.HasField("in_controlled_shutdown") else None))


def _decode_fence_broker(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    p = m.fence_broker_record
    return r.FenceBrokerRecord(broker_id=p.broker_id, broker_epoch=p.broker_epoch)


def _decode_unfence_broker(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    p = m.unfence_broker_record
    return r.UnfenceBrokerRecord(broker_id=p.broker_id, broker_epoch=p.broker_epoch)


def _decode_topic(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    p = m.topic_record
    return r.TopicRecord(name=p.name, topic_id=uuid_from_proto(p.topic_id))


def _decode_remove_topic(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    return r.RemoveTopicRecord(topic_id=uuid_from_proto(m.remove_topic_record.topic_id))


_RECOVERY_STATES = {int(s): s for s in r.LeaderRecoveryState}
_RESOURCE_TYPES = {int(t): t for t in r.ConfigResourceType}


def _decode_partition(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    p = m.partition_record
    topic_id = p.topic_id
    return r.PartitionRecord(
        topic_id=_uuid_from_bits(topic_id.most_significant_bits,
                                 topic_id.least_significant_bits),
        partition_id=p.partition_id, replicas=_ints(p.replicas), isr=_ints(p.isr),
        leader=p.leader, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
        removing_replicas=_ints(p.removing_replicas),
        adding_replicas=_ints(p.adding_replicas),
        leader_recovery_state=_RECOVERY_STATES[p.leader_recovery_state],
        eligible_leader_replicas=_ints(p.eligible_leader_replicas),
        last_known_elr=_ints(p.last_known_elr))


def _decode_partition_change(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    p = m.partition_change_record
    has = p.HasField
    return r.PartitionChangeRecord(
        topic_id=uuid_from_proto(p.topic_id), partition_id=p.partition_id,
        leader=p.leader if has("leader") else None,
        isr=_ints(p.isr.replicas) if has("isr") else None,
        replicas=_ints(p.replicas.replicas) if has("replicas") else None,
        removing_replicas=(_ints(p.removing_replicas.replicas)
                           if has("removing_replicas") else None),
        adding_replicas=_ints(p.adding_replicas.replicas) if has("adding_replicas") else None,
        leader_recovery_state=(_RECOVERY_STATES[p.leader_recovery_state]
                               if has("leader_recovery_state") else None),
        eligible_leader_replicas=(_ints(p.eligible_leader_replicas.replicas)
                                  if has("eligible_leader_replicas") else None),
        last_known_elr=_ints(p.last_known_elr.replicas) if has("last_known_elr") else None)


def _decode_config(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    p = m.config_record
    return r.ConfigRecord(resource_type=_RESOURCE_TYPES[p.resource_type],
                          resource_name=p.resource_name, name=p.name,
                          value=p.value if p.HasField("value") else None)


def _decode_feature_level(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    p = m.feature_level_record
    return r.FeatureLevelRecord(name=p.name, feature_level=p.feature_level)


_NO_OP = r.NoOpRecord()


def _decode_no_op(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    return _NO_OP


def _decode_producer_ids(m: metadata_pb2.MetadataRecord) -> r.MetadataRecord:
    p = m.producer_ids_record
    return r.ProducerIdsRecord(broker_id=p.broker_id, broker_epoch=p.broker_epoch,
                               next_producer_id=p.next_producer_id)


_DECODERS: dict[str, Callable[[metadata_pb2.MetadataRecord], r.MetadataRecord]] = {
    "register_broker_record": _decode_register_broker,
    "unregister_broker_record": _decode_unregister_broker,
    "broker_registration_change_record": _decode_broker_registration_change,
    "fence_broker_record": _decode_fence_broker,
    "unfence_broker_record": _decode_unfence_broker,
    "topic_record": _decode_topic,
    "remove_topic_record": _decode_remove_topic,
    "partition_record": _decode_partition,
    "partition_change_record": _decode_partition_change,
    "config_record": _decode_config,
    "feature_level_record": _decode_feature_level,
    "no_op_record": _decode_no_op,
    "producer_ids_record": _decode_producer_ids,
}

_parse = metadata_pb2.MetadataRecord.FromString


def from_proto(message: metadata_pb2.MetadataRecord, *, offset: int) -> r.MetadataRecord:
    """The record value of a parsed ``MetadataRecord``; corrupt input names ``offset``."""
    kind = message.WhichOneof("record")
    if kind is None:
        raise CorruptRecordError(f"metadata record at offset {offset}: no record type set "
                                 "(unset oneof, or a type newer than this version)")
    try:
        return _DECODERS[kind](message)
    except KeyError as exc:
        # An enum number outside LeaderRecoveryState / ConfigResourceType (proto3 enums are
        # open, so upb accepts any number).
        raise CorruptRecordError(f"metadata record at offset {offset}: {kind} holds unknown "
                                 f"enum value {exc.args[0]!r}") from exc


def decode(data: bytes, *, offset: int) -> r.MetadataRecord:
    """The record serialized in ``data``, the value of the log record at ``offset``.

    Raises :class:`~kraftlog.errors.CorruptRecordError` naming ``offset`` when
    ``data`` is not a ``MetadataRecord`` with exactly one known record set.
    """
    try:
        message = _parse(data)
    except DecodeError as exc:
        raise CorruptRecordError(f"metadata record at offset {offset}: not a MetadataRecord "
                                 f"({len(data)} bytes): {exc}") from exc
    return from_proto(message, offset=offset)
