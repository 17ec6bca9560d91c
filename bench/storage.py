"""Storage benchmark: segmented-log append and sequential read, as ratios of raw file I/O.

Measures, in one run and in the same temporary directory:

* raw write: ``os.write`` of 1 MiB chunks to a plain file (no fsync);
* log append: ``Log.append_as_leader`` of 1 MiB of record batches per call
  (offsets and leader epoch stamped into the headers, CRC checked, indexes
  written; no fsync);
* raw read: ``readinto`` of 1 MiB chunks from that file into one buffer;
* log read: ``Log.read(offset, 1 MiB)`` over the whole log, following
  ``next_offset``.

Every read touches one byte per 4 KiB page of what it got. Rounds alternate
raw/log so page-cache and writeback effects hit both; the best round of each
is reported, for 16 KiB batches (Kafka's default ``batch.size``) and 64 KiB
batches. Prints a table and one JSON line; the target is a ratio >= 0.8 for
both paths (judged on the first batch size). Bounded: ``--mib`` per round
(default 256) x ``--rounds`` (default 7) x batch sizes, about 15-30 s. Run as
``.venv/bin/python bench/storage.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "services"))

from kraftlog.storage import record_batch
from kraftlog.storage.log import Log
from kraftlog.storage.log_config import LogConfig

MIB = 1024 * 1024
PAGE = 4096


def make_chunk(*, batch_bytes: int, record_bytes: int) -> bytearray:
    """About 1 MiB of whole v2 batches (never more), each about ``batch_bytes`` long."""
    records_per_batch = max(1, batch_bytes // (record_bytes + 16))
    batch = record_batch.build_batch(
        [record_batch.RecordInput(key=b"k%06d" % i, value=os.urandom(record_bytes), timestamp_ms=1_700_000_000_000 + i)
         for i in range(records_per_batch)])
    count = MIB // len(batch)
    return bytearray(batch * count)


def touch(view: bytes | bytearray | memoryview) -> int:
    """Read one byte per page, so the bytes are really there."""
    return sum(memoryview(view)[::PAGE])


def raw_write(path: str, chunk: bytearray, total: int) -> float:
    view = memoryview(chunk)
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        written = 0
        while written < total:
            rest = view
            while rest:
                rest = rest[os.write(fd, rest):]
            written += len(chunk)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def raw_read(path: str) -> tuple[float, int]:
    buf = bytearray(MIB)
    view = memoryview(buf)
    total = 0
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            touch(view[:n])
            total += n
    return time.perf_counter() - start, total


def log_append(directory: str, chunk: bytearray, total: int) -> tuple[float, int]:
    config = LogConfig(retention_ms=-1)
    log = Log.open(directory, config, now_ms=0)
    start = time.perf_counter()
    written = 0
    while written < total:
        log.append_as_leader(chunk, leader_epoch=1, now_ms=0)
        written += len(chunk)
    elapsed = time.perf_counter() - start
    end = log.log_end_offset
    log.close_handlers()
    return elapsed, end


def log_read(directory: str, log_end_offset: int) -> tuple[float, int]:
    # Reopened with the recovery point at the end: the timed part is reading, not recovery.
    log = Log.open(directory, LogConfig(retention_ms=-1), now_ms=0, recovery_point=log_end_offset)
    total = 0
    offset = log.log_start_offset
    end = log.log_end_offset
    start = time.perf_counter()
    while offset < end:
        data = log.read(offset, MIB)
        touch(data.records)
        total += len(data.records)
        offset = data.next_offset
    elapsed = time.perf_counter() - start
    log.close_handlers()
    return elapsed, total


def measure(chunk: bytearray, *, total: int, rounds: int, tmp: str) -> dict[str, float]:
    """Best-of-``rounds`` MiB/s for raw write, log append, raw read and log read."""
    best = {"raw_write": float("inf"), "log_append": float("inf"), "raw_read": float("inf"),
            "log_read": float("inf")}
    read_bytes = {"raw_read": 0, "log_read": 0}
    for n in range(rounds):
        # Fresh files every round: truncating a large cached file would
        # charge page-cache freeing to whichever side did it.
        raw_path = os.path.join(tmp, f"raw-{n}.bin")
        log_dir = os.path.join(tmp, f"bench-{n}")
        best["raw_write"] = min(best["raw_write"], raw_write(raw_path, chunk, total))
        elapsed, log_end = log_append(log_dir, chunk, total)
        best["log_append"] = min(best["log_append"], elapsed)
        elapsed, read_bytes["raw_read"] = raw_read(raw_path)
        best["raw_read"] = min(best["raw_read"], elapsed)
        elapsed, read_bytes["log_read"] = log_read(log_dir, log_end)
        best["log_read"] = min(best["log_read"], elapsed)
        for name in os.listdir(log_dir):
            os.unlink(os.path.join(log_dir, name))
        os.rmdir(log_dir)
        os.unlink(raw_path)
    written = (total + len(chunk) - 1) // len(chunk) * len(chunk)
    return {
        "raw_write": written / best["raw_write"] / MIB,
        "log_append": written / best["log_append"] / MIB,
        "raw_read": read_bytes["raw_read"] / best["raw_read"] / MIB,
        "log_read": read_bytes["log_read"] / best["log_read"] / MIB,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB written per round (default 256)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating raw/log rounds (default 7)")
    parser.add_argument("--batch-bytes", default="16384,65536",
                        help="record batch sizes to try, comma-separated (default 16384 = Kafka's batch.size, "
                             "and 65536); the first one decides pass/fail")
    parser.add_argument("--record-bytes", type=int, default=1000, help="record value size (default 1000)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.batch_bytes.split(",")]
    total = args.mib * MIB
    print(f"storage bench: {args.mib} MiB x {args.rounds} rounds per batch size, ~1 MiB of batches per "
          f"append and per read, best round, no fsync")
    print(f"{'batch B':>8}{'batches':>8}  {'path':<7}{'MiB/s':>8}  {'anchor':<10}{'MiB/s':>8}{'ratio':>7}"
          f"{'target':>8}")
    results = []
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="kraftlog-bench-") as tmp:
        for size in sizes:
            chunk = make_chunk(batch_bytes=size, record_bytes=args.record_bytes)
            batches = len(list(record_batch.iter_batches(chunk)))
            rate = measure(chunk, total=total, rounds=args.rounds, tmp=tmp)
            append_ratio = rate["log_append"] / rate["raw_write"]
            read_ratio = rate["log_read"] / rate["raw_read"]
            batch_bytes = len(chunk) // batches
            print(f"{batch_bytes:>8}{batches:>8}  {'append':<7}{rate['log_append']:>8.0f}  {'raw write':<10}"
                  f"{rate['raw_write']:>8.0f}{append_ratio:>7.2f}{'>=0.8':>8}")
            print(f"{batch_bytes:>8}{batches:>8}  {'read':<7}{rate['log_read']:>8.0f}  {'raw read':<10}"
                  f"{rate['raw_read']:>8.0f}{read_ratio:>7.2f}{'>=0.8':>8}")
            results.append({
                "batch_bytes": batch_bytes, "batches_per_append": batches, "append_bytes": len(chunk),
                "append_mib_s": round(rate["log_append"], 1), "raw_write_mib_s": round(rate["raw_write"], 1),
                "append_ratio": round(append_ratio, 3),
                "read_mib_s": round(rate["log_read"], 1), "raw_read_mib_s": round(rate["raw_read"], 1),
                "read_ratio": round(read_ratio, 3),
            })
    first = results[0]
    print(json.dumps({
        "bench": "storage", "mib_per_round": args.mib, "rounds": args.rounds, "results": results,
        "target": 0.8, "pass": first["append_ratio"] >= 0.8 and first["read_ratio"] >= 0.8,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
