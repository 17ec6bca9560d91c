"""Hypothesis state machine: the Log against an in-memory model (a list of batches).

Every rule changes both; after every step the whole log is read back and must
equal the model byte for byte, and the offsets, sizes and segment layout must
be consistent. Tiny segment, index and interval sizes make rolls, index-full
rolls and index lookups happen within a few steps.
"""

from __future__ import annotations

import itertools
import pathlib
import shutil
import tempfile
from dataclasses import dataclass

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kraftlog.storage import file_handles
from kraftlog.storage import record_batch as rb
from kraftlog.storage.log import Log, OffsetAndTimestamp
from kraftlog.storage.log_config import LogConfig

CONFIG = LogConfig(segment_bytes=700, segment_ms=5000, segment_index_bytes=48, index_interval_bytes=150,
                   retention_ms=3000, retention_bytes=1500)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelBatch:
    base_offset: int
    timestamps: tuple[int, ...]
    data: bytes

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.timestamps) - 1


BatchSpec = tuple[int, int, int]  # (record count, first timestamp, value size)
batch_specs = st.lists(
    st.tuples(st.integers(1, 4), st.integers(0, 10_000), st.integers(0, 60)), min_size=1, max_size=3)


def encode(spec: BatchSpec, *, base_offset: int, epoch: int) -> tuple[bytes, tuple[int, ...]]:
    count, first_ts, size = spec
    # Timestamps inside a batch go up and down a little, like a real producer's.
    timestamps = tuple(first_ts + (7 * i) % 5 for i in range(count))
    data = rb.build_batch([rb.RecordInput(value=b"%d" % i * size, timestamp_ms=t) for i, t in enumerate(timestamps)],
                          base_offset=base_offset, partition_leader_epoch=epoch)
    return data, timestamps


class LogMachine(RuleBasedStateMachine):
    handles = file_handles.UNBOUNDED
    """The descriptor cache every Log.open here uses (a subclass bounds it)."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="kraftlog-stateful-"))
        self.log = self.open_log(now_ms=0)
        self.batches: list[ModelBatch] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.epoch = 0

    def open_log(self, *, now_ms: int, recovery_point: int = 0, log_start_offset: int = 0) -> Log:
        return Log.open(self.dir, CONFIG, now_ms=now_ms, recovery_point=recovery_point,
                        log_start_offset=log_start_offset, handles=self.handles)

    def teardown(self) -> None:
        self.log.close_handlers()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize(start=st.integers(0, 1000))
    def start_somewhere(self, start: int) -> None:
        if start:
            self.log.truncate_fully_and_start_at(start)
            self.log_start_offset = self.log_end_offset = start

    # ------------------------------------------------------------------ model helpers

    def _add(self, specs: list[BatchSpec], epoch: int) -> bytes:
        out = bytearray()
        for spec in specs:
            data, timestamps = encode(spec, base_offset=self.log_end_offset, epoch=epoch)
            self.batches.append(ModelBatch(base_offset=self.log_end_offset, timestamps=timestamps, data=data))
            self.log_end_offset += len(timestamps)
            out += data
        return bytes(out)

    def _drop_deleted_segments(self) -> None:
        first_base = self.log.segments[0].base_offset
        self.batches = [b for b in self.batches if b.base_offset >= first_base]
        self.log_start_offset = max(self.log_start_offset, first_base)

    def _segment_of(self, offset: int) -> int:
        base = self.log.segments[0].base_offset
        for s in self.log.segments:
            if s.base_offset <= offset:
                base = s.base_offset
        return base

    # ------------------------------------------------------------------ rules

    @rule(specs=batch_specs, epoch_step=st.integers(0, 1), now_ms=st.integers(0, 20_000),
          writable=st.booleans())
    def append_as_leader(self, specs: list[BatchSpec], epoch_step: int, now_ms: int,
                         writable: bool = False) -> None:
        self.epoch += epoch_step
        expected = self._add(specs, self.epoch)
        # The leader gets the batches with offset 0 and no epoch: it stamps both,
        # in place (bytearray) or as stamped pieces written with pwritev (bytes).
        raw = b"".join(encode(spec, base_offset=0, epoch=-1)[0] for spec in specs)
        first = self.log.log_end_offset
        info = self.log.append_as_leader(bytearray(raw) if writable else raw, leader_epoch=self.epoch,
                                         now_ms=now_ms)
        assert info.first_offset == first and info.last_offset == self.log_end_offset - 1
        assert info.batch_count == len(specs)
        # One append lands whole at the end of the active segment.
        assert self.log.read(first, 10**6).records == expected

    @rule(specs=st.lists(batch_specs, min_size=2, max_size=4), now_ms=st.integers(0, 20_000))
    def append_as_leader_many_times(self, specs: list[list[BatchSpec]], now_ms: int) -> None:
        for n, group in enumerate(specs):
            self.append_as_leader(group, epoch_step=0, now_ms=now_ms + 100 * n)

    @rule(specs=batch_specs, now_ms=st.integers(0, 20_000))
    def append_as_follower(self, specs: list[BatchSpec], now_ms: int) -> None:
        data = self._add(specs, self.epoch)
        info = self.log.append_as_follower(data, now_ms=now_ms)
        assert info.last_offset == self.log_end_offset - 1

    @precondition(lambda self: any(b.last_offset >= self.log_start_offset for b in self.batches))
    @rule(data=st.data(), max_bytes=st.integers(0, 900), min_one=st.booleans(), limit=st.booleans())
    def read(self, data: st.DataObject, max_bytes: int, min_one: bool, limit: bool) -> None:
        start = data.draw(st.integers(self.log_start_offset, self.log_end_offset), label="start")
        max_offset = (data.draw(st.integers(self.log_start_offset, self.log_end_offset), label="max_offset")
                      if limit else None)
        got = self.log.read(start, max_bytes, max_offset=max_offset, min_one_message=min_one)
        candidates = [b for b in self.batches if b.last_offset >= start]
        if candidates:
            segment = self._segment_of(candidates[0].base_offset)
            candidates = [b for b in candidates if self._segment_of(b.base_offset) == segment]
        if max_offset is not None:
            candidates = [b for b in candidates if b.last_offset < max_offset]
        expected: list[ModelBatch] = []
        size = 0
        for b in candidates:
            if size + len(b.data) > max_bytes:
                break
            expected.append(b)
            size += len(b.data)
        if not expected and candidates and min_one:
            expected = candidates[:1]
        assert got.records == b"".join(b.data for b in expected)
        if expected:
            assert got.first_offset == expected[0].base_offset
            assert got.next_offset == expected[-1].last_offset + 1
        else:
            assert got.first_offset is None and got.next_offset == start

    @rule(now_ms=st.integers(0, 20_000))
    def roll(self, now_ms: int) -> None:
        before = self.log.segments
        self.log.roll(now_ms)
        after = self.log.segments
        if before[-1].size_in_bytes:
            assert after[:-1] == before and after[-1].base_offset == self.log_end_offset
            assert after[-1].size_in_bytes == 0
        else:
            assert after == before

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.log_end_offset + 2), label="offset")
        first_base = self.log.segments[0].base_offset
        changed = self.log.truncate_to(offset)
        assert changed == (offset < self.log_end_offset)
        if not changed:
            return
        if offset < first_base:
            self.batches = []
            self.log_start_offset = self.log_end_offset = offset
            return
        kept = [b for b in self.batches if b.last_offset < offset]
        removed = [b for b in self.batches if b.last_offset >= offset]
        self.batches = kept
        self.log_end_offset = removed[0].base_offset if removed else offset
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)

    @precondition(lambda self: len(self.batches) >= 8)
    @rule(offset=st.integers(0, 2000))
    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.batches = []
        self.log_start_offset = self.log_end_offset = offset
        assert self.log.log_end_offset == offset and self.log.recovery_point == offset

    @rule(data=st.data())
    def maybe_increment_log_start_offset(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(max(0, self.log_start_offset - 2), self.log_end_offset), label="offset")
        moved = self.log.maybe_increment_log_start_offset(offset)
        assert moved == (offset > self.log_start_offset)
        self.log_start_offset = max(self.log_start_offset, offset)
        self._drop_deleted_segments()
        segments = self.log.segments
        if moved:
            assert len(segments) == 1 or segments[1].base_offset > self.log_start_offset

    @rule(now_ms=st.integers(0, 20_000), data=st.data())
    def delete_old_segments(self, now_ms: int, data: st.DataObject) -> None:
        hw = data.draw(st.integers(self.log_start_offset, self.log_end_offset), label="high_watermark")
        before_start = self.log_start_offset
        within_size_limit = self.log.size_in_bytes < CONFIG.retention_bytes
        self.log.delete_old_segments(now_ms, high_watermark=hw)
        self._drop_deleted_segments()
        assert self.log.log_end_offset == self.log_end_offset
        assert self.log_start_offset <= max(hw, before_start)
        segments = self.log.segments
        if len(segments) > 1 and segments[1].base_offset <= hw:
            first = segments[0]
            # What stayed could not go: not over the size limit, and not expired
            # (time goes first, as in Kafka, so a size deletion can uncover an
            # expired segment that the next pass will take).
            assert self.log.size_in_bytes - first.size_in_bytes < CONFIG.retention_bytes
            if within_size_limit:
                assert now_ms - first.max_timestamp <= CONFIG.retention_ms

    @rule(flush=st.booleans(), now_ms=st.integers(0, 20_000))
    def close_and_reopen(self, flush: bool, now_ms: int) -> None:
        if flush:
            self.log.close()
        else:
            self.log.close_handlers()
        self.log = self.open_log(now_ms=now_ms, recovery_point=self.log.recovery_point,
                                 log_start_offset=self.log.log_start_offset)

    @precondition(lambda self: bool(self.batches))
    @rule(data=st.data(), now_ms=st.integers(0, 20_000))
    def crash_losing_the_unflushed_tail(self, data: st.DataObject, now_ms: int) -> None:
        """Cut the active segment anywhere at or after its flushed bytes, then recover."""
        recovery_point = self.log.recovery_point
        active = self.log.segments[-1]
        # A batch holding any flushed offset was fsynced whole (flush(offset) may stop mid-batch).
        flushed_bytes = sum(len(b.data) for b in self.batches
                            if b.base_offset >= active.base_offset and b.base_offset < recovery_point)
        cut = data.draw(st.integers(flushed_bytes, active.size_in_bytes), label="cut")
        start = self.log.log_start_offset
        self.log.close_handlers()
        path = self.dir / f"{active.base_offset:020d}.log"
        with open(path, "r+b") as f:
            f.truncate(cut)
        self.log = self.open_log(now_ms=now_ms, recovery_point=recovery_point, log_start_offset=start)
        position = 0
        kept: list[ModelBatch] = []
        for b in self.batches:
            if b.base_offset >= active.base_offset:
                position += len(b.data)
                if position > cut:
                    break
            kept.append(b)
        self.batches = kept
        self.log_end_offset = kept[-1].last_offset + 1 if kept else active.base_offset
        if self.log_end_offset < start:
            # The log start offset is ahead of what survived: the log restarts empty there.
            self.batches = []
            self.log_end_offset = start
        assert self.log.log_end_offset >= recovery_point

    @rule(flush_to=st.integers(0, 3000))
    def flush(self, flush_to: int) -> None:
        before = self.log.recovery_point
        self.log.flush(flush_to)
        assert self.log.recovery_point == max(before, min(flush_to, self.log_end_offset))

    @precondition(lambda self: bool(self.batches))
    @rule(timestamp=st.integers(0, 10_100))
    def offset_for_timestamp(self, timestamp: int) -> None:
        expected: OffsetAndTimestamp | None = None
        for b in self.batches:
            for i, ts in enumerate(b.timestamps):
                offset = b.base_offset + i
                if offset >= self.log_start_offset and ts >= timestamp:
                    expected = OffsetAndTimestamp(offset, ts)
                    break
            if expected is not None:
                break
        assert self.log.offset_for_timestamp(timestamp) == expected

    # ------------------------------------------------------------------ invariants

    @invariant()
    def offsets_and_sizes_match_the_model(self) -> None:
        log = self.log
        assert (log.log_start_offset, log.log_end_offset) == (self.log_start_offset, self.log_end_offset)
        assert log.recovery_point <= log.log_end_offset
        segments = log.segments
        assert segments[0].base_offset <= log.log_start_offset
        for prev, nxt in itertools.pairwise(segments):
            assert prev.base_offset < nxt.base_offset and prev.next_offset <= nxt.base_offset
        assert log.size_in_bytes == sum(s.size_in_bytes for s in segments)
        assert log.size_in_bytes == sum(len(b.data) for b in self.batches)

    @invariant()
    def reading_everything_returns_the_model(self) -> None:
        got = bytearray()
        offset = self.log_start_offset
        while offset < self.log_end_offset:
            data = self.log.read(offset, 400)
            assert data.records, f"no progress at offset {offset}"
            got += data.records
            offset = data.next_offset
        assert bytes(got) == b"".join(b.data for b in self.batches if b.last_offset >= self.log_start_offset)


LogMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=50, deadline=None)
TestLogAgainstModel = LogMachine.TestCase
