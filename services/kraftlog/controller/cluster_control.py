"""ClusterControlManager: broker registrations, sessions and the broker lifecycle states.

Owns the registered brokers (a TimelineHashMap replayed from Register/
Unregister/Fence/Unfence/BrokerRegistrationChange records), the checks of
BrokerRegistration (cluster id, incarnation id within a live session, features)
and of broker epochs, and the heartbeat state machine (Kafka's
``BrokerHeartbeatManager.calculateNextBrokerState``):

    current \\ request   want_shut_down              want_fence    caught up     otherwise
    FENCED               SHUTDOWN_NOW                FENCED        UNFENCED      FENCED
    UNFENCED             CONTROLLED_SHUTDOWN if it   FENCED (or    UNFENCED      UNFENCED
                         leads partitions, else      SHUTDOWN_NOW
                         SHUTDOWN_NOW                with shutdown)
    CONTROLLED_SHUTDOWN  SHUTDOWN_NOW once it leads nothing and the records that moved
                         its leaderships are committed and seen by every active broker

Sessions (last contact time, replayed metadata offset) are in-memory state of
the active controller, not timeline state, exactly as in Kafka: they are not
part of the metadata and a new active controller starts them afresh
(:meth:`BrokerHeartbeatManager.reset`).

Called by ControllerState. Generation changes no timeline state.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace

from kraftlog.controller import api, replica_placer
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import InvariantViolation
from kraftlog.ids import ZERO_UUID, Uuid
from kraftlog.metadata.records import (
    BrokerRegistrationChangeRecord,
    Endpoint,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    SupportedFeature,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from kraftlog.timeline import snapshot_registry, timeline_hash_map

LATEST_EPOCH = snapshot_registry.LATEST_EPOCH


class BrokerControlState(enum.Enum):
    """Where a broker is in its lifecycle, from the controller's view (Kafka's names)."""

    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"

    @property
    def fenced(self) -> bool:
        return self in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistration:
    """A registered broker. ``register_offset`` is the offset of its RegisterBrokerRecord:
    the broker is caught up (may be unfenced) once it has replayed that far."""

    broker_id: int
    incarnation_id: Uuid
    broker_epoch: int
    register_offset: int
    endpoints: tuple[Endpoint, ...] = ()
    features: tuple[SupportedFeature, ...] = ()
    rack: str = ""
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: tuple[Uuid, ...] = ()

    @property
    def is_active(self) -> bool:
        """May lead partitions and take new replicas (Kafka's ``isActive``)."""
        return not self.fenced and not self.in_controlled_shutdown

    @property
    def control_state(self) -> BrokerControlState:
        if self.fenced:
            return BrokerControlState.FENCED
        if self.in_controlled_shutdown:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.UNFENCED


@dataclass(slots=True)
class _Session:
    last_contact_ms: int
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1


class BrokerHeartbeatManager:
    """Broker sessions on the active controller (not timeline state; see module doc)."""

    def __init__(self, session_timeout_ms: int) -> None:
        self._session_timeout_ms = session_timeout_ms
        self._sessions: dict[int, _Session] = {}

    def reset(self) -> None:
        """Forget every session (a controller becoming active starts afresh)."""
        self._sessions.clear()

    def touch(self, broker_id: int, now_ms: int, metadata_offset: int | None = None) -> None:
        session = self._sessions.get(broker_id)
        if session is None:
            session = self._sessions[broker_id] = _Session(last_contact_ms=now_ms)
        session.last_contact_ms = max(session.last_contact_ms, now_ms)
        if metadata_offset is not None:
            session.metadata_offset = metadata_offset

    def start_session(self, broker_id: int, now_ms: int) -> None:
        """A fresh session (registration): contact now, nothing replayed, no shutdown."""
        self._sessions[broker_id] = _Session(last_contact_ms=now_ms)

    def remove(self, broker_id: int) -> None:
        self._sessions.pop(broker_id, None)

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        session = self._sessions.get(broker_id)
        return session is not None and now_ms - session.last_contact_ms <= self._session_timeout_ms

    def is_expired(self, broker_id: int, now_ms: int) -> bool:
        """Whether the broker's session timed out. A broker without a session (this
        controller just became active) gets one now: it is owed a full timeout."""
        session = self._sessions.get(broker_id)
        if session is None:
            self._sessions[broker_id] = _Session(last_contact_ms=now_ms)
            return False
        return now_ms - session.last_contact_ms > self._session_timeout_ms

    def last_contact_ms(self, broker_id: int) -> int | None:
        session = self._sessions.get(broker_id)
        return None if session is None else session.last_contact_ms

    def metadata_offset(self, broker_id: int) -> int:
        session = self._sessions.get(broker_id)
        return -1 if session is None else session.metadata_offset

    def update_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        """A record at ``offset`` took a leadership or ISR seat from a shutting-down broker."""
        session = self._sessions.get(broker_id)
        if session is not None:
            session.controlled_shutdown_offset = max(session.controlled_shutdown_offset, offset)

    def controlled_shutdown_offset(self, broker_id: int) -> int:
        session = self._sessions.get(broker_id)
        return -1 if session is None else session.controlled_shutdown_offset

    def lowest_active_offset(self, active_brokers: Iterable[int]) -> int | None:
        """The lowest metadata offset replayed by the given brokers, None if there are none."""
        offsets = [self.metadata_offset(b) for b in active_brokers]
        return min(offsets) if offsets else None


class ClusterControlManager:
    """Registered brokers in timeline state, plus the active controller's sessions."""

    def __init__(
        self, registry: snapshot_registry.SnapshotRegistry, config: ControllerConfig
    ) -> None:
        self._config = config
        self.registrations: timeline_hash_map.TimelineHashMap[int, BrokerRegistration] = (
            timeline_hash_map.TimelineHashMap(registry)
        )
        self.heartbeats = BrokerHeartbeatManager(config.broker_session_timeout_ms)

    # -- reads --------------------------------------------------------------------------

    def get(self, broker_id: int, epoch: int = LATEST_EPOCH) -> BrokerRegistration | None:
        return self.registrations.get(broker_id, epoch=epoch)

    def is_active(self, broker_id: int) -> bool:
        registration = self.registrations.get(broker_id)
        return registration is not None and registration.is_active

    def is_unfenced(self, broker_id: int) -> bool:
        registration = self.registrations.get(broker_id)
        return registration is not None and not registration.fenced

    def usable_brokers(self) -> list[replica_placer.UsableBroker]:
        """Brokers new replicas may be placed on: registered, unfenced, not shutting down."""
        return [
            replica_placer.UsableBroker(broker_id=r.broker_id, rack=r.rack)
            for r in self.registrations.values()
            if r.is_active
        ]

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        """The registration, or STALE_BROKER_EPOCH (BROKER_ID_NOT_REGISTERED when unknown)."""
        registration = self.registrations.get(broker_id)
        if registration is None:
            raise api.RequestError(
                ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker {broker_id} is not registered."
            )
        if registration.broker_epoch != broker_epoch:
            raise api.RequestError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"Expected broker epoch {registration.broker_epoch} for broker {broker_id}, "
                f"but got broker epoch {broker_epoch}.",
            )
        return registration

    # -- generation ---------------------------------------------------------------------

    def validate_registration(
        self, request: api.BrokerRegistrationRequest, now_ms: int
    ) -> BrokerRegistration | None:
        """Check a registration; returns the registration it replaces (None if new)."""
        if self._config.cluster_id and request.cluster_id != self._config.cluster_id:
            raise api.RequestError(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"Expected cluster ID {self._config.cluster_id}, but got cluster ID "
                f"{request.cluster_id}.",
            )
        if request.broker_id < 0:
            raise api.RequestError(
                ErrorCode.INVALID_REGISTRATION, f"Invalid broker id {request.broker_id}."
            )
        if request.incarnation_id == ZERO_UUID:
            raise api.RequestError(
                ErrorCode.INVALID_REGISTRATION, "The incarnation id must not be the zero UUID."
            )
        for listener in request.listeners:
            if not 0 < listener.port < 65536 or not listener.host:
                raise api.RequestError(
                    ErrorCode.INVALID_REGISTRATION,
                    f"Invalid listener {listener.listener_name} {listener.host}:{listener.port}.",
                )
        existing = self.registrations.get(request.broker_id)
        if (
            existing is not None
            and existing.incarnation_id != request.incarnation_id
            # A broker presenting the epoch its predecessor cleanly shut down with is that
            # broker restarting (KIP-966), not a second process with the same id.
            and request.previous_broker_epoch != existing.broker_epoch
            and self.heartbeats.has_valid_session(request.broker_id, now_ms)
        ):
            raise api.RequestError(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                f"Another broker is registered with broker id {request.broker_id}. If the broker "
                "was recently restarted this should self-resolve once the heartbeat manager "
                "expires the broker's session.",
            )
        return existing

    def next_state(
        self,
        registration: BrokerRegistration,
        request: api.BrokerHeartbeatRequest,
        *,
        has_leaderships: bool,
        committed_offset: int,
    ) -> BrokerControlState:
        """The heartbeat state machine of the module doc."""
        current = registration.control_state
        broker_id = registration.broker_id
        if current is BrokerControlState.FENCED:
            if request.want_shut_down:
                return BrokerControlState.SHUTDOWN_NOW
            if (
                not request.want_fence
                and request.current_metadata_offset >= registration.register_offset
            ):
                return BrokerControlState.UNFENCED
            return BrokerControlState.FENCED
        if current is BrokerControlState.UNFENCED:
            if request.want_fence:
                return (
                    BrokerControlState.SHUTDOWN_NOW
                    if request.want_shut_down
                    else BrokerControlState.FENCED
                )
            if request.want_shut_down:
                return (
                    BrokerControlState.CONTROLLED_SHUTDOWN
                    if has_leaderships
                    else BrokerControlState.SHUTDOWN_NOW
                )
            return BrokerControlState.UNFENCED
        # CONTROLLED_SHUTDOWN
        if request.want_fence:
            return BrokerControlState.SHUTDOWN_NOW
        if has_leaderships:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        active = [
            r.broker_id
            for r in self.registrations.values()
            if r.is_active and r.broker_id != broker_id
        ]
        lowest = self.heartbeats.lowest_active_offset(active)
        # Grant the shutdown once the records that moved its leaderships are committed
        # and every active broker has replayed them (Kafka: lowestActiveOffset).
        horizon = committed_offset if lowest is None else min(lowest, committed_offset)
        if self.heartbeats.controlled_shutdown_offset(broker_id) <= horizon:
            return BrokerControlState.SHUTDOWN_NOW
        return BrokerControlState.CONTROLLED_SHUTDOWN

    def stale_brokers(self, now_ms: int) -> list[int]:
        """Unfenced brokers whose session expired, oldest contact first."""
        stale = [
            r.broker_id
            for r in self.registrations.values()
            if not r.fenced and self.heartbeats.is_expired(r.broker_id, now_ms)
        ]
        return sorted(stale, key=lambda b: (self.heartbeats.last_contact_ms(b) or 0, b))

    # -- replay -------------------------------------------------------------------------

    def replay_register(self, record: RegisterBrokerRecord, offset: int) -> None:
        self.registrations[record.broker_id] = BrokerRegistration(
            broker_id=record.broker_id,
            incarnation_id=record.incarnation_id,
            broker_epoch=record.broker_epoch,
            register_offset=offset,
            endpoints=record.endpoints,
            features=record.features,
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            log_dirs=record.log_dirs,
        )

    def replay_unregister(self, record: UnregisterBrokerRecord) -> None:
        registration = self._registration_for(record.broker_id, record.broker_epoch, record)
        del self.registrations[registration.broker_id]
        self.heartbeats.remove(registration.broker_id)

    def replay_fence(self, record: FenceBrokerRecord) -> None:
        registration = self._registration_for(record.broker_id, record.broker_epoch, record)
        self.registrations[record.broker_id] = replace(registration, fenced=True)

    def replay_unfence(self, record: UnfenceBrokerRecord) -> None:
        registration = self._registration_for(record.broker_id, record.broker_epoch, record)
        self.registrations[record.broker_id] = replace(registration, fenced=False)

    def replay_change(self, record: BrokerRegistrationChangeRecord) -> None:
        registration = self._registration_for(record.broker_id, record.broker_epoch, record)
        if record.fenced is not None:
            registration = replace(registration, fenced=record.fenced)
        if record.in_controlled_shutdown is not None:
            registration = replace(
                registration, in_controlled_shutdown=record.in_controlled_shutdown
            )
        self.registrations[record.broker_id] = registration

    def _registration_for(
        self, broker_id: int, broker_epoch: int, record: object
    ) -> BrokerRegistration:
        registration = self.registrations.get(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch:
            found = None if registration is None else registration.broker_epoch
            raise InvariantViolation(
                f"replaying {record!r}: broker {broker_id} epoch {broker_epoch} does not match "
                f"the registration's epoch {found}"
            )
        return registration
