"""A broker's roll-safe readiness: ready only once back in the ISR of what it hosts.

Owns the rule behind the ``in-sync`` gRPC health service a broker serves
(:data:`kraftlog.health_server.IN_SYNC_SERVICE_NAME`), which the Helm chart's readiness
probe asks. A StatefulSet rolling update restarts the next pod as soon as the previous
one is Ready, and a node drain evicts the next broker only while the PodDisruptionBudget
counts every other one Ready; with "registered, unfenced, caught up on metadata" as
Ready, the next restart could come while the previous broker is still out of the ISR of
its partitions, leaving them at (or below) ``min.insync.replicas`` and failing acks=all
producers with NOT_ENOUGH_REPLICAS. Strimzi's roller refuses such a restart; this
readiness makes the StatefulSet controller and the eviction API wait instead.

The rule, over the broker's metadata image (the controller's committed ISRs):

- a partition *needs* broker B when B is one of its replicas, not only as an adding or
  removing replica of a reassignment (nobody's min ISR counts on those; the partition's
  ISR is complete without B), and it has a leader (without one, B cannot rejoin, and
  waiting would only burn the timeout);
- B is *in sync* when it is in the ISR of every partition that needs it;
- :class:`InSyncGate`: B is roll-ready when its base readiness holds (registered,
  unfenced, caught up on metadata) and it is in sync, or has been out of sync for at
  least ``timeout_ms`` (``kraftlog.readiness.isr.timeout.ms``), so one replica that
  cannot catch up does not block a roll forever. Falling out of sync later (an ISR
  shrink) starts that clock again: the broker is not Ready meanwhile, and a drain waits.

Called by :mod:`kraftlog.server.broker_server` (the driver: evaluates on metadata changes and
on a timer, publishes the health status). Pure: no asyncio, grpc or clock; time comes in
as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Iterator

from kraftlog.metadata import image as im


def needs_broker(registration: im.PartitionRegistration, broker_id: int) -> bool:
    """The partition counts on ``broker_id`` being in its ISR (see the module docstring)."""
    return (broker_id in registration.replicas
            and broker_id not in registration.adding_replicas
            and broker_id not in registration.removing_replicas
            and registration.has_leader)


def out_of_sync(image: im.MetadataImage, broker_id: int) -> Iterator[im.PartitionInfo]:
    """Partitions that need ``broker_id`` and do not have it in their ISR (O(partitions))."""
    for info in image.topics.all_partitions():
        registration = info.registration
        if needs_broker(registration, broker_id) and broker_id not in registration.isr:
            yield info


class InSyncGate:
    """Roll-ready = base-ready and (in sync, or out of sync for ``timeout_ms``).

    ``out_of_sync_since_ms`` is when the current out-of-sync spell began (None while in
    sync or not base-ready); ``timed_out`` says the last answer was given by the timeout.
    """

    __slots__ = ("out_of_sync_since_ms", "timed_out", "timeout_ms")

    def __init__(self, *, timeout_ms: int) -> None:
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms}")
        self.timeout_ms = timeout_ms
        self.out_of_sync_since_ms: int | None = None
        self.timed_out = False

    def update(self, *, now_ms: int, base_ready: bool, lagging: int) -> bool:
        """Roll-readiness now, given the base readiness and how many partitions lag."""
        if not base_ready:
            self.out_of_sync_since_ms = None
            self.timed_out = False
            return False
        if lagging == 0:
            self.out_of_sync_since_ms = None
            self.timed_out = False
            return True
        if self.out_of_sync_since_ms is None:
            self.out_of_sync_since_ms = now_ms
        self.timed_out = now_ms - self.out_of_sync_since_ms >= self.timeout_ms
        return self.timed_out

    def next_deadline_ms(self) -> int | None:
        """When the timeout would turn an out-of-sync broker ready (None: nothing pending)."""
        if self.out_of_sync_since_ms is None or self.timed_out:
            return None
        return self.out_of_sync_since_ms + self.timeout_ms
