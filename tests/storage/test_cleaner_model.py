"""Property test of log compaction against a dict model.

Model: after a cleaning that ends at offset E, the log holds, below E, exactly
the records whose key is not null and whose offset is the last one of that key
among all offsets below E (tombstones included: delete.retention.ms is long
here); at and after E every record, verbatim. Batches still cover every offset
contiguously, and a replica can copy the log byte for byte.
"""

from __future__ import annotations

import itertools
import pathlib
import tempfile

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from kraftlog.storage import batch_header as bh
from kraftlog.storage import cleaner
from kraftlog.storage import record_batch as rb
from kraftlog.storage.compression import CompressionType
from kraftlog.storage.log import Log
from kraftlog.storage.log_config import LogConfig

T0 = 1_700_000_000_000
CFG = cleaner.CleanerConfig(delete_retention_ms=10**12, min_cleanable_dirty_ratio=0.0)

Rec = tuple[int, bytes | None, bytes | None]

record_st = st.tuples(st.sampled_from([None, b"a", b"b", b"c", b"d", b"e", b"f"]),
                      st.one_of(st.none(), st.binary(min_size=0, max_size=30)))
batch_st = st.tuples(st.lists(record_st, min_size=1, max_size=6),
                     st.sampled_from([CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD]),
                     st.integers(min_value=0, max_value=2), st.sampled_from([-1, -1, 5, 9]))
step_st = st.one_of(
    st.tuples(st.just("append"), st.lists(batch_st, min_size=1, max_size=8)),
    st.tuples(st.just("clean"), st.floats(min_value=0.0, max_value=1.0)),
)


def read_records(log: Log) -> tuple[list[Rec], list[tuple[int, int]]]:
    offset = log.log_start_offset
    out: list[Rec] = []
    spans: list[tuple[int, int]] = []
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 30)
        assert fetched.records, f"nothing to read at {offset} below the log end {log.log_end_offset}"
        for batch in rb.decode_batches(fetched.records):
            spans.append((batch.base_offset, batch.last_offset))
            out.extend((r.offset, r.key, r.value) for r in batch.records)
        offset = fetched.next_offset
    return out, spans


def read_all(log: Log) -> bytes:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 30)
        out.append(fetched.records)
        offset = fetched.next_offset
    return b"".join(out)


def model_after_clean(model: list[Rec], end: int) -> list[Rec]:
    last: dict[bytes, int] = {}
    for offset, key, _value in model:
        if offset < end and key is not None:
            last[key] = offset
    return [r for r in model if r[0] >= end or (r[1] is not None and last[r[1]] == r[0])]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step_st, min_size=1, max_size=12),
       segment_bytes=st.sampled_from([250, 500, 1_500]))
def test_compaction_matches_the_last_value_per_key_model(steps: list[tuple[str, object]],
                                                         segment_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp)
        log = Log.open(path / "log", LogConfig(segment_bytes=segment_bytes, index_interval_bytes=100,
                                               retention_ms=-1), now_ms=T0)
        model: list[Rec] = []
        all_appended: list[Rec] = []
        checkpoint: int | None = None
        next_sequence: dict[int, int] = {}
        producer_batches: list[tuple[int, int, int, int]] = []
        epoch = 0
        try:
            for kind, arg in steps:
                if kind == "append":
                    assert isinstance(arg, list)
                    for records, codec, epoch_step, producer_id in arg:
                        epoch += epoch_step
                        sequence = next_sequence.get(producer_id, 0) if producer_id >= 0 else -1
                        data = rb.build_batch([rb.RecordInput(key=k, value=v, timestamp_ms=T0) for k, v in records],
                                              compression=codec, producer_id=producer_id,
                                              producer_epoch=0 if producer_id >= 0 else -1, base_sequence=sequence)
                        info = log.append_as_leader(data, leader_epoch=epoch, now_ms=T0)
                        if producer_id >= 0:
                            next_sequence[producer_id] = sequence + len(records)
                            producer_batches.append((producer_id, sequence, info.first_offset, info.last_offset))
                        appended = [(info.first_offset + i, k, v) for i, (k, v) in enumerate(records)]
                        model.extend(appended)
                        all_appended.extend(appended)
                    continue
                assert isinstance(arg, float)
                # High watermark somewhere in the log; the cleanable end is a segment boundary below it.
                hw = log.log_start_offset + int(arg * (log.log_end_offset - log.log_start_offset))
                rng = cleaner.cleanable_range(log, checkpoint_offset=checkpoint, high_watermark=hw, now_ms=T0,
                                              config=CFG)
                assert rng.end_offset <= hw and rng.end_offset <= log.segments[-1].base_offset
                result = cleaner.clean(log, rng, now_ms=T0, config=CFG)
                assert result.end_offset <= max(rng.end_offset, rng.first_dirty_offset)
                checkpoint = result.end_offset
                model = model_after_clean(model, result.end_offset)
                got, spans = read_records(log)
                assert got == model
                # Each producer's last batch below the cleaned end keeps its header (sequence
                # range and offsets), emptied or not, so producer state can be rebuilt.
                last_below = {pid: (seq, first, last) for pid, seq, first, last in producer_batches
                              if last < result.end_offset}
                headers = {(h.producer_id, h.base_sequence, h.base_offset, h.last_offset)
                           for h in bh.iter_batches(read_all(log))}
                assert all((pid, *batch) in headers for pid, batch in last_below.items())
                assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
                assert not spans or (spans[0][0] == log.log_start_offset and spans[-1][1] == log.log_end_offset - 1)
            got, _spans = read_records(log)
            assert got == model
            end = log.log_end_offset
            log.close()
            reopened = Log.open(path / "log", LogConfig(segment_bytes=segment_bytes, index_interval_bytes=100,
                                                        retention_ms=-1), now_ms=T0, recovery_point=end)
            assert read_records(reopened)[0] == model
            replica = Log.open(path / "replica", LogConfig(retention_ms=-1), now_ms=T0)
            offset = 0
            while offset < reopened.log_end_offset:
                fetched = reopened.read(offset, 1 << 30)
                replica.append_as_follower(fetched.records, now_ms=T0)
                offset = fetched.next_offset
            assert read_records(replica)[0] == model
            reopened.close()
            replica.close()
        finally:
            log.close()
