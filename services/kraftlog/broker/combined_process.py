"""``kraftlog server``: the roles of ``process.roles`` (or ``--roles``) in one process.

``--roles controller,broker`` is Kafka's combined mode, the smallest setup: one
node id, one metadata log (in ``metadata.log.dir``) replicated by the controller's
raft driver, which the broker listens to as well (:mod:`kraftlog.raft.shared_driver`)
instead of fetching it again. The broker serves on its own listener (the first
``listeners`` entry not named in ``controller.listener.names``), the controller on
the ``CONTROLLER`` one. SIGTERM stops the broker first (controlled shutdown, while
the controller still answers), then the controller (a leader resigns).
With one role it is the same as ``kraftlog controller`` or ``kraftlog broker``.
Edge module (process, signals).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from kraftlog import config as kconfig
from kraftlog import errors
from kraftlog.broker import process as broker_process
from kraftlog.raft import shared_driver
from kraftlog.telemetry import logging as log_setup
from kraftlog.tools import controller_commands as raft_commands

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
    shared = shared_driver.SharedRaft()
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

    controller = loop.create_task(raft_commands.serve(controller_cfg, shared=shared),
                                  name="controller-role")
    broker = loop.create_task(broker_process.serve(broker_cfg, shared=shared),
                              name="broker-role")
    results = await asyncio.gather(role("controller", controller), role("broker", broker),
                                   return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return max(int(r) for r in results if not isinstance(r, BaseException))


def run_server(args: argparse.Namespace) -> int:
    overrides = list(args.override or ())
    probe = kconfig.load_properties(args.config)[0]
    roles = parse_roles(args.roles or probe.get("process.roles", ""))
    overrides.append(f"process.roles={','.join(roles)}")
    if roles == ("controller",) or roles == ("broker",):
        definition = (raft_commands.CONTROLLER_CONFIG if roles == ("controller",)
                      else broker_process.BROKER_CONFIG)
        cfg = kconfig.load(definition, args.config, overrides)
        unused: set[str] = set(cfg.unused())
    else:
        controller_cfg = kconfig.load(raft_commands.CONTROLLER_CONFIG, args.config, overrides)
        broker_cfg = kconfig.load(broker_process.BROKER_CONFIG, args.config, overrides)
        cfg = controller_cfg
        unused = set(controller_cfg.unused()) & set(broker_cfg.unused())
    log_setup.configure(level=args.log_level or cfg.get_str("kraftlog.log.level"),
                        log_format=args.log_format or cfg.get_str("kraftlog.log.format"))
    logging.getLogger("kraftlog.raft.consensus").setLevel(logging.WARNING)
    for key in sorted(unused):
        logger.warning("event=unused_config key=%s", key)
    if roles == ("controller",):
        return asyncio.run(raft_commands.serve(cfg))
    if roles == ("broker",):
        broker_process.apply_malloc_config(cfg)
        return asyncio.run(broker_process.serve(cfg))
    broker_process.apply_malloc_config(broker_cfg)
    return asyncio.run(serve_combined(controller_cfg, broker_cfg))
