"""ControllerLocator: the candidate order, hints, and when a round without an active one ended."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.controller_locator import Attempt, ControllerLocator


def _targets(locator: ControllerLocator[str], n: int) -> list[tuple[str, bool]]:
    out = []
    for _ in range(n):
        attempt = locator.next()
        assert attempt is not None
        out.append((attempt.target, attempt.back_off))
    return out


def test_round_robin_over_the_candidates_backing_off_after_each_full_round() -> None:
    locator = ControllerLocator(lambda: ["a", "b", "c"])
    locator.begin()
    assert _targets(locator, 7) == [("a", False), ("b", False), ("c", False),
                                    ("a", True), ("b", False), ("c", False), ("a", True)]


def test_the_active_one_and_the_hints_go_first_without_duplicates() -> None:
    locator = ControllerLocator(lambda: ["a", "b", "c"])
    locator.answered("c")
    locator.begin(None, "b")
    assert _targets(locator, 4) == [("c", False), ("b", False), ("a", False), ("c", True)]


def test_a_leader_hint_is_asked_next_even_outside_the_candidates() -> None:
    locator = ControllerLocator(lambda: ["a", "b", "c"])
    locator.begin()
    assert _targets(locator, 1) == [("a", False)]
    locator.not_controller("a", "z")
    assert _targets(locator, 3) == [("z", False), ("b", False), ("c", False)]


def test_a_hint_already_asked_this_round_ends_the_round() -> None:
    locator = ControllerLocator(lambda: ["a", "b"])
    locator.begin()
    assert _targets(locator, 2) == [("a", False), ("b", False)]
    locator.not_controller("b", "a")  # a stale hint back to a
    assert _targets(locator, 1) == [("a", True)]
    # a controller that names itself (elected, still activating): back off, ask it again
    locator.not_controller("a", "a")
    assert _targets(locator, 1) == [("a", True)]


def test_active_is_forgotten_when_it_fails_or_says_not_controller() -> None:
    locator = ControllerLocator(lambda: ["a", "b"])
    locator.answered("b")
    locator.unreachable("a")
    assert locator.active == "b"
    locator.unreachable("b")
    assert locator.active is None
    locator.answered("a")
    locator.not_controller("a", None)
    assert locator.active is None


def test_no_candidates_answers_none_and_the_list_is_read_again_each_round() -> None:
    voters: list[int] = []
    locator = ControllerLocator(lambda: list(voters))
    locator.begin()
    assert locator.next() is None
    voters.extend([3, 1])  # KIP-853: the metadata log named voters meanwhile
    assert locator.next() == Attempt(3, False)
    voters.append(7)
    assert [locator.next() for _ in range(3)] == [
        Attempt(1, False), Attempt(3, True), Attempt(1, False)]
    assert locator.next() == Attempt(7, False)


def test_begin_starts_a_fresh_round() -> None:
    locator = ControllerLocator(lambda: ["a", "b"])
    locator.begin()
    _targets(locator, 2)
    locator.begin()
    assert _targets(locator, 1) == [("a", False)]


@settings(max_examples=200, deadline=None)
@given(candidates=st.lists(st.integers(0, 9), min_size=1, max_size=6, unique=True),
       events=st.lists(st.tuples(st.sampled_from(["unreachable", "not_controller"]),
                                 st.none() | st.integers(0, 12)), max_size=40))
def test_every_candidate_is_asked_between_two_back_offs(
        candidates: list[int], events: list[tuple[str, int | None]]) -> None:
    """Whatever the answers, no key is asked twice without a back-off between, a back-off
    comes only after a repeat, and while no hint came every candidate is asked in a round."""
    locator = ControllerLocator(lambda: candidates)
    locator.begin()
    since_back_off: list[int] = []
    hinted = False
    for kind, hint in events:
        attempt = locator.next()
        assert attempt is not None
        if attempt.back_off:
            assert attempt.target in since_back_off
            if not hinted:
                assert sorted(since_back_off) == sorted(candidates)
            since_back_off = []
        assert attempt.target not in since_back_off
        since_back_off.append(attempt.target)
        if kind == "unreachable":
            locator.unreachable(attempt.target)
        else:
            locator.not_controller(attempt.target, hint)
            hinted = hinted or hint is not None
