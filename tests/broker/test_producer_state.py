"""ProducerStateManager (KIP-98): duplicates, gaps, epochs, wrap-around, retention, rebuild from headers."""

from __future__ import annotations

import random

import pytest

from kraftlog.broker import producer_state as ps
from kraftlog.broker.producer_state import BatchMetadata, ProducerBatch, ProducerStateManager
from kraftlog.error_codes import ErrorCode
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb

PID = 1000
MAX = ps.INT32_MAX


def pb(seq: int, count: int = 1, *, pid: int = PID, epoch: int = 0) -> ProducerBatch:
    return ProducerBatch(producer_id=pid, producer_epoch=epoch, base_sequence=seq, last_offset_delta=count - 1)


def write(state: ProducerStateManager, batch: ProducerBatch, first_offset: int) -> int:
    """Check then append as a leader would; returns the next offset."""
    check = state.check_leader_append([batch])
    assert check.error is ErrorCode.NONE and check.duplicate is None, check
    last = first_offset + batch.last_offset_delta
    state.append(batch, first_offset=first_offset, last_offset=last)
    return last + 1


def test_sequence_arithmetic_wraps_at_int32_max() -> None:
    assert ps.increment_sequence(5, 3) == 8
    assert ps.increment_sequence(MAX - 1, 1) == MAX
    assert ps.increment_sequence(MAX, 1) == 0
    assert ps.increment_sequence(MAX - 1, 3) == 1
    assert ps.in_sequence(4, 5) and ps.in_sequence(MAX, 0)
    assert not ps.in_sequence(4, 6) and not ps.in_sequence(4, 4) and not ps.in_sequence(MAX, 1)
    assert pb(MAX - 1, 3).last_sequence == 0  # MAX-1, MAX, 0


def test_a_new_producer_must_start_at_sequence_zero() -> None:
    state = ProducerStateManager("t-0")
    check = state.check_leader_append([pb(5)])
    assert check.error is ErrorCode.UNKNOWN_PRODUCER_ID and check.batch_index == 0
    assert "sequence 5" in check.message and "t-0" in check.message
    assert state.check_leader_append([pb(0, 3)]) == ps.AppendCheck()
    assert len(state) == 0, "checking changes nothing"


def test_batches_without_a_producer_id_are_never_checked() -> None:
    state = ProducerStateManager()
    assert state.check_leader_append([None, None]) == ps.AppendCheck()


def test_negative_epoch_or_sequence_with_a_producer_id_is_an_invalid_record() -> None:
    state = ProducerStateManager()
    assert state.check_leader_append([pb(-1)]).error is ErrorCode.INVALID_RECORD
    assert state.check_leader_append([pb(0, epoch=-1)]).error is ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("slot", range(ps.NUM_BATCHES_TO_RETAIN))
def test_a_retry_of_any_of_the_last_five_batches_is_a_duplicate_with_its_original_offsets(slot: int) -> None:
    state = ProducerStateManager()
    offset = 0
    written: list[tuple[ProducerBatch, int]] = []
    for i in range(7):  # batches of 2 records: sequences 0-1, 2-3, ..., 12-13
        batch = pb(2 * i, 2)
        written.append((batch, offset))
        offset = write(state, batch, offset) + 10  # other producers' records in between
    retained = written[-ps.NUM_BATCHES_TO_RETAIN:]
    batch, first = retained[slot]
    check = state.check_leader_append([batch])
    assert check.error is ErrorCode.NONE
    assert check.duplicate == BatchMetadata(first_sequence=batch.base_sequence, last_sequence=batch.last_sequence,
                                            first_offset=first, last_offset=first + 1)


def test_a_retry_older_than_the_last_five_batches_is_out_of_order() -> None:
    state = ProducerStateManager()
    offset = 0
    for i in range(6):
        offset = write(state, pb(i), offset)
    assert state.check_leader_append([pb(0)]).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check_leader_append([pb(1)]).duplicate is not None


def test_a_duplicate_must_match_the_whole_sequence_range() -> None:
    state = ProducerStateManager()
    write(state, pb(0, 3), 0)
    check = state.check_leader_append([pb(0, 2)])
    assert check.duplicate is None and check.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_gap_or_a_repeat_is_out_of_order() -> None:
    state = ProducerStateManager()
    write(state, pb(0, 3), 0)  # sequences 0..2
    gap = state.check_leader_append([pb(4)])
    assert gap.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "sequence 4 does not follow the last written sequence 2" in gap.message
    assert state.check_leader_append([pb(1)]).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check_leader_append([pb(3)]) == ps.AppendCheck()


def test_epochs_older_is_fenced_newer_must_start_at_zero() -> None:
    state = ProducerStateManager()
    offset = write(state, pb(0, 2, epoch=3), 0)
    older = state.check_leader_append([pb(2, epoch=2)])
    assert older.error is ErrorCode.INVALID_PRODUCER_EPOCH and "older than its epoch 3" in older.message
    assert state.check_leader_append([pb(2, epoch=4)]).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    offset = write(state, pb(0, epoch=4), offset)
    entry = state.entry(PID)
    assert entry is not None and entry.producer_epoch == 4 and len(entry.batches) == 1, \
        "a new epoch forgets the old epoch's batches"
    # The retry of an old-epoch batch is no longer a duplicate: it is fenced.
    assert state.check_leader_append([pb(0, 2, epoch=3)]).error is ErrorCode.INVALID_PRODUCER_EPOCH


def test_sequences_wrap_from_int32_max_to_zero() -> None:
    state = ProducerStateManager()
    state.append(pb(MAX - 4, 3), first_offset=0, last_offset=2)  # replicated: MAX-4..MAX-2
    offset = write(state, pb(MAX - 1, 3), 3)  # MAX-1, MAX, 0
    entry = state.entry(PID)
    assert entry is not None and entry.last_sequence == 0
    assert state.check_leader_append([pb(0)]).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    write(state, pb(1), offset)
    assert state.check_leader_append([pb(MAX - 1, 3)]).duplicate is not None
    state2 = ProducerStateManager()
    state2.append(pb(MAX - 1, 2), first_offset=0, last_offset=1)  # ends exactly at MAX
    assert state2.check_leader_append([pb(0)]) == ps.AppendCheck()


def test_several_batches_of_one_producer_in_one_request_must_follow_each_other() -> None:
    state = ProducerStateManager()
    assert state.check_leader_append([pb(0, 2), None, pb(2, 3), pb(0, pid=7)]) == ps.AppendCheck()
    bad = state.check_leader_append([pb(0, 2), pb(3)])
    assert bad.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and bad.batch_index == 1


def test_a_request_of_contiguous_duplicates_is_one_duplicate_and_a_mixed_one_is_refused() -> None:
    state = ProducerStateManager()
    state.append(pb(0, 2), first_offset=0, last_offset=1)
    state.append(pb(2, 3), first_offset=2, last_offset=4)
    whole = state.check_leader_append([pb(0, 2), pb(2, 3)])
    assert whole.duplicate == BatchMetadata(first_sequence=0, last_sequence=4, first_offset=0, last_offset=4)
    mixed = state.check_leader_append([pb(2, 3), pb(5)])
    assert mixed.error is ErrorCode.INVALID_RECORD and mixed.duplicate is None
    assert state.check_leader_append([None, pb(2, 3)]).error is ErrorCode.INVALID_RECORD


def test_truncate_head_drops_batches_below_the_log_start_and_empty_producers() -> None:
    state = ProducerStateManager()
    state.append(pb(0, 2), first_offset=0, last_offset=1)
    state.append(pb(2, 2), first_offset=5, last_offset=6)
    state.append(pb(0, pid=7), first_offset=3, last_offset=3)
    assert state.truncate_head(4) == 1
    assert state.entry(7) is None
    entry = state.entry(PID)
    assert entry is not None and [b.first_offset for b in entry.batches] == [5]
    assert state.check_leader_append([pb(4)]) == ps.AppendCheck()
    assert state.check_leader_append([pb(3, pid=7)]).error is ErrorCode.UNKNOWN_PRODUCER_ID
    assert state.truncate_head(7) == 1 and len(state) == 0


def _header_log(seed: int) -> list[bytes]:
    """A random log of idempotent (several producers and epochs) and plain batches, with offsets."""
    rng = random.Random(seed)
    seqs: dict[int, tuple[int, int]] = {}
    offset = 0
    out: list[bytes] = []
    for _ in range(rng.randint(1, 40)):
        count = rng.randint(1, 4)
        pid = rng.choice([-1, 1, 2, 3])
        if pid < 0:
            out.append(rb.build_batch([rb.RecordInput(value=b"x")] * count, base_offset=offset))
        else:
            epoch, seq = seqs.get(pid, (0, 0))
            if rng.random() < 0.1:
                epoch, seq = epoch + 1, 0
            if rng.random() < 0.05:
                seq = MAX - rng.randint(0, 3)
            out.append(rb.build_batch([rb.RecordInput(value=b"x")] * count, base_offset=offset,
                                      producer_id=pid, producer_epoch=epoch, base_sequence=seq))
            seqs[pid] = (epoch, ps.increment_sequence(seq, count))
        offset += count
    return out


@pytest.mark.parametrize("seed", range(20))
def test_rebuild_from_headers_equals_the_incremental_state_at_every_step(seed: int) -> None:
    batches = _header_log(seed)
    incremental = ProducerStateManager()
    for i, raw in enumerate(batches):
        incremental.append_headers(bh.iter_batches(raw))
        rebuilt = ProducerStateManager()
        rebuilt.rebuild(bh.iter_batches(b"".join(batches[: i + 1])))
        assert dict(rebuilt.producers) == dict(incremental.producers)
    # And after retention removes a prefix of the log.
    cut = len(batches) // 2
    start = bh.BatchHeader(batches[cut]).base_offset
    incremental.truncate_head(start)
    rebuilt = ProducerStateManager()
    rebuilt.rebuild(bh.iter_batches(b"".join(batches[cut:])))
    assert dict(rebuilt.producers) == dict(incremental.producers)


def test_control_batches_carry_no_producer_state() -> None:
    control = rb.build_batch([rb.RecordInput(key=rb.encode_control_record_key(rb.ControlRecordType.COMMIT),
                                             value=b"\x00\x00\x00\x00\x00\x00")],
                             producer_id=5, producer_epoch=0, base_sequence=-1, is_control=True)
    assert ProducerBatch.of(bh.BatchHeader(control)) is None
    plain = rb.build_batch([rb.RecordInput(value=b"v")])
    assert ProducerBatch.of(bh.BatchHeader(plain)) is None


def test_has_batches_from_says_whether_a_cut_touches_any_producer() -> None:
    state = ProducerStateManager()
    assert not state.has_batches_from(0)
    state.append(pb(0, 2), first_offset=3, last_offset=4)
    state.append(pb(0, pid=7), first_offset=1, last_offset=1)
    assert state.has_batches_from(4) and not state.has_batches_from(5)
    state.restore([])
    assert len(state) == 0
