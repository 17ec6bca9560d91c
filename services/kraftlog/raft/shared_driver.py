"""One raft driver shared by a controller and a broker in one process (combined mode).

``kraftlog server --roles controller,broker`` runs both roles on one event loop. The
controller owns the metadata log and its :class:`~kraftlog.raft.driver.RaftDriver`;
the broker does not fetch the log as a separate observer (it would share the node id
of a voter, which the leader would count as that voter's fetch position) but listens
to the same driver. The hand-offs, in order:

1. the broker registers its metadata loader (:meth:`SharedRaft.register_listener`);
2. the controller builds the driver with both listeners, starts it, and publishes it
   (:meth:`SharedRaft.publish`);
3. on shutdown the broker runs its controlled shutdown while the controller still
   serves, then says it is done (:meth:`SharedRaft.broker_done`); only then does the
   controller stop the driver.

Every wait also ends when :attr:`stop` is set, so a role that fails early cannot
leave the other one waiting. Edge module (asyncio).
"""

from __future__ import annotations

import asyncio
import contextlib

from kraftlog.raft import consensus, driver


class SharedRaft:
    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.broker_listener: consensus.RaftListener | None = None
        self.raft: driver.RaftDriver | None = None
        self._registered = asyncio.Event()
        self._published = asyncio.Event()
        self._broker_done = asyncio.Event()

    async def _wait(self, event: asyncio.Event) -> bool:
        """True once ``event`` is set, False if :attr:`stop` came first."""
        if event.is_set():
            return True
        waiter = asyncio.ensure_future(event.wait())
        stopper = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiter, stopper):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return event.is_set()

    # broker side
    def register_listener(self, listener: consensus.RaftListener) -> None:
        self.broker_listener = listener
        self._registered.set()

    async def wait_published(self) -> driver.RaftDriver | None:
        """The started driver, None if the process is stopping first."""
        return self.raft if await self._wait(self._published) else None

    def broker_done(self) -> None:
        self._broker_done.set()

    # controller side
    async def wait_registered(self) -> consensus.RaftListener | None:
        return self.broker_listener if await self._wait(self._registered) else None

    def publish(self, raft: driver.RaftDriver) -> None:
        self.raft = raft
        self._published.set()

    async def wait_broker_done(self, timeout_s: float) -> bool:
        """Wait (bounded) until the broker has shut down; True if it did."""
        try:
            await asyncio.wait_for(self._broker_done.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
