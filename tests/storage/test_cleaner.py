"""Log compaction (storage.cleaner): latest record per key, offsets kept, tombstones, bounds, crash safety."""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import pathlib

import pytest

from kraftlog.errors import ConfigError, InvariantViolation
from kraftlog.storage import batch_header as bh
from kraftlog.storage import cleaner
from kraftlog.storage import record_batch as rb
from kraftlog.storage import segment as segment_mod
from kraftlog.storage.compression import CompressionType
from kraftlog.storage.leader_epoch import LeaderEpochFileCache
from kraftlog.storage.log import Log
from kraftlog.storage.log_config import LogConfig

T0 = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=2_000, index_interval_bytes=200, retention_ms=-1)
KEEP_TOMBSTONES = cleaner.CleanerConfig(delete_retention_ms=10**12)


def kbatch(*records: tuple[bytes | None, bytes | None], ts: int = T0,
           codec: CompressionType = CompressionType.NONE, producer_id: int = -1, base_sequence: int = -1) -> bytes:
    return rb.build_batch([rb.RecordInput(key=k, value=v, timestamp_ms=ts + i) for i, (k, v) in enumerate(records)],
                          compression=codec, producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                          base_sequence=base_sequence)


def open_log(path: pathlib.Path, config: LogConfig = CONFIG, *, recovery_point: int = 0) -> Log:
    return Log.open(path, config, now_ms=T0, recovery_point=recovery_point,
                    epoch_cache=LeaderEpochFileCache(path / "leader-epoch-checkpoint"))


def records(log: Log, start: int | None = None) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of every record from ``start`` (default: the log start)."""
    return [(r.offset, r.key, r.value, r.timestamp_ms) for b in rb.decode_batches(read_all(log, start))
            for r in b.records]


def read_all(log: Log, start: int | None = None) -> bytes:
    """Every batch from ``start`` to the log end (one Log.read returns one segment's worth)."""
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.log_end_offset:
        fetched = log.read(offset, 1 << 30)
        if not fetched.records:
            break
        out.append(fetched.records)
        offset = fetched.next_offset
    return b"".join(out)


def fill(log: Log, *, keys: int, rounds: int, epoch: int = 0, per_batch: int = 1,
         codec: CompressionType = CompressionType.NONE) -> None:
    n = 0
    for r in range(rounds):
        for k in range(0, keys, per_batch):
            batch = [(b"key-%03d" % (k + j), b"value-%03d-%04d" % (k + j, r)) for j in range(min(per_batch, keys - k))]
            log.append_as_leader(kbatch(*batch, ts=T0 + n, codec=codec), leader_epoch=epoch, now_ms=T0)
            n += 1


def clean_all(log: Log, *, now_ms: int = T0, checkpoint: int | None = None, hw: int | None = None,
              config: cleaner.CleanerConfig = KEEP_TOMBSTONES) -> cleaner.CleanResult:
    log.roll(now_ms)
    rng = cleaner.cleanable_range(log, checkpoint_offset=checkpoint,
                                  high_watermark=log.log_end_offset if hw is None else hw,
                                  now_ms=now_ms, config=config)
    return cleaner.clean(log, rng, now_ms=now_ms, config=config)


def latest_per_key(recs: list[tuple[int, bytes | None, bytes | None, int]]) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, key, value, _ts in recs:
        if key is not None:
            out[key] = (offset, value)
    return out


# ---------------------------------------------------------------------------- compaction

@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4,
                                   CompressionType.ZSTD])
def test_keys_overwritten_many_times_shrink_to_one_record_per_key_at_their_offsets(
        tmp_path: pathlib.Path, codec: CompressionType) -> None:
    log = open_log(tmp_path)
    fill(log, keys=20, rounds=30, per_batch=4, codec=codec)
    before = records(log)
    expected = latest_per_key(before)
    size_before, segments_before = log.size_in_bytes, len(log.segments)
    result = clean_all(log)
    after = records(log)
    assert [(o, k, v) for o, k, v, _ in after] == sorted((o, k, v) for k, (o, v) in expected.items())
    assert {o: ts for o, _k, _v, ts in after} == {o: ts for o, _k, _v, ts in before if o in {x[0] for x in after}}
    assert log.size_in_bytes < size_before / 5 and segments_before > 5
    assert len(log.segments) == 2, "the small cleaned segments are grouped into one (plus the active one)"
    assert result.records_retained == 20 and result.map_keys == 20 and result.end_offset == log.log_end_offset
    # Every offset is still covered by a batch: a replica can copy the log as it is.
    data = read_all(log)
    covered = [(h.base_offset, h.last_offset) for h in bh.iter_batches(data)]
    assert covered[0][0] == 0 and covered[-1][1] == log.log_end_offset - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(covered))
    for h in bh.iter_batches(data):
        h.validate()
    replica = open_log(tmp_path / "replica")
    replica.append_as_follower(data, now_ms=T0)
    assert records(replica) == after
    log.close()
    replica.close()


def test_reads_from_any_offset_return_survivors_in_order_and_the_cleaned_log_reopens(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    fill(log, keys=10, rounds=10)
    expected = latest_per_key(records(log))
    clean_all(log)
    survivors = sorted(o for o, _v in expected.values())
    for start in range(0, log.log_end_offset):
        got = [o for o, *_ in records(log, start)]
        assert got == [o for o in survivors if o >= start]
    # Offsets inside removed runs are not gaps for a reader: the read starts at the next batch.
    assert log.read(1, 1_000).next_offset > 1
    # Offset/time indexes were rebuilt: lookups by timestamp land on survivors.
    ts_of = {o: ts for o, _k, _v, ts in records(log)}
    hit = log.offset_for_timestamp(T0)
    assert hit is not None and hit.offset == survivors[0] and hit.timestamp == ts_of[survivors[0]]
    end = log.log_end_offset
    log.close()
    reopened = open_log(tmp_path, recovery_point=end)
    assert [o for o, *_ in records(reopened)] == survivors
    reopened.close()


def test_a_second_pass_keeps_the_clean_section_and_maps_only_the_dirty_one(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    fill(log, keys=10, rounds=5)
    first = clean_all(log)
    log.append_as_leader(kbatch((b"key-003", b"new"), (b"other", b"x")), leader_epoch=0, now_ms=T0)
    rng = cleaner.cleanable_range(log, checkpoint_offset=first.end_offset, high_watermark=10**9, now_ms=T0,
                                  config=KEEP_TOMBSTONES)
    assert rng.first_dirty_offset == first.end_offset and rng.dirty_bytes == 0, "the new batch is active"
    second = clean_all(log, checkpoint=first.end_offset)
    assert second.map_keys == 2
    latest = latest_per_key(records(log))
    assert latest[b"key-003"][1] == b"new" and len(latest) == 11
    assert sum(1 for _o, k, *_ in records(log) if k == b"key-003") == 1
    log.close()


def test_null_keys_are_dropped_and_producer_batches_leave_an_empty_last_batch(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(kbatch((None, b"no key"), (b"a", b"1")), leader_epoch=0, now_ms=T0)
    log.append_as_leader(kbatch((b"a", b"p1"), producer_id=7, base_sequence=0), leader_epoch=0, now_ms=T0)
    log.append_as_leader(kbatch((b"a", b"p2"), (b"a", b"p3"), producer_id=7, base_sequence=1),
                         leader_epoch=1, now_ms=T0)
    log.append_as_leader(kbatch((b"a", b"last")), leader_epoch=1, now_ms=T0)
    clean_all(log)
    assert [(o, k, v) for o, k, v, _ in records(log)] == [(5, b"a", b"last")]
    batches = list(bh.iter_batches(read_all(log)))
    kept = [(b.base_offset, b.last_offset, b.producer_id, b.base_sequence, b.record_count, b.partition_leader_epoch)
            for b in batches]
    # Offsets 0-2 (epoch 0, the producer's first batch among them) are one filler; the
    # producer's last batch stays, empty, with its sequence range; then the survivor.
    assert kept == [(0, 2, -1, -1, 0, 0), (3, 4, 7, 1, 0, 1), (5, 5, -1, -1, 1, 1)]
    log.close()


def test_tombstones_stay_for_delete_retention_ms_after_the_cleaning_that_kept_them(tmp_path: pathlib.Path) -> None:
    config = cleaner.CleanerConfig(delete_retention_ms=60_000)
    log = open_log(tmp_path)
    log.append_as_leader(kbatch((b"gone", b"v1"), (b"kept", b"v")), leader_epoch=0, now_ms=T0)
    log.append_as_leader(kbatch((b"gone", None), ts=T0 + 5), leader_epoch=0, now_ms=T0)
    first = clean_all(log, now_ms=T0 + 1_000, config=config)
    assert [(k, v) for _o, k, v, _ts in records(log)] == [(b"kept", b"v"), (b"gone", None)]
    tombstone_ts = [ts for _o, k, _v, ts in records(log) if k == b"gone"]
    assert tombstone_ts == [T0 + 5], "the delete horizon does not change record timestamps"
    assert first.earliest_delete_horizon_ms == T0 + 61_000
    rng = cleaner.cleanable_range(log, checkpoint_offset=first.end_offset, high_watermark=10**9,
                                  now_ms=T0 + 61_000, config=config)
    assert not rng.is_due(config, now_ms=T0 + 60_999, delete_horizon_ms=first.earliest_delete_horizon_ms)
    assert rng.is_due(config, now_ms=T0 + 61_000, delete_horizon_ms=first.earliest_delete_horizon_ms)
    early = clean_all(log, now_ms=T0 + 60_999, checkpoint=first.end_offset, config=config)
    assert [k for _o, k, _v, _ts in records(log)] == [b"kept", b"gone"]
    assert early.earliest_delete_horizon_ms == T0 + 61_000, "the horizon is stamped once"
    late = clean_all(log, now_ms=T0 + 61_000, checkpoint=first.end_offset, config=config)
    assert [k for _o, k, _v, _ts in records(log)] == [b"kept"]
    assert late.earliest_delete_horizon_ms is None
    log.close()


def test_the_log_keeps_working_after_a_swap_and_old_reads_stay_valid(tmp_path: pathlib.Path) -> None:
    cache_path = tmp_path / "leader-epoch-checkpoint"
    log = open_log(tmp_path)
    fill(log, keys=5, rounds=8, epoch=1)
    fill(log, keys=5, rounds=8, epoch=3)
    epochs_before = LeaderEpochFileCache(cache_path).entries()
    fetched = log.read(0, 1 << 20)  # bytes taken before the swap: a reader's copy, not a handle
    old_first = log.segment_handles()[0]
    clean_all(log)
    assert rb.decode_batches(fetched.records)[0].base_offset == 0
    assert LeaderEpochFileCache(cache_path).entries() == epochs_before
    assert [b.partition_leader_epoch for b in rb.decode_batches(read_all(log)) if b.records] == [3] * 5
    with pytest.raises(InvariantViolation, match="not a run of inactive segments"):
        log.replace_segments(str(tmp_path / "x.cleaned"), [old_first], now_ms=T0)
    # Appends, rolls, retention and truncation go on over the swapped-in segments.
    end = log.log_end_offset
    log.append_as_leader(kbatch((b"key-000", b"after")), leader_epoch=4, now_ms=T0)
    log.roll(T0)
    assert records(log)[-1][2] == b"after"
    log.truncate_to(end)
    assert log.log_end_offset == end
    cut = records(log)[1][0]
    kept = [r for r in records(log) if r[0] >= cut]
    log.maybe_increment_log_start_offset(cut)
    assert log.delete_old_segments(T0) == 0 and records(log) == kept and len(kept) == 4
    log.close()


def cleaned_files(path: pathlib.Path) -> list[str]:
    return [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]


def test_preparing_in_a_worker_thread_while_the_owner_appends_and_rolls(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    fill(log, keys=10, rounds=12)
    log.roll(T0)
    expected = latest_per_key(records(log))
    rng = cleaner.cleanable_range(log, checkpoint_offset=None, high_watermark=10**9, now_ms=T0, config=KEEP_TOMBSTONES)
    plan = cleaner.plan_clean(log, rng, now_ms=T0, config=KEEP_TOMBSTONES)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(cleaner.prepare_clean, plan)
        fill(log, keys=10, rounds=3)  # the owner goes on appending (and rolling) meanwhile
        prepared = future.result(timeout=30)
    tail = [r for r in records(log) if r[0] >= rng.end_offset]
    result = cleaner.commit_clean(log, prepared, now_ms=T0)
    assert result.end_offset == rng.end_offset and not cleaned_files(tmp_path)
    got = records(log)
    assert [r for r in got if r[0] < rng.end_offset] == sorted(
        (r for r in got if r[0] < rng.end_offset), key=lambda r: r[0])
    assert {(o, v) for o, _k, v, _ts in got if o < rng.end_offset} == set(expected.values())
    assert [r for r in got if r[0] >= rng.end_offset] == tail
    log.close()


@pytest.mark.parametrize("when", ["before_prepare", "before_commit"])
def test_a_cleaning_is_abandoned_when_the_log_changed_under_it(tmp_path: pathlib.Path, when: str) -> None:
    log = open_log(tmp_path)
    fill(log, keys=10, rounds=12)
    log.roll(T0)
    rng = cleaner.cleanable_range(log, checkpoint_offset=None, high_watermark=10**9, now_ms=T0, config=KEEP_TOMBSTONES)
    plan = cleaner.plan_clean(log, rng, now_ms=T0, config=KEEP_TOMBSTONES)
    cut = log.segments[1].base_offset
    if when == "before_prepare":
        log.maybe_increment_log_start_offset(cut)  # retention deletes the first segment
        with pytest.raises(cleaner.CleaningAbandoned, match="deleted before the cleaner read it"):
            cleaner.prepare_clean(plan)
    else:
        prepared = cleaner.prepare_clean(plan)
        assert cleaned_files(tmp_path)
        log.maybe_increment_log_start_offset(cut)
        with pytest.raises(cleaner.CleaningAbandoned, match="segments changed"):
            cleaner.commit_clean(log, prepared, now_ms=T0)
    assert not cleaned_files(tmp_path)
    assert records(log)[0][0] == cut and len(records(log)) == log.log_end_offset - cut
    log.close()


# ---------------------------------------------------------------------------- what is cleanable

def test_nothing_at_or_after_the_high_watermark_or_in_the_active_segment_is_touched(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    fill(log, keys=10, rounds=12)
    segs = log.segments
    hw = segs[3].base_offset + 1  # inside the fourth segment
    untouched = {s.base_offset: (tmp_path / segment_mod.file_name(s.base_offset, ".log")).read_bytes()
                 for s in segs[3:]}
    rng = cleaner.cleanable_range(log, checkpoint_offset=None, high_watermark=hw, now_ms=T0, config=KEEP_TOMBSTONES)
    assert rng.end_offset == segs[3].base_offset
    result = cleaner.clean(log, rng, now_ms=T0, config=KEEP_TOMBSTONES)
    assert result.end_offset == segs[3].base_offset
    for base, data in untouched.items():
        assert (tmp_path / segment_mod.file_name(base, ".log")).read_bytes() == data
    # Records below the end are compacted only against keys seen below it.
    assert all(o >= segs[3].base_offset or o in {v[0] for v in latest_per_key(
        [r for r in records(log) if r[0] < segs[3].base_offset]).values()} for o, *_ in records(log))
    log.close()


def test_dirty_ratio_and_compaction_lags_decide_when_a_log_is_due(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    fill(log, keys=10, rounds=6)
    log.roll(T0)
    cfg = cleaner.CleanerConfig()
    rng = cleaner.cleanable_range(log, checkpoint_offset=None, high_watermark=10**9, now_ms=T0, config=cfg)
    assert rng.clean_bytes == 0 and rng.dirty_ratio == 1.0 and rng.is_due(cfg, now_ms=T0)
    done = cleaner.clean(log, rng, now_ms=T0, config=cfg)
    fill(log, keys=1, rounds=1)
    log.roll(T0)
    small = cleaner.cleanable_range(log, checkpoint_offset=done.end_offset, high_watermark=10**9, now_ms=T0,
                                    config=cfg)
    assert 0 < small.dirty_ratio < 0.5 and not small.is_due(cfg, now_ms=T0)
    overdue = cleaner.CleanerConfig(max_compaction_lag_ms=1_000)
    assert cleaner.cleanable_range(log, checkpoint_offset=done.end_offset, high_watermark=10**9,
                                   now_ms=T0 + 10_000, config=overdue).is_due(overdue, now_ms=T0 + 10_000)
    lagging = cleaner.CleanerConfig(min_compaction_lag_ms=10_000)
    held = cleaner.cleanable_range(log, checkpoint_offset=done.end_offset, high_watermark=10**9,
                                   now_ms=T0 + 5_000, config=lagging)
    assert held.end_offset == done.end_offset and held.dirty_bytes == 0
    assert cleaner.cleanable_range(log, checkpoint_offset=10**9, high_watermark=10**9, now_ms=T0,
                                   config=cfg).first_dirty_offset == log.log_start_offset, "stale checkpoint"
    log.close()


def test_config_from_kafka_names_topic_over_broker_and_bad_values_name_the_key() -> None:
    cfg = cleaner.CleanerConfig.from_properties({
        "log.cleaner.min.cleanable.ratio": "0.1", "min.cleanable.dirty.ratio": "0.25",
        "log.cleaner.delete.retention.ms": "5", "log.cleaner.dedupe.buffer.size": "2400"})
    assert cfg.min_cleanable_dirty_ratio == 0.25 and cfg.delete_retention_ms == 5 and cfg.max_offset_map_keys == 90
    with pytest.raises(ConfigError, match=r"min\.compaction\.lag\.ms must be an integer"):
        cleaner.CleanerConfig.from_properties({"min.compaction.lag.ms": "soon"})
    with pytest.raises(ConfigError, match=r"min.cleanable.dirty.ratio must be in \[0, 1\]"):
        cleaner.CleanerConfig.from_properties({"min.cleanable.dirty.ratio": "1.5"})
    assert cleaner.is_compacted("compact,delete") and cleaner.is_compacted(["delete", "compact"])
    assert not cleaner.is_compacted("delete") and not cleaner.is_compacted(None)
    assert cleaner.cleanup_policy({"log.cleanup.policy": "compact"}) == "compact"


def test_a_small_offset_map_cleans_in_several_passes(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    fill(log, keys=40, rounds=3)
    expected = latest_per_key(records(log))
    cfg = cleaner.CleanerConfig(max_offset_map_keys=10, delete_retention_ms=10**12)
    checkpoint: int | None = None
    passes = 0
    log.roll(T0)
    while checkpoint != log.segments[-1].base_offset:
        rng = cleaner.cleanable_range(log, checkpoint_offset=checkpoint, high_watermark=10**9, now_ms=T0, config=cfg)
        checkpoint = cleaner.clean(log, rng, now_ms=T0, config=cfg).end_offset
        passes += 1
        assert passes < 50
    assert passes > 1
    assert latest_per_key(records(log)) == expected and len(records(log)) == 40
    log.close()


# ---------------------------------------------------------------------------- crash safety

def steps_of(tmp_path: pathlib.Path) -> list[str]:
    log = open_log(tmp_path / "probe")
    fill(log, keys=10, rounds=12)
    seen: list[str] = []
    log.roll(T0)
    rng = cleaner.cleanable_range(log, checkpoint_offset=None, high_watermark=10**9, now_ms=T0, config=KEEP_TOMBSTONES)
    cleaner.clean(log, rng, now_ms=T0, config=KEEP_TOMBSTONES, on_step=seen.append)
    log.close()
    return seen


class Crash(Exception):
    pass


@pytest.mark.parametrize("crash_at", ["cleaned", "swap", "delete:first", "delete:last", "rename"])
def test_a_crash_at_any_step_of_the_swap_recovers_on_open(tmp_path: pathlib.Path, crash_at: str) -> None:
    steps = steps_of(tmp_path)
    assert steps[0] == "swap" and steps[-1] == "rename" and sum(s.startswith("delete:") for s in steps) >= 2
    deletes = [s for s in steps if s.startswith("delete:")]
    target = {"delete:first": deletes[0], "delete:last": deletes[-1]}.get(crash_at, crash_at)
    path = tmp_path / "log"
    log = open_log(path)
    fill(log, keys=10, rounds=12)
    log.roll(T0)
    log.flush()
    original = records(log)
    expected = latest_per_key(original)
    end = log.log_end_offset

    def crash(step: str) -> None:
        if step == target:
            raise Crash(step)

    rng = cleaner.cleanable_range(log, checkpoint_offset=None, high_watermark=10**9, now_ms=T0, config=KEEP_TOMBSTONES)
    if crash_at == "cleaned":
        def no_swap(*_args: object, **_kwargs: object) -> object:
            raise Crash("before the swap")
        log.replace_segments = no_swap  # type: ignore[method-assign]
    with pytest.raises(Crash):
        cleaner.clean(log, rng, now_ms=T0, config=KEEP_TOMBSTONES, on_step=crash)
    log.close_handlers()
    leftovers = {name.split(".", 1)[1] for name in os.listdir(path) if name[0].isdigit()}
    if crash_at == "cleaned":
        assert "log.cleaned" in leftovers
    elif crash_at != "rename":
        assert "log.swap" in leftovers
    reopened = open_log(path, recovery_point=end)
    assert not [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap", ".deleted"))]
    recovered = records(reopened)
    assert latest_per_key(recovered) == expected
    if crash_at == "cleaned":
        assert recovered == original, "a crash before the swap keeps the old segments"
    else:
        # A crash once .swap exists finishes that group's swap: the groups before and that
        # one are cleaned, the later ones untouched.
        survivors = {o for o, _v in expected.values()}
        group_end = min((r[0] for r in recovered if r[0] not in survivors), default=end)
        assert group_end > 0
        assert any(s.base_offset == group_end for s in reopened.segments) or group_end == end
        assert [r for r in recovered if r[0] < group_end] == [r for r in original if r[0] in survivors
                                                              and r[0] < group_end]
        assert [r for r in recovered if r[0] >= group_end] == [r for r in original if r[0] >= group_end]
    assert reopened.log_end_offset == end
    # The next cleaning (no checkpoint was written) starts over and finishes the job.
    reopened.roll(T0)
    rng = cleaner.cleanable_range(reopened, checkpoint_offset=None, high_watermark=10**9, now_ms=T0,
                                  config=KEEP_TOMBSTONES)
    cleaner.clean(reopened, rng, now_ms=T0, config=KEEP_TOMBSTONES)
    assert sorted((o, v) for o, _k, v, _ts in records(reopened)) == sorted(expected.values())
    reopened.close()
