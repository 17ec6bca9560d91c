"""``kraftlog cluster decommission --broker N``: empty a broker, then unregister it.

The scale-down path (the Helm chart's NOTES say to run it before lowering
``broker.replicaCount``; a StatefulSet removes its highest ordinal, so N is that pod's
node id). In order, through the AdminService:

1. plan: every partition with a replica on N gets another broker in its place
   (:func:`kraftlog.admin.reassign_plan.propose_decommission`: no broker twice, a rack
   the partition does not use yet when possible, the least loaded broker);
2. move: KIP-73 throttles when ``--throttle B/S`` is given (as ``reassign execute``),
   AlterPartitionReassignments, then progress lines (bytes copied per partition, as
   ``reassign verify``) until every move is complete, bounded by ``--timeout-s``; the
   throttles are removed afterwards;
3. wait for the broker to stop: a running broker registers again after an
   unregistration, so this waits (``--shutdown-timeout-s``) until N is fenced (its pod
   is gone: ``helm upgrade --set broker.replicaCount=...`` or ``kubectl scale`` now);
   partitions placed on N meanwhile (a topic created in between) are moved off too;
4. unregister N (UnregisterBroker, Kafka's ``kafka-cluster unregister``).

Running it again is safe: nothing left to move, a stopped broker, an unregistration (a
broker no longer registered: done). Exit 0 when N is unregistered, 1 on an error or a
timeout (one line saying where it stopped). Edge module: the AdminClient, the clock.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from kraftlog import errors
from kraftlog.admin import admin_client as ac
from kraftlog.admin import reassign_plan as rp
from kraftlog.admin import reassign_throttles
from kraftlog.error_codes import ErrorCode
from kraftlog.tools import reassign_commands as rc
from kraftlog.tools import topic_commands as tc

POLL_INTERVAL_S = 0.5
PROGRESS_EVERY_S = 5.0
"""An unchanged progress table is printed again this often (a changed one at once)."""


def _say(text: str) -> None:
    print(text, flush=True)


async def _brokers(admin: ac.AdminClient) -> dict[int, tuple[bool, str]]:
    """Registered broker id -> (fenced, rack)."""
    cluster = await admin.describe_cluster(include_fenced_brokers=True)
    return {b.broker_id: (b.is_fenced, b.rack) for b in cluster.brokers}


async def _move_off(admin: ac.AdminClient, broker: int, *, throttle: int | None,
                    timeout_s: float) -> int:
    """Steps 1-2; the number of partitions moved."""
    brokers = await _brokers(admin)
    current = await reassign_throttles.current_assignment(admin)
    live = [b for b, (fenced, _) in brokers.items() if not fenced and b != broker]
    plan = rp.propose_decommission(current, broker=broker, brokers=live,
                                   racks={b: rack for b, (_, rack) in brokers.items()})
    if not plan.partitions:
        return 0
    in_progress = await admin.list_partition_reassignments()
    busy = [f"{t.name}-{p.partition_index}" for t in in_progress.topics for p in t.partitions]
    if busy:
        raise errors.KraftlogError(f"reassignments are already in progress "
                                   f"({', '.join(busy[:10])}); finish them first "
                                   "('kraftlog reassign verify')")
    _say(f"Moving {len(plan.partitions)} partition(s) off broker {broker}: "
         + ", ".join(f"{m.topic}-{m.partition} -> {list(m.replicas)}" for m in plan.partitions))
    throttled = []
    if throttle is not None:
        throttled = await rc._set_throttles(admin, plan, current, throttle)
        _say(f"Throttle set to {throttle} B/s on {', '.join(throttled)}")
    try:
        answer = await admin.alter_partition_reassignments(
            {(m.topic, m.partition): m.replicas for m in plan.partitions}, check=False)
        failures = ac.item_errors(answer)
        if failures:
            raise errors.KraftlogError(ac.describe_failures(failures))
        await _wait_for_moves(admin, plan, timeout_s)
    finally:
        if throttled:
            await rc._clear_throttles(admin, plan.topics)
            _say("Throttles removed")
    return len(plan.partitions)


async def _wait_for_moves(admin: ac.AdminClient, plan: rp.Plan, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    partitions = {t: [m.partition for m in plan.partitions if m.topic == t] for t in plan.topics}
    shown: list[str] = []
    shown_at = 0.0
    while True:
        progress = await admin.list_partition_reassignments(partitions)
        current = await reassign_throttles.current_assignment(admin, plan.topics)
        statuses = rc.move_statuses(plan, current, progress)
        lines = rc.format_statuses(statuses)
        now = time.monotonic()
        if lines != shown or now - shown_at >= PROGRESS_EVERY_S:
            for line in lines:
                _say(f"  {line}")
            shown, shown_at = lines, now
        if all(s.state == "complete" for s in statuses):
            return
        # "failed" may be metadata trailing the controller for a moment: only a timeout
        # ends the wait (the plan's replicas differ for good only if someone else moved them).
        if now > deadline:
            pending = [s.name for s in statuses if s.state != "complete"]
            raise errors.KraftlogError(
                f"the moves did not finish within --timeout-s {timeout_s:g} "
                f"({', '.join(pending[:10])} pending); they continue: run this command again "
                "to keep waiting")
        await asyncio.sleep(POLL_INTERVAL_S)


async def decommission(admin: ac.AdminClient, broker: int, *, throttle: int | None,
                       timeout_s: float, shutdown_timeout_s: float) -> None:
    brokers = await _brokers(admin)
    if broker not in brokers:
        raise errors.KraftlogError(f"broker {broker} is not registered (brokers: "
                                   f"{sorted(brokers)}); nothing to do")
    moved = await _move_off(admin, broker, throttle=throttle, timeout_s=timeout_s)
    _say(f"Broker {broker} holds no partition replicas"
         + (f" ({moved} moved)" if moved else ""))
    deadline = time.monotonic() + shutdown_timeout_s
    announced = False
    while True:
        brokers = await _brokers(admin)
        if broker not in brokers:
            _say(f"Broker {broker} is not registered any more")
            return
        if brokers[broker][0]:
            break
        if not announced:
            _say(f"Waiting for broker {broker} to stop (a running broker registers again): "
                 "lower broker.replicaCount now (helm upgrade ... --set "
                 "broker.replicaCount=...), or stop it")
            announced = True
        if time.monotonic() > deadline:
            raise errors.KraftlogError(
                f"broker {broker} still runs after --shutdown-timeout-s "
                f"{shutdown_timeout_s:g}; it holds no replicas: stop it, then run this "
                "command again to unregister it")
        await asyncio.sleep(POLL_INTERVAL_S)
    _say(f"Broker {broker} stopped (fenced)")
    # A topic created while we waited may have put replicas on it: move those too.
    again = await _move_off(admin, broker, throttle=throttle, timeout_s=timeout_s)
    if again:
        _say(f"Moved {again} more partition(s) placed on broker {broker} meanwhile")
    try:
        await admin.unregister_broker(broker)
    except ac.AdminError as exc:
        if exc.code is not ErrorCode.BROKER_ID_NOT_REGISTERED:
            raise
        _say(f"Broker {broker} is not registered any more")
        return
    _say(f"Unregistered broker {broker}")


def run_decommission(args: argparse.Namespace) -> int:
    if args.broker < 0:
        raise errors.ConfigError(f"--broker must be a broker id (>= 0), not {args.broker}")
    if args.throttle is not None and args.throttle < 1:
        raise errors.ConfigError(f"--throttle must be a positive number of bytes/s, "
                                 f"not {args.throttle}")
    for name in ("timeout_s", "shutdown_timeout_s"):
        if getattr(args, name) <= 0:
            raise errors.ConfigError(f"--{name.replace('_', '-')} must be > 0")

    async def body(admin: ac.AdminClient) -> None:
        await decommission(admin, args.broker, throttle=args.throttle,
                           timeout_s=args.timeout_s, shutdown_timeout_s=args.shutdown_timeout_s)
    tc._run(args, body)
    return 0


def register(cluster_subparsers: Any) -> None:
    """Add ``decommission`` under ``kraftlog cluster`` (:mod:`.topic_commands` makes it)."""
    parser = cluster_subparsers.add_parser(
        "decommission",
        help="move every replica off a broker, wait for it to stop, unregister it",
        description="The scale-down path: reassign the broker's replicas to the other "
                    "brokers (with --throttle, showing progress), wait until the broker "
                    "stops (lower broker.replicaCount meanwhile), then unregister it. Safe "
                    "to run again.")
    parser.add_argument("--broker", type=int, required=True, metavar="ID",
                        help="the broker's node id (the chart: nodeIdOffset + the last ordinal)")
    parser.add_argument("--throttle", type=int, default=None, metavar="BYTES_PER_S",
                        help="replication throttle for the moves (KIP-73); removed after")
    parser.add_argument("--timeout-s", type=float, default=3600.0, metavar="S",
                        help="how long the moves may take (3600)")
    parser.add_argument("--shutdown-timeout-s", type=float, default=1800.0, metavar="S",
                        help="how long to wait for the emptied broker to stop (1800)")
    tc._common(parser, output=False)
    parser.set_defaults(func=run_decommission)
