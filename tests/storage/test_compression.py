"""Tests of kraftlog.storage.compression: the records-section codecs of RecordBatch v2."""

from __future__ import annotations

import gzip
import os

import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.errors import CorruptRecordError, KraftlogError
from kraftlog.storage import compression
from kraftlog.storage.compression import CompressionType

REAL_CODECS = (CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD)


def _sample(size: int) -> bytes:
    # Half compressible text, half random bytes: exercises both literal and match paths.
    text = (b"kraftlog record " * (size // 32 + 1))[: size // 2]
    return text + os.urandom(size - len(text))


@pytest.mark.parametrize("codec", REAL_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("size", [0, 1, 100, 70_000, 300_000])
def test_round_trip_of_every_supported_codec(codec: CompressionType, size: int) -> None:
    data = _sample(size)
    packed = compression.compress(codec, data)
    assert compression.decompress(codec, packed) == data
    assert compression.decompress(int(codec), memoryview(packed)) == data


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=2000), codec=st.sampled_from(REAL_CODECS))
def test_round_trip_property(data: bytes, codec: CompressionType) -> None:
    assert compression.decompress(codec, compression.compress(codec, data)) == data


def test_none_passes_bytes_through() -> None:
    assert compression.compress(CompressionType.NONE, b"abc") == b"abc"
    assert compression.decompress(CompressionType.NONE, memoryview(b"abc")) == b"abc"


def test_gzip_writes_a_gzip_container_that_stdlib_gzip_reads() -> None:
    packed = compression.compress(CompressionType.GZIP, b"hello kafka")
    assert packed[:2] == b"\x1f\x8b"  # RFC 1952 magic, as GZIPOutputStream writes
    assert gzip.decompress(packed) == b"hello kafka"


def test_gzip_reads_stdlib_output_and_concatenated_members() -> None:
    packed = gzip.compress(b"one-") + gzip.compress(b"two")
    assert compression.decompress(CompressionType.GZIP, packed) == b"one-two"


def test_lz4_writes_a_kafka_style_frame() -> None:
    packed = compression.compress(CompressionType.LZ4, _sample(200_000))
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic (little-endian 0x184D2204)
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 0b01  # frame format version 01
    assert flg & 0x20  # independent blocks, as KafkaLZ4BlockOutputStream writes
    assert not flg & 0x08  # no content size
    assert not flg & 0x04  # no content checksum
    assert (bd >> 4) & 0x07 == 4  # 64 KiB maximum block size


def test_lz4_reads_frames_with_other_options() -> None:
    data = _sample(100_000)
    packed = lz4.frame.compress(data, content_checksum=True, store_size=True, block_linked=True)
    assert compression.decompress(CompressionType.LZ4, packed) == data


def test_zstd_reads_streamed_frames_without_content_size_and_concatenated_frames() -> None:
    data = _sample(50_000)
    streamed = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    packed = streamed.compress(data) + streamed.flush()
    second = zstandard.ZstdCompressor().compress(b"tail")
    assert compression.decompress(CompressionType.ZSTD, packed + second) == data + b"tail"


@pytest.mark.parametrize("codec", REAL_CODECS, ids=lambda c: c.name)
def test_truncated_data_is_corrupt(codec: CompressionType) -> None:
    packed = compression.compress(codec, _sample(5000))
    for cut in (1, len(packed) // 2, len(packed) - 1):
        with pytest.raises(CorruptRecordError):
            compression.decompress(codec, packed[:cut])


@pytest.mark.parametrize("codec", REAL_CODECS, ids=lambda c: c.name)
def test_garbage_and_empty_input_are_corrupt(codec: CompressionType) -> None:
    with pytest.raises(CorruptRecordError, match=codec.name):
        compression.decompress(codec, b"\x00\x01garbage-garbage-garbage")
    with pytest.raises(CorruptRecordError, match="empty"):
        compression.decompress(codec, b"")


@pytest.mark.parametrize("codec", REAL_CODECS, ids=lambda c: c.name)
def test_trailing_garbage_is_corrupt(codec: CompressionType) -> None:
    packed = compression.compress(codec, b"payload" * 10)
    with pytest.raises(CorruptRecordError):
        compression.decompress(codec, packed + b"\xde\xad\xbe\xef")


@pytest.mark.parametrize("codec", REAL_CODECS, ids=lambda c: c.name)
def test_decompression_bomb_is_refused(codec: CompressionType) -> None:
    packed = compression.compress(codec, bytes(1_000_000))
    assert len(packed) < 20_000
    with pytest.raises(CorruptRecordError, match="more than 100000 bytes"):
        compression.decompress(codec, packed, max_size=100_000)
    assert len(compression.decompress(codec, packed, max_size=1_000_000)) == 1_000_000


def test_snappy_is_refused_both_ways_with_a_clear_message() -> None:
    with pytest.raises(KraftlogError, match="snappy compression is not supported"):
        compression.compress(CompressionType.SNAPPY, b"x")
    with pytest.raises(CorruptRecordError, match="snappy compression is not supported"):
        compression.decompress(CompressionType.SNAPPY, b"x")


def test_unknown_codec_id_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="unknown compression codec id 7"):
        compression.decompress(7, b"x")


def test_levels_follow_kip_390_defaults_and_can_be_overridden() -> None:
    data = _sample(20_000)
    for codec in REAL_CODECS:
        fast = compression.compress(codec, data, level=1)
        assert compression.decompress(codec, fast) == data
    assert compression.DEFAULT_LEVELS == {
        CompressionType.GZIP: 6, CompressionType.LZ4: 9, CompressionType.ZSTD: 3,
    }
