"""OpenTelemetry tracing set-up for one kraftlog process, from the standard ``OTEL_*`` variables.

Owns the process's :class:`~opentelemetry.sdk.trace.TracerProvider` and span exporter.
Called once at process start by the role commands (``kraftlog controller``, ``kraftlog
broker``) through :func:`setup_tracing`, and flushed by
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
``OTEL_TRACES_SAMPLER`` (+ ``_ARG``)    read by the SDK when set; unset: kraftlog's
                                       :class:`DataPathSampler` (below)
``OTEL_BSP_SCHEDULE_DELAY`` etc.        batch span processor tuning, read by the SDK
=====================================  =================================================

Sampling. With ``OTEL_TRACES_SAMPLER`` set, the SDK's standard sampler decides for every
span. Unset, kraftlog's default is :class:`DataPathSampler`: parent-based, every root span
of the control plane sampled (elections, leadership changes, ISR changes are rare and are
what operators trace), and root spans of the data path (BrokerService ``Produce`` /
``Fetch``, :data:`DATA_PATH_SPANS`) sampled at ``OTEL_TRACES_SAMPLER_ARG`` (a ratio in
[0, 1], default :data:`DEFAULT_DATA_PATH_RATIO`) so tracing costs the data path little.

Span ids. :func:`start_span_with_ids` starts a span whose trace and span ids are given
(:func:`derived_ids` makes them from a key) so that another process can link to it
without any context travelling between them: the controller's
``controller.partition_leader_election`` and the brokers' ``broker.become_leader`` meet
that way (see :mod:`kraftlog.telemetry.controller_tracing`).

Resource attributes set by default: ``service.name`` (``kraftlog-controller``,
``kraftlog-broker``, ...), ``service.namespace`` (``kraftlog``),
``service.instance.id`` (``<role>-<node id>``), ``kraftlog.node.id``,
``kraftlog.process.role`` and ``process.pid``.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from kraftlog import errors

logger = logging.getLogger(__name__)

INSTRUMENTATION_NAME = "kraftlog"
Tracer: TypeAlias = trace.Tracer
"""OpenTelemetry's tracer, for modules that take one without importing opentelemetry."""
PROTOCOL_GRPC = "grpc"
PROTOCOL_HTTP = "http/protobuf"
_EXPORTERS = ("otlp", "console")
DATA_PATH_SPANS = frozenset({"kraftlog.v1.BrokerService/Produce",
                             "kraftlog.v1.BrokerService/Fetch"})
"""Root spans :class:`DataPathSampler` samples by ratio (the server spans of the data path)."""
DEFAULT_DATA_PATH_RATIO = 0.01
"""Share of data-path root spans sampled when ``OTEL_TRACES_SAMPLER`` is unset (1%)."""


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


class _RootSampler(Sampler):
    """Root spans: the data path by trace-id ratio, everything else always."""

    def __init__(self, ratio: float) -> None:
        self._ratio = TraceIdRatioBased(ratio)
        self.ratio = ratio

    def should_sample(self, parent_context: otel_context.Context | None, trace_id: int,
                      name: str, kind: SpanKind | None = None,
                      attributes: Attributes = None, links: Sequence[Link] | None = None,
                      trace_state: TraceState | None = None) -> SamplingResult:
        if name in DATA_PATH_SPANS:
            return self._ratio.should_sample(parent_context, trace_id, name, kind, attributes,
                                             links, trace_state)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, trace_state)

    def get_description(self) -> str:
        return f"KraftlogRoot{{data_path_ratio={self.ratio}}}"


class DataPathSampler(ParentBased):
    """kraftlog's default sampler: parent-based; control-plane roots always, data-path
    roots (:data:`DATA_PATH_SPANS`) at ``ratio``."""

    def __init__(self, ratio: float = DEFAULT_DATA_PATH_RATIO) -> None:
        super().__init__(_RootSampler(ratio))
        self.ratio = ratio


def default_sampler(env: Mapping[str, str] | None = None) -> Sampler | None:
    """The sampler kraftlog installs: None (the SDK reads ``OTEL_TRACES_SAMPLER`` itself)
    when that variable is set, else a :class:`DataPathSampler` with the ratio of
    ``OTEL_TRACES_SAMPLER_ARG``; raises :class:`~kraftlog.errors.ConfigError` for a bad
    ratio."""
    env = os.environ if env is None else env
    if env.get("OTEL_TRACES_SAMPLER", "").strip():
        return None
    raw = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if not raw:
        return DataPathSampler()
    try:
        ratio = float(raw)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise errors.ConfigError(f"OTEL_TRACES_SAMPLER_ARG {raw!r} is not a ratio in [0, 1]")
    return DataPathSampler(ratio)


# -- spans with given ids -------------------------------------------------------------------------

_FORCED_IDS: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "kraftlog_forced_span_ids", default=None)


class IdGenerator(RandomIdGenerator):
    """Random ids, except inside :func:`start_span_with_ids`."""

    def generate_span_id(self) -> int:
        forced = _FORCED_IDS.get()
        return forced[1] if forced is not None else int(super().generate_span_id())

    def generate_trace_id(self) -> int:
        forced = _FORCED_IDS.get()
        return forced[0] if forced is not None else int(super().generate_trace_id())

    def is_trace_id_random(self) -> bool:
        return _FORCED_IDS.get() is None


def derived_ids(key: str) -> tuple[int, int]:
    """A (trace id, span id) pair that is a function of ``key`` (never zero)."""
    digest = hashlib.sha256(key.encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def partition_leader_ids(*, cluster_id: str, topic_id: object, partition: int,
                         leader_epoch: int) -> tuple[int, int]:
    """The ids of the ``controller.partition_leader_election`` span that gave ``partition``
    its leader epoch ``leader_epoch``: the controller starts the span with them and the
    brokers link to them. One election = one leader epoch of one partition, so the key
    is unique (a controller failover that re-does a reverted election reuses it)."""
    return derived_ids(f"partition_leader_election/{cluster_id}/{topic_id}/{partition}/"
                       f"{leader_epoch}")


def start_span_with_ids(tracer: trace.Tracer, name: str, ids: tuple[int, int],
                        **kwargs: Any) -> trace.Span:
    """A new ROOT span with trace id ``ids[0]`` and span id ``ids[1]`` when ``tracer`` comes
    from :func:`setup_tracing` (other SDK tracers give random ids). A span current in the
    caller's context (an RPC that caused this) becomes a link, as the span cannot be its
    child."""
    current = trace.get_current_span().get_span_context()
    if current.is_valid:
        kwargs["links"] = [*kwargs.get("links", ()), Link(current, {"kraftlog.link": "cause"})]
    token = _FORCED_IDS.set(ids)
    try:
        return tracer.start_span(name, context=otel_context.Context(), **kwargs)
    finally:
        _FORCED_IDS.reset(token)


def data_path_root_draw(tracer: trace.Tracer | None) -> Callable[[], tuple[int, int] | None] | None:
    """The sampling of data-path ROOT spans, decided before any span exists.

    With kraftlog's default sampler (:class:`DataPathSampler`), 99% of Produce and Fetch
    calls are not traced, yet starting their non-recording span costs a sampler call and
    two random ids each. The returned ``draw()`` instead picks a trace id and applies the
    same trace-id-ratio test: None (no span at all), or the ``(trace id, span id)`` to start
    the span with (:func:`start_span_with_ids`), which the SDK's sampler then samples, as
    the test is the same on the same id. None when another sampler is configured
    (``OTEL_TRACES_SAMPLER``): spans then start as usual and the SDK decides."""
    sampler = getattr(tracer, "sampler", None)
    if not isinstance(sampler, DataPathSampler):
        return None
    bound = TraceIdRatioBased.get_bound_for_rate(sampler.ratio)
    limit = TraceIdRatioBased.TRACE_ID_LIMIT
    bits = random.getrandbits

    def draw() -> tuple[int, int] | None:
        trace_id = bits(128)
        if trace_id & limit >= bound or trace_id == 0:
            return None
        return trace_id, bits(64) or 1

    return draw


def link_to(ids: tuple[int, int], attributes: Attributes = None) -> Link:
    """A link to the span :func:`start_span_with_ids` made (or will make) with ``ids``."""
    return Link(trace.SpanContext(ids[0], ids[1], is_remote=True,
                                  trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)),
                attributes)


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
    sampler = default_sampler()
    provider = TracerProvider(resource=resource_for(role=role, node_id=node_id),
                              id_generator=IdGenerator(), sampler=sampler)
    if span_exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    else:
        for name in settings.exporters:
            exporter = _otlp_exporter(settings.protocol) if name == "otlp" \
                else ConsoleSpanExporter()
            provider.add_span_processor(BatchSpanProcessor(exporter))
    if set_global:
        trace.set_tracer_provider(provider)
    logger.info("event=tracing_enabled exporters=%s protocol=%s service=%s sampler=%s",
                ",".join(settings.exporters) or "custom", settings.protocol,
                provider.resource.attributes.get("service.name"),
                provider.sampler.get_description())
    return Tracing(provider.get_tracer(INSTRUMENTATION_NAME), provider)
