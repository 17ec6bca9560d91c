"""ServerHealth: readiness ("" and the role's service) moves with set_serving, liveness is
SERVING from start to shutdown, and reflection lists the role's services."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from kraftlog import health_server

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_readiness_liveness_and_reflection() -> None:
    async def scenario() -> None:
        server = grpc.aio.server()
        health = health_server.ServerHealth(server, service="kraftlog.v1.BrokerService",
                                            reflected=("kraftlog.v1.Extra",))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = health_pb2_grpc.HealthStub(channel)

                async def status(name: str) -> int:
                    answer = await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
                    return int(answer.status)

                await health.start(serving=False)
                assert [await status(n) for n in ("", "kraftlog.v1.BrokerService", "liveness")] \
                    == [NOT_SERVING, NOT_SERVING, SERVING]
                assert await health.set_serving(True) is True
                assert await health.set_serving(True) is False, "no change, nothing to log"
                assert [await status(n) for n in ("", "kraftlog.v1.BrokerService")] \
                    == [SERVING, SERVING]
                reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
                answers = reflect.ServerReflectionInfo(
                    iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
                names = [s.name async for a in answers for s in a.list_services_response.service]
                assert {"kraftlog.v1.BrokerService", "kraftlog.v1.Extra",
                        "grpc.health.v1.Health"} <= set(names)
                await health.shutdown()
                assert await status("liveness") == NOT_SERVING
        finally:
            await server.stop(None)

    asyncio.run(scenario())
