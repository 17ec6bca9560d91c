"""Raft elections and leader changes as OpenTelemetry spans (one trace per election).

Owns :class:`RaftTracer`, the :class:`kraftlog.raft.driver.RaftObserver` that the
controller process injects into its raft driver. The core emits plain
:class:`~kraftlog.raft.consensus.RaftEvent` values; this module turns them into spans.
It never calls into the driver or the core, and all of it runs on the event loop.

The traces it makes:

* ``raft.election`` — one trace per election attempt on the node that stands. It opens
  at ``PRE_VOTE_STARTED`` (Prospective) and closes with ``raft.election.outcome``:
  ``won``; ``backoff`` (a majority rejected; KIP-595 backoff follows); ``lost`` (the
  round timed out and another attempt starts); ``superseded`` (another leader or a
  higher epoch turned up); ``aborted`` (the process stopped). Attributes: node id,
  target epoch, reason (``startup``, ``fetch timeout``, ``EndQuorumEpoch``,
  ``check-quorum``, ``election timeout``, ...; a retry after a lost or backed-off
  attempt keeps the reason of the first attempt of its run and counts
  ``raft.election.attempt``, its own cause is ``raft.election.trigger``), voters, votes
  granted and rejected (of the pre-vote and of the vote), duration. Span events mark
  ``prospective`` → ``candidate`` → ``leader`` / ``backoff``.
* ``raft.vote_request`` — a child per Vote or pre-vote request sent, current in the send
  task, so the gRPC client span and, through ``traceparent``, the voter's server span
  and its ``raft.vote`` span continue the same trace in another process.
* ``raft.begin_quorum_epoch`` — the new leader's first BeginQuorumEpoch per voter, child
  of the election, so followers learn the election's context.
* ``raft.leader_change`` — on a node that starts following a new leader; a child of
  (and linked to) the election when BeginQuorumEpoch carried its context, a root span
  otherwise (leader learnt from a Fetch or Vote answer).
* ``raft.vote`` — on a voter, the handling of one Vote request (granted or not, why).
* ``raft.resign`` — a leader resigning (graceful shutdown, check-quorum), with a
  ``raft.end_quorum_epoch`` child per EndQuorumEpoch sent; the election a successor
  then starts (reason ``EndQuorumEpoch``) links to it.

With a no-op tracer (tracing off) every span is a non-recording stub; Fetch, the hot
path, is recognised first and costs one ``isinstance``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar, cast

from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode

from kraftlog.raft import consensus
from kraftlog.raft import messages as m
from kraftlog.raft.consensus import RaftEventKind as K
from kraftlog.raft.epoch_state import Role

logger = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

OUTCOME_WON = "won"
OUTCOME_BACKOFF = "backoff"
OUTCOME_LOST = "lost"
OUTCOME_SUPERSEDED = "superseded"
OUTCOME_ABORTED = "aborted"

REASON_STARTUP = "startup"
REASON_CHECK_QUORUM = "check-quorum"
REASON_END_QUORUM_EPOCH = "EndQuorumEpoch"
ELECTION_BAGGAGE_KEY = "kraftlog.raft.election_span_id"
"""Baggage on BeginQuorumEpoch naming the election span, so followers can link to it."""
MAX_BEGIN_QUORUM_SPANS_PER_VOTER = 3
"""A leader resends BeginQuorumEpoch (a resigned one EndQuorumEpoch) to a dead voter until it
answers; trace the first few per voter."""

_ELECTING = frozenset({Role.PROSPECTIVE.value, Role.CANDIDATE.value, Role.LEADER.value})
ElectionDone = Callable[[str, int], None]
"""``(outcome, duration_ms)`` at the end of each election attempt (metrics hook); for the
last attempt of a run (won, superseded, aborted) the duration covers the whole run, i.e.
how long this node was trying to get a leader elected."""


@dataclass(slots=True, kw_only=True)
class _Attempt:
    """One election attempt in flight (mutable: it follows the events)."""

    span: Span
    epoch: int
    """The epoch the attempt stands for (current epoch + 1 while Prospective)."""
    started_ms: int
    phase: str = "prospective"
    pre_granted: set[int] = field(default_factory=set)
    pre_rejected: set[int] = field(default_factory=set)
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)

    def record(self, *, pre_vote: bool, voter: int, granted: bool) -> None:
        """One answer to this attempt's (pre-)vote request."""
        yes, no = ((self.pre_granted, self.pre_rejected) if pre_vote
                   else (self.granted, self.rejected))
        if voter not in yes and voter not in no:
            (yes if granted else no).add(voter)


_TRACED_SENDS = (m.VoteRequest, m.BeginQuorumEpochRequest, m.EndQuorumEpochRequest)


def _null_answer(response: m.RaftResponse) -> None:
    return None


# Reusable and allocation-free: what every Fetch gets.
_UNTRACED: contextlib.AbstractContextManager[Callable[[m.RaftResponse], None]] = \
    contextlib.nullcontext(_null_answer)


def _guarded(default: Any) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Tracing must never take consensus down: a bug in a hook costs a span, not the node
    (the driver calls these from inside the core's transitions)."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except Exception:
                logger.exception("event=tracing_failed hook=%s", fn.__name__)
                return cast(R, default)

        return guarded

    return decorate


@contextlib.contextmanager
def _answer_scope(span: Span) -> Iterator[Callable[[m.RaftResponse], None]]:
    """``span`` current for the wait; the yielded callable records the answer on it."""

    def answered(response: m.RaftResponse) -> None:
        span.set_attribute("raft.response.error_code", response.error_code.name)
        span.set_attribute("raft.epoch", response.leader_epoch)
        span.set_attribute("raft.leader_id", response.leader_id)
        if isinstance(response, m.VoteResponse):
            span.set_attribute("raft.vote.granted", response.vote_granted)

    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield answered
    except BaseException as exc:  # the driver stopped, or the caller was cancelled
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        otel_context.detach(token)
        span.end()


def _pending_key(destination: int, request: m.RaftRequest) -> tuple[object, ...]:
    """Which sent request a span stands for until its answer. A pre-vote and the vote after
    it are apart: the vote can go out while the pre-vote to a dead voter still waits to
    fail (the other voters granted it first)."""
    return (type(request), destination, isinstance(request, m.VoteRequest) and request.pre_vote)


def _election_context(caller: SpanContext) -> SpanContext:
    """The leader's election span, named by baggage in the caller's trace; else the caller."""
    span_id = baggage.get_baggage(ELECTION_BAGGAGE_KEY)
    if not isinstance(span_id, str):
        return caller
    try:
        parsed = int(span_id, 16)
    except ValueError:
        return caller
    if not 0 < parsed < 1 << 64:
        return caller
    return SpanContext(trace_id=caller.trace_id, span_id=parsed, is_remote=True,
                       trace_flags=caller.trace_flags, trace_state=caller.trace_state)


class RaftTracer:
    """Turns one node's raft events into spans. See the module docstring."""

    def __init__(self, tracer: trace.Tracer, *, node_id: int,
                 on_election_done: ElectionDone | None = None) -> None:
        self._tracer = tracer
        self.node_id = node_id
        self._on_election_done = on_election_done
        self._attempt: _Attempt | None = None
        self._pending: dict[tuple[object, ...], Span] = {}
        """:func:`_pending_key` -> the span of that request while it waits for its answer."""
        self._seen_leader = False
        self._cause: str | None = None
        """Why the next attempt starts, when an earlier event knows better (check-quorum)."""
        self._run: tuple[str, int, int] | None = None
        """(reason, attempts, start ms) of the current run of attempts: retries after a lost
        or backed-off attempt keep the reason that started the run."""
        self._last_role_change = ""
        self._won: tuple[int, SpanContext] | None = None
        """(epoch, election span context) of the last election this node won."""
        self._begin_quorum_sent: dict[int, int] = {}
        self._resigned: tuple[int, SpanContext] | None = None
        """(epoch, span context) of this node's last resignation."""
        self._end_quorum_sent: dict[int, int] = {}
        self._resignation_link: SpanContext | None = None
        """The caller's context of the last EndQuorumEpoch served: the election it causes
        links to the resignation."""
        self._leader_contexts: dict[tuple[int, int], SpanContext] = {}
        """(leader id, epoch) -> the caller's span context of a BeginQuorumEpoch served."""

    # -- RaftObserver -------------------------------------------------------------------------

    @_guarded(None)
    def on_event(self, event: consensus.RaftEvent) -> None:
        kind = event.kind
        if kind is K.ROLE_CHANGE:
            self._on_role_change(event)
        elif kind is K.PRE_VOTE_STARTED:
            self._start_attempt(event)
        elif kind is K.ELECTION_STARTED:
            self._on_election_started(event)
        elif kind is K.ELECTION_WON:
            self._on_election_won(event)
        elif kind is K.ELECTION_LOST:
            self._on_election_lost(event)
        elif kind is K.ELECTION_BACKOFF:
            self._on_election_backoff(event)
        elif kind is K.LEADER_CHANGE:
            self._on_leader_change(event)
        elif kind is K.RESIGNED:
            self._on_resigned(event)

    @_guarded(None)
    def send_context(self, destination: int,
                     request: m.RaftRequest) -> contextvars.Context | None:
        if isinstance(request, m.FetchRequest):
            return None
        span: Span | None = None
        if isinstance(request, m.VoteRequest):
            span = self._start_vote_request(destination, request)
        elif isinstance(request, m.BeginQuorumEpochRequest):
            span = self._start_begin_quorum(destination, request)
        elif isinstance(request, m.EndQuorumEpochRequest):
            span = self._start_end_quorum(destination, request)
        if span is None:
            return None
        key = _pending_key(destination, request)
        old = self._pending.pop(key, None)
        if old is not None:  # the same request again before the first was answered
            old.set_status(Status(StatusCode.ERROR, "no answer before it was sent again"))
            old.end()
        self._pending[key] = span
        current = trace.set_span_in_context(span, otel_context.Context())
        if isinstance(request, m.BeginQuorumEpochRequest) and self._won is not None:
            current = baggage.set_baggage(ELECTION_BAGGAGE_KEY,
                                          trace.format_span_id(self._won[1].span_id), current)
        ctx = contextvars.copy_context()
        ctx.run(otel_context.attach, current)
        return ctx

    @_guarded(None)
    def on_send_result(self, destination: int, request: m.RaftRequest,
                       response: m.RaftResponse | None) -> None:
        if not isinstance(request, _TRACED_SENDS):
            return
        span = self._pending.pop(_pending_key(destination, request), None)
        if span is None:
            return
        attempt = self._attempt
        if isinstance(request, m.VoteRequest) and isinstance(response, m.VoteResponse) \
                and attempt is not None and request.candidate_epoch == attempt.epoch:
            attempt.record(pre_vote=request.pre_vote, voter=destination,
                           granted=response.vote_granted)
        if response is None:
            span.set_status(Status(StatusCode.ERROR, "no answer (send failed or timed out)"))
        else:
            span.set_attribute("raft.response.error_code", response.error_code.name)
            span.set_attribute("raft.response.leader_epoch", response.leader_epoch)
            span.set_attribute("raft.response.leader_id", response.leader_id)
            if isinstance(response, m.VoteResponse):
                span.set_attribute("raft.vote.granted", response.vote_granted)
        span.end()

    @_guarded(_UNTRACED)
    def inbound(self, source: int, request: m.RaftRequest
                ) -> contextlib.AbstractContextManager[Callable[[m.RaftResponse], None]]:
        if isinstance(request, m.FetchRequest):
            return _UNTRACED
        if isinstance(request, m.VoteRequest):
            return self._vote_span(request)
        if isinstance(request, m.BeginQuorumEpochRequest | m.EndQuorumEpochRequest):
            # The caller's span (our gRPC server span) is current here, not in the driver
            # task that will emit the events this request causes: remember it for them.
            caller = trace.get_current_span().get_span_context()
            if caller.is_valid and isinstance(request, m.BeginQuorumEpochRequest):
                self._leader_contexts[(request.leader_id, request.leader_epoch)] = \
                    _election_context(caller)
            elif caller.is_valid:
                self._resignation_link = caller
        return _UNTRACED

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self, now_ms: int | None = None) -> None:
        """End whatever is still open (process shutdown)."""
        if self._attempt is not None:
            self._end_attempt(OUTCOME_ABORTED, self._attempt.started_ms
                              if now_ms is None else now_ms)
        for span in self._pending.values():
            span.set_status(Status(StatusCode.ERROR, "aborted"))
            span.end()
        self._pending.clear()

    # -- elections ----------------------------------------------------------------------------

    def _start_attempt(self, event: consensus.RaftEvent) -> None:
        if self._attempt is not None:
            # Another Prospective round starts without an outcome event: the last one
            # timed out (or its backoff ended after the outcome was already recorded).
            self._end_attempt(OUTCOME_LOST, event.now_ms)
        if self._run is None:
            reason = event.detail or "unknown"
            if self._cause is not None:
                reason, self._cause = self._cause, None
            elif not self._seen_leader:
                reason = REASON_STARTUP
            self._run = (reason, 1, event.now_ms)
        else:
            self._run = (self._run[0], self._run[1] + 1, self._run[2])
        reason, attempt_number, _ = self._run
        links: list[Link] = []
        if reason == REASON_END_QUORUM_EPOCH and self._resignation_link is not None:
            links.append(Link(self._resignation_link, {"kraftlog.link": "resignation"}))
        self._resignation_link = None
        epoch = event.epoch + 1
        span = self._tracer.start_span(
            "raft.election", kind=SpanKind.INTERNAL, attributes={
                "kraftlog.node.id": self.node_id,
                "raft.epoch": epoch,
                "raft.election.reason": reason,
                "raft.election.trigger": event.detail,
                "raft.election.attempt": attempt_number,
                "raft.voters": list(event.voters),
            }, links=links, context=otel_context.Context())  # always a new trace
        span.add_event("prospective", {"raft.epoch": event.epoch, "reason": event.detail})
        self._attempt = _Attempt(span=span, epoch=epoch, started_ms=event.now_ms,
                                 pre_granted=set(event.granted), pre_rejected=set(event.rejected))

    @staticmethod
    def _tally(attempt: _Attempt, event: consensus.RaftEvent) -> None:
        """The core's tally is authoritative for the phase it reports on."""
        if not event.voters:
            return
        if attempt.phase == "prospective":
            attempt.pre_granted, attempt.pre_rejected = set(event.granted), set(event.rejected)
        else:
            attempt.granted, attempt.rejected = set(event.granted), set(event.rejected)

    def _on_election_started(self, event: consensus.RaftEvent) -> None:
        attempt = self._attempt
        if attempt is None:
            return
        attempt.phase = "candidate"
        attempt.epoch = event.epoch
        self._tally(attempt, event)
        attempt.span.set_attribute("raft.epoch", event.epoch)
        attempt.span.add_event("candidate", {"raft.epoch": event.epoch})

    def _on_election_won(self, event: consensus.RaftEvent) -> None:
        attempt = self._attempt
        if attempt is None:
            return
        self._tally(attempt, event)
        attempt.span.add_event("leader", {"raft.epoch": event.epoch})
        self._won = (event.epoch, attempt.span.get_span_context())
        self._begin_quorum_sent.clear()
        self._end_attempt(OUTCOME_WON, event.now_ms)

    def _on_election_lost(self, event: consensus.RaftEvent) -> None:
        attempt = self._attempt
        if attempt is None:
            return
        self._tally(attempt, event)
        attempt.span.set_attribute("raft.election.lost_reason", event.detail)
        if event.detail == "election timed out":
            self._end_attempt(OUTCOME_LOST, event.now_ms)

    def _on_election_backoff(self, event: consensus.RaftEvent) -> None:
        attempt = self._attempt
        if attempt is None:
            return
        self._tally(attempt, event)
        attempt.span.add_event("backoff", {"detail": event.detail})
        self._end_attempt(OUTCOME_BACKOFF, event.now_ms)

    def _on_role_change(self, event: consensus.RaftEvent) -> None:
        role, _, why = event.detail.partition(": ")
        self._last_role_change = why
        attempt = self._attempt
        if attempt is None or role in _ELECTING:
            return
        # Follower, Unattached, Voted: someone else's epoch or leader took over; a pre-vote
        # that timed out and went back to its leader just lost.
        outcome = OUTCOME_LOST if "timed out" in why else OUTCOME_SUPERSEDED
        attempt.span.set_attribute("raft.election.superseded_by", why)
        self._end_attempt(outcome, event.now_ms)

    def _end_attempt(self, outcome: str, now_ms: int) -> None:
        attempt, self._attempt = self._attempt, None
        if attempt is None:
            return
        duration_ms = max(now_ms - attempt.started_ms, 0)
        span = attempt.span
        span.set_attribute("raft.epoch", attempt.epoch)
        span.set_attribute("raft.election.outcome", outcome)
        span.set_attribute("raft.election.duration_ms", duration_ms)
        span.set_attribute("raft.election.phase", attempt.phase)
        span.set_attribute("raft.prevote.granted", sorted(attempt.pre_granted))
        span.set_attribute("raft.prevote.rejected", sorted(attempt.pre_rejected))
        final = attempt.phase == "prospective"
        span.set_attribute("raft.votes.granted",
                           sorted(attempt.pre_granted if final else attempt.granted))
        span.set_attribute("raft.votes.rejected",
                           sorted(attempt.pre_rejected if final else attempt.rejected))
        span.end()
        run_ms = duration_ms
        if outcome not in (OUTCOME_LOST, OUTCOME_BACKOFF) and self._run is not None:
            run_ms = max(now_ms - self._run[2], 0)
            self._run = None
        if self._on_election_done is not None:
            self._on_election_done(outcome, run_ms)

    # -- requests -----------------------------------------------------------------------------

    def _start_vote_request(self, destination: int, request: m.VoteRequest) -> Span | None:
        attempt = self._attempt
        if attempt is None:
            return None
        parent = trace.set_span_in_context(attempt.span, otel_context.Context())
        span = self._tracer.start_span(
            "raft.vote_request", context=parent, kind=SpanKind.INTERNAL, attributes={
                "kraftlog.node.id": self.node_id,
                "raft.voter_id": destination,
                "raft.pre_vote": request.pre_vote,
                "raft.candidate_epoch": request.candidate_epoch,
                "raft.last_offset": request.last_offset,
                "raft.last_offset_epoch": request.last_offset_epoch,
            })
        return span

    def _start_begin_quorum(self, destination: int,
                            request: m.BeginQuorumEpochRequest) -> Span | None:
        won = self._won
        if won is None or won[0] != request.leader_epoch:
            return None
        sent = self._begin_quorum_sent.get(destination, 0)
        if sent >= MAX_BEGIN_QUORUM_SPANS_PER_VOTER:
            return None
        self._begin_quorum_sent[destination] = sent + 1
        parent = trace.set_span_in_context(trace.NonRecordingSpan(won[1]),
                                           otel_context.Context())
        span = self._tracer.start_span(
            "raft.begin_quorum_epoch", context=parent, kind=SpanKind.INTERNAL, attributes={
                "kraftlog.node.id": self.node_id,
                "raft.voter_id": destination,
                "raft.epoch": request.leader_epoch,
            })
        return span

    def _start_end_quorum(self, destination: int,
                          request: m.EndQuorumEpochRequest) -> Span | None:
        resigned = self._resigned
        if resigned is None or resigned[0] != request.leader_epoch:
            return None
        sent = self._end_quorum_sent.get(destination, 0)
        if sent >= MAX_BEGIN_QUORUM_SPANS_PER_VOTER:
            return None
        self._end_quorum_sent[destination] = sent + 1
        parent = trace.set_span_in_context(trace.NonRecordingSpan(resigned[1]),
                                           otel_context.Context())
        return self._tracer.start_span(
            "raft.end_quorum_epoch", context=parent, kind=SpanKind.INTERNAL, attributes={
                "kraftlog.node.id": self.node_id,
                "raft.voter_id": destination,
                "raft.epoch": request.leader_epoch,
                "raft.preferred_successors": list(request.preferred_successors),
            })

    def _on_resigned(self, event: consensus.RaftEvent) -> None:
        if event.detail.startswith(REASON_CHECK_QUORUM):
            self._cause = REASON_CHECK_QUORUM
        span = self._tracer.start_span(
            "raft.resign", kind=SpanKind.INTERNAL, attributes={
                "kraftlog.node.id": self.node_id,
                "raft.epoch": event.epoch,
                "raft.resign.reason": event.detail,
            }, context=otel_context.Context())
        span.end()
        self._resigned = (event.epoch, span.get_span_context())
        self._end_quorum_sent.clear()

    def _vote_span(self, request: m.VoteRequest
                   ) -> contextlib.AbstractContextManager[Callable[[m.RaftResponse], None]]:
        # Started here, in the serving task, where the gRPC server span (the candidate's
        # context) is current: this span continues the candidate's election trace. Started
        # eagerly so that a failure is the caller's (guarded) and not the with-statement's.
        span = self._tracer.start_span(
            "raft.vote", kind=SpanKind.INTERNAL, attributes={
                "kraftlog.node.id": self.node_id,
                "raft.candidate_id": request.candidate_id,
                "raft.candidate_epoch": request.candidate_epoch,
                "raft.pre_vote": request.pre_vote,
                "raft.last_offset": request.last_offset,
                "raft.last_offset_epoch": request.last_offset_epoch,
            })
        return _answer_scope(span)

    # -- leader changes -----------------------------------------------------------------------

    def _on_leader_change(self, event: consensus.RaftEvent) -> None:
        self._seen_leader = True
        self._cause = None
        self._run = None
        if event.leader_id == self.node_id or event.leader_id < 0:
            return  # the winner's election span already says it
        election = self._leader_contexts.pop((event.leader_id, event.epoch), None)
        # Forget contexts of older epochs: a leader is announced once per epoch.
        for key in [k for k in self._leader_contexts if k[1] <= event.epoch]:
            del self._leader_contexts[key]
        parent = otel_context.Context()
        links: list[Link] = []
        if election is not None and election.is_valid:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(election), parent)
            links.append(Link(election, {"kraftlog.link": "election"}))
        span = self._tracer.start_span(
            "raft.leader_change", context=parent, kind=SpanKind.INTERNAL, links=links,
            attributes={
                "kraftlog.node.id": self.node_id,
                "raft.epoch": event.epoch,
                "raft.leader_id": event.leader_id,
                "raft.leader_change.reason": self._last_role_change,
            })
        span.end()
