"""The Kafka APIs this broker serves, their version ranges and codecs.

Owns :data:`SERVED`: API key -> :class:`Api` (request and response classes, the versions
answered). ApiVersions advertises exactly these ranges; a request for any other API or
version is not answered wrongly: ApiVersions answers UNSUPPORTED_VERSION (KIP-511), every
other unknown key or version closes the connection, as Kafka's broker does.

Each range starts at the first version that carries RecordBatch v2 or the current offsets
storage where that matters (Produce 3, Fetch 4, ListOffsets 1, OffsetCommit 2,
OffsetFetch 1, CreateTopics 2, DeleteTopics 1: the minimums Kafka 4.0 keeps, KIP-896) and ends at the last version whose
semantics kraftlog implements; the generated codecs cover exactly these ranges.

Callers: :mod:`kraftlog.broker.kafka_listener`, :mod:`kraftlog.broker.kafka_apis`. Pure.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Protocol, runtime_checkable

from kraftlog.protocol import wire
from kraftlog.protocol.generated import (
    api_versions,
    create_topics,
    delete_topics,
    fetch,
    find_coordinator,
    init_producer_id,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    produce,
)


class ApiKey(enum.IntEnum):
    """Kafka's API keys (org.apache.kafka.common.protocol.ApiKeys) that kraftlog serves."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22


@runtime_checkable
class Message(Protocol):
    """What every generated message is to the listener: something that writes itself."""

    def write(self, w: wire.Writer, version: int) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Api:
    key: ApiKey
    request: Any
    """The generated request class (``decode(data, version)``)."""
    response: Any
    """The generated response class (``encode(version)``)."""

    @property
    def min_version(self) -> int:
        return int(self.request.MIN_VERSION)

    @property
    def max_version(self) -> int:
        return int(self.request.MAX_VERSION)

    def flexible(self, version: int) -> bool:
        low, high = self.request.FLEXIBLE_VERSIONS
        return bool(low <= version <= high)

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


SERVED: dict[int, Api] = {api.key: api for api in (
    Api(key=ApiKey.PRODUCE, request=produce.ProduceRequest, response=produce.ProduceResponse),
    Api(key=ApiKey.FETCH, request=fetch.FetchRequest, response=fetch.FetchResponse),
    Api(key=ApiKey.LIST_OFFSETS, request=list_offsets.ListOffsetsRequest,
        response=list_offsets.ListOffsetsResponse),
    Api(key=ApiKey.METADATA, request=metadata.MetadataRequest,
        response=metadata.MetadataResponse),
    Api(key=ApiKey.OFFSET_COMMIT, request=offset_commit.OffsetCommitRequest,
        response=offset_commit.OffsetCommitResponse),
    Api(key=ApiKey.OFFSET_FETCH, request=offset_fetch.OffsetFetchRequest,
        response=offset_fetch.OffsetFetchResponse),
    Api(key=ApiKey.FIND_COORDINATOR, request=find_coordinator.FindCoordinatorRequest,
        response=find_coordinator.FindCoordinatorResponse),
    Api(key=ApiKey.API_VERSIONS, request=api_versions.ApiVersionsRequest,
        response=api_versions.ApiVersionsResponse),
    Api(key=ApiKey.CREATE_TOPICS, request=create_topics.CreateTopicsRequest,
        response=create_topics.CreateTopicsResponse),
    Api(key=ApiKey.DELETE_TOPICS, request=delete_topics.DeleteTopicsRequest,
        response=delete_topics.DeleteTopicsResponse),
    Api(key=ApiKey.INIT_PRODUCER_ID, request=init_producer_id.InitProducerIdRequest,
        response=init_producer_id.InitProducerIdResponse),
)}


def api_versions_entries() -> list[api_versions.ApiVersion]:
    """ApiVersions' list: every served API with its range, by key."""
    return [api_versions.ApiVersion(api_key=int(api.key), min_version=api.min_version,
                                    max_version=api.max_version)
            for api in sorted(SERVED.values(), key=lambda a: a.key)]
