"""Compression codecs of the RecordBatch v2 records section.

Owns :class:`CompressionType` (the codec id stored in bits 0-2 of a batch's
attributes) and the byte-level ``compress`` / ``decompress`` of one records
section. With compression, everything after ``recordCount`` is one compressed
block (Kafka's message-format docs); ``recordCount`` itself stays uncompressed.

Formats match what Kafka's Java client writes and reads:

- GZIP: RFC 1952 gzip members (``java.util.zip.GZIPOutputStream``); several
  concatenated members are accepted on decode, like ``GZIPInputStream``.
- LZ4: the LZ4 *frame* format (``KafkaLZ4BlockOutputStream``: 64 KiB independent
  blocks, no content size, no content checksum). The pre-KIP-57 broken header
  checksum only ever applied to magic 0/1 and is not supported.
- ZSTD: standard zstd frames (KIP-110); concatenated frames are accepted.
- SNAPPY: not supported (it would need a native dependency with xerial framing);
  both directions fail with a clear error instead of passing bytes through.

Default levels are Kafka's (KIP-390): gzip 6, lz4 9, zstd 3.

Called by :mod:`kraftlog.storage.record_batch`'s full encoder/decoder (clients and
tools) and by :mod:`kraftlog.storage.log_validator` (a leader decompresses a client's
batch to check its records). Brokers never recompress (a leader keeps a client's batch bytes as they came).
It must not import I/O frameworks or a clock (tests/test_layering.py).
"""

from __future__ import annotations

import enum
import zlib

import lz4.frame
import zstandard

from kraftlog.errors import CorruptRecordError, KraftlogError, UnsupportedCompressionTypeError


class CompressionType(enum.IntEnum):
    """Codec ids of attributes bits 0-2 (Kafka ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


DEFAULT_LEVELS: dict[CompressionType, int] = {
    CompressionType.GZIP: 6,
    CompressionType.LZ4: 9,
    CompressionType.ZSTD: 3,
}
"""``compression.<codec>.level`` defaults from KIP-390."""

MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
"""Default cap on one decompressed records section: a few corrupt or hostile bytes
must not make a reader allocate gigabytes (a "decompression bomb")."""

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # zlib's switch for the gzip container, not raw deflate
_LZ4_BLOCK_SIZE = lz4.frame.BLOCKSIZE_MAX64KB
# zstd input is fed in small slices so that the output of one slice stays bounded
# (one RLE block of a few bytes can expand to 128 KiB) and the size cap bites early.
_ZSTD_FEED_BYTES = 1024

_SNAPPY_UNSUPPORTED = "snappy compression is not supported by kraftlog (use gzip, lz4 or zstd)"


def _codec(codec: int) -> CompressionType:
    try:
        return CompressionType(codec)
    except ValueError:
        raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}") from None


def compress(codec: CompressionType, data: bytes, *, level: int | None = None) -> bytes:
    """Compress one records section with ``codec``.

    ``NONE`` returns ``data`` unchanged. SNAPPY raises :class:`KraftlogError`.
    ``level`` defaults to Kafka's default for the codec.
    """
    if codec is CompressionType.NONE:
        return data
    if codec is CompressionType.SNAPPY:
        raise KraftlogError(_SNAPPY_UNSUPPORTED)
    chosen = DEFAULT_LEVELS[codec] if level is None else level
    if codec is CompressionType.GZIP:
        compressor = zlib.compressobj(chosen, zlib.DEFLATED, _GZIP_WBITS)
        return compressor.compress(data) + compressor.flush()
    if codec is CompressionType.LZ4:
        out: bytes = lz4.frame.compress(
            data,
            compression_level=chosen,
            block_size=_LZ4_BLOCK_SIZE,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return out
    if codec is CompressionType.ZSTD:
        zout: bytes = zstandard.ZstdCompressor(level=chosen).compress(data)
        return zout
    raise KraftlogError(f"unknown compression codec {codec!r}")


def decompress(
    codec: int, data: bytes | memoryview, *, max_size: int = MAX_DECOMPRESSED_BYTES
) -> bytes:
    """Decompress one records section.

    Raises :class:`CorruptRecordError` (without a position: the caller knows
    where the batch is and re-raises with it) when the data is truncated, is not
    valid for the codec, has trailing garbage, decompresses to more than
    ``max_size`` bytes, or the codec is SNAPPY or unknown.
    """
    kind = _codec(codec)
    if kind is CompressionType.NONE:
        return bytes(data)
    if kind is CompressionType.SNAPPY:
        raise CorruptRecordError(_SNAPPY_UNSUPPORTED)
    if not data:
        raise CorruptRecordError(f"{kind.name} records section is empty")
    try:
        if kind is CompressionType.GZIP:
            return _gunzip(bytes(data), max_size)
        if kind is CompressionType.LZ4:
            return _lz4_decompress(bytes(data), max_size)
        return _zstd_decompress(bytes(data), max_size)
    except CorruptRecordError:
        raise
    except (zlib.error, RuntimeError, zstandard.ZstdError, ValueError) as exc:
        # lz4.frame raises RuntimeError for malformed frames.
        raise CorruptRecordError(f"{kind.name} decompression failed: {exc}") from exc


class DecompressedTooLargeError(CorruptRecordError):
    """A records section decompresses to more than the caller's ``max_size``: too large, which a
    leader answers with MESSAGE_TOO_LARGE, not CORRUPT_MESSAGE."""


def _too_large(kind: str, max_size: int) -> CorruptRecordError:
    return DecompressedTooLargeError(f"{kind} records section decompresses to more than {max_size} bytes")


def _gunzip(data: bytes, max_size: int) -> bytes:
    out = bytearray()
    rest = data
    while rest:
        member = zlib.decompressobj(_GZIP_WBITS)
        # max_length is always >= 1 here (0 would mean "unlimited" to zlib).
        out += member.decompress(rest, max_size + 1 - len(out))
        if len(out) > max_size:
            raise _too_large("GZIP", max_size)
        if not member.eof:
            raise CorruptRecordError("GZIP data is truncated (member has no end)")
        rest = member.unused_data
    return bytes(out)


def _lz4_decompress(data: bytes, max_size: int) -> bytes:
    frame = lz4.frame.LZ4FrameDecompressor()
    out: bytes = frame.decompress(data, max_length=max_size + 1)
    if len(out) > max_size:
        raise _too_large("LZ4", max_size)
    if not frame.eof:
        raise CorruptRecordError("LZ4 frame is truncated (no end mark)")
    if frame.unused_data:
        raise CorruptRecordError(
            f"{len(frame.unused_data)} trailing bytes after the LZ4 frame"
        )
    return out


def _zstd_decompress(data: bytes, max_size: int) -> bytes:
    out = bytearray()
    view = memoryview(data)
    dctx = zstandard.ZstdDecompressor()
    while view:
        frame = dctx.decompressobj()
        while view and not frame.eof:
            out += frame.decompress(view[:_ZSTD_FEED_BYTES])
            view = view[_ZSTD_FEED_BYTES:]
            if len(out) > max_size:
                raise _too_large("ZSTD", max_size)
        if not frame.eof:
            raise CorruptRecordError("ZSTD frame is truncated (no end of frame)")
        # Bytes fed past the frame's end come back as unused_data: the next frame.
        leftover = frame.unused_data
        if leftover:
            view = memoryview(bytes(leftover) + bytes(view))
    return bytes(out)
