"""Kafka's combined mode: a controller and a broker in one process (``kraftlog server``).

``--roles controller,broker`` is the smallest setup: one node id, one metadata log (in
``metadata.log.dir``) replicated by the controller's raft driver, which the broker
listens to as well instead of fetching it again: a
:class:`~.controller_server.ControllerServer` and a :class:`~.broker_server.BrokerServer`
sharing one :class:`~.shared_server.SharedServer`. The broker serves on its own listener
(the first ``listeners`` entry not named in ``controller.listener.names``), the
controller on the ``CONTROLLER`` one. SIGTERM stops the broker first (controlled shutdown, while
the controller still answers), then the controller (a leader resigns).
With one role ``kraftlog server`` is the same as ``kraftlog controller`` or ``kraftlog
broker`` (:mod:`kraftlog.tools.broker_commands` picks). Composition root (signals).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from kraftlog import config as kconfig
from kraftlog import errors
from kraftlog.server import broker_server, controller_server, shared_server

logger = logging.getLogger(__name__)
ROLES = ("controller", "broker")


def parse_roles(text: str) -> tuple[str, ...]:
    roles = tuple(dict.fromkeys(r.strip() for r in text.split(",") if r.strip()))
    unknown = [r for r in roles if r not in ROLES]
    if not roles or unknown:
        raise errors.ConfigError(f"roles must be controller, broker or both "
                                 f"(comma-separated), not {text!r}")
    return roles


async def serve_combined(controller_cfg: kconfig.Config, broker_cfg: kconfig.Config) -> int:
    """Both roles on this event loop; the first to end (or a signal) stops the other."""
    shared = shared_server.SharedServer()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, shared.stop.set)

    async def role(name: str, run: asyncio.Future[int] | asyncio.Task[int]) -> int:
        try:
            return await run
        finally:
            shared.stop.set()  # one role ending ends the process
            if name == "broker":
                shared.broker_done()

    controller = loop.create_task(controller_server.serve(controller_cfg, shared=shared),
                                  name="controller-role")
    broker = loop.create_task(broker_server.serve(broker_cfg, shared=shared),
                              name="broker-role")
    results = await asyncio.gather(role("controller", controller), role("broker", broker),
                                   return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return max(int(r) for r in results if not isinstance(r, BaseException))
