"""The client's data-path spans: a CLIENT span per Produce / Fetch, its context sent to
the broker, other RPCs untouched."""

from __future__ import annotations

from typing import Any

import grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from kraftlog.storage import record_batch as rb
from kraftlog.telemetry import grpc_tracing
from kraftlog.v1 import broker_pb2, broker_pb2_grpc


def test_produce_and_fetch_get_client_spans_and_send_their_context(fake_broker: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    interceptor = grpc_tracing.SyncDataPathClientInterceptor(provider.get_tracer("test"))
    channel = grpc.intercept_channel(grpc.insecure_channel(f"127.0.0.1:{fake_broker.port}"),
                                     interceptor)
    try:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        stub.Metadata(broker_pb2.MetadataRequest(topics=["t"]), timeout=5)
        batch = rb.build_batch([rb.RecordInput(value=b"v", timestamp_ms=None)], now_ms=1)
        request = broker_pb2.ProduceRequest(acks=-1, timeout_ms=1000)
        request.topic_data.add(name="t").partition_data.add(index=0, records=batch)
        stub.Produce.future(request, timeout=5).result()
        stub.Fetch(broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1024),
                   timeout=5)
    finally:
        channel.close()
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["kraftlog.v1.BrokerService/Produce",
                                       "kraftlog.v1.BrokerService/Fetch"]
    assert all(s.kind is SpanKind.CLIENT for s in spans)
    assert spans[0].attributes is not None and spans[0].attributes["rpc.method"] == "Produce"
    assert spans[0].status.status_code is not StatusCode.ERROR
    produce_span = spans[0].get_span_context()
    traceparent = fake_broker.produce_metadata[-1].get("traceparent", "")
    assert f"{produce_span.trace_id:032x}-{produce_span.span_id:016x}" in traceparent
