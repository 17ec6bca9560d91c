"""Trace-context propagation across grpc.aio calls: one client and one server interceptor.

Owns the W3C ``traceparent`` hop: the client interceptor, when the calling task has a
recording or remote span current, opens a CLIENT span named after the RPC
(``kraftlog.v1.RaftService/Vote``) and injects its context into the call's metadata;
the server interceptor, when a call carries that metadata, runs the handler inside a
SERVER span that continues the caller's trace, so whatever the handler starts (the
voter's ``raft.vote`` span) joins it.

Untraced calls pass through untouched and create no span: the raft Fetch long-poll
runs several times a second, and a root span per fetch would bury the elections in
noise. That is also why this module, not opentelemetry-instrumentation-grpc (which
starts a root span for every call), carries the raft hop.

The data path is the exception (:class:`DataPathInterceptor`, on the broker): every
BrokerService ``Produce`` / ``Fetch`` call gets a SERVER span, continuing the client's
context when it sent one, else a root span that the sampler keeps at a ratio
(:class:`kraftlog.telemetry.tracing.DataPathSampler`), drawn before any span exists
(:func:`kraftlog.telemetry.tracing.data_path_root_draw`), so an unsampled call costs one
random number and no span; the same interceptor times the calls for the broker's
request metrics (and the admin service's, over its own methods).

Used by :mod:`kraftlog.raft.transport` (server creation and the peer channels) when
tracing is on, and by the broker process. Must not import any raft module: it knows
RPCs, not protocols.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import grpc
import grpc.aio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from kraftlog.telemetry import tracing

_RPC_SYSTEM = "grpc"
_TRACE_HEADERS = frozenset({"traceparent", "tracestate", "baggage"})
DATA_PATH_METHODS = frozenset({"/kraftlog.v1.BrokerService/Produce",
                               "/kraftlog.v1.BrokerService/Fetch"})
"""The RPCs :class:`DataPathInterceptor` traces (sampled) and times."""
_EMPTY_CONTEXT = otel_context.Context()

RequestObserver = Callable[[str, float, bool], None]
"""``(rpc method name, seconds, ok)`` for each data-path call (the broker's request metrics)."""


def _split_method(method: str) -> tuple[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return service, name


def _rpc_attributes(method: str) -> dict[str, str]:
    service, name = _split_method(method)
    return {"rpc.system": _RPC_SYSTEM, "rpc.service": service, "rpc.method": name}


def _span_name(method: str) -> str:
    return method.lstrip("/")


class ClientInterceptor(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Opens a CLIENT span for a traced unary call and propagates its context."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    async def intercept_unary_unary(self, continuation: Callable[[Any, Any], Awaitable[Any]],
                                    client_call_details: Any, request: Any) -> Any:
        if not trace.get_current_span().get_span_context().is_valid:
            return await continuation(client_call_details, request)
        method = client_call_details.method
        method = method.decode() if isinstance(method, bytes) else str(method)
        with self._tracer.start_as_current_span(
                _span_name(method), kind=SpanKind.CLIENT, attributes=_rpc_attributes(method),
                record_exception=False, set_status_on_exception=False) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            metadata = grpc.aio.Metadata(*(client_call_details.metadata or ()))
            for key, value in carrier.items():
                metadata.add(key, value)
            details = grpc.aio.ClientCallDetails(
                client_call_details.method, client_call_details.timeout, metadata,
                client_call_details.credentials, client_call_details.wait_for_ready)
            call = await continuation(details, request)
            # Await here so the span covers the whole call; the caller's own await of the
            # returned call then yields the same (cached) outcome.
            try:
                await call
            except grpc.aio.AioRpcError as exc:
                span.set_attribute("rpc.grpc.status_code", exc.code().value[0])
                span.set_status(Status(StatusCode.ERROR, exc.code().name))
                return call
            span.set_attribute("rpc.grpc.status_code", grpc.StatusCode.OK.value[0])
            return call


class ServerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Runs a unary handler inside a SERVER span when the caller sent trace context."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                handler_call_details: Any) -> Any:
        return self.wrap(await continuation(handler_call_details), handler_call_details)

    def wrap(self, handler: Any, handler_call_details: Any) -> Any:
        """``handler`` run in a span continuing the caller's trace, if the caller sent one."""
        if handler is None or handler.unary_unary is None:
            return handler
        metadata = handler_call_details.invocation_metadata or ()
        carrier = {key: value for key, value in metadata if key in _TRACE_HEADERS}
        if "traceparent" not in carrier:
            return handler
        parent = propagate.extract(carrier)
        method: str = handler_call_details.method
        behaviour = handler.unary_unary
        tracer = self._tracer

        async def traced(request: Any, context: Any) -> Any:
            # Attach the caller's whole context first: start_as_current_span would make the
            # span current on top of *our* context and drop the caller's baggage.
            token = otel_context.attach(parent)
            try:
                with tracer.start_as_current_span(
                        _span_name(method), kind=SpanKind.SERVER,
                        attributes=_rpc_attributes(method)) as span:
                    try:
                        return await behaviour(request, context)
                    except Exception:
                        # context.abort() raises too; its status code is on the context.
                        code = context.code() if hasattr(context, "code") else None
                        if code is not None:
                            span.set_attribute("rpc.grpc.status_code", code.value[0])
                        raise
            finally:
                otel_context.detach(token)

        return grpc.unary_unary_rpc_method_handler(
            traced, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


class DataPathInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """SERVER spans (sampled) and timings for the unary data-path RPCs (:data:`DATA_PATH_METHODS`);
    every other RPC as :class:`ServerInterceptor` does (one interceptor, not two chained:
    each link of a chain costs a coroutine per call).

    ``tracer`` None: no spans (and other RPCs pass untouched); ``observe`` None: no timings."""

    def __init__(self, tracer: trace.Tracer | None, observe: RequestObserver | None,
                 methods: Collection[str] = DATA_PATH_METHODS) -> None:
        self._tracer = tracer
        self._observe = observe
        self._methods = methods
        self._attributes = {m: _rpc_attributes(m) for m in methods}
        self._others = ServerInterceptor(tracer) if tracer is not None else None
        # Root data-path spans are sampled here, before one exists (tracing.data_path_root_draw);
        # other methods (the admin's) are sampled by the SDK as the sampler says.
        self._draw = tracing.data_path_root_draw(tracer)
        self._drawn = frozenset(m for m in methods if _span_name(m) in tracing.DATA_PATH_SPANS)

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                handler_call_details: Any) -> Any:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if method not in self._methods:
            return handler if self._others is None \
                else self._others.wrap(handler, handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        behaviour = handler.unary_unary
        tracer, observe = self._tracer, self._observe
        api = _split_method(method)[1]
        parent = _EMPTY_CONTEXT
        if tracer is not None:
            carrier = {key: value for key, value in handler_call_details.invocation_metadata or ()
                       if key in _TRACE_HEADERS}
            if "traceparent" in carrier:
                parent = propagate.extract(carrier)
        attributes = self._attributes[method]
        draw = self._draw if parent is _EMPTY_CONTEXT and method in self._drawn else None

        async def handle(request: Any, context: Any) -> Any:
            started = time.perf_counter()
            ok = False
            span: trace.Span | None = None
            if tracer is not None:
                if draw is None:
                    span = tracer.start_span(_span_name(method), context=parent,
                                             kind=SpanKind.SERVER, attributes=attributes)
                elif (ids := draw()) is not None:
                    span = tracing.start_span_with_ids(tracer, _span_name(method), ids,
                                                       kind=SpanKind.SERVER, attributes=attributes)
            token = None
            if span is not None and span.is_recording():
                token = otel_context.attach(trace.set_span_in_context(span, parent))
            try:
                response = await behaviour(request, context)
                ok = True
                return response
            finally:
                if token is not None:
                    otel_context.detach(token)
                if span is not None:
                    if not ok and span.is_recording():
                        code = context.code() if hasattr(context, "code") else None
                        span.set_status(Status(StatusCode.ERROR, getattr(code, "name", None)))
                    span.end()
                if observe is not None:
                    observe(api, time.perf_counter() - started, ok)

        return grpc.unary_unary_rpc_method_handler(
            handle, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


class _SyncCallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, method: str, timeout: float | None, metadata: Any, credentials: Any,
                 wait_for_ready: bool | None, compression: Any) -> None:
        self.method = method
        self.timeout = timeout
        self.metadata = metadata
        self.credentials = credentials
        self.wait_for_ready = wait_for_ready
        self.compression = compression


class SyncDataPathClientInterceptor(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """The client library's side of the data path (blocking gRPC, calls as futures).

    A ``Produce`` / ``Fetch`` call opens a CLIENT span named after the RPC, as a child of
    the caller's current span or else a root that the process's sampler decides on
    (kraftlog's :class:`~kraftlog.telemetry.tracing.DataPathSampler` keeps a ratio), and
    when it records, injects its context so the broker's SERVER span continues the trace.
    The span ends when the call's future completes. Without a configured tracer provider
    (the OpenTelemetry default) the check costs one ``isinstance`` per call; other RPCs
    pass through untouched.
    """

    def __init__(self, tracer: trace.Tracer | None = None) -> None:
        self._tracer = tracer

    def _current_tracer(self) -> trace.Tracer | None:
        if self._tracer is not None:
            return self._tracer
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            return None  # nobody configured tracing in this process
        return trace.get_tracer(__name__)

    def intercept_unary_unary(self, continuation: Callable[[Any, Any], Any],
                              client_call_details: Any, request: Any) -> Any:
        method = client_call_details.method
        method = method.decode() if isinstance(method, bytes) else str(method)
        tracer = self._current_tracer() if method in DATA_PATH_METHODS else None
        if tracer is None:
            return continuation(client_call_details, request)
        span = tracer.start_span(_span_name(method), kind=SpanKind.CLIENT,
                                 attributes=_rpc_attributes(method))
        details = client_call_details
        if span.is_recording():
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=trace.set_span_in_context(span))
            metadata = list(client_call_details.metadata or ()) + list(carrier.items())
            details = _SyncCallDetails(method, client_call_details.timeout, metadata,
                                       client_call_details.credentials,
                                       client_call_details.wait_for_ready,
                                       getattr(client_call_details, "compression", None))
        call = continuation(details, request)

        def finish(done: Any) -> None:
            code = done.code() if hasattr(done, "code") else None
            if code is not None:
                span.set_attribute("rpc.grpc.status_code", code.value[0])
                if code is not grpc.StatusCode.OK:
                    span.set_status(Status(StatusCode.ERROR, code.name))
            span.end()
        call.add_done_callback(finish)
        return call


def data_path_interceptors(tracer: trace.Tracer | None, observe: RequestObserver | None
                           ) -> list[Any]:
    """The broker's server interceptors: none when neither tracing nor metrics is on."""
    if tracer is None and observe is None:
        return []
    return [DataPathInterceptor(tracer, observe)]


def client_interceptors(tracer: trace.Tracer) -> Sequence[Any]:
    """Interceptors for ``grpc.aio.insecure_channel(..., interceptors=...)``."""
    return [ClientInterceptor(tracer)]


def server_interceptors(tracer: trace.Tracer) -> Sequence[Any]:
    """Interceptors for ``grpc.aio.server(interceptors=...)``."""
    return [ServerInterceptor(tracer)]
