"""The stateless AdminService as a process (``kraftlog admin``): :func:`serve`.

Serves :class:`~kraftlog.admin.admin_service.AdminServicer` over one
:class:`~kraftlog.admin.admin_service.ClusterLocator`, gRPC health (``""``,
``liveness`` and ``kraftlog.v1.AdminService``, SERVING while the process serves) and
server reflection, until SIGTERM/SIGINT. Every AdminService call is timed
(:class:`~kraftlog.telemetry.admin_metrics.AdminMetrics`) and, with tracing on, a SERVER
span whose context the calls to controllers and brokers carry. The settings come from
:mod:`kraftlog.tools.admin_commands`. Composition root: process I/O (signals, sockets).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Any

from kraftlog import errors, health_server, rpc, rpc_guard
from kraftlog.admin import admin_service
from kraftlog.security import tls
from kraftlog.telemetry import admin_metrics, grpc_tracing, metrics, tracing
from kraftlog.v1 import admin_pb2

logger = logging.getLogger(__name__)

ADMIN_SERVICE_NAME = "kraftlog.v1.AdminService"
SHUTDOWN_GRACE_S = 1.0

ADMIN_METHODS = frozenset(
    f"/{ADMIN_SERVICE_NAME}/{method.name}"
    for method in admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods)
"""The RPCs the admin's server interceptor times (and traces when tracing is on)."""


async def serve(settings: admin_service.AdminSettings, listen: str, *,
                metrics_port: int = 0, metrics_host: str = "0.0.0.0",
                server_tls: tls.ServerTls | None = None) -> int:
    tracer = tracing.setup_tracing(role="admin", node_id=None)
    registry = metrics.MetricsRegistry()
    try:
        return await _serve(settings, listen, tracer=tracer, registry=registry,
                            metrics_port=metrics_port, metrics_host=metrics_host,
                            server_tls=server_tls)
    finally:
        registry.close()
        tracer.shutdown()  # flushes the spans still buffered


async def _serve(settings: admin_service.AdminSettings, listen: str, *,
                 tracer: tracing.Tracing, registry: metrics.MetricsRegistry,
                 metrics_port: int, metrics_host: str,
                 server_tls: tls.ServerTls | None = None) -> int:
    locator = admin_service.ClusterLocator(
        settings, interceptors=grpc_tracing.client_interceptors(tracer.tracer)
        if tracer.enabled else ())
    sink = admin_metrics.AdminMetrics(
        registry.registry, active_controller_known=lambda: locator.active_controller is not None)
    if metrics_port:
        try:
            registry.serve(metrics_port, metrics_host)
        except OSError as exc:
            raise errors.ConfigError(f"cannot serve metrics on {metrics_host}:{metrics_port}: "
                                     f"{exc}") from None
    servicer = admin_service.AdminServicer(locator)
    server: Any = rpc.create_server(interceptors=[
        grpc_tracing.DataPathInterceptor(tracer.tracer if tracer.enabled else None,
                                         sink.observe_request, methods=ADMIN_METHODS)],
        server_tls=server_tls)
    admin_service.add_to_server(servicer, server)
    health = health_server.ServerHealth(server, service=ADMIN_SERVICE_NAME)
    rpc.bind(server, listen, server_tls=server_tls)
    await server.start()
    await health.start(serving=True)  # stateless: ready as soon as it listens
    logger.info("event=started role=admin listener=%s controllers=%s pid=%s", listen,
                ",".join(settings.bootstrap_controllers), os.getpid())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        logger.info("event=shutdown role=admin")
    finally:
        await health.shutdown()
        await rpc_guard.stop_server(server, SHUTDOWN_GRACE_S)
        await locator.close()
    return 0
