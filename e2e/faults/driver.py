"""One run, from inside the client namespace: nodes, workload, nemesis, healing, clean stop.

Owns :func:`drive` (what ``python -m e2e.faults drive`` runs; the CLI's ``run`` starts it
with ``ip netns exec <client namespace>`` after making the network) and
:class:`Nemesis`, which applies one :class:`~.schedule.FaultSpec` to the cluster of the
moment, records the :class:`~.evidence.FaultWindow` (which nodes it picked, when it
started and healed) and heals it.

The run, in order: format and start the six nodes, wait for an active controller,
create the topic (``partitions`` partitions, replication factor 3,
min.insync.replicas 2) and wait for whole ISRs; start the workload; play the schedule;
heal everything (nft tables gone, paused nodes continued, killed nodes restarted);
wait for whole ISRs (timed: the ``isr_recovered`` check); stop the producers; read
every partition back; let the reader catch up; stop the brokers cleanly (SIGTERM:
controlled shutdown, checkpoints written); take the quorum's high watermark once every
voter has caught up; stop the controllers; write ``history.json``. The files are
checked afterwards by the CLI (:mod:`.collect`, :mod:`.checks`) in the host namespace.

Edge module: processes, signals, nftables, the clock.
"""

from __future__ import annotations

import json
import pathlib
import random
import signal
import sys
import time
from collections.abc import Callable

from e2e.faults import cluster, netns, schedule, workload
from e2e.faults import evidence as ev

TOPIC = "faults"
PARTITIONS = 3
MIN_INSYNC_REPLICAS = 2
ISR_WAIT_S = 60.0
"""How long the driver waits for whole ISRs after healing (the check's bound is lower)."""
AFTER_HEAL_PRODUCE_S = 3.0
FLUSH_TIMEOUT_S = 40.0


def _say(message: str) -> None:
    print(f"[drive] {message}", flush=True)


class Nemesis:
    """Applies and heals faults on :class:`cluster.Nodes` and the :class:`netns.Network`."""

    def __init__(self, nodes: cluster.Nodes, network: netns.Network, *, seed: int,
                 clock: Callable[[], float]) -> None:
        self.nodes = nodes
        self.network = network
        self.clock = clock
        self.rng = random.Random(seed ^ 0x5EED)
        self.windows: list[ev.FaultWindow] = []

    # -- targets --------------------------------------------------------------------------------

    def _leader_broker(self, partition: int) -> int:
        leader = self.nodes.leader_of(TOPIC, partition)
        if leader is not None and self.nodes.alive(leader):
            return leader
        live = [b for b in cluster.BROKERS if self.nodes.alive(b)] or list(cluster.BROKERS)
        return self.rng.choice(live)

    def _active_controller(self) -> int:
        found = self.nodes.active_controller()
        if found is not None:
            return found[0]
        live = [c for c in cluster.CONTROLLERS if self.nodes.alive(c)] or list(cluster.CONTROLLERS)
        return self.rng.choice(live)

    # -- primitives -----------------------------------------------------------------------------

    def _cut(self, node_id: int, name: str, rule: netns.Rule) -> Callable[[], None]:
        host = cluster.BY_ID[node_id].host
        self.network.add_rule(host, name, rule)
        return lambda: self.network.remove_rule(host, name)

    def _kill(self, node_id: int) -> Callable[[], None]:
        self.nodes.kill(node_id)
        return lambda: self.nodes.start(node_id)

    def _pause(self, node_id: int) -> Callable[[], None]:
        self.nodes.signal(node_id, signal.SIGSTOP)
        return lambda: self.nodes.signal(node_id, signal.SIGCONT)

    def _loss_everywhere(self, spec: schedule.FaultSpec) -> list[Callable[[], None]]:
        rule = netns.Rule(inbound=True, outbound=True, percent=spec.loss_percent)
        return [self._cut(n.node_id, f"loss-{spec.index}", rule) for n in cluster.NODES]

    # -- one episode ----------------------------------------------------------------------------

    def play(self, spec: schedule.FaultSpec) -> ev.FaultWindow:
        """Apply ``spec``, hold it for its duration, heal it; the window as it happened."""
        kind = spec.kind
        K = schedule.FaultKind
        heals: list[Callable[[], None]] = []
        targets: list[int] = []
        start_s = self.clock()
        detail = ""
        try:
            if kind is K.KILL_LEADER_BROKER:
                targets = [self._leader_broker(spec.partition)]
                heals.append(self._kill(targets[0]))
            elif kind is K.KILL_ACTIVE_CONTROLLER:
                targets = [self._active_controller()]
                heals.append(self._kill(targets[0]))
            elif kind is K.KILL_TWO_BROKERS:
                first = self._leader_broker(spec.partition)
                heals.append(self._kill(first))
                time.sleep(spec.stagger_s)
                second = self.rng.choice([b for b in cluster.BROKERS if b != first])
                heals.append(self._kill(second))
                targets = [first, second]
            elif kind in (K.ISOLATE_LEADER_BROKER, K.ISOLATE_ACTIVE_CONTROLLER):
                node = (self._leader_broker(spec.partition) if kind is K.ISOLATE_LEADER_BROKER
                        else self._active_controller())
                targets = [node]
                heals.append(self._cut(node, f"isolate-{spec.index}",
                                       netns.Rule(inbound=True, outbound=True)))
            elif kind in (K.ONE_WAY_LEADER_BROKER, K.ONE_WAY_ACTIVE_CONTROLLER):
                node = (self._leader_broker(spec.partition) if kind is K.ONE_WAY_LEADER_BROKER
                        else self._active_controller())
                targets = [node]
                inbound = spec.direction is schedule.Direction.INBOUND
                detail = f"drops {spec.direction.value} packets"
                heals.append(self._cut(node, f"oneway-{spec.index}",
                                       netns.Rule(inbound=inbound, outbound=not inbound)))
            elif kind is K.PACKET_LOSS:
                targets = [n.node_id for n in cluster.NODES]
                detail = f"{spec.loss_percent}% both ways"
                heals.extend(self._loss_everywhere(spec))
            elif kind in (K.PAUSE_LEADER_BROKER, K.PAUSE_ACTIVE_CONTROLLER):
                node = (self._leader_broker(spec.partition) if kind is K.PAUSE_LEADER_BROKER
                        else self._active_controller())
                targets = [node]
                heals.append(self._pause(node))
            elif kind is K.LOSS_AND_KILL_CONTROLLER:
                controller = self._active_controller()
                targets = [controller]
                detail = f"{spec.loss_percent}% loss everywhere"
                heals.extend(self._loss_everywhere(spec))
                heals.append(self._kill(controller))
            elif kind is K.ISOLATE_CONTROLLER_AND_PAUSE_LEADER:
                controller = self._active_controller()
                leader = self._leader_broker(spec.partition)
                targets = [controller, leader]
                heals.append(self._cut(controller, f"isolate-{spec.index}",
                                       netns.Rule(inbound=True, outbound=True)))
                heals.append(self._pause(leader))
            else:
                raise AssertionError(f"no nemesis for {kind}")
            names = [cluster.BY_ID[t].name for t in targets]
            _say(f"fault #{spec.index} {kind.value} on {', '.join(names)}"
                 + (f" ({detail})" if detail else "") + f" at {start_s:.1f}s")
            remaining = spec.heal_at_s - self.clock()
            if remaining > 0:
                time.sleep(remaining)
        finally:
            for heal in reversed(heals):
                heal()
        heal_s = self.clock()
        _say(f"healed #{spec.index} at {heal_s:.1f}s")
        window = ev.FaultWindow(index=spec.index, kind=kind.value,
                                targets=tuple(cluster.BY_ID[t].name for t in targets),
                                start_s=round(start_s, 3), heal_s=round(heal_s, 3),
                                detail=detail)
        self.windows.append(window)
        return window

    def heal_all(self) -> None:
        self.network.clear_rules()
        for node in cluster.NODES:
            self.nodes.signal(node.node_id, signal.SIGCONT)
            if not self.nodes.alive(node.node_id):
                self.nodes.start(node.node_id)


def _wait(probe: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(0.25)
    return False


def _quorum_high_watermark(nodes: cluster.Nodes, timeout_s: float) -> int | None:
    """The leader's high watermark at a moment when every voter's log reached it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = nodes.active_controller()
        if found is not None:
            view = found[1]
            ends = [r.log_end_offset for r in view.current_voters]
            if len(ends) == len(cluster.CONTROLLERS) and min(ends) >= view.high_watermark >= 0:
                return int(view.high_watermark)
        time.sleep(0.2)
    return None


def drive(*, run_dir: pathlib.Path, run_id: str, seed: int, seconds: float,
          kinds: tuple[schedule.FaultKind, ...], producers: int, rate_per_s: float,
          delivery_timeout_ms: int = workload.DEFAULT_DELIVERY_TIMEOUT_MS) -> int:
    """Run the cluster and the plan; write ``run_dir/history.json``. 0 when the history was
    written (the checks decide the verdict), 2 when the cluster never came up."""
    network = netns.Network(run_id, cluster.hosts())
    nodes = cluster.Nodes(run_dir, network)
    plan = schedule.build_schedule(seed, seconds, partitions=PARTITIONS, kinds=kinds)
    notes: list[str] = []
    bootstrap = tuple(cluster.BY_ID[b].endpoint for b in cluster.BROKERS)
    try:
        cluster.prepare(run_dir)
        nodes.start_all()
        if nodes.wait_active_controller(60) is None:
            _say("no active controller within 60s")
            return 2
        nodes.create_topic(TOPIC, partitions=PARTITIONS, min_insync_replicas=MIN_INSYNC_REPLICAS)
        if not _wait(lambda: nodes.isr_whole(TOPIC, PARTITIONS), 60):
            _say("the topic's ISRs were not whole within 60s of creating it")
            return 2
        _say(f"cluster up; {TOPIC}: {PARTITIONS} partitions, RF 3, min ISR "
             f"{MIN_INSYNC_REPLICAS}; leaders {nodes.partition_views(TOPIC)}")
        t0 = time.monotonic()

        def clock() -> float:
            return time.monotonic() - t0

        load = workload.Workload(bootstrap=bootstrap, topic=TOPIC, partitions=PARTITIONS,
                                 producers=producers, rate_per_s=rate_per_s, clock=clock,
                                 delivery_timeout_ms=delivery_timeout_ms)
        load.start()
        nemesis = Nemesis(nodes, network, seed=seed, clock=clock)
        try:
            for spec in plan:
                wait_s = spec.at_s - clock()
                if wait_s > 0:
                    time.sleep(wait_s)
                nemesis.play(spec)
        finally:
            nemesis.heal_all()
        healed_s = clock()
        isr_whole = _wait(lambda: nodes.isr_whole(TOPIC, PARTITIONS), ISR_WAIT_S)
        isr_full_after_s = round(clock() - healed_s, 3) if isr_whole else None
        _say(f"all healed at {healed_s:.1f}s; ISRs whole "
             + (f"{isr_full_after_s:.1f}s later" if isr_full_after_s is not None
                else f"NOT within {ISR_WAIT_S:g}s"))
        time.sleep(max(0.0, AFTER_HEAL_PRODUCE_S - (clock() - healed_s)))
        load.stop_producing(timeout_s=FLUSH_TIMEOUT_S)
        final = workload.read_all(bootstrap, TOPIC, PARTITIONS, timeout_s=90)
        ends = {p: (records[-1][0] + 1 if records else 0) for p, records in final.items()}
        if not _wait(lambda: all(load.reader_positions.get(p, 0) >= end
                                 for p, end in ends.items()), 20):
            notes.append(f"the reader did not reach the end offsets {ends} within 20s "
                         f"(it was at {load.reader_positions})")
        load.stop_reading()
        notes.extend(nodes.stop(cluster.BROKERS))
        quorum_hw = _quorum_high_watermark(nodes, 20)
        notes.extend(nodes.stop(cluster.CONTROLLERS))
        acks, indeterminate, unsent, observations = load.snapshot()
        notes.extend(load.reader_errors[:20])
        history = ev.History(
            seed=seed, topic=TOPIC, partitions=PARTITIONS, acks=tuple(acks),
            indeterminate=tuple(indeterminate), unsent=unsent,
            observations=tuple(observations), faults=tuple(nemesis.windows),
            final_read=final, healed_s=round(healed_s, 3), isr_full_after_s=isr_full_after_s,
            quorum_high_watermark=quorum_hw, end_s=round(clock(), 3), notes=tuple(notes))
        (run_dir / "history.json").write_text(json.dumps(history.to_json()))
        _say(f"history written: {len(acks)} acknowledged, {len(indeterminate)} "
             f"indeterminate, {unsent} refused by send(), {len(observations)} read")
        return 0
    finally:
        nodes.kill_all()
        sys.stdout.flush()
