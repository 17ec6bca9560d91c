"""RaftTracer turns scripted raft events into election, vote and leader-change spans
(in memory; the multi-process test checks the same across real processes)."""

from __future__ import annotations

import contextvars

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from kraftlog.raft import messages as m
from kraftlog.raft.consensus import RaftEvent
from kraftlog.raft.consensus import RaftEventKind as K
from kraftlog.raft.error_codes import ErrorCode
from kraftlog.telemetry import raft_tracing

VOTERS = (1, 2, 3)


class Recorder:
    def __init__(self, node_id: int = 1) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer_provider = provider
        self.done: list[tuple[str, int]] = []
        self.raft = raft_tracing.RaftTracer(provider.get_tracer("test"), node_id=node_id,
                                            on_election_done=lambda o, d: self.done.append((o, d)))
        self.node_id = node_id

    def event(self, kind: K, *, epoch: int, now_ms: int, detail: str = "", leader_id: int = -1,
              granted: tuple[int, ...] = (), rejected: tuple[int, ...] = ()) -> None:
        voters = VOTERS if granted or rejected else ()
        self.raft.on_event(RaftEvent(kind=kind, node_id=self.node_id, epoch=epoch,
                                     leader_id=leader_id, now_ms=now_ms, detail=detail,
                                     voters=voters, granted=granted, rejected=rejected))

    def spans(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]


def vote(candidate: int, voter: int, epoch: int, *, pre_vote: bool) -> m.VoteRequest:
    return m.VoteRequest(cluster_id="c", candidate_epoch=epoch, candidate_id=candidate,
                         voter_id=voter, last_offset_epoch=0, last_offset=0, pre_vote=pre_vote)


def answer(granted: bool, epoch: int) -> m.VoteResponse:
    return m.VoteResponse(error_code=ErrorCode.NONE, leader_epoch=epoch, leader_id=-1,
                          vote_granted=granted)


def current_span_in(ctx: contextvars.Context | None) -> trace.Span:
    assert ctx is not None
    return ctx.run(trace.get_current_span)


def test_won_startup_election_is_one_trace_with_a_span_per_vote_request() -> None:
    rec = Recorder()
    rec.event(K.ROLE_CHANGE, epoch=0, now_ms=1000, detail="Prospective: election timeout")
    rec.event(K.PRE_VOTE_STARTED, epoch=0, now_ms=1000, detail="election timeout",
              granted=(1,))
    for voter in (2, 3):
        request = vote(1, voter, 1, pre_vote=True)
        sent = current_span_in(rec.raft.send_context(voter, request))
        assert sent.is_recording()
        rec.raft.on_send_result(voter, request, answer(True, 0))
    rec.event(K.ROLE_CHANGE, epoch=1, now_ms=1010, detail="Candidate: pre-vote granted")
    rec.event(K.ELECTION_STARTED, epoch=1, now_ms=1010, granted=(1,))
    rec.raft.send_context(2, vote(1, 2, 1, pre_vote=False))
    rec.raft.send_context(3, vote(1, 3, 1, pre_vote=False))
    rec.raft.on_send_result(2, vote(1, 2, 1, pre_vote=False), answer(True, 1))
    rec.raft.on_send_result(3, vote(1, 3, 1, pre_vote=False), None)  # the send failed
    rec.event(K.ROLE_CHANGE, epoch=1, now_ms=1030, leader_id=1, detail="Leader: won")
    rec.event(K.ELECTION_WON, epoch=1, now_ms=1030, leader_id=1, detail="granted=[1, 2]")
    rec.event(K.LEADER_CHANGE, epoch=1, now_ms=1030, leader_id=1, detail="leader=1")

    [election] = rec.spans("raft.election")
    attrs = dict(election.attributes or {})
    assert election.parent is None
    assert attrs["kraftlog.node.id"] == 1 and attrs["raft.epoch"] == 1
    assert attrs["raft.election.reason"] == "startup"
    assert attrs["raft.election.trigger"] == "election timeout"
    assert attrs["raft.election.outcome"] == "won" and attrs["raft.election.duration_ms"] == 30
    assert attrs["raft.voters"] == VOTERS and attrs["raft.election.attempt"] == 1
    assert attrs["raft.prevote.granted"] == (1, 2, 3) and attrs["raft.prevote.rejected"] == ()
    assert attrs["raft.votes.granted"] == (1, 2) and attrs["raft.votes.rejected"] == ()
    assert [e.name for e in election.events] == ["prospective", "candidate", "leader"]
    requests = rec.spans("raft.vote_request")
    assert len(requests) == 4
    assert all(s.parent is not None and s.parent.span_id == election.context.span_id
               and s.context.trace_id == election.context.trace_id for s in requests)
    failed = [s for s in requests if not s.status.is_ok]
    assert len(failed) == 1 and (failed[0].attributes or {})["raft.voter_id"] == 3
    assert failed[0].status.status_code is StatusCode.ERROR
    assert rec.done == [("won", 30)]


def test_new_leader_begin_quorum_epoch_carries_the_election_and_names_it_in_baggage() -> None:
    rec = Recorder()
    rec.event(K.PRE_VOTE_STARTED, epoch=0, now_ms=0, detail="election timeout", granted=(1,))
    rec.event(K.ELECTION_STARTED, epoch=1, now_ms=1, granted=(1,))
    rec.event(K.ELECTION_WON, epoch=1, now_ms=2, leader_id=1)
    [election] = rec.spans("raft.election")
    request = m.BeginQuorumEpochRequest(cluster_id="c", leader_id=1, leader_epoch=1, voter_id=2)
    ctx = rec.raft.send_context(2, request)
    span = current_span_in(ctx)
    assert ctx is not None
    assert ctx.run(baggage.get_baggage, raft_tracing.ELECTION_BAGGAGE_KEY) \
        == trace.format_span_id(election.context.span_id)
    rec.raft.on_send_result(2, request, m.BeginQuorumEpochResponse(
        error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1))
    [begin] = rec.spans("raft.begin_quorum_epoch")
    assert begin.context.span_id == span.get_span_context().span_id
    assert begin.parent is not None and begin.parent.span_id == election.context.span_id
    # A dead voter is retried forever: only the first few sends are traced.
    traced = [rec.raft.send_context(3, m.BeginQuorumEpochRequest(
        cluster_id="c", leader_id=1, leader_epoch=1, voter_id=3)) for _ in range(5)]
    assert sum(ctx is not None for ctx in traced) == raft_tracing.MAX_BEGIN_QUORUM_SPANS_PER_VOTER
    # Fetch, the hot path, is never traced.
    fetch = m.FetchRequest(cluster_id="c", replica_id=2, current_leader_epoch=1, fetch_offset=0,
                           last_fetched_epoch=0, max_wait_ms=0, max_bytes=1)
    assert rec.raft.send_context(2, fetch) is None


def test_a_backed_off_run_keeps_its_reason_counts_attempts_and_ends_superseded() -> None:
    rec = Recorder()
    rec.event(K.LEADER_CHANGE, epoch=1, now_ms=0, leader_id=2)  # a leader was known
    rec.event(K.ROLE_CHANGE, epoch=1, now_ms=100, detail="Prospective: no answer from leader")
    rec.event(K.PRE_VOTE_STARTED, epoch=1, now_ms=100, detail="fetch timeout", granted=(1,))
    rec.event(K.ELECTION_LOST, epoch=1, now_ms=120, detail="a majority rejected the pre-vote",
              granted=(1,), rejected=(2, 3))
    rec.event(K.ELECTION_BACKOFF, epoch=1, now_ms=120, detail="50 ms after ...",
              granted=(1,), rejected=(2, 3))
    rec.event(K.ROLE_CHANGE, epoch=1, now_ms=170, detail="Prospective: pre-vote backoff over")
    rec.event(K.PRE_VOTE_STARTED, epoch=1, now_ms=170, detail="pre-vote backoff over",
              granted=(1,))
    rec.event(K.ROLE_CHANGE, epoch=2, now_ms=200, leader_id=3,
              detail="Follower: response names leader 3")
    rec.event(K.LEADER_CHANGE, epoch=2, now_ms=200, leader_id=3)

    first, second = sorted(rec.spans("raft.election"), key=lambda s: s.start_time or 0)
    a, b = dict(first.attributes or {}), dict(second.attributes or {})
    assert a["raft.election.outcome"] == "backoff" and a["raft.election.reason"] == "fetch timeout"
    assert a["raft.votes.rejected"] == (2, 3) and a["raft.election.phase"] == "prospective"
    assert a["raft.epoch"] == 2 and [e.name for e in first.events] == ["prospective", "backoff"]
    assert b["raft.election.outcome"] == "superseded" and b["raft.election.attempt"] == 2
    assert b["raft.election.reason"] == "fetch timeout"
    assert b["raft.election.trigger"] == "pre-vote backoff over"
    assert first.context.trace_id != second.context.trace_id  # one trace per attempt
    # The run's last attempt reports how long the run took, for the latency metric.
    assert rec.done == [("backoff", 20), ("superseded", 100)]
    # This node learnt the leader from a response: a root leader-change span, no link.
    changes = rec.spans("raft.leader_change")
    assert [(c.attributes or {})["raft.leader_id"] for c in changes] == [2, 3]
    change = changes[1]
    assert change.parent is None and not change.links
    assert (change.attributes or {})["raft.leader_change.reason"] == "response names leader 3"


def test_a_timed_out_round_is_lost_and_check_quorum_is_the_next_reason() -> None:
    rec = Recorder()
    rec.event(K.LEADER_CHANGE, epoch=3, now_ms=0, leader_id=1)
    rec.event(K.ROLE_CHANGE, epoch=3, now_ms=10, detail="Resigned: check-quorum: ...")
    rec.event(K.RESIGNED, epoch=3, now_ms=10, detail="check-quorum: no majority fetched")
    rec.event(K.ROLE_CHANGE, epoch=4, now_ms=20, detail="Unattached: resigned")
    rec.event(K.ROLE_CHANGE, epoch=4, now_ms=30, detail="Prospective: election timeout")
    rec.event(K.PRE_VOTE_STARTED, epoch=4, now_ms=30, detail="election timeout", granted=(1,))
    rec.event(K.ELECTION_STARTED, epoch=5, now_ms=40, granted=(1,))
    rec.event(K.ELECTION_LOST, epoch=5, now_ms=90, detail="election timed out", granted=(1,))
    rec.event(K.ROLE_CHANGE, epoch=5, now_ms=90, detail="Prospective: election timeout")
    rec.event(K.PRE_VOTE_STARTED, epoch=5, now_ms=90, detail="election timed out", granted=(1,))
    rec.raft.close(now_ms=95)
    first, second = sorted(rec.spans("raft.election"), key=lambda s: s.start_time or 0)
    a, b = dict(first.attributes or {}), dict(second.attributes or {})
    assert a["raft.election.reason"] == "check-quorum" and a["raft.election.outcome"] == "lost"
    assert a["raft.epoch"] == 5 and a["raft.election.phase"] == "candidate"
    assert b["raft.election.reason"] == "check-quorum" and b["raft.election.attempt"] == 2
    assert b["raft.election.outcome"] == "aborted" and b["raft.epoch"] == 6
    assert rec.done == [("lost", 60), ("aborted", 65)]


def test_voter_spans_continue_the_callers_trace_and_leader_change_links_the_election() -> None:
    rec = Recorder(node_id=2)
    remote = Recorder(node_id=1)  # stands in for the candidate's process
    election = remote.tracer_provider.get_tracer("t").start_span("raft.election")
    server = remote.tracer_provider.get_tracer("t").start_span(
        "server", context=trace.set_span_in_context(election))
    incoming = baggage.set_baggage(raft_tracing.ELECTION_BAGGAGE_KEY,
                                   trace.format_span_id(election.get_span_context().span_id),
                                   trace.set_span_in_context(server))
    token = otel_context.attach(incoming)
    try:
        with rec.raft.inbound(1, vote(1, 2, 4, pre_vote=False)) as answered:
            answered(answer(True, 4))
        begin = m.BeginQuorumEpochRequest(cluster_id="c", leader_id=1, leader_epoch=4,
                                          voter_id=2)
        with rec.raft.inbound(1, begin) as answered:
            # The core handles the request (in the driver task) while the caller waits.
            rec.event(K.ROLE_CHANGE, epoch=4, now_ms=5, leader_id=1,
                      detail="Follower: BeginQuorumEpoch from 1")
            rec.event(K.LEADER_CHANGE, epoch=4, now_ms=5, leader_id=1)
            answered(m.BeginQuorumEpochResponse(error_code=ErrorCode.NONE, leader_epoch=4,
                                                leader_id=1))
    finally:
        otel_context.detach(token)
    [voted] = rec.spans("raft.vote")
    assert voted.parent is not None and voted.parent.span_id == server.get_span_context().span_id
    attrs = dict(voted.attributes or {})
    assert attrs["raft.vote.granted"] is True and attrs["raft.candidate_id"] == 1
    assert attrs["raft.pre_vote"] is False and attrs["kraftlog.node.id"] == 2
    [change] = rec.spans("raft.leader_change")
    assert change.context.trace_id == election.get_span_context().trace_id
    assert [link.context.span_id for link in change.links] \
        == [election.get_span_context().span_id]
    assert (change.attributes or {})["raft.leader_id"] == 1
    # A Fetch is served without any span.
    fetch = m.FetchRequest(cluster_id="c", replica_id=1, current_leader_epoch=4, fetch_offset=0,
                           last_fetched_epoch=0, max_wait_ms=0, max_bytes=1)
    before = len(rec.exporter.get_finished_spans())
    with rec.raft.inbound(1, fetch) as answered:
        answered(m.FetchResponse(error_code=ErrorCode.NONE, leader_epoch=4, leader_id=1))
    assert len(rec.exporter.get_finished_spans()) == before


def test_with_tracing_off_the_tracer_still_times_elections_and_records_nothing() -> None:
    done: list[tuple[str, int]] = []
    raft = raft_tracing.RaftTracer(trace.NoOpTracer(), node_id=1,
                                   on_election_done=lambda o, d: done.append((o, d)))

    def event(kind: K, epoch: int, now_ms: int, detail: str = "") -> None:
        raft.on_event(RaftEvent(kind=kind, node_id=1, epoch=epoch, leader_id=-1,
                                now_ms=now_ms, detail=detail))

    event(K.PRE_VOTE_STARTED, 0, 0, "election timeout")
    ctx = raft.send_context(2, vote(1, 2, 1, pre_vote=True))
    assert not current_span_in(ctx).is_recording()
    raft.on_send_result(2, vote(1, 2, 1, pre_vote=True), answer(True, 0))
    event(K.ELECTION_STARTED, 1, 5)
    event(K.ELECTION_WON, 1, 12)
    assert done == [("won", 12)]


def test_a_resignation_traces_end_quorum_epoch_and_the_successors_election_links_it() -> None:
    leader = Recorder(node_id=1)
    leader.event(K.RESIGNED, epoch=5, now_ms=0, detail="graceful resign; successors=[2, 3]")
    [resign] = leader.spans("raft.resign")
    assert (resign.attributes or {})["raft.resign.reason"].startswith("graceful resign")
    request = m.EndQuorumEpochRequest(cluster_id="c", leader_id=1, leader_epoch=5,
                                      preferred_successors=(2, 3))
    ctx = leader.raft.send_context(2, request)
    leader.raft.on_send_result(2, request, m.EndQuorumEpochResponse(
        error_code=ErrorCode.NONE, leader_epoch=5, leader_id=1))
    [end] = leader.spans("raft.end_quorum_epoch")
    assert end.parent is not None and end.parent.span_id == resign.context.span_id
    assert (end.attributes or {})["raft.preferred_successors"] == (2, 3)

    successor = Recorder(node_id=2)
    successor.event(K.LEADER_CHANGE, epoch=5, now_ms=0, leader_id=1)
    assert ctx is not None
    # What the leader's send task propagates (its end_quorum_epoch span), made current here
    # as the successor's server interceptor would.
    attached = otel_context.attach(ctx.run(otel_context.get_current))
    try:
        with successor.raft.inbound(1, request) as answered:
            answered(m.EndQuorumEpochResponse(error_code=ErrorCode.NONE, leader_epoch=5,
                                              leader_id=1))
    finally:
        otel_context.detach(attached)
    successor.event(K.PRE_VOTE_STARTED, epoch=5, now_ms=10, detail="EndQuorumEpoch",
                    granted=(2,))
    successor.raft.close(now_ms=20)
    [election] = successor.spans("raft.election")
    assert (election.attributes or {})["raft.election.reason"] == "EndQuorumEpoch"
    assert [link.context.span_id for link in election.links] == [end.context.span_id]


def test_a_failing_tracer_costs_spans_not_the_node(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(trace.NoOpTracer):
        def start_span(self, *args: object, **kwargs: object) -> trace.Span:
            raise RuntimeError("exporter bug")

    raft = raft_tracing.RaftTracer(Broken(), node_id=1)
    raft.on_event(RaftEvent(kind=K.PRE_VOTE_STARTED, node_id=1, epoch=0, leader_id=-1,
                            now_ms=0, detail="election timeout"))  # logged, not raised
    assert raft.send_context(2, vote(1, 2, 1, pre_vote=True)) is None
    with raft.inbound(2, vote(2, 1, 1, pre_vote=True)) as answered:
        answered(answer(True, 1))
    # on_event and inbound failed and said so; send_context had no attempt to trace.
    assert caplog.text.count("event=tracing_failed") == 2


def test_a_vote_sent_while_the_pre_vote_to_a_dead_voter_waits_gets_a_span_of_its_own() -> None:
    """The live voter grants the pre-vote first, so the vote to the dead one goes out while
    its pre-vote is still waiting to fail: each request's failure lands on its own span."""
    rec = Recorder()
    rec.event(K.ROLE_CHANGE, epoch=0, now_ms=1000, detail="Prospective: fetch timeout")
    rec.event(K.PRE_VOTE_STARTED, epoch=0, now_ms=1000, detail="fetch timeout", granted=(1,))
    for voter in (2, 3):
        rec.raft.send_context(voter, vote(1, voter, 1, pre_vote=True))
    rec.raft.on_send_result(2, vote(1, 2, 1, pre_vote=True), answer(True, 0))
    rec.event(K.ROLE_CHANGE, epoch=1, now_ms=1010, detail="Candidate: pre-vote granted")
    rec.event(K.ELECTION_STARTED, epoch=1, now_ms=1010, granted=(1,))
    for voter in (2, 3):
        rec.raft.send_context(voter, vote(1, voter, 1, pre_vote=False))
    rec.raft.on_send_result(2, vote(1, 2, 1, pre_vote=False), answer(True, 1))
    rec.raft.on_send_result(3, vote(1, 3, 1, pre_vote=True), None)  # connection refused
    rec.raft.on_send_result(3, vote(1, 3, 1, pre_vote=False), None)
    to_dead = [s for s in rec.spans("raft.vote_request")
               if (s.attributes or {})["raft.voter_id"] == 3]
    assert sorted((s.attributes or {})["raft.pre_vote"] for s in to_dead) == [False, True]
    assert all(s.status.status_code is StatusCode.ERROR for s in to_dead)
    # The same request sent again before an answer: the first span ends, unanswered.
    rec.raft.send_context(2, vote(1, 2, 1, pre_vote=False))
    rec.raft.send_context(2, vote(1, 2, 1, pre_vote=False))
    superseded = [s for s in rec.spans("raft.vote_request")
                  if s.status.description == "no answer before it was sent again"]
    assert len(superseded) == 1 and superseded[0].status.status_code is StatusCode.ERROR
