"""The admin service's Prometheus metrics, on its ``/metrics`` endpoint
(``kraftlog.metrics.port``), beside the process collectors.

Owns :class:`AdminMetrics`:

- ``kraftlog_admin_requests_total{request, outcome}``: AdminService RPCs served, by name
  (``CreateTopics``, ...) and ``ok`` / ``failed`` (a gRPC error status; a Kafka error
  inside a normal answer is ``ok``: the call itself worked);
- ``kraftlog_admin_request_latency_seconds{request}``: their latency, which includes
  the hops to the active controller and the brokers the service makes on the caller's
  behalf;
- ``kraftlog_admin_active_controller_known``: 1 while the service knows which controller
  is active (0 before the first lookup, and after a NOT_CONTROLLER until the next one).

Observations come from the server interceptor (:class:`~kraftlog.telemetry.grpc_tracing
.DataPathInterceptor` with the admin methods); nothing here calls into the service.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REQUEST_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                             2.5, 5.0, 10.0, 30.0)


class AdminMetrics:
    """Request counts and latencies of one admin process, and whether it knows the controller."""

    def __init__(self, registry: CollectorRegistry, *,
                 active_controller_known: Callable[[], bool]) -> None:
        self.requests = Counter("kraftlog_admin_requests", "AdminService RPCs served",
                                ("request", "outcome"), registry=registry)
        self.request_latency = Histogram(
            "kraftlog_admin_request_latency_seconds", "AdminService RPC latency",
            ("request",), buckets=REQUEST_LATENCY_BUCKETS_S, registry=registry)
        known = Gauge("kraftlog_admin_active_controller_known",
                      "1 while the admin service knows the active controller",
                      registry=registry)
        known.set_function(lambda: 1.0 if active_controller_known() else 0.0)

    def observe_request(self, api: str, seconds: float, ok: bool) -> None:
        """One served call (a :data:`~kraftlog.telemetry.grpc_tracing.RequestObserver`)."""
        self.requests.labels(request=api, outcome="ok" if ok else "failed").inc()
        self.request_latency.labels(request=api).observe(seconds)
