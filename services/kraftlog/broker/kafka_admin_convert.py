"""Kafka's admin requests as the active controller's protobuf requests, and the answers back.

Owns the mapping between the Kafka messages a broker forwards (KIP-590: CreateTopics,
DeleteTopics) and ControllerService's messages: field by field, with the controller's
top-level error (e.g. NOT_CONTROLLER after every retry) put on every topic, as Kafka's
forwarding does. Callers: :mod:`kraftlog.broker.kafka_apis`. Edge module (protobuf); no
decision is made here: the controller validates and decides.
"""

from __future__ import annotations

from kraftlog.error_codes import ErrorCode
from kraftlog.ids import ZERO_UUID, Uuid
from kraftlog.protocol.generated import create_topics, delete_topics
from kraftlog.v1 import common_pb2, controller_pb2

_MASK64 = (1 << 64) - 1


def _uuid_to_proto(value: Uuid) -> common_pb2.Uuid:
    return common_pb2.Uuid(most_significant_bits=value.most_significant_bits & _MASK64,
                           least_significant_bits=value.least_significant_bits & _MASK64)


def _uuid_from_proto(value: common_pb2.Uuid) -> Uuid:
    return Uuid.from_bits(value.most_significant_bits, value.least_significant_bits)


def create_topics_request(topics: list[create_topics.CreatableTopic], *, timeout_ms: int,
                          validate_only: bool) -> controller_pb2.CreateTopicsRequest:
    """The controller's CreateTopics for ``topics`` (null config values mean the default:
    left out)."""
    return controller_pb2.CreateTopicsRequest(timeout_ms=timeout_ms, validate_only=validate_only,
                                              topics=[
        controller_pb2.CreateTopicsRequest.CreatableTopic(
            name=topic.name, num_partitions=topic.num_partitions,
            replication_factor=topic.replication_factor,
            assignments=[controller_pb2.CreateTopicsRequest.CreatableReplicaAssignment(
                partition_index=a.partition_index, broker_ids=a.broker_ids)
                for a in topic.assignments],
            configs=[controller_pb2.CreateTopicsRequest.CreatableTopicConfig(
                name=c.name, value=c.value) for c in topic.configs if c.value is not None])
        for topic in topics])


def create_topics_results(answer: controller_pb2.CreateTopicsResponse,
                          names: list[str]) -> list[create_topics.CreatableTopicResult]:
    """One result per name asked for, in request order."""
    overall = ErrorCode(answer.error.code)
    by_name = {t.name: t for t in answer.topics}
    results = []
    for name in names:
        found = by_name.get(name)
        if overall is not ErrorCode.NONE or found is None:
            refusal = overall if overall is not ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR
            message = answer.error.message or "the controller did not answer for this topic"
            results.append(create_topics.CreatableTopicResult(
                name=name, error_code=refusal, error_message=message))
            continue
        code = ErrorCode(found.error.code)
        results.append(create_topics.CreatableTopicResult(
            name=name, error_code=code, error_message=found.error.message or None,
            topic_id=(_uuid_from_proto(found.topic_id) if found.HasField("topic_id")
                      else ZERO_UUID),
            num_partitions=found.num_partitions if code is ErrorCode.NONE else -1,
            replication_factor=found.replication_factor if code is ErrorCode.NONE else -1))
    return results


def delete_topics_request(topics: list[tuple[str | None, Uuid]], *, timeout_ms: int
                          ) -> controller_pb2.DeleteTopicsRequest:
    request = controller_pb2.DeleteTopicsRequest(timeout_ms=timeout_ms)
    for name, topic_id in topics:
        state = request.topics.add(name=name or "")
        if topic_id != ZERO_UUID:
            state.topic_id.CopyFrom(_uuid_to_proto(topic_id))
    return request


def delete_topics_results(answer: controller_pb2.DeleteTopicsResponse,
                          topics: list[tuple[str | None, Uuid]]
                          ) -> list[delete_topics.DeletableTopicResult]:
    overall = ErrorCode(answer.error.code)
    results = []
    by_name = {r.name: r for r in answer.responses if r.name}
    by_id = {_uuid_from_proto(r.topic_id): r for r in answer.responses if r.HasField("topic_id")}
    for name, topic_id in topics:
        found = by_name.get(name) if name else by_id.get(topic_id)
        if overall is not ErrorCode.NONE or found is None:
            refusal = overall if overall is not ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR
            results.append(delete_topics.DeletableTopicResult(
                name=name, topic_id=topic_id, error_code=refusal,
                error_message=answer.error.message or "the controller did not answer"))
            continue
        results.append(delete_topics.DeletableTopicResult(
            name=found.name or name, error_code=ErrorCode(found.error.code),
            error_message=found.error.message or None,
            topic_id=_uuid_from_proto(found.topic_id) if found.HasField("topic_id") else topic_id))
    return results
