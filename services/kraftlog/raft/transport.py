"""The raft RPCs over gRPC (grpc.aio): the RaftService server and the peer client.

Server side, :class:`RaftServicer` validates and converts each protobuf request
(:mod:`.convert`), hands it to a :class:`RequestHandler` (the driver, which
owns the core) and awaits the answer, which may come much later for a parked
Fetch. Invalid input is answered with an error response, never an exception
(and logged at most once per interval and kind of request); a stopped driver answers
UNAVAILABLE (a transport failure). Undecodable bytes, unexpected exceptions and the
calls still open at shutdown are :mod:`kraftlog.rpc_guard`'s, which
:func:`create_server` puts in front of every method. KIP-853's
Add/Remove/UpdateRaftVoter are validated like the rest (:mod:`.convert`) and answered by
the core when the change commits (UNSUPPORTED_VERSION while ``kraft.version`` is 0).

Client side, :class:`RaftPeers` implements ``send(destination, request)``: one
channel per peer, created on first use and reused; each call runs as its own
task with the deadline ``controller.quorum.request.timeout.ms``; the answer or
the failure goes back to a :class:`ResponseSink` (the driver's inbox), never
into the core directly. Retry pacing after a failure is the core's
(``controller.quorum.retry.backoff.ms`` per destination); the channels
reconnect with that backoff as their floor and a low ceiling, so a restarted
peer is reached again within about a second rather than gRPC's default two
minutes.

Fetch goes over ``FetchStream``, a long-lived bidirectional stream per peer: each
request is a whole Fetch and its answer is exactly what unary Fetch answers
(KIP-595 semantics unchanged), one exchange at a time per stream. A voter fetches
after every append, and a new unary call costs both ends far more than a message
on an open stream (call set-up, metadata, a server task per call); on the
sequential-commit path that was the largest cost after the fsyncs. A stream whose
exchange fails or times out is cancelled, never reused; a peer without
FetchStream (UNIMPLEMENTED) gets unary Fetch.

Tracing: the server and the channels take grpc.aio interceptors (the driver passes
:mod:`kraftlog.telemetry.grpc_tracing`'s when tracing is on), and ``send`` runs each call
in the contextvars context its caller hands over, so the span current there (a vote
request's) crosses the hop as ``traceparent``.

Message-size limits are raised on both sides (:data:`MAX_MESSAGE_BYTES`) so a
Fetch or FetchSnapshot answer of ``fetch_max_bytes`` plus one oversized batch
fits. Channels and the server come from :mod:`kraftlog.rpc` (TLS when configured); with
mTLS on, a Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch or FetchSnapshot that names voter
N is answered only for voter N's own certificate (``kraftlog.security.controller.principal``,
default CN ``controller-N``): any other caller gets CLUSTER_AUTHORIZATION_FAILED in the
response and the core never sees the request. Observers (brokers) may fetch under ids that are not voters.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, cast

import grpc
import grpc.aio

from kraftlog import errors, rpc, rpc_guard
from kraftlog.raft import convert
from kraftlog.raft import messages as m
from kraftlog.security import principal, tls
from kraftlog.v1 import common_pb2, raft_pb2, raft_pb2_grpc

logger = logging.getLogger(__name__)

# The shared gRPC settings live in kraftlog.rpc; these names stay for the raft callers.
MAX_MESSAGE_BYTES = rpc.MAX_MESSAGE_BYTES
DEFAULT_MAX_RECONNECT_BACKOFF_MS = rpc.DEFAULT_MAX_RECONNECT_BACKOFF_MS
server_options = rpc.server_options
channel_options = rpc.channel_options
MAX_IDLE_FETCH_STREAMS = 1
"""FetchStream calls kept open per peer between fetches. One is in use at a time; a second
opens only while a fetch sent before a role change is still parked at that peer."""


class DriverStoppedError(errors.KraftlogError):
    """The driver no longer accepts requests (shutting down or failed)."""


class RequestHandler(Protocol):
    """What the servicer needs from the driver."""

    async def handle_request(self, source: int, request: m.RaftRequest) -> m.RaftResponse:
        """Answer ``request`` (raises :class:`DriverStoppedError` once stopping)."""
        ...

    def leader_and_epoch(self) -> tuple[int, int]:
        """The last known (leader id or -1, epoch), for answers the core does not make."""
        ...


class ResponseSink(Protocol):
    """Where :class:`RaftPeers` reports the outcome of a send (thread: the event loop)."""

    def deliver_response(self, destination: int, request: m.RaftRequest,
                         response: m.RaftResponse) -> None: ...

    def deliver_send_failure(self, destination: int, request: m.RaftRequest) -> None: ...


# -- server ---------------------------------------------------------------------------------------

class RaftServicer(raft_pb2_grpc.RaftServiceServicer):
    """RaftService backed by a :class:`RequestHandler`; attach one before serving traffic."""

    def __init__(self, handler: RequestHandler | None = None, *,
                 voter_identity: principal.NodePrincipal | None = None,
                 voters: frozenset[int] = frozenset()) -> None:
        self.handler = handler
        self._invalid_log = rpc_guard.RateLimitedLog()
        # With mTLS on: who may speak as voter N (the listener's interceptor names the
        # caller; on a listener without client certificates there is no one to check).
        self._voter_identity = voter_identity
        self._voters = voters

    def _impersonation(self, request: m.RaftRequest) -> convert.Invalid | None:
        """A refusal when an authenticated caller names a voter it is not."""
        peer = tls.current_peer()
        if peer is None or self._voter_identity is None:
            return None
        source = convert.request_source(request)
        if source not in self._voters or self._voter_identity.matches(peer, source):
            return None
        logger.warning("event=impersonation_refused rpc=%s named_voter=%d principal=%r "
                       "expected=%r", type(request).__name__, source, peer.principal,
                       self._voter_identity.expected(source))
        return convert.Invalid(code=common_pb2.CLUSTER_AUTHORIZATION_FAILED,
                               message=f"{peer.principal} may not act as voter {source}")

    async def _serve(self, request: convert.ProtoRequest, context: Any) -> convert.ProtoResponse:
        handler = self.handler
        if handler is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "raft driver not started yet")
            raise AssertionError("unreachable: abort raises")
        converted = convert.request_from_proto(request)
        if not isinstance(converted, convert.Invalid):
            converted = self._impersonation(converted) or converted
        if isinstance(converted, convert.Invalid):
            leader_id, epoch = handler.leader_and_epoch()
            rpc = type(request).__name__
            suppressed = self._invalid_log.admit(rpc)
            if suppressed is not None:  # a flood of bad requests is a few lines, not one each
                logger.info("event=invalid_request rpc=%s reason=%r suppressed=%d", rpc,
                            converted.message, suppressed)
            return convert.error_response(type(request), converted, leader_id=leader_id,
                                          epoch=epoch)
        try:
            response = await handler.handle_request(convert.request_source(converted), converted)
        except DriverStoppedError:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "raft driver is stopping")
            raise AssertionError("unreachable: abort raises") from None
        if isinstance(response, m.VoterChangeResponse):
            return convert.voter_change_response_to_proto(type(request), response)
        return convert.response_to_proto(response)

    async def Vote(self, request: raft_pb2.VoteRequest, context: Any) -> raft_pb2.VoteResponse:
        return cast(raft_pb2.VoteResponse, await self._serve(request, context))

    async def BeginQuorumEpoch(self, request: raft_pb2.BeginQuorumEpochRequest,
                               context: Any) -> raft_pb2.BeginQuorumEpochResponse:
        return cast(raft_pb2.BeginQuorumEpochResponse, await self._serve(request, context))

    async def EndQuorumEpoch(self, request: raft_pb2.EndQuorumEpochRequest,
                             context: Any) -> raft_pb2.EndQuorumEpochResponse:
        return cast(raft_pb2.EndQuorumEpochResponse, await self._serve(request, context))

    async def Fetch(self, request: raft_pb2.RaftFetchRequest,
                    context: Any) -> raft_pb2.RaftFetchResponse:
        return cast(raft_pb2.RaftFetchResponse, await self._serve(request, context))

    async def FetchStream(self, request_iterator: Any,
                          context: Any) -> AsyncIterator[raft_pb2.RaftFetchResponse]:
        # One answer per request, in order: exactly what Fetch answers (a parked fetch
        # answers when the purgatory completes it). The fetcher sends its next request only
        # after reading the answer, so requests never queue behind a parked one.
        async for request in request_iterator:
            yield cast(raft_pb2.RaftFetchResponse, await self._serve(request, context))

    async def FetchSnapshot(self, request: raft_pb2.FetchSnapshotRequest,
                            context: Any) -> raft_pb2.FetchSnapshotResponse:
        return cast(raft_pb2.FetchSnapshotResponse, await self._serve(request, context))

    async def DescribeQuorum(self, request: raft_pb2.DescribeQuorumRequest,
                             context: Any) -> raft_pb2.DescribeQuorumResponse:
        return cast(raft_pb2.DescribeQuorumResponse, await self._serve(request, context))

    async def AddRaftVoter(self, request: raft_pb2.AddRaftVoterRequest,
                           context: Any) -> raft_pb2.AddRaftVoterResponse:
        return cast(raft_pb2.AddRaftVoterResponse, await self._serve(request, context))

    async def RemoveRaftVoter(self, request: raft_pb2.RemoveRaftVoterRequest,
                              context: Any) -> raft_pb2.RemoveRaftVoterResponse:
        return cast(raft_pb2.RemoveRaftVoterResponse, await self._serve(request, context))

    async def UpdateRaftVoter(self, request: raft_pb2.UpdateRaftVoterRequest,
                              context: Any) -> raft_pb2.UpdateRaftVoterResponse:
        return cast(raft_pb2.UpdateRaftVoterResponse, await self._serve(request, context))


def create_server(servicer: RaftServicer, *, interceptors: Sequence[Any] = (),
                  server_tls: tls.ServerTls | None = None) -> Any:
    """A grpc.aio server with RaftService registered (not yet bound or started).

    ``interceptors`` (grpc.aio server interceptors) run for every service added later too,
    e.g. trace-context extraction from :mod:`kraftlog.telemetry.grpc_tracing`; with an
    authenticating ``server_tls``, :mod:`kraftlog.rpc` puts authentication first."""
    server = rpc.create_server(interceptors=interceptors, server_tls=server_tls)
    rpc_guard.add_service(lambda s: raft_pb2_grpc.add_RaftServiceServicer_to_server(servicer, s),
                          server)
    return server


# -- client ---------------------------------------------------------------------------------------

def _method(stub: Any, request: m.RaftRequest) -> Callable[..., Awaitable[Any]]:
    if isinstance(request, m.VoteRequest):
        return stub.Vote  # type: ignore[no-any-return]
    if isinstance(request, m.BeginQuorumEpochRequest):
        return stub.BeginQuorumEpoch  # type: ignore[no-any-return]
    if isinstance(request, m.EndQuorumEpochRequest):
        return stub.EndQuorumEpoch  # type: ignore[no-any-return]
    if isinstance(request, m.FetchRequest):
        return stub.Fetch  # type: ignore[no-any-return]
    if isinstance(request, m.FetchSnapshotRequest):
        return stub.FetchSnapshot  # type: ignore[no-any-return]
    if isinstance(request, m.AddRaftVoterRequest):
        return stub.AddRaftVoter  # type: ignore[no-any-return]
    if isinstance(request, m.RemoveRaftVoterRequest):
        return stub.RemoveRaftVoter  # type: ignore[no-any-return]
    if isinstance(request, m.UpdateRaftVoterRequest):
        return stub.UpdateRaftVoter  # type: ignore[no-any-return]
    return stub.DescribeQuorum  # type: ignore[no-any-return]


class RaftPeers:
    """The client half: ``send`` to a node id, outcome to ``sink``. One owner (the driver)."""

    def __init__(self, endpoints: Mapping[int, str] | Callable[[int], str], sink: ResponseSink, *,
                 request_timeout_ms: int, retry_backoff_ms: int,
                 max_reconnect_backoff_ms: int = DEFAULT_MAX_RECONNECT_BACKOFF_MS,
                 interceptors: Sequence[Any] = ()) -> None:
        # A voter set in the log (KIP-853) changes under us: resolve at each new channel,
        # and move a destination whose address changed to a new channel.
        self._resolve: Callable[[int], str] = endpoints if callable(endpoints) \
            else dict(endpoints).get  # type: ignore[assignment]
        self._targets: dict[int, str] = {}
        self._interceptors = list(interceptors) or None
        self._sink = sink
        self._timeout_s = request_timeout_ms / 1000
        self._options = channel_options(retry_backoff_ms=retry_backoff_ms,
                                        max_reconnect_backoff_ms=max_reconnect_backoff_ms)
        self._channels: dict[int, Any] = {}
        self._stubs: dict[int, raft_pb2_grpc.RaftServiceStub] = {}
        # Idle FetchStream calls per destination (at most MAX_IDLE_FETCH_STREAMS each); a
        # call in use is in no list, so two fetches never share one.
        self._idle_streams: dict[int, list[Any]] = {}
        self._unary_fetch: set[int] = set()  # peers that answered FetchStream UNIMPLEMENTED
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def _stub(self, destination: int) -> raft_pb2_grpc.RaftServiceStub | None:
        stub = self._stubs.get(destination)
        target = self._resolve(destination) or None
        if stub is not None and target is not None and target != self._targets.get(destination):
            old = self._channels.pop(destination)
            del self._stubs[destination]
            for call in self._idle_streams.pop(destination, []):
                call.cancel()
            task = asyncio.get_running_loop().create_task(old.close())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            stub = None
        if stub is None:
            if target is None:
                return None
            self._targets[destination] = target
            channel = rpc.aio_channel(target, options=self._options,
                                      interceptors=self._interceptors)
            self._channels[destination] = channel
            stub = self._stubs[destination] = raft_pb2_grpc.RaftServiceStub(channel)
        return stub

    def send(self, destination: int, request: m.RaftRequest, *,
             context: contextvars.Context | None = None) -> None:
        """Start the call; never blocks and never calls back synchronously.

        ``context`` is the contextvars context the call runs in (default: a copy of the
        caller's); the tracer passes one whose current span the call propagates."""
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._call(destination, request),
                                                      name=f"raft-send-{destination}",
                                                      context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, destination: int, request: m.RaftRequest) -> None:
        stub = self._stub(destination)
        if stub is None:
            logger.warning("event=send_failed to=%s reason=unknown_destination", destination)
            self._sink.deliver_send_failure(destination, request)
            return
        try:
            answer = None
            if isinstance(request, m.FetchRequest) and destination not in self._unary_fetch:
                answer = await self._fetch_on_stream(destination, stub,
                                                     convert.request_to_proto(request))
            if answer is None:
                answer = await _method(stub, request)(convert.request_to_proto(request),
                                                      timeout=self._timeout_s)
        except grpc.aio.AioRpcError as exc:
            logger.debug("event=send_failed to=%s rpc=%s code=%s", destination,
                         type(request).__name__, exc.code())
            self._sink.deliver_send_failure(destination, request)
            return
        except Exception as exc:
            # (a closed channel, a serialisation bug); the core must hear of it, or the
            # destination would stay "in flight" until the request timeout.
            logger.warning("event=send_failed to=%s rpc=%s error=%r", destination,
                           type(request).__name__, exc)
            self._sink.deliver_send_failure(destination, request)
            return
        response = convert.response_from_proto(answer)
        if isinstance(response, convert.Invalid):
            logger.warning("event=invalid_response from=%s rpc=%s reason=%r", destination,
                           type(request).__name__, response.message)
            self._sink.deliver_send_failure(destination, request)
            return
        self._sink.deliver_response(destination, request, response)

    async def _fetch_on_stream(self, destination: int, stub: raft_pb2_grpc.RaftServiceStub,
                               request: convert.ProtoRequest) -> convert.ProtoResponse | None:
        """One Fetch exchange on an idle FetchStream call to ``destination`` (opened if none).

        The call goes back to the idle list only after a whole exchange; on any failure
        (the deadline included, whose cancel ends the call) it is cancelled, so a late
        answer can never be read as the answer to a later request. None when the peer has
        no FetchStream (UNIMPLEMENTED): this destination uses unary Fetch from then on.
        """
        idle = self._idle_streams.get(destination)
        call = idle.pop() if idle else stub.FetchStream()
        reusable = False
        try:
            async with asyncio.timeout(self._timeout_s):
                await call.write(request)
                answer = await call.read()
            if answer is grpc.aio.EOF:
                raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                           grpc.aio.Metadata(),
                                           details="FetchStream ended by the server")
            reusable = True
            return cast(convert.ProtoResponse, answer)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
                raise
            logger.info("event=fetch_stream_unsupported to=%s fallback=Fetch", destination)
            self._unary_fetch.add(destination)
            return None
        except TimeoutError:
            raise grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(),
                                       grpc.aio.Metadata(),
                                       details="no FetchStream answer in time") from None
        finally:
            idle = self._idle_streams.setdefault(destination, [])
            if reusable and not self._closed and len(idle) < MAX_IDLE_FETCH_STREAMS:
                idle.append(call)
            else:
                call.cancel()

    async def close(self) -> None:
        """Cancel calls in flight and close every channel."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for calls in self._idle_streams.values():
            for call in calls:
                call.cancel()
        self._idle_streams.clear()
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._stubs.clear()


async def describe_quorum(target: str, *, timeout_s: float = 2.0) -> raft_pb2.DescribeQuorumResponse:
    """One DescribeQuorum call to ``host:port`` (tools and tests); gRPC errors propagate."""
    async with rpc.aio_channel(target) as channel:
        stub = raft_pb2_grpc.RaftServiceStub(channel)
        answer: raft_pb2.DescribeQuorumResponse = await stub.DescribeQuorum(
            raft_pb2.DescribeQuorumRequest(), timeout=timeout_s)
        return answer
