"""The grpc.aio interceptors carry trace context (and baggage) from a traced caller to the
server's handler, and leave untraced calls alone (no span at all)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from kraftlog.telemetry import grpc_tracing
from kraftlog.v1 import raft_pb2, raft_pb2_grpc


class _Recorder(raft_pb2_grpc.RaftServiceServicer):  # type: ignore[misc]
    """Answers DescribeQuorum and remembers the trace context its handler ran in."""

    def __init__(self) -> None:
        self.seen: list[tuple[trace.SpanContext, object]] = []

    async def DescribeQuorum(self, request: Any, context: Any) -> Any:
        self.seen.append((trace.get_current_span().get_span_context(),
                          baggage.get_baggage("k")))
        return raft_pb2.DescribeQuorumResponse(leader_id=7)

    async def Vote(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "not today")


def _tracer() -> tuple[trace.Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


async def _exchange(traced: bool) -> tuple[_Recorder, InMemorySpanExporter, list[Any]]:
    tracer, exporter = _tracer()
    recorder = _Recorder()
    server = grpc.aio.server(interceptors=grpc_tracing.server_interceptors(tracer))
    raft_pb2_grpc.add_RaftServiceServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    outcomes: list[Any] = []
    try:
        async with grpc.aio.insecure_channel(
                f"127.0.0.1:{port}",
                interceptors=grpc_tracing.client_interceptors(tracer)) as channel:
            stub = raft_pb2_grpc.RaftServiceStub(channel)
            token = None
            if traced:
                root = tracer.start_span("root")
                token = otel_context.attach(baggage.set_baggage(
                    "k", "v", trace.set_span_in_context(root)))
            try:
                outcomes.append(await stub.DescribeQuorum(raft_pb2.DescribeQuorumRequest(),
                                                          timeout=5))
                try:
                    await stub.Vote(raft_pb2.VoteRequest(), timeout=5)
                except grpc.aio.AioRpcError as exc:
                    outcomes.append(exc.code())
            finally:
                if token is not None:
                    otel_context.detach(token)
                    root.end()
    finally:
        await server.stop(None)
    return recorder, exporter, outcomes


def test_traced_call_continues_the_callers_trace_on_the_server_with_its_baggage() -> None:
    recorder, exporter, outcomes = asyncio.run(_exchange(traced=True))
    assert outcomes[0].leader_id == 7 and outcomes[1] == grpc.StatusCode.UNAVAILABLE
    spans = {(s.name, s.kind): s for s in exporter.get_finished_spans()}
    root = spans[("root", SpanKind.INTERNAL)]
    client = spans[("kraftlog.v1.RaftService/DescribeQuorum", SpanKind.CLIENT)]
    server = spans[("kraftlog.v1.RaftService/DescribeQuorum", SpanKind.SERVER)]
    assert client.parent is not None and client.parent.span_id == root.context.span_id
    assert server.parent is not None and server.parent.span_id == client.context.span_id
    assert server.context.trace_id == root.context.trace_id
    assert server.attributes is not None and server.attributes["rpc.method"] == "DescribeQuorum"
    handler_context, handler_baggage = recorder.seen[0]
    assert handler_context.span_id == server.context.span_id and handler_baggage == "v"
    failed = spans[("kraftlog.v1.RaftService/Vote", SpanKind.CLIENT)]
    assert failed.attributes is not None
    assert failed.attributes["rpc.grpc.status_code"] == grpc.StatusCode.UNAVAILABLE.value[0]
    assert not failed.status.is_ok


def test_untraced_call_creates_no_span_and_carries_no_context() -> None:
    recorder, exporter, outcomes = asyncio.run(_exchange(traced=False))
    assert outcomes[0].leader_id == 7 and outcomes[1] == grpc.StatusCode.UNAVAILABLE
    assert exporter.get_finished_spans() == ()
    handler_context, handler_baggage = recorder.seen[0]
    assert not handler_context.is_valid and handler_baggage is None
