"""Micro-benchmark of the broker's header-only batch paths (kraftlog.storage.batch_header).

Measures ``stamp_batches`` (leader append: CRC check + header patch per batch)
and ``scan_valid_prefix`` (recovery scan) over 1 MiB of batches, and prints each
as a ratio of the anchor: one hardware CRC-32C pass over the same bytes, the
floor any CRC-checking path must pay. A ratio near 1.0 means the per-batch
Python work is negligible next to the checksum; it falls as batches get smaller
(more headers per MiB). Also times the client-side full encoder/decoder, which
loops per record, in CPU µs per record (no anchor: it is not on the broker path).
And the per-record loops of the producer's RecordsBuilder, the consumer's decode, the
leader's LogValidator and the cleaner on 1,000 1 KiB records (CPU µs per record).

Run: ``.venv/bin/python bench/bench_record_batch.py`` (a few seconds; 1 core).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import crc32c

from kraftlog.storage import batch_header as bh
from kraftlog.storage import cleaner, log_validator
from kraftlog.storage import record_batch as rb

MIB = 1024 * 1024


def _batches(records_per_batch: int, value_size: int, total_bytes: int) -> bytes:
    records = [rb.RecordInput(key=b"key-%06d" % i, value=bytes(value_size), timestamp_ms=i)
               for i in range(records_per_batch)]
    one = rb.build_batch(records)
    return one * max(1, total_bytes // len(one))


def _best_seconds(fn: Callable[[], object], repeat: int = 15) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _best_cpu_seconds(fn: Callable[[], object], repeat: int = 30) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    print(f"{'batch shape':<26}{'anchor GB/s':>12}{'stamp':>8}{'scan':>8}")
    for records_per_batch, value_size in ((1, 100), (16, 1000), (64, 16_000)):
        data = _batches(records_per_batch, value_size, MIB)
        buf = bytearray(data)
        bh.stamp_batches(buf, first_offset=0, leader_epoch=1)
        data = bytes(buf)  # offsets now increase, so the scan walks every batch
        anchor = _best_seconds(lambda data=data: crc32c.crc32c(data))  # type: ignore[misc]
        stamp = _best_seconds(
            lambda buf=buf: bh.stamp_batches(buf, first_offset=0, leader_epoch=1)  # type: ignore[misc]
        )
        scan = _best_seconds(lambda data=data: bh.scan_valid_prefix(data))  # type: ignore[misc]
        shape = f"{records_per_batch} x {value_size} B records"
        print(f"{shape:<26}{len(data) / anchor / 1e9:>12.1f}"
              f"{anchor / stamp:>8.3f}{anchor / scan:>8.3f}")

    # The client codec (build_batch / decode_batches), per record: CPU time (process_time,
    # min of repeats), so other processes on a shared box disturb it less than wall time.
    print(f"{'full codec, per record':<34}{'encode us':>10}{'decode us':>10}")
    shapes = (
        ("256 x 1 KiB, null keys", [rb.RecordInput(value=bytes(1024), timestamp_ms=10**12 + i // 16)
                                    for i in range(256)]),
        ("1000 x 100 B, keys", [rb.RecordInput(key=b"k%d" % i, value=bytes(100), timestamp_ms=i)
                                for i in range(1000)]),
        ("200 x 100 B, 2 headers", [rb.RecordInput(key=b"k", value=bytes(100), timestamp_ms=i,
                                                   headers=(rb.Header(key="a", value=b"x"),
                                                            rb.Header(key="b", value=None)))
                                    for i in range(200)]),
    )
    for name, records in shapes:
        encode = _best_cpu_seconds(lambda records=records: rb.build_batch(records))  # type: ignore[misc]
        encoded = rb.build_batch(records)
        decode = _best_cpu_seconds(lambda encoded=encoded: rb.decode_batches(encoded))  # type: ignore[misc]
        print(f"{name:<34}{encode / len(records) * 1e6:>10.2f}{decode / len(records) * 1e6:>10.2f}")

    # The per-record loops issue 18 item 3 kept fast, on one batch of 1,000 keyed 1 KiB
    # records: the producer's RecordsBuilder (append + build), the consumer's decode
    # (decode_batch_records, in place), the leader's LogValidator and the cleaner's walk.
    values, keys = bytes(1024), [b"key-%06d" % i for i in range(1000)]

    def build() -> bytes:
        builder = rb.RecordsBuilder()
        for i, key in enumerate(keys):
            builder.append(key, values, (), 1_700_000_000_000 + i)
        return builder.build(producer_id=7, producer_epoch=0, base_sequence=0)

    batch = build()
    config = log_validator.ValidationConfig()
    section = batch[bh.RECORDS_OFFSET:]
    loops = (
        ("build", build),
        ("decode", lambda: rb.decode_batch_records(next(bh.iter_batches(batch)), rb.Record)),
        ("validate", lambda: log_validator.validate_batches(batch, config, now_ms=1_700_000_000_000)),
        ("cleaner walk", lambda: cleaner._parse_records(section, len(keys))),
    )
    print(f"{'1000 x 1 KiB, keys, per record':<34}" + "".join(f"{name:>14}" for name, _ in loops))
    print(f"{'CPU us':<34}" + "".join(
        f"{_best_cpu_seconds(fn) / len(keys) * 1e6:>14.2f}" for _, fn in loops))


if __name__ == "__main__":
    main()
