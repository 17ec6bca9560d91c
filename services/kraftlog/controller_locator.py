"""Which controller to ask next: the one policy behind every find-the-active-controller loop.

Owns :class:`ControllerLocator`, a pure policy over opaque keys (a ``host:port`` for the
admin service, a node id for the broker). Per search it hands out the candidates in
order — the one that last answered as active, then the caller's hints, then the
candidates the caller lists (its bootstrap list or voters), again and again — and
follows NOT_CONTROLLER leader hints by moving the hinted key to the front. When it is
about to hand out a key already asked since the last back-off, a full round passed
without an active controller (an election, a controller still activating, everyone
unreachable), and :meth:`ControllerLocator.next` says so: the caller backs off once,
then the round starts again.

Callers: :class:`kraftlog.admin.admin_service.ClusterLocator` (the active controller by
address, and the raft leader for DescribeQuorum) and
:class:`kraftlog.broker.controller_client.ControllerClient` (by node id). The client's
MetadataCache does not use it: any broker answers Metadata, so there is no single
active node to find and no NOT_CONTROLLER to follow.

It must not do I/O, sleep or read a clock: the callers own channels, deadlines and the
back-off pause (it is in the pure-cores contract of ``.importlinter``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Attempt(Generic[K]):
    """Ask ``target`` next; when ``back_off``, pause first: a full round found no active one."""

    target: K
    back_off: bool


class ControllerLocator(Generic[K]):
    """The order in which to ask controllers, and the one that last answered as active.

    ``candidates`` is called at every new round, so a changing list (KIP-853 voters)
    is seen. :attr:`active` outlives a search; the round state lasts one search
    (:meth:`begin`).
    """

    def __init__(self, candidates: Callable[[], Iterable[K]]) -> None:
        self._candidates = candidates
        self.active: K | None = None
        """The key that last answered as the active one (None: not known)."""
        self._pending: list[K] = []
        self._asked: set[K] = set()

    def _order(self, first: Iterable[K | None]) -> list[K]:
        keys = [k for k in (self.active, *first) if k is not None]
        return list(dict.fromkeys([*keys, *self._candidates()]))

    def begin(self, *first: K | None) -> None:
        """Start a search: :attr:`active`, then ``first`` (None entries are skipped), then
        the candidates."""
        self._asked.clear()
        self._pending = self._order(first)

    def next(self) -> Attempt[K] | None:
        """The key to ask next, or None when there is no candidate at all (back off, retry)."""
        if not self._pending:
            self._pending = self._order(())
        if not self._pending:
            return None
        target = self._pending.pop(0)
        back_off = target in self._asked
        if back_off:
            self._asked.clear()
        self._asked.add(target)
        return Attempt(target, back_off)

    def answered(self, target: K) -> None:
        """``target`` answered as the active one: ask it first from now on."""
        self.active = target

    def unreachable(self, target: K) -> None:
        """``target`` could not be asked (connection, deadline): go on with the others."""
        if self.active == target:
            self.active = None

    def not_controller(self, target: K, hint: K | None) -> None:
        """``target`` answered NOT_CONTROLLER, naming ``hint`` (None: no usable hint) as the
        leader: ask the hint next. A hint already asked this round ends the round."""
        if self.active == target:
            self.active = None
        if hint is not None:
            self._pending = [hint, *(k for k in self._pending if k != hint)]
