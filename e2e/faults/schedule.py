"""The nemesis's plan: which faults a seed injects, when, for how long. Pure.

Owns :class:`FaultKind`, :class:`FaultSpec` and :func:`build_schedule`, which turns a
seed and a run length into a tuple of fault episodes. The same seed always gives the
same episodes (kinds, start times, durations, loss rates, directions, partitions), so
``python -m e2e.faults run --seed N`` replays a run's plan. Which node a spec hits is
decided when it starts, from the cluster of that moment (the leader of partition
``partition``, the active controller), like Jepsen's nemesis targets; the driver
prints and records the node it picked.

Each episode is followed by a quiet gap, so the acknowledgement gap of one fault
(:func:`.checks.unavailability`) is not blurred by the next. The kinds are
drawn as shuffled rounds of every kind, so a short run still covers many kinds and
the rounds of consecutive seeds differ.

Called by the driver (:mod:`.driver`) and the CLI; no I/O, no clock.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass


class FaultKind(enum.Enum):
    """A fault, named for what it does to which node."""

    KILL_LEADER_BROKER = "kill-leader-broker"
    """SIGKILL the leader of a partition; restart it when the episode ends."""
    KILL_ACTIVE_CONTROLLER = "kill-active-controller"
    """SIGKILL the raft leader of the controller quorum; restart it at the end."""
    KILL_TWO_BROKERS = "kill-two-brokers"
    """SIGKILL a partition's leader, then (``stagger_s`` later) another broker; both
    restart at the end (the partitions are below min.insync.replicas meanwhile)."""
    ISOLATE_LEADER_BROKER = "isolate-leader-broker"
    """Drop every packet into and out of a partition leader's interface."""
    ISOLATE_ACTIVE_CONTROLLER = "isolate-active-controller"
    """Drop every packet into and out of the active controller's interface."""
    ONE_WAY_LEADER_BROKER = "one-way-leader-broker"
    """Drop one direction only (``direction``) at a partition leader."""
    ONE_WAY_ACTIVE_CONTROLLER = "one-way-active-controller"
    """Drop one direction only (``direction``) at the active controller."""
    PACKET_LOSS = "packet-loss"
    """Drop ``loss_percent`` of the packets both ways at every node."""
    PAUSE_LEADER_BROKER = "pause-leader-broker"
    """SIGSTOP a partition leader; SIGCONT at the end."""
    PAUSE_ACTIVE_CONTROLLER = "pause-active-controller"
    """SIGSTOP the active controller; SIGCONT at the end."""
    LOSS_AND_KILL_CONTROLLER = "loss+kill-active-controller"
    """Packet loss everywhere while the active controller is SIGKILLed and restarted."""
    ISOLATE_CONTROLLER_AND_PAUSE_LEADER = "isolate-controller+pause-leader-broker"
    """The active controller cut off while a partition leader is paused."""


class Direction(enum.Enum):
    """Which packets a one-way cut drops, seen from the node it is applied to."""

    INBOUND = "inbound"
    """The node sends but hears nothing."""
    OUTBOUND = "outbound"
    """The node hears but nothing it sends arrives."""


WARMUP_S = 6.0
"""Faults start this long after the workload does (leaders elected, producers warm)."""
MIN_DURATION_S = 3.0
MAX_DURATION_S = 8.0
MIN_GAP_S = 4.0
"""Quiet time after a fault heals, before the next one starts."""
MAX_GAP_S = 7.0
MIN_LOSS_PERCENT = 20
MAX_LOSS_PERCENT = 30


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultSpec:
    """One episode of the plan. Times in seconds from the workload's start."""

    index: int
    kind: FaultKind
    at_s: float
    duration_s: float
    partition: int
    """The partition whose leader a broker fault hits."""
    loss_percent: int
    """For packet loss: the share of packets dropped, 0-100."""
    direction: Direction
    """For one-way cuts."""
    stagger_s: float
    """For two brokers: how long after the first the second dies."""

    @property
    def heal_at_s(self) -> float:
        return self.at_s + self.duration_s

    def describe(self) -> str:
        """One line for the schedule print-out."""
        extra = ""
        if self.kind in (FaultKind.PACKET_LOSS, FaultKind.LOSS_AND_KILL_CONTROLLER):
            extra = f" loss={self.loss_percent}%"
        elif self.kind in (FaultKind.ONE_WAY_LEADER_BROKER, FaultKind.ONE_WAY_ACTIVE_CONTROLLER):
            extra = f" direction={self.direction.value}"
        elif self.kind is FaultKind.KILL_TWO_BROKERS:
            extra = f" stagger={self.stagger_s:.1f}s"
        return (f"#{self.index} t={self.at_s:6.1f}s +{self.duration_s:.1f}s "
                f"{self.kind.value} partition={self.partition}{extra}")


def build_schedule(seed: int, seconds: float, *, partitions: int,
                   kinds: tuple[FaultKind, ...] = tuple(FaultKind)) -> tuple[FaultSpec, ...]:
    """The episodes of ``seed`` that heal within ``seconds`` of the workload's start.

    Raises ValueError for a run too short to hold one episode, no kinds or no partitions.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    if not kinds:
        raise ValueError("no fault kinds to choose from")
    if seconds < WARMUP_S + MIN_DURATION_S:
        raise ValueError(f"--seconds {seconds:g} is too short: the first fault starts at "
                         f"{WARMUP_S:g}s and lasts at least {MIN_DURATION_S:g}s")
    rng = random.Random(seed)
    specs: list[FaultSpec] = []
    pending: list[FaultKind] = []
    at_s = WARMUP_S
    while True:
        if not pending:
            pending = list(kinds)
            rng.shuffle(pending)
        kind = pending.pop()
        duration_s = round(rng.uniform(MIN_DURATION_S, MAX_DURATION_S), 1)
        spec = FaultSpec(
            index=len(specs), kind=kind, at_s=round(at_s, 1), duration_s=duration_s,
            partition=rng.randrange(partitions),
            loss_percent=rng.randint(MIN_LOSS_PERCENT, MAX_LOSS_PERCENT),
            direction=rng.choice(list(Direction)),
            stagger_s=round(rng.uniform(0.5, min(2.0, duration_s / 2)), 1))
        if spec.heal_at_s > seconds:
            break
        specs.append(spec)
        at_s = spec.heal_at_s + rng.uniform(MIN_GAP_S, MAX_GAP_S)
    if not specs:
        # The first draw was longer than the run allows: shorten it rather than run no fault.
        first = FaultKind(kinds[rng.randrange(len(kinds))])
        specs.append(FaultSpec(index=0, kind=first, at_s=WARMUP_S,
                               duration_s=round(seconds - WARMUP_S, 1), partition=0,
                               loss_percent=MIN_LOSS_PERCENT, direction=Direction.INBOUND,
                               stagger_s=0.5))
    return tuple(specs)


def parse_kinds(text: str) -> tuple[FaultKind, ...]:
    """``kill-leader-broker,packet-loss`` (the ``--faults`` option) as kinds; ValueError
    naming an unknown one."""
    chosen: list[FaultKind] = []
    known = {kind.value: kind for kind in FaultKind}
    for name in (part.strip() for part in text.split(",")):
        if not name:
            continue
        if name not in known:
            raise ValueError(f"unknown fault {name!r}: choose from {', '.join(known)}")
        chosen.append(known[name])
    if not chosen:
        raise ValueError("--faults names no fault")
    return tuple(dict.fromkeys(chosen))
