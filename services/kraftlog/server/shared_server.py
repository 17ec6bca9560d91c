"""What a controller and a broker in one process share (Kafka's ``SharedServer``).

Owns the metadata log's place and checks, which both roles make the same way (the
metadata log dir from ``metadata.log.dir`` or the first ``log.dirs``; its
``meta.properties`` for this node; ``__cluster_metadata-0/`` present; the raft timeouts
from ``controller.quorum.*``), and :class:`SharedServer`, the one raft driver a
controller and a broker share in combined mode.

``kraftlog server --roles controller,broker`` runs both roles on one event loop. The
controller owns the metadata log and its :class:`~kraftlog.raft.driver.RaftDriver`;
the broker does not fetch the log as a separate observer (it would share the node id
of a voter, which the leader would count as that voter's fetch position) but listens
to the same driver. The hand-offs, in order:

1. the broker registers its metadata loader (:meth:`SharedServer.register_listener`);
2. the controller builds the driver with both listeners, starts it, and publishes it
   (:meth:`SharedServer.publish`);
3. on shutdown the broker runs its controlled shutdown while the controller still
   serves, then says it is done (:meth:`SharedServer.broker_done`); only then does the
   controller stop the driver.

Every wait also ends when :attr:`SharedServer.stop` is set, so a role that fails early
cannot leave the other one waiting. Called by :mod:`.controller_server`,
:mod:`.broker_server` and :mod:`.combined_server`. Composition root (asyncio).
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib

from kraftlog import config as kconfig
from kraftlog import errors
from kraftlog import ids as topic_partition
from kraftlog.raft import consensus, driver
from kraftlog.raft.raft_config import RaftConfig
from kraftlog.storage import meta_properties

METADATA_PARTITION_DIR = topic_partition.METADATA_PARTITION_DIR


def raft_config(cfg: kconfig.Config) -> RaftConfig:
    """The raft timeouts of ``controller.quorum.*`` (controllers and broker observers)."""
    return RaftConfig(
        election_timeout_ms=cfg.get_int("controller.quorum.election.timeout.ms"),
        fetch_timeout_ms=cfg.get_int("controller.quorum.fetch.timeout.ms"),
        election_backoff_max_ms=cfg.get_int("controller.quorum.election.backoff.max.ms"),
        retry_backoff_ms=cfg.get_int("controller.quorum.retry.backoff.ms"),
        request_timeout_ms=cfg.get_int("controller.quorum.request.timeout.ms"),
        append_linger_ms=cfg.get_int("controller.quorum.append.linger.ms"),
        fetch_max_wait_ms=cfg.get_int("controller.quorum.fetch.max.wait.ms"))


def metadata_dir(cfg: kconfig.Config) -> pathlib.Path:
    """``metadata.log.dir``, else the first of ``log.dirs`` (Kafka's default)."""
    explicit = cfg.get_str("metadata.log.dir")
    if explicit:
        return pathlib.Path(explicit)
    dirs = cfg.get_list("log.dirs")
    if not dirs:
        raise errors.ConfigError("set metadata.log.dir or log.dirs")
    return pathlib.Path(dirs[0])


def check_storage(directory: pathlib.Path, node_id: int) -> str:
    """The cluster id from ``meta.properties``; refuses unformatted or foreign dirs."""
    props = meta_properties.read(directory)
    if props is None:
        raise errors.ConfigError(
            f"metadata log directory {directory} is not formatted (no meta.properties); "
            f"run 'kraftlog storage format --cluster-id ID --node-id {node_id} "
            f"--data-dir {directory}' first")
    if props.node_id != node_id:
        raise errors.InconsistentStorageError(
            f"{meta_properties.properties_path(directory)} is for node.id {props.node_id}, "
            f"but this process is node.id {node_id}")
    if not (directory / METADATA_PARTITION_DIR).is_dir():
        raise errors.ConfigError(f"{directory / METADATA_PARTITION_DIR} is missing; "
                                 "the directory was not formatted as a metadata log dir")
    return props.cluster_id


class SharedServer:
    """The raft driver a co-located controller and broker share, and their stop signal."""

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
