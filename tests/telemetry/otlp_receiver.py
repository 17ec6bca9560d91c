"""A real OTLP/gRPC trace receiver inside the test process (reusable by any test room).

Serves opentelemetry-proto's collector ``TraceService.Export`` on ``127.0.0.1:<free
port>`` from a thread-pool gRPC server, and keeps every span it receives as a flat
:class:`ReceivedSpan` (ids in hex, attribute values decoded, the sending process's
resource attributes attached). Point a process at it with :meth:`OtlpReceiver.env`.

    with OtlpReceiver() as receiver:
        subprocess.Popen([...], env={**os.environ, **receiver.env()})
        spans = receiver.wait_for(lambda spans: ..., timeout_s=10)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    attributes: Mapping[str, Any]
    resource: Mapping[str, Any]
    events: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    """(trace id, span id) of each link."""
    start_ns: int
    end_ns: int
    status_code: int

    @property
    def instance(self) -> str:
        return str(self.resource.get("service.instance.id", ""))


def any_value(value: common_pb2.AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which)


def attributes(pairs: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in pairs}


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request: trace_service_pb2.ExportTraceServiceRequest,
               context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        received: list[ReceivedSpan] = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(ReceivedSpan(
                        trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(), name=span.name,
                        kind=span.kind, attributes=attributes(span.attributes),
                        resource=resource, events=tuple(e.name for e in span.events),
                        links=tuple((link.trace_id.hex(), link.span_id.hex())
                                    for link in span.links),
                        start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
                        status_code=span.status.code))
        self._receiver.add(received)
        return trace_service_pb2.ExportTraceServiceResponse()


class OtlpReceiver:
    """An OTLP/gRPC trace collector on a free loopback port; a context manager."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._cond = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self),
                                                                  self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OtlpReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)

    def env(self, *, schedule_delay_ms: int = 200) -> dict[str, str]:
        """Variables that send a process's spans here, exported every ``schedule_delay_ms``."""
        return {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_BSP_SCHEDULE_DELAY": str(schedule_delay_ms)}

    def add(self, spans: list[ReceivedSpan]) -> None:
        with self._cond:
            self._spans.extend(spans)
            self._cond.notify_all()

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._cond:
            return list(self._spans)

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], Any], *,
                 timeout_s: float) -> Any:
        """Until ``predicate(spans)`` is truthy (returns it); AssertionError on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                result = predicate(list(self._spans))
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted({(s.instance, s.name) for s in self._spans})
                    raise AssertionError(f"timed out after {timeout_s}s; received "
                                         f"{len(self._spans)} spans: {names}")
                self._cond.wait(min(left, 0.2))
