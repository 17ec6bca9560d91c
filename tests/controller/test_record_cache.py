"""server/controller_host.py RecordCache: each committed record is decoded once per process.

The QuorumController and the MetadataLoader both consume every committed record; the cache
hands the second consumer the first one's record, keyed by the exact bytes, and stays
bounded."""

from __future__ import annotations

import pytest

from kraftlog.errors import CorruptRecordError
from kraftlog.ids import Uuid
from kraftlog.metadata import record_convert
from kraftlog.metadata import records as r
from kraftlog.server import controller_host as process

TOPIC = r.TopicRecord(name="t", topic_id=Uuid.from_bits(1, 1))


def test_what_the_controller_encodes_the_loader_decodes_without_parsing() -> None:
    cache = process.RecordCache()
    value = cache.encode(TOPIC)
    assert value == record_convert.encode(TOPIC)
    assert cache.decode(bytes(value), offset=5) is TOPIC  # equal bytes, another object
    assert len(cache) == 0  # its one other consumer took it


def test_a_standby_decodes_once_for_the_loader_and_the_controller() -> None:
    cache = process.RecordCache()
    value = record_convert.encode(TOPIC)
    first = cache.decode(value, offset=3)
    assert first == TOPIC
    assert cache.decode_at(value, 3) is first
    assert len(cache) == 0
    # A third read decodes afresh (and gives an equal record).
    assert cache.decode(memoryview(value), offset=3) == TOPIC


def test_different_bytes_never_share_a_record() -> None:
    cache = process.RecordCache()
    other = r.TopicRecord(name="u", topic_id=Uuid.from_bits(1, 1))
    cache.encode(TOPIC)
    assert cache.decode(record_convert.encode(other), offset=0) == other


def test_the_cache_is_bounded_and_forgets_the_oldest_first() -> None:
    cache = process.RecordCache(capacity=2)
    records = [r.TopicRecord(name=f"t{i}", topic_id=Uuid.from_bits(1, i + 1)) for i in range(3)]
    values = [cache.encode(record) for record in records]
    assert len(cache) == 2
    assert cache.decode(values[0], offset=0) is not records[0]  # evicted: decoded again
    assert cache.decode(values[2], offset=2) is records[2]


def test_corrupt_bytes_still_raise_naming_the_offset() -> None:
    cache = process.RecordCache()
    with pytest.raises(CorruptRecordError, match="offset 9"):
        cache.decode(b"\xff\xff", offset=9)
