"""gRPC health and server reflection, the same way in every kraftlog server process.

Owns :class:`ServerHealth`: the ``grpc.health.v1`` servicer of one gRPC server, with
kraftlog's conventions:

- ``""`` and the role's own service name (``kraftlog.v1.RaftService``,
  ``kraftlog.v1.BrokerService``, ``kraftlog.v1.AdminService``) are the *readiness*
  answer: SERVING only while the process can do its job (a controller that knows a
  leader, a broker registered, caught up and unfenced);
- :data:`LIVENESS_SERVICE_NAME` is SERVING from :meth:`ServerHealth.start` until
  shutdown: the process answers gRPC (the Helm chart's liveness and startup probes);
- the roll-safe readiness the Helm chart's readiness probes ask (:meth:`ServerHealth.set_named`):
  :data:`IN_SYNC_SERVICE_NAME` on a broker (ready, and back in the ISR of the partitions
  it hosts, or out of them longer than a timeout: :mod:`kraftlog.broker.readiness`),
  :data:`CAUGHT_UP_SERVICE_NAME` on a controller (it knows a leader and its log reaches
  the leader's high watermark);

and server reflection for the role's services, health and reflection itself, so that
``grpcurl`` lists and calls them. Both are registered through :mod:`kraftlog.rpc_guard`,
like every kraftlog service. Used by ``kraftlog controller`` (server/controller_server.py),
``kraftlog broker`` (server/broker_server.py) and ``kraftlog admin`` (tools/admin_commands.py).
Edge module: grpc.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from kraftlog import rpc_guard

LIVENESS_SERVICE_NAME = "liveness"
"""The health service name a liveness probe asks: SERVING while the process serves gRPC."""
IN_SYNC_SERVICE_NAME = "in-sync"
"""A broker's roll-safe readiness: ready and in the ISR of what it hosts (or timed out)."""
CAUGHT_UP_SERVICE_NAME = "caught-up"
"""A controller's roll-safe readiness: its log reaches the leader's high watermark."""
HEALTH_SERVICE_NAME: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class ServerHealth:
    """Health (readiness + liveness) and reflection on ``server``, before it starts."""

    def __init__(self, server: Any, *, service: str, reflected: Sequence[str] = ()) -> None:
        self._servicer = grpc_health.aio.HealthServicer()
        servicer = self._servicer
        rpc_guard.add_service(lambda s: health_pb2_grpc.add_HealthServicer_to_server(servicer, s),
                              server)
        names = (service, *reflected, HEALTH_SERVICE_NAME, reflection.SERVICE_NAME)
        # reflection.enable_server_reflection picks the aio servicer by the server's type,
        # which the guard's registrar is not: choose it here.
        reflector = reflection.aio.ReflectionServicer(names)
        rpc_guard.add_service(
            lambda s: reflection_pb2_grpc.add_ServerReflectionServicer_to_server(reflector, s),
            server)
        self._readiness = ("", service)
        self.serving: bool | None = None
        """The last readiness set (None before :meth:`start`)."""

    async def start(self, *, serving: bool = False) -> None:
        """The server started: alive, and ready or not."""
        await self._servicer.set(LIVENESS_SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await self.set_serving(serving)

    async def set_serving(self, serving: bool) -> bool:
        """Set readiness; True if it changed."""
        if serving == self.serving:
            return False
        self.serving = serving
        code = (health_pb2.HealthCheckResponse.SERVING if serving
                else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in self._readiness:
            await self._servicer.set(name, code)
        return True

    async def set_named(self, name: str, serving: bool) -> None:
        """Set one more named status (e.g. :data:`IN_SYNC_SERVICE_NAME`); the readiness of
        ``""`` and the role's service stays :meth:`set_serving`'s."""
        await self._servicer.set(name, health_pb2.HealthCheckResponse.SERVING if serving
                                 else health_pb2.HealthCheckResponse.NOT_SERVING)

    async def shutdown(self) -> None:
        """Every service NOT_SERVING from now on (graceful shutdown)."""
        await self._servicer.enter_graceful_shutdown()
