"""kraftlog's producer and consumer library, and the ``kraftlog produce`` / ``consume`` tools.

The public face (import from here)::

    from kraftlog import client

    producer = client.Producer(client.ProducerConfig(
        bootstrap_servers=("127.0.0.1:19101",), acks=client.Acks.ALL, linger_ms=5))
    future = producer.send("events", b"value", key=b"k", headers=[("h", b"v")])
    future.result(timeout=10)          # RecordMetadata(topic, partition, offset, timestamp_ms)
    producer.close()

    consumer = client.Consumer(client.ConsumerConfig(
        bootstrap_servers=("127.0.0.1:19101",), auto_offset_reset=client.OffsetReset.EARLIEST))
    consumer.assign_topic("events")    # or assign([TopicPartition(...), ...])
    records = consumer.poll(max_records=500, timeout_ms=1000)   # list[ConsumerRecord]
    consumer.close()

    # Committed offsets: group.id set, positions committed with commit() (or auto-committed),
    # a partition without a position starts from the group's committed offset.
    consumer = client.Consumer(client.ConsumerConfig(
        bootstrap_servers=("127.0.0.1:19101",), group_id="billing", enable_auto_commit=False))
    consumer.assign_topic("events")
    records = consumer.poll(timeout_ms=1000)
    consumer.commit()                  # or commit({tp: 42}) / commit({tp: OffsetAndMetadata(...)})
    consumer.committed(consumer.assignment())   # {tp: OffsetAndMetadata | None}

Both are synchronous (a Spark task or a CLI has no event loop); the producer
sends from one background thread, the consumer fetches inside ``poll``. Configs
take Kafka's names through ``from_properties({"bootstrap.servers": ..., ...})``.
Errors are :mod:`kraftlog.client.errors` (all ``KraftlogError``), named for
Kafka's error codes.

A program that moves records in bulk should call ``client.tune_malloc()`` once at start
(glibc only; see :mod:`kraftlog.malloc_tuning`): with glibc's defaults every Fetch answer
and every request's records is a fresh, page-faulted mmap, ~15% of a consumer's throughput.
``kraftlog produce`` / ``consume`` do.

Rooms: :mod:`.config` (settings), :mod:`.partitioner` (murmur2, sticky),
:mod:`.accumulator` (batches), :mod:`.metadata_client` (channels, metadata
cache), :mod:`.producer`, :mod:`.consumer`, :mod:`.commands` (CLI).

Importing this package imports none of its rooms: each public name is resolved on
first use (PEP 562 ``__getattr__``) and then cached. CPython (3.11 included, gh-83065)
takes a submodule's import lock before its parent's, so an ``__init__`` that imported
its own rooms deadlocked against a thread importing one of them directly: about one
start in eight raised ``_DeadlockError`` or "partially initialized module". The rule,
checked by tests/test_import_cycles.py: a package ``__init__`` imports nothing inside
its own package at import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kraftlog.client.config import Acks, ConsumerConfig, OffsetReset, ProducerConfig
    from kraftlog.client.consumer import (
        Consumer,
        ConsumerRecord,
        OffsetAndMetadata,
        OffsetAndTimestamp,
    )
    from kraftlog.client.errors import (
        BrokersUnavailableError,
        ClientClosedError,
        ClientError,
        ClientTimeoutError,
        CorruptRecordBatchError,
        KafkaApiError,
        OffsetOutOfRangeError,
        UnknownTopicError,
    )
    from kraftlog.client.metadata_client import PartitionInfo
    from kraftlog.client.producer import Producer, RecordFuture, RecordMetadata
    from kraftlog.ids import TopicPartition
    from kraftlog.malloc_tuning import tune as tune_malloc
    from kraftlog.storage.record_batch import Header, TimestampType

_CONFIG, _CONSUMER, _ERRORS, _PRODUCER = (f"{__name__}.config", f"{__name__}.consumer",
                                          f"{__name__}.errors", f"{__name__}.producer")
# public name -> (the module that defines it, its name there)
_EXPORTS: dict[str, tuple[str, str]] = {
    **{name: (_CONFIG, name) for name in ("Acks", "ConsumerConfig", "OffsetReset",
                                          "ProducerConfig")},
    **{name: (_CONSUMER, name) for name in ("Consumer", "ConsumerRecord", "OffsetAndMetadata",
                                            "OffsetAndTimestamp")},
    **{name: (_ERRORS, name) for name in (
        "BrokersUnavailableError", "ClientClosedError", "ClientError", "ClientTimeoutError",
        "CorruptRecordBatchError", "KafkaApiError", "OffsetOutOfRangeError", "UnknownTopicError")},
    "PartitionInfo": (f"{__name__}.metadata_client", "PartitionInfo"),
    **{name: (_PRODUCER, name) for name in ("Producer", "RecordFuture", "RecordMetadata")},
    "Header": ("kraftlog.storage.record_batch", "Header"),
    "TimestampType": ("kraftlog.storage.record_batch", "TimestampType"),
    "TopicPartition": ("kraftlog.ids", "TopicPartition"),
    "tune_malloc": ("kraftlog.malloc_tuning", "tune"),
}
_ROOMS = frozenset({"accumulator", "commands", "config", "consumer", "errors", "fetch_wire",
                    "metadata_client", "partitioner", "producer"})


def __getattr__(name: str) -> Any:
    """Resolve a public name (or a room, ``client.errors``) on first use, then cache it."""
    if name in _ROOMS:
        value: Any = importlib.import_module(f"{__name__}.{name}")
    elif name in _EXPORTS:
        module, attribute = _EXPORTS[name]
        value = getattr(importlib.import_module(module), attribute)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_ROOMS})


__all__ = [
    "Acks", "BrokersUnavailableError", "ClientClosedError", "ClientError", "ClientTimeoutError",
    "Consumer", "ConsumerConfig", "ConsumerRecord", "CorruptRecordBatchError", "Header",
    "KafkaApiError",
    "OffsetAndMetadata", "OffsetAndTimestamp", "OffsetOutOfRangeError", "OffsetReset", "PartitionInfo", "Producer",
    "ProducerConfig", "RecordFuture", "RecordMetadata", "TimestampType", "TopicPartition",
    "UnknownTopicError", "tune_malloc",
]
