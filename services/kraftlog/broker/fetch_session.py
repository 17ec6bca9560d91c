"""Incremental fetch sessions between a follower and a leader (KIP-227), pure.

Without a session an idle follower sends every followed partition twice a second and the
leader reads and answers every one of them: O(partitions) per round whether or not
anything changed (issue 16). With one, both sides remember the partitions:

* the follower (:class:`FetchSessionBuilder`, Kafka's FetchSessionHandler) sends a full
  fetch that opens the session (epoch 0), then incremental fetches (epoch 1, 2, ...)
  carrying only the partitions whose request changed (a new fetch offset after an append,
  a new leader epoch, ...) and the ones it stopped fetching (forgotten); an idle round
  carries none. Any failure (an error, a lost or cancelled answer: the leader may or may
  not have seen the request) resets it: the next fetch is full and opens a new session;
* the leader (:class:`FetchSessionCache`, Kafka's FetchSessionCache / FetchSession) keeps
  each session's partitions with their last request and what it last answered (high
  watermark, log start offset), and which of them changed on the leader since
  (:meth:`FetchSession.mark_dirty`, fed by the replica manager's change events). An
  incremental fetch reads only the partitions it names and the changed ones, and answers
  only those with news (:meth:`FetchSession.has_news`): an idle round reads nothing and
  answers nothing.

Sessions are for followers only (a consumer's fetch carries no ``session_epoch``: answered
in full, as before) and are bound to the follower's broker epoch: a restarted follower
cannot continue a session of its previous incarnation. The cache holds at most
``max_sessions`` (Kafka's ``max.incremental.fetch.session.cache.slots``); the least
recently used goes first.

Callers: :mod:`kraftlog.broker.replica_manager` (leader), :mod:`kraftlog.broker.fetcher_driver`
(follower). Must not: import asyncio, grpc, protobuf or a clock; read logs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kraftlog.broker import purgatory
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition

INITIAL_EPOCH = 0
"""A full fetch that opens a new session."""
FINAL_EPOCH = -1
"""Close the session (a full fetch without one follows)."""
DEFAULT_MAX_SESSIONS = 1000
"""``max.incremental.fetch.session.cache.slots``."""


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (wraps to 1, never back to the initial epoch)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRequest:
    """The session part of a Fetch: id, epoch (None: no session) and forgotten partitions."""

    session_id: int = 0
    epoch: int | None = None
    forgotten: tuple[TopicPartition, ...] = ()


class CachedPartition:
    """One partition of a session: its last request and what the leader last answered."""

    __slots__ = ("request", "sent_high_watermark", "sent_log_start_offset")

    def __init__(self, request: purgatory.FetchPartitionRequest) -> None:
        self.request = request
        self.sent_high_watermark = -2  # never answered: the first answer has news
        self.sent_log_start_offset = -2


class FetchSession:
    """One follower's session on this leader. See the module docstring."""

    __slots__ = ("dirty", "epoch", "last_fetch_ms", "partitions", "replica_epoch", "replica_id", "session_id")

    def __init__(self, *, session_id: int, replica_id: int, replica_epoch: int) -> None:
        self.session_id = session_id
        self.replica_id = replica_id
        self.replica_epoch = replica_epoch
        self.epoch = 1
        """The epoch the next incremental fetch must carry."""
        self.partitions: dict[TopicPartition, CachedPartition] = {}
        self.dirty: set[TopicPartition] = set()
        """Session partitions that changed on the leader since they were last read."""
        self.last_fetch_ms = -1
        """When the follower last fetched in this session (every partition of it, implicitly)."""

    def update(self, requests: Mapping[TopicPartition, purgatory.FetchPartitionRequest],
               forgotten: Iterable[TopicPartition]) -> None:
        """Merge an incremental fetch: new or changed partitions, then the forgotten ones."""
        for tp, request in requests.items():
            cached = self.partitions.get(tp)
            if cached is None:
                self.partitions[tp] = CachedPartition(request)
            else:
                cached.request = request
        for tp in forgotten:
            self.partitions.pop(tp, None)
            self.dirty.discard(tp)

    def to_read(self, named: Iterable[TopicPartition]) -> dict[TopicPartition, purgatory.FetchPartitionRequest]:
        """The partitions an incremental fetch reads: those it names and those that changed
        here since last read (their last request), in that order. Clears ``dirty``."""
        reads: dict[TopicPartition, purgatory.FetchPartitionRequest] = {}
        for tp in named:
            cached = self.partitions.get(tp)
            if cached is not None:
                reads[tp] = cached.request
        for tp in self.dirty:
            cached = self.partitions.get(tp)
            if cached is not None and tp not in reads:
                reads[tp] = cached.request
        self.dirty.clear()
        return reads

    def take_changed(self, tp: TopicPartition) -> dict[TopicPartition, purgatory.FetchPartitionRequest]:
        """``tp`` alone as :meth:`to_read` would read it (its last request), no longer dirty:
        a waiting fetch reads the one partition that changed, not every dirty one (the others
        are read when they change, or at the session's next fetch)."""
        cached = self.partitions.get(tp)
        if cached is None:
            return {}
        self.dirty.discard(tp)
        return {tp: cached.request}

    def has_news(self, tp: TopicPartition, *, error: ErrorCode, records: bool, diverging: bool,
                 high_watermark: int, log_start_offset: int) -> bool:
        """Whether an answer for ``tp`` must go to the follower (Kafka's
        ``maybeUpdateResponseData``); records what was sent when it must."""
        cached = self.partitions.get(tp)
        if cached is None:
            return True
        if (error is not ErrorCode.NONE or records or diverging
                or high_watermark != cached.sent_high_watermark
                or log_start_offset != cached.sent_log_start_offset):
            cached.sent_high_watermark = high_watermark
            cached.sent_log_start_offset = log_start_offset
            return True
        return False


class FetchSessionCache:
    """The leader's sessions by id, at most ``max_sessions`` (least recently used evicted)."""

    def __init__(self, *, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._by_partition: dict[TopicPartition, set[int]] = {}
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, *, replica_id: int, replica_epoch: int) -> FetchSession:
        while len(self._sessions) >= max(1, self.max_sessions):
            self.remove(next(iter(self._sessions)))
        session_id = self._next_id
        self._next_id = 1 if self._next_id >= 2**31 - 1 else self._next_id + 1
        session = FetchSession(session_id=session_id, replica_id=replica_id, replica_epoch=replica_epoch)
        self._sessions[session_id] = session
        return session

    def get(self, session_id: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            self._sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        for tp in session.partitions:
            self._unindex(tp, session_id)

    def reindex(self, session: FetchSession, before: Iterable[TopicPartition]) -> None:
        """Keep the partition -> sessions index after ``session`` changed its partitions from
        ``before`` (only the difference is touched)."""
        old = set(before)
        for tp in old - session.partitions.keys():
            self._unindex(tp, session.session_id)
        for tp in session.partitions.keys() - old:
            self._by_partition.setdefault(tp, set()).add(session.session_id)

    def add_partitions(self, session: FetchSession, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._by_partition.setdefault(tp, set()).add(session.session_id)

    def remove_partitions(self, session: FetchSession, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._unindex(tp, session.session_id)

    def sessions_of(self, tp: TopicPartition) -> list[FetchSession]:
        """The sessions holding ``tp``."""
        ids = self._by_partition.get(tp)
        if not ids:
            return []
        return [session for session_id in ids if (session := self._sessions.get(session_id)) is not None]

    def mark_dirty(self, tp: TopicPartition) -> list[FetchSession]:
        """``tp`` changed here: every session holding it reads it at its next fetch; returns them."""
        ids = self._by_partition.get(tp)
        if not ids:
            return []
        touched = []
        for session_id in ids:
            session = self._sessions.get(session_id)
            if session is not None:
                session.dirty.add(tp)
                touched.append(session)
        return touched

    def _unindex(self, tp: TopicPartition, session_id: int) -> None:
        ids = self._by_partition.get(tp)
        if ids is not None:
            ids.discard(session_id)
            if not ids:
                del self._by_partition[tp]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionFetch:
    """What the follower sends this round: the session fields and the partitions to list."""

    session_id: int
    epoch: int
    send: tuple[TopicPartition, ...]
    forgotten: tuple[TopicPartition, ...]


class FetchSessionBuilder:
    """The follower's side of one session with one leader (Kafka's FetchSessionHandler)."""

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._sent: dict[TopicPartition, object] = {}
        self._pending: dict[TopicPartition, object] | None = None
        self._closing = 0
        """A session given up on: the next full fetch names it, so the leader drops it."""
        self._sent_from: Mapping[TopicPartition, object] | None = None
        self._pending_from: Mapping[TopicPartition, object] | None = None
        # The mapping the answered requests were built from: the caller promises not to
        # change a mapping it passes again (it builds a new one when anything changes).

    def build(self, requests: Mapping[TopicPartition, object]) -> SessionFetch:
        """This round's fetch for ``requests`` (partition -> a comparable request value):
        everything when no session is open, else only what changed since the last answered
        request, and what was dropped."""
        if self.session_id and requests is self._sent_from:
            # The very mapping answered last time, unchanged by its owner: an idle round.
            self._pending = self._sent
            return SessionFetch(session_id=self.session_id, epoch=self.epoch, send=(), forgotten=())
        self._pending = dict(requests)
        self._pending_from = requests
        if self.session_id == 0:
            return SessionFetch(session_id=self._closing, epoch=INITIAL_EPOCH, send=tuple(requests),
                                forgotten=())
        sent = self._sent
        send = tuple(tp for tp, request in requests.items()
                     if (last := sent.get(tp)) is not request and last != request)
        forgotten = tuple(tp for tp in self._sent if tp not in requests)
        return SessionFetch(session_id=self.session_id, epoch=self.epoch, send=send, forgotten=forgotten)

    def handle_response(self, *, error: ErrorCode, session_id: int) -> None:
        """The leader answered the fetch last built: the session goes on (or opens, or the
        leader keeps none: ``session_id`` 0), or it resets on a session error."""
        pending, self._pending = self._pending, None
        if error is not ErrorCode.NONE or pending is None:
            self.reset()
            return
        if session_id == 0:
            self.reset()  # no session on the leader's side: full fetches, each opening one
            return
        if session_id != self.session_id:
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH
        self._closing = 0
        self.epoch = next_epoch(self.epoch)
        if pending is not self._sent:
            self._sent = pending
            self._sent_from = self._pending_from

    def reset(self) -> None:
        """Forget the session: the next fetch is full and opens a new one (closing this one)."""
        if self.session_id:
            self._closing = self.session_id
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._sent = {}
        self._pending = None
        self._sent_from = None
