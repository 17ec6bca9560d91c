"""OpenTelemetry tracing set-up for one kraftlog process, from the standard ``OTEL_*`` variables.

Owns the process's :class:`~opentelemetry.sdk.trace.TracerProvider` and span exporter.
Called once at process start by the role commands (``kraftlog controller`` today;
broker and admin later) through :func:`setup_tracing`, and flushed by
:meth:`Tracing.shutdown` before the process exits. It must not be imported by pure
cores, and it never changes the behaviour of the code it observes.

Tracing is ON when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``,
``console``), or, when that variable is unset, when an OTLP endpoint is configured
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``). It is
OFF when nothing is configured, when ``OTEL_TRACES_EXPORTER=none`` or when
``OTEL_SDK_DISABLED=true``: then no SDK object is created, :attr:`Tracing.tracer`
is OpenTelemetry's no-op tracer, and callers skip their tracing work
(:attr:`Tracing.enabled`), so the cost is a few attribute reads.

The variables honoured, all as the OpenTelemetry specification defines them:

=====================================  =================================================
``OTEL_TRACES_EXPORTER``               ``otlp`` (default when an endpoint is set),
                                       ``console``, ``none``; comma-separated
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``  where spans go (the exporter reads these itself;
``OTEL_EXPORTER_OTLP_ENDPOINT``         ``http://host:4317`` for gRPC = plaintext)
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``  ``grpc`` (default, Jaeger's 4317) or
``OTEL_EXPORTER_OTLP_PROTOCOL``         ``http/protobuf`` (Jaeger's 4318)
``OTEL_SERVICE_NAME``                   overrides ``kraftlog-<role>``
``OTEL_RESOURCE_ATTRIBUTES``            ``k=v,...``; override the defaults below
``OTEL_TRACES_SAMPLER`` (+ ``_ARG``)    read by the SDK; default ``parentbased_always_on``
``OTEL_BSP_SCHEDULE_DELAY`` etc.        batch span processor tuning, read by the SDK
=====================================  =================================================

Resource attributes set by default: ``service.name`` (``kraftlog-controller``,
``kraftlog-broker``, ...), ``service.namespace`` (``kraftlog``),
``service.instance.id`` (``<role>-<node id>``), ``kraftlog.node.id``,
``kraftlog.process.role`` and ``process.pid``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

from kraftlog import errors

logger = logging.getLogger(__name__)

INSTRUMENTATION_NAME = "kraftlog"
PROTOCOL_GRPC = "grpc"
PROTOCOL_HTTP = "http/protobuf"
_EXPORTERS = ("otlp", "console")


@dataclass(frozen=True, slots=True, kw_only=True)
class TracingSettings:
    """What the ``OTEL_*`` variables ask for (the parts kraftlog decides on itself)."""

    exporters: tuple[str, ...]
    """Exporter names; empty = tracing off."""
    protocol: str
    """OTLP wire protocol: :data:`PROTOCOL_GRPC` or :data:`PROTOCOL_HTTP`."""

    @property
    def enabled(self) -> bool:
        return bool(self.exporters)


def settings_from_env(env: Mapping[str, str] | None = None) -> TracingSettings:
    """Read the variables; raises :class:`~kraftlog.errors.ConfigError` for unknown values."""
    env = os.environ if env is None else env
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or PROTOCOL_GRPC).strip()
    if protocol not in (PROTOCOL_GRPC, PROTOCOL_HTTP):
        raise errors.ConfigError(f"OTLP protocol {protocol!r} is not supported; use "
                                 f"{PROTOCOL_GRPC!r} or {PROTOCOL_HTTP!r}")
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return TracingSettings(exporters=(), protocol=protocol)
    named = env.get("OTEL_TRACES_EXPORTER")
    if named is None:
        # The specification's default is otlp; kraftlog's is "off unless told where to send",
        # so that a plain install never tries to reach a collector that is not there.
        endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                    or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
        return TracingSettings(exporters=("otlp",) if endpoint else (), protocol=protocol)
    exporters = tuple(dict.fromkeys(name.strip().lower() for name in named.split(",")
                                    if name.strip() and name.strip().lower() != "none"))
    unknown = [name for name in exporters if name not in _EXPORTERS]
    if unknown:
        raise errors.ConfigError(f"OTEL_TRACES_EXPORTER names unknown exporters {unknown}; "
                                 f"kraftlog knows {list(_EXPORTERS)} and 'none'")
    return TracingSettings(exporters=exporters, protocol=protocol)


def resource_for(*, role: str, node_id: int | None) -> Resource:
    """kraftlog's default resource attributes, overridden by the ``OTEL_*`` variables."""
    attributes: dict[str, str | int] = {
        "service.name": f"kraftlog-{role}",
        "service.namespace": "kraftlog",
        "kraftlog.process.role": role,
        "process.pid": os.getpid(),
    }
    if node_id is not None:
        attributes["service.instance.id"] = f"{role}-{node_id}"
        attributes["kraftlog.node.id"] = node_id
    # Resource.create lets its argument win over the environment; the operator's variables
    # must win over kraftlog's defaults, so merge them last.
    return Resource.create(attributes).merge(OTELResourceDetector().detect())


def _otlp_exporter(protocol: str) -> SpanExporter:
    if protocol == PROTOCOL_HTTP:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )
        return HttpExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )
    return GrpcExporter()


class Tracing:
    """The process's tracer, and the provider to flush on shutdown (``None`` when off)."""

    def __init__(self, tracer: trace.Tracer, provider: TracerProvider | None) -> None:
        self.tracer = tracer
        self.provider = provider

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    def force_flush(self, timeout_ms: int = 5000) -> bool:
        return self.provider.force_flush(timeout_ms) if self.provider is not None else True

    def shutdown(self) -> None:
        """Export what is buffered and stop the exporter (idempotent)."""
        provider, self.provider = self.provider, None
        if provider is not None:
            provider.shutdown()


def disabled() -> Tracing:
    """Tracing off: OpenTelemetry's no-op tracer, nothing to flush."""
    return Tracing(trace.NoOpTracer(), None)


def setup_tracing(*, role: str, node_id: int | None,
                  settings: TracingSettings | None = None,
                  span_exporter: SpanExporter | None = None,
                  set_global: bool = True) -> Tracing:
    """Build the tracer for this process as the ``OTEL_*`` variables say.

    ``span_exporter`` (tests) replaces the configured exporters and exports synchronously.
    ``set_global`` installs the provider as OpenTelemetry's global one, so libraries that
    trace through the global API (grpc instrumentation) join the same pipeline; a process
    does that once.
    """
    settings = settings if settings is not None else settings_from_env()
    if span_exporter is None and not settings.enabled:
        return disabled()
    provider = TracerProvider(resource=resource_for(role=role, node_id=node_id))
    if span_exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    else:
        for name in settings.exporters:
            exporter = _otlp_exporter(settings.protocol) if name == "otlp" \
                else ConsoleSpanExporter()
            provider.add_span_processor(BatchSpanProcessor(exporter))
    if set_global:
        trace.set_tracer_provider(provider)
    logger.info("event=tracing_enabled exporters=%s protocol=%s service=%s",
                ",".join(settings.exporters) or "custom", settings.protocol,
                provider.resource.attributes.get("service.name"))
    return Tracing(provider.get_tracer(INSTRUMENTATION_NAME), provider)
