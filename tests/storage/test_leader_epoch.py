"""Leader-epoch cache: Kafka's assign / truncate / endOffsetFor semantics, and its checkpoint file."""

from __future__ import annotations

import itertools
import pathlib
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kraftlog import errors
from kraftlog.ids import Epoch, Offset
from kraftlog.storage import checkpoint, leader_epoch
from kraftlog.storage.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
    LeaderEpochFileCache,
)


def entry(epoch: int, start_offset: int) -> checkpoint.EpochEntry:
    return checkpoint.EpochEntry(epoch=Epoch(epoch), start_offset=Offset(start_offset))


def pairs(cache: LeaderEpochCache | LeaderEpochFileCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries()]


def cache_of(*entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache()
    for epoch, start in entries:
        assert cache.assign(epoch, start)
    return cache


# --- assign ------------------------------------------------------------------------------


def test_assign_appends_new_epochs_in_order() -> None:
    cache = cache_of((1, 0), (2, 10), (4, 25))
    assert pairs(cache) == [(1, 0), (2, 10), (4, 25)]
    assert cache.latest_epoch() == 4
    assert cache.latest_entry() == entry(4, 25)
    assert cache.earliest_entry() == entry(1, 0)


def test_assign_same_epoch_at_a_later_offset_is_a_no_op() -> None:
    # Every append by the current leader re-asserts its epoch; only the first counts.
    cache = cache_of((1, 0), (2, 10))
    assert not cache.assign(2, 10)
    assert not cache.assign(2, 15)
    assert pairs(cache) == [(1, 0), (2, 10)]


def test_assign_same_epoch_at_an_earlier_offset_moves_its_start_back() -> None:
    cache = cache_of((1, 0), (2, 10))
    assert cache.assign(2, 7)
    assert pairs(cache) == [(1, 0), (2, 7)]


def test_assign_with_start_offset_at_or_below_latest_removes_conflicting_entries() -> None:
    # A new leader overwriting a follower's uncommitted tail: entries that start
    # at or after the new epoch's start are dropped.
    cache = cache_of((1, 0), (2, 10), (3, 20))
    assert cache.assign(4, 10)
    assert pairs(cache) == [(1, 0), (4, 10)]


def test_assign_of_an_older_epoch_removes_every_entry_with_a_higher_or_equal_epoch() -> None:
    cache = cache_of((1, 0), (3, 10), (5, 20))
    assert cache.assign(2, 30)
    assert pairs(cache) == [(1, 0), (2, 30)]


def test_assign_rejects_negative_epoch_or_offset() -> None:
    cache = LeaderEpochCache()
    with pytest.raises(ValueError, match="leader epoch -1"):
        cache.assign(-1, 0)
    with pytest.raises(ValueError, match="start offset -5"):
        cache.assign(0, -5)
    assert len(cache) == 0


def test_constructor_applies_assign_rules_to_given_entries() -> None:
    entries = [entry(e, o) for e, o in [(1, 0), (3, 5), (2, 9)]]
    assert pairs(LeaderEpochCache(entries)) == [(1, 0), (2, 9)]


# --- queries -----------------------------------------------------------------------------


def test_empty_cache_answers_none() -> None:
    cache = LeaderEpochCache()
    assert cache.latest_epoch() is None
    assert cache.latest_entry() is None
    assert cache.earliest_entry() is None
    assert cache.epoch_for_offset(0) is None
    assert cache.previous_epoch(5) is None
    assert cache.next_epoch(5) is None
    assert cache.epoch_entry(1) is None


def test_epoch_for_offset() -> None:
    cache = cache_of((2, 5), (4, 10), (7, 20))
    assert cache.epoch_for_offset(4) is None  # below the earliest start
    assert cache.epoch_for_offset(5) == 2
    assert cache.epoch_for_offset(9) == 2
    assert cache.epoch_for_offset(10) == 4
    assert cache.epoch_for_offset(19) == 4
    assert cache.epoch_for_offset(20) == 7
    assert cache.epoch_for_offset(1000) == 7  # beyond the latest start: the latest epoch


def test_previous_and_next_epoch_and_epoch_entry() -> None:
    cache = cache_of((2, 5), (4, 10), (7, 20))
    assert cache.previous_epoch(2) is None
    assert cache.previous_epoch(4) == 2
    assert cache.previous_epoch(5) == 4  # not cached itself: the largest below it
    assert cache.previous_epoch(100) == 7
    assert cache.next_epoch(1) == 2
    assert cache.next_epoch(4) == 7
    assert cache.next_epoch(7) is None
    assert cache.epoch_entry(4) == entry(4, 10)
    assert cache.epoch_entry(5) is None


# --- end_offset_for: every branch of Kafka's endOffsetFor --------------------------------


def test_end_offset_for_undefined_epoch_is_undefined() -> None:
    cache = cache_of((1, 0), (2, 10))
    assert cache.end_offset_for(UNDEFINED_EPOCH, 50) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_end_offset_for_on_an_empty_cache_is_undefined() -> None:
    assert LeaderEpochCache().end_offset_for(3, 50) == (-1, -1)


def test_end_offset_for_the_latest_epoch_is_the_log_end_offset() -> None:
    cache = cache_of((1, 0), (2, 10))
    assert cache.end_offset_for(2, 57) == (2, 57)


def test_end_offset_for_an_epoch_above_the_latest_is_undefined() -> None:
    cache = cache_of((1, 0), (2, 10))
    assert cache.end_offset_for(3, 57) == (-1, -1)


def test_end_offset_for_an_epoch_below_the_earliest_is_the_earliest_start() -> None:
    # Retention removed that history; the follower must restart from the leader's start (KIP-279).
    cache = cache_of((3, 100), (5, 150))
    assert cache.end_offset_for(1, 200) == (1, 100)


def test_end_offset_for_a_cached_epoch_ends_where_the_next_one_starts() -> None:
    cache = cache_of((1, 0), (2, 10), (4, 25))
    assert cache.end_offset_for(1, 40) == (1, 10)
    assert cache.end_offset_for(2, 40) == (2, 25)


def test_end_offset_for_an_uncached_epoch_answers_the_largest_epoch_below_it() -> None:
    # The diverging-epoch case: the follower asks for epoch 3, which this log never saw.
    cache = cache_of((1, 0), (2, 10), (4, 25))
    assert cache.end_offset_for(3, 40) == (2, 25)


# --- truncation --------------------------------------------------------------------------


def test_truncate_from_end_drops_entries_starting_at_or_after_the_end() -> None:
    cache = cache_of((1, 0), (2, 10), (3, 20))
    removed = cache.truncate_from_end(20)
    assert [(e.epoch, e.start_offset) for e in removed] == [(3, 20)]
    assert pairs(cache) == [(1, 0), (2, 10)]
    assert cache.truncate_from_end(11) == []  # epoch 2 still has offset 10
    assert pairs(cache) == [(1, 0), (2, 10)]
    cache.truncate_from_end(0)
    assert pairs(cache) == []


def test_truncate_from_end_ignores_a_negative_offset() -> None:
    cache = cache_of((1, 0))
    assert cache.truncate_from_end(-1) == []
    assert pairs(cache) == [(1, 0)]


def test_truncate_from_start_moves_the_covering_epoch_up() -> None:
    cache = cache_of((1, 0), (2, 10), (3, 20))
    removed = cache.truncate_from_start(15)
    assert [(e.epoch, e.start_offset) for e in removed] == [(1, 0), (2, 10)]
    assert pairs(cache) == [(2, 15), (3, 20)]


def test_truncate_from_start_is_exclusive_at_an_entry_start() -> None:
    cache = cache_of((1, 0), (2, 10))
    cache.truncate_from_start(10)
    assert pairs(cache) == [(2, 10)]


def test_truncate_from_start_below_the_earliest_entry_changes_nothing() -> None:
    cache = cache_of((2, 10), (3, 20))
    assert cache.truncate_from_start(5) == []
    assert pairs(cache) == [(2, 10), (3, 20)]


def test_truncate_from_start_beyond_every_entry_keeps_the_latest_epoch() -> None:
    cache = cache_of((1, 0), (2, 10))
    cache.truncate_from_start(50)
    assert pairs(cache) == [(2, 50)]


def test_clear() -> None:
    cache = cache_of((1, 0))
    assert cache.clear()
    assert not cache.clear()
    assert pairs(cache) == []


# --- the file-backed cache ---------------------------------------------------------------


def test_file_cache_persists_every_change(tmp_path: pathlib.Path) -> None:
    path = tmp_path / checkpoint.LEADER_EPOCH_CHECKPOINT
    cache = LeaderEpochFileCache(path)
    assert not path.exists()  # nothing assigned, nothing written
    cache.assign(1, 0)
    cache.assign(2, 10)
    assert path.read_text() == "0\n2\n1 0\n2 10\n"
    cache.assign(2, 12)  # no-op: no rewrite needed, content unchanged
    assert path.read_text() == "0\n2\n1 0\n2 10\n"
    cache.truncate_from_start(5)
    assert path.read_text() == "0\n2\n1 5\n2 10\n"
    cache.truncate_from_end(10)
    assert path.read_text() == "0\n1\n1 5\n"
    assert pairs(LeaderEpochFileCache(path)) == [(1, 5)]
    cache.clear()
    assert path.read_text() == "0\n0\n"
    assert pairs(LeaderEpochFileCache(path)) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint.LEADER_EPOCH_CHECKPOINT]


def test_file_cache_queries_delegate(tmp_path: pathlib.Path) -> None:
    cache = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint")
    cache.assign(1, 0)
    cache.assign(3, 8)
    assert cache.latest_epoch() == 3 and len(cache) == 2
    assert cache.earliest_entry() == entry(1, 0)
    assert cache.latest_entry() == entry(3, 8)
    assert cache.epoch_entry(3) is not None
    assert cache.epoch_for_offset(7) == 1
    assert cache.previous_epoch(3) == 1 and cache.next_epoch(1) == 3
    assert cache.end_offset_for(2, 20) == (1, 8)
    assert cache.path == tmp_path / "leader-epoch-checkpoint"


def test_file_cache_refuses_a_corrupt_checkpoint(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n2\n1 0\n1 10\n")
    with pytest.raises(errors.CorruptFileError, match=r"leader-epoch-checkpoint: line 4: .*strictly increase"):
        LeaderEpochFileCache(path)


# --- property test against a simple model -------------------------------------------------


class Model:
    """A list of (epoch, start) with each rule written the obvious way."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch: int, start: int) -> None:
        if self.entries and self.entries[-1][0] == epoch and self.entries[-1][1] <= start:
            return
        self.entries = [(e, s) for e, s in self.entries if e < epoch and s < start] + [(epoch, start)]

    def truncate_from_end(self, end: int) -> None:
        self.entries = [(e, s) for e, s in self.entries if s < end]

    def truncate_from_start(self, start: int) -> None:
        below = [(e, s) for e, s in self.entries if s <= start]
        if below:
            self.entries = [(below[-1][0], start)] + [(e, s) for e, s in self.entries if s > start]

    def epoch_for_offset(self, offset: int) -> int | None:
        covering = [e for e, s in self.entries if s <= offset]
        return covering[-1] if covering else None

    def end_offset_for(self, requested: int, leo: int) -> tuple[int, int]:
        if requested == -1:
            return -1, -1
        if self.entries and self.entries[-1][0] == requested:
            return requested, leo
        higher = [(e, s) for e, s in self.entries if e > requested]
        lower = [(e, s) for e, s in self.entries if e <= requested]
        if not higher:
            return -1, -1
        if not lower:
            return requested, higher[0][1]
        return lower[-1][0], higher[0][1]


EPOCHS = st.integers(min_value=0, max_value=12)
OFFSETS = st.integers(min_value=0, max_value=60)


class CacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.path = pathlib.Path(self._dir.name) / "leader-epoch-checkpoint"
        self.cache = LeaderEpochFileCache(self.path)
        self.model = Model()

    def teardown(self) -> None:
        self._dir.cleanup()

    @rule(epoch=EPOCHS, start=OFFSETS)
    def assign(self, epoch: int, start: int) -> None:
        self.cache.assign(epoch, start)
        self.model.assign(epoch, start)

    @rule(end=OFFSETS)
    def truncate_from_end(self, end: int) -> None:
        self.cache.truncate_from_end(end)
        self.model.truncate_from_end(end)

    @rule(start=OFFSETS)
    def truncate_from_start(self, start: int) -> None:
        self.cache.truncate_from_start(start)
        self.model.truncate_from_start(start)

    @precondition(lambda self: len(self.model.entries) > 0)
    @rule()
    def reopen(self) -> None:
        self.cache = LeaderEpochFileCache(self.path)

    @rule(offset=OFFSETS)
    def check_epoch_for_offset(self, offset: int) -> None:
        assert self.cache.epoch_for_offset(offset) == self.model.epoch_for_offset(offset)

    @rule(requested=st.integers(min_value=-1, max_value=13), leo=st.integers(min_value=0, max_value=80))
    def check_end_offset_for(self, requested: int, leo: int) -> None:
        assert self.cache.end_offset_for(requested, leo) == self.model.end_offset_for(requested, leo)

    @invariant()
    def same_entries_strictly_increasing(self) -> None:
        got = pairs(self.cache)
        assert got == self.model.entries
        for (e1, s1), (e2, s2) in itertools.pairwise(got):
            assert e1 < e2 and s1 < s2

    @invariant()
    def file_matches_memory(self) -> None:
        if self.path.exists():
            on_disk = checkpoint.LeaderEpochCheckpointFile(self.path).read()
            assert [(e.epoch, e.start_offset) for e in on_disk] == self.model.entries


TestCacheMachine = CacheMachine.TestCase
TestCacheMachine.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(EPOCHS, OFFSETS), max_size=20), OFFSETS, EPOCHS)
def test_end_offset_for_agrees_with_epoch_for_offset(
    assigns: list[tuple[int, int]], leo_extra: int, requested: int
) -> None:
    """The end offset returned for epoch E is where a later epoch begins: no offset
    before it belongs to an epoch above the answered one."""
    cache = LeaderEpochCache()
    for epoch, start in assigns:
        cache.assign(epoch, start)
    latest = cache.latest_entry()
    leo = (latest.start_offset if latest else 0) + leo_extra
    epoch, end = cache.end_offset_for(requested, leo)
    if epoch == UNDEFINED_EPOCH:
        assert end == UNDEFINED_EPOCH_OFFSET
        return
    assert epoch <= requested
    for offset in range(end):
        owner = cache.epoch_for_offset(offset)
        assert owner is None or owner <= epoch


def test_module_reexports_epoch_entry() -> None:
    assert leader_epoch.EpochEntry is checkpoint.EpochEntry
