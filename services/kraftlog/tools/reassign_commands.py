"""``kraftlog reassign generate|execute|verify|cancel|list`` and ``kraftlog leader-election``.

kafka-reassign-partitions and kafka-leader-election over the AdminService, with
Kafka's plan JSON (:mod:`.reassign_plan`):

- ``generate --topics a,b --broker-list 1,2,3`` prints the current assignment and a
  proposed plan that spreads the topics over those brokers, moving little;
- ``execute --reassignment-json-file plan.json [--throttle BYTES_PER_S]`` checks the
  plan against the cluster, prints the current assignment (the rollback plan), sets
  the replication throttles when asked, and starts the moves;
- ``verify`` says per partition whether its move is complete, in progress (with bytes
  copied) or failed; once all are complete it removes the throttles (unless
  ``--preserve-throttles``); ``--watch`` redraws progress bars (bytes copied, rate,
  ETA) until the moves finish. Exit 0 when complete, 3 while in progress, 1 on failure;
- ``cancel`` stops the plan's moves (and removes the throttles); ``list`` shows every
  move in progress.

Throttles are Kafka's (KIP-73): ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` on every broker the plan touches, and per
topic ``leader.replication.throttled.replicas`` (the partitions' current replicas)
and ``follower.replication.throttled.replicas`` (the replicas being added).
Edge module (asyncio, the admin client).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import pathlib
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kraftlog import cli_conventions as conventions
from kraftlog import errors
from kraftlog.admin import admin_client as ac
from kraftlog.admin import reassign_plan as rp
from kraftlog.admin import reassign_throttles as rt
from kraftlog.error_codes import ErrorCode
from kraftlog.tools import topic_commands as tc
from kraftlog.v1 import admin_pb2

EXIT_IN_PROGRESS = 3
VERIFY_EXIT_CODES = {EXIT_IN_PROGRESS: "some moves still in progress"}
BAR_WIDTH = 30


# -- pure helpers -------------------------------------------------------------------------------

def progress_bar(copied: int, total: int, *, width: int = BAR_WIDTH) -> str:
    fraction = 1.0 if total <= 0 else min(1.0, max(0.0, copied / total))
    filled = round(fraction * width)
    return f"[{'#' * filled}{'-' * (width - filled)}] {fraction * 100:5.1f}%"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MoveStatus:
    """One partition of a plan as ``verify`` sees it."""

    topic: str
    partition: int
    state: str  # "complete", "in progress", "failed"
    detail: str = ""
    copied_bytes: int = -1
    total_bytes: int = -1

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "state": self.state,
                "detail": self.detail, "copiedBytes": self.copied_bytes,
                "totalBytes": self.total_bytes}


def move_statuses(plan: rp.Plan, current: Mapping[tuple[str, int], Sequence[int]],
                  progress: admin_pb2.ListPartitionReassignmentsProgressResponse,
                  ) -> list[MoveStatus]:
    """Compare the plan with the cluster: in progress (with bytes), complete or failed."""
    ongoing: dict[tuple[str, int], Any] = {}
    for topic in progress.topics:
        for part in topic.partitions:
            ongoing[(topic.name, part.partition_index)] = part
    statuses = []
    for move in plan.partitions:
        key = (move.topic, move.partition)
        found = ongoing.get(key)
        if found is not None:
            known = [p for p in found.progress if p.leader_size_bytes >= 0 and p.size_bytes >= 0]
            total = sum(p.leader_size_bytes for p in known)
            copied = sum(min(p.size_bytes, p.leader_size_bytes) for p in known)
            adding = ",".join(str(r) for r in found.adding_replicas) or "-"
            removing = ",".join(str(r) for r in found.removing_replicas) or "-"
            statuses.append(MoveStatus(
                topic=move.topic, partition=move.partition, state="in progress",
                detail=f"adding {adding}, removing {removing}",
                copied_bytes=copied if known else -1, total_bytes=total if known else -1))
        elif tuple(current.get(key, ())) == move.replicas:
            statuses.append(MoveStatus(topic=move.topic, partition=move.partition,
                                       state="complete"))
        else:
            now = ",".join(str(b) for b in current.get(key, ())) or "none"
            want = ",".join(str(b) for b in move.replicas)
            statuses.append(MoveStatus(topic=move.topic, partition=move.partition,
                                       state="failed",
                                       detail=f"replicas are {now}, the plan wants {want}"))
    return statuses


def statuses_json(statuses: Sequence[MoveStatus]) -> dict[str, Any]:
    """``verify --output json``: the plan's partitions and their states."""
    return {"partitions": [s.to_json() for s in statuses]}


def format_statuses(statuses: Sequence[MoveStatus], *, rates: Mapping[str, float] | None = None,
                    ) -> list[str]:
    """One line per partition; moving ones get a progress bar, rate and ETA."""
    lines = []
    width = max((len(s.name) for s in statuses), default=0)
    for status in statuses:
        line = f"{status.name.ljust(width)}  {status.state:<11}"
        if status.state == "in progress" and status.total_bytes >= 0:
            line += (f"  {progress_bar(status.copied_bytes, status.total_bytes)}  "
                     f"{rt.human_bytes(status.copied_bytes)} / {rt.human_bytes(status.total_bytes)}")
            rate = (rates or {}).get(status.name)
            if rate:
                remaining = max(0, status.total_bytes - status.copied_bytes)
                line += f"  {rt.human_bytes(rate)}/s  ETA {remaining / rate:.0f}s"
        if status.detail:
            line += f"  ({status.detail})"
        lines.append(line.rstrip())
    return lines


def parse_broker_list(text: str) -> list[int]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items or not all(t.isdigit() for t in items):
        raise errors.ConfigError(f"--broker-list must be broker ids like 1,2,3, not {text!r}")
    brokers = [int(t) for t in items]
    duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
    if duplicates:
        raise errors.ConfigError(f"--broker-list names broker(s) {duplicates} twice")
    return brokers


def read_file(path: str, what: str) -> str:
    try:
        return pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise errors.ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


# -- cluster reads ------------------------------------------------------------------------------

async def _set_throttles(admin: ac.AdminClient, plan: rp.Plan, current: rt.Assignment,
                         rate: int) -> list[str]:
    changes: dict[ac.ConfigResource, list[ac.ConfigChange]] = {}
    for broker in rt.throttled_brokers(plan, current):
        changes[ac.ConfigResource(type=ac.ResourceType.BROKER, name=str(broker))] = [
            ac.ConfigChange(name=rt.LEADER_RATE, value=str(rate)),
            ac.ConfigChange(name=rt.FOLLOWER_RATE, value=str(rate))]
    for topic, (leaders, followers) in rt.throttled_replicas(plan, current).items():
        changes[ac.ConfigResource(type=ac.ResourceType.TOPIC, name=topic)] = [
            ac.ConfigChange(name=rt.LEADER_REPLICAS, value=leaders),
            ac.ConfigChange(name=rt.FOLLOWER_REPLICAS, value=followers)]
    if changes:
        await admin.incremental_alter_configs(changes)
    return [f"{r.type.name.lower()} {r.name or '<default>'}" for r in changes]


async def _clear_throttles(admin: ac.AdminClient, topics: Sequence[str]) -> None:
    """Remove the rate from every broker and the throttled replicas from ``topics``."""
    brokers = await rt.brokers_and_racks(admin)
    changes: dict[ac.ConfigResource, list[ac.ConfigChange]] = {}
    for broker in sorted(brokers):
        changes[ac.ConfigResource(type=ac.ResourceType.BROKER, name=str(broker))] = [
            ac.ConfigChange(name=rt.LEADER_RATE, op=ac.ConfigOp.DELETE),
            ac.ConfigChange(name=rt.FOLLOWER_RATE, op=ac.ConfigOp.DELETE)]
    for topic in topics:
        changes[ac.ConfigResource(type=ac.ResourceType.TOPIC, name=topic)] = [
            ac.ConfigChange(name=rt.LEADER_REPLICAS, op=ac.ConfigOp.DELETE),
            ac.ConfigChange(name=rt.FOLLOWER_REPLICAS, op=ac.ConfigOp.DELETE)]
    if changes:
        await admin.incremental_alter_configs(changes)


# -- commands -----------------------------------------------------------------------------------

def run_generate(args: argparse.Namespace) -> int:
    if bool(args.topics) == bool(args.topics_to_move_json_file):
        raise errors.ConfigError("give exactly one of --topics and --topics-to-move-json-file")
    topics = (tc.parse_topics(args.topics, required=True) if args.topics else
              list(rp.parse_topics_to_move(read_file(args.topics_to_move_json_file,
                                                     "topics file"),
                                           source=args.topics_to_move_json_file)))
    targets = parse_broker_list(args.broker_list)

    async def body(admin: ac.AdminClient) -> tuple[rt.Assignment, rp.Plan]:
        current = await rt.current_assignment(admin, topics)
        racks = await rt.brokers_and_racks(admin)
        missing = sorted(set(targets) - set(racks))
        if missing:
            raise errors.ConfigError(f"--broker-list: broker(s) {missing} do not exist "
                                     f"(brokers: {sorted(racks)})")
        return current, rp.propose(current, brokers=targets, racks=racks)
    current, proposed = tc._run(args, body)
    if args.output == "json":
        print(json.dumps({"current": json.loads(rp.current_plan(current).to_json()),
                          "proposed": json.loads(proposed.to_json())}))
    else:
        print("Current partition replica assignment")
        print(rp.current_plan(current).to_json())
        print()
        print("Proposed partition reassignment configuration")
        print(proposed.to_json())
    return 0


def run_execute(args: argparse.Namespace) -> int:
    plan = rp.parse_plan(read_file(args.reassignment_json_file, "plan"),
                         source=args.reassignment_json_file)
    if args.throttle is not None and args.throttle < 1:
        raise errors.ConfigError(f"--throttle must be a positive number of bytes/s, "
                                 f"not {args.throttle}")

    async def body(admin: ac.AdminClient) -> tuple[rt.Assignment, list[str], Any]:
        current = await rt.current_assignment(admin, plan.topics)
        brokers = await rt.brokers_and_racks(admin)
        rp.check_against_cluster(plan, brokers=brokers, partitions=current)
        in_progress = await admin.list_partition_reassignments()
        if any(t.partitions for t in in_progress.topics) and not args.additional:
            names = [f"{t.name}-{p.partition_index}" for t in in_progress.topics
                     for p in t.partitions]
            raise errors.KraftlogError(
                f"reassignments are already in progress ({', '.join(names[:10])}); finish "
                "them ('reassign verify') or pass --additional")
        throttled: list[str] = []
        if args.throttle is not None:
            throttled = await _set_throttles(admin, plan, current, args.throttle)
        answer = await admin.alter_partition_reassignments(
            {(m.topic, m.partition): m.replicas for m in plan.partitions}, check=False)
        return current, throttled, answer
    current, throttled, answer = tc._run(args, body)
    rollback = rp.Plan(partitions=tuple(
        rp.PartitionMove(topic=m.topic, partition=m.partition,
                         replicas=current[(m.topic, m.partition)]) for m in plan.partitions))
    print("Current partition replica assignment")
    print(rollback.to_json())
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    if throttled:
        print(f"Throttle set to {args.throttle} B/s on {', '.join(throttled)}; "
              "'reassign verify' removes it when the moves are done")
    failures = ac.item_errors(answer)
    if failures:
        print(f"kraftlog: error: {ac.describe_failures(failures)}", file=sys.stderr)
        return 1
    print(f"Successfully started partition reassignment{'s' if len(plan.partitions) > 1 else ''}"
          f" for {', '.join(f'{m.topic}-{m.partition}' for m in plan.partitions)}")
    return 0


SETTLE_ATTEMPTS = 6
SETTLE_INTERVAL_S = 0.5


async def _verify_once(admin: ac.AdminClient, plan: rp.Plan) -> list[MoveStatus]:
    """The plan's status. The replica sets come from broker metadata, which trails the
    controller's view of reassignments by a moment: a move the controller just finished
    can still show its old replicas. A partition that looks failed is therefore read
    again (a few times, half a second apart) before it is reported as failed."""
    partitions = {t: [m.partition for m in plan.partitions if m.topic == t]
                  for t in plan.topics}
    for attempt in range(SETTLE_ATTEMPTS):
        progress = await admin.list_partition_reassignments(partitions)
        current = await rt.current_assignment(admin, plan.topics)
        statuses = move_statuses(plan, current, progress)
        if not any(s.state == "failed" for s in statuses) or attempt == SETTLE_ATTEMPTS - 1:
            return statuses
        await asyncio.sleep(SETTLE_INTERVAL_S)
    raise AssertionError("unreachable")


def run_verify(args: argparse.Namespace) -> int:
    plan = rp.parse_plan(read_file(args.reassignment_json_file, "plan"),
                         source=args.reassignment_json_file)
    if args.interval_s <= 0:
        raise errors.ConfigError(f"--interval-s must be positive, not {args.interval_s}")

    async def body(admin: ac.AdminClient) -> list[MoveStatus]:
        statuses = await _verify_once(admin, plan)
        if args.watch:
            statuses = await _watch(admin, plan, statuses, args)
        else:
            _print_statuses(args, statuses, {})
        if all(s.state == "complete" for s in statuses) and not args.preserve_throttles:
            await _clear_throttles(admin, plan.topics)
            if args.output != "json":
                print("Throttles removed (brokers' replication rates, topics' throttled "
                      "replicas)")
        return statuses
    statuses = tc._run(args, body)
    if any(s.state == "failed" for s in statuses):
        return 1
    return 0 if all(s.state == "complete" for s in statuses) else EXIT_IN_PROGRESS


def _print_statuses(args: argparse.Namespace, statuses: Sequence[MoveStatus],
                    rates: Mapping[str, float]) -> None:
    if args.output == "json":
        print(json.dumps(statuses_json(statuses)))
        return
    print("Status of partition reassignment:")
    print("\n".join(format_statuses(statuses, rates=rates)))


async def _watch(admin: ac.AdminClient, plan: rp.Plan, statuses: list[MoveStatus],
                 args: argparse.Namespace) -> list[MoveStatus]:
    """Redraw until nothing is in progress (or --watch-timeout-s passes)."""
    deadline = time.monotonic() + args.watch_timeout_s
    last: dict[str, tuple[float, int]] = {}
    rates: dict[str, float] = {}
    redraw = sys.stdout.isatty() and args.output != "json"
    drawn = 0
    while True:
        now = time.monotonic()
        for status in statuses:
            if status.copied_bytes >= 0:
                previous = last.get(status.name)
                if previous is not None and now > previous[0]:
                    rate = (status.copied_bytes - previous[1]) / (now - previous[0])
                    rates[status.name] = max(0.0, rate)
                last[status.name] = (now, status.copied_bytes)
        if redraw and drawn:
            sys.stdout.write(f"\x1b[{drawn}F\x1b[J")  # back to the first line, clear below
        lines = format_statuses(statuses, rates=rates)
        if args.output == "json":
            print(json.dumps(statuses_json(statuses)),
                  flush=True)
        else:
            print("Status of partition reassignment:\n" + "\n".join(lines), flush=True)
        drawn = len(lines) + 1
        if not any(s.state == "in progress" for s in statuses):
            return statuses
        if time.monotonic() > deadline:
            raise errors.KraftlogError(f"moves still in progress after "
                                       f"{args.watch_timeout_s:.0f} s of --watch")
        await asyncio.sleep(args.interval_s)
        statuses = await _verify_once(admin, plan)


def run_cancel(args: argparse.Namespace) -> int:
    plan = rp.parse_plan(read_file(args.reassignment_json_file, "plan"),
                         source=args.reassignment_json_file)

    async def body(admin: ac.AdminClient) -> Any:
        progress = await admin.list_partition_reassignments(
            {t: [m.partition for m in plan.partitions if m.topic == t] for t in plan.topics})
        moving = {t.name: [p.partition_index for p in t.partitions] for t in progress.topics
                  if t.partitions}
        answer = None
        if moving:
            answer = await admin.cancel_partition_reassignments(moving, check=False)
        if not args.preserve_throttles:
            await _clear_throttles(admin, plan.topics)
        return moving, answer
    moving, answer = tc._run(args, body)
    if not moving:
        print("No reassignment of the plan's partitions is in progress")
        return 0
    failures = ac.item_errors(answer) if answer is not None else []
    if failures:
        print(f"kraftlog: error: {ac.describe_failures(failures)}", file=sys.stderr)
        return 1
    names = [f"{t}-{p}" for t, parts in sorted(moving.items()) for p in parts]
    print(f"Cancelled the reassignment of {', '.join(names)}")
    return 0


def reassignments_json(progress: admin_pb2.ListPartitionReassignmentsProgressResponse,
                       ) -> dict[str, Any]:
    """``reassign list --output json``: every move in progress, bytes behind (-1: unknown)."""
    payload = []
    for topic in progress.topics:
        for part in topic.partitions:
            behind = [p.bytes_behind for p in part.progress if p.bytes_behind >= 0]
            payload.append({"topic": topic.name, "partition": part.partition_index,
                            "replicas": list(part.replicas),
                            "addingReplicas": list(part.adding_replicas),
                            "removingReplicas": list(part.removing_replicas),
                            "bytesBehind": sum(behind) if behind else -1})
    return {"reassignments": payload}


def run_list(args: argparse.Namespace) -> int:
    topics = tc.parse_topics(args.topics, required=False)

    async def body(admin: ac.AdminClient) -> admin_pb2.ListPartitionReassignmentsProgressResponse:
        return await admin.list_partition_reassignments({t: [] for t in topics} or None)
    progress = tc._run(args, body)
    rows = []
    for topic in progress.topics:
        for part in topic.partitions:
            behind = [p.bytes_behind for p in part.progress if p.bytes_behind >= 0]
            rows.append((f"{topic.name}-{part.partition_index}",
                         ",".join(map(str, part.replicas)),
                         ",".join(map(str, part.adding_replicas)) or "-",
                         ",".join(map(str, part.removing_replicas)) or "-",
                         rt.human_bytes(sum(behind)) if behind else "?"))
    if args.output == "json":
        print(json.dumps(reassignments_json(progress)))
    elif not rows:
        print("No partition reassignments in progress")
    else:
        print("\n".join(tc.table(("PARTITION", "REPLICAS", "ADDING", "REMOVING",
                                  "BYTES BEHIND"), rows)))
    return 0


# -- leader election ----------------------------------------------------------------------------

def parse_election_json(text: str, source: str) -> dict[str, list[int]]:
    """kafka-leader-election's ``{"partitions":[{"topic":"t","partition":0}]}``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise errors.ConfigError(f"{source}: not valid JSON: {exc.msg} at line "
                                 f"{exc.lineno}") from None
    entries = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise errors.ConfigError(f"{source}: expected {{\"partitions\": [{{\"topic\": \"t\", "
                                 "\"partition\": 0}, ...]}")
    result: dict[str, list[int]] = {}
    for index, entry in enumerate(entries):
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic or not isinstance(partition, int) \
                or isinstance(partition, bool) or partition < 0:
            raise errors.ConfigError(f"{source}: partitions[{index}] must be "
                                     "{\"topic\": NAME, \"partition\": N >= 0}")
        if partition in result.setdefault(topic, []):
            raise errors.ConfigError(f"{source}: {topic}-{partition} appears twice")
        result[topic].append(partition)
    return result


def election_json(elected: Sequence[str], not_needed: Sequence[str], failed: Sequence[str],
                  ) -> dict[str, Any]:
    """``leader-election --output json``: partitions (``topic-N``) by outcome."""
    return {"elected": list(elected), "notNeeded": list(not_needed), "failed": list(failed)}


def run_leader_election(args: argparse.Namespace) -> int:
    chosen = [bool(args.all_topic_partitions), bool(args.topic),
              bool(args.path_to_json_file)]
    if sum(chosen) != 1:
        raise errors.ConfigError("give exactly one of --all-topic-partitions, --topic and "
                                 "--path-to-json-file")
    if args.partition is not None and not args.topic:
        raise errors.ConfigError("--partition needs --topic")
    if args.partition is not None and args.partition < 0:
        raise errors.ConfigError(f"--partition must be >= 0, not {args.partition}")
    partitions: dict[str, list[int]] | None = None
    if args.topic:
        partitions = {args.topic: [] if args.partition is None else [args.partition]}
    elif args.path_to_json_file:
        partitions = parse_election_json(read_file(args.path_to_json_file, "partitions file"),
                                         args.path_to_json_file)
    election = ac.ElectionType[args.election_type.upper()]

    async def body(admin: ac.AdminClient) -> Any:
        if partitions is not None:
            await rt.current_assignment(admin, sorted(partitions))  # unknown topics fail here
        return await admin.elect_leaders(election, partitions, check=False)
    answer = tc._run(args, body)
    elected: list[str] = []
    not_needed: list[str] = []
    failed: list[str] = []
    for topic in answer.replica_election_results:
        for part in topic.partition_result:
            name = f"{topic.topic}-{part.partition_id}"
            code = ErrorCode(part.error.code)
            if code is ErrorCode.NONE:
                elected.append(name)
            elif code is ErrorCode.ELECTION_NOT_NEEDED:
                not_needed.append(name)
            else:
                failed.append(f"{name}: {code.name}"
                              + (f" ({part.error.message})" if part.error.message else ""))
    if args.output == "json":
        print(json.dumps(election_json(elected, not_needed, failed)))
    else:
        if elected:
            print(f"Successfully completed leader election ({election.name}) for partitions "
                  f"{', '.join(elected)}")
        if not_needed:
            print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
        if not elected and not not_needed and not failed:
            # Kafka leaves partitions that need no election out of an all-partitions answer.
            print("Every partition already has a valid leader; no election needed"
                  if election is ac.ElectionType.UNCLEAN else
                  "Every partition is led by its preferred replica; no election needed")
    for line in failed:
        print(f"kraftlog: error: election failed for {line}", file=sys.stderr)
    return 1 if failed else 0


# -- registration -------------------------------------------------------------------------------

def register(subparsers: Any) -> None:
    """Add ``reassign`` and ``leader-election`` to the ``kraftlog`` command."""
    reassign = subparsers.add_parser(
        "reassign", help="move partitions between brokers (kafka-reassign-partitions)",
        description="Generate, execute, verify, cancel and list partition reassignments "
                    "with Kafka's plan JSON.")
    sub = reassign.add_subparsers(dest="reassign_command", metavar="ACTION")
    sub.required = True

    generate = sub.add_parser("generate", help="propose a plan spreading topics over brokers")
    tc._common(generate, output=True)
    generate.add_argument("--topics", default=None, metavar="T1,T2",
                          help="the topics to move")
    generate.add_argument("--topics-to-move-json-file", default=None, metavar="FILE",
                          help='{"version":1,"topics":[{"topic":"t"}]}')
    generate.add_argument("--broker-list", "--brokers", required=True, metavar="1,2,3",
                          help="the brokers the topics should live on")
    generate.set_defaults(func=run_generate)

    execute = sub.add_parser("execute", help="start the moves of a plan")
    tc._common(execute, output=False)
    execute.add_argument("--reassignment-json-file", required=True, metavar="FILE")
    execute.add_argument("--throttle", type=int, default=None, metavar="BYTES_PER_S",
                         help="cap replication traffic of the moves (KIP-73 throttles)")
    execute.add_argument("--additional", action="store_true",
                         help="start even though other reassignments are in progress")
    execute.set_defaults(func=run_execute)

    verify = sub.add_parser("verify", help="is each move done? removes throttles when all are")
    tc._common(verify, output=True)
    verify.add_argument("--reassignment-json-file", required=True, metavar="FILE")
    verify.add_argument("--preserve-throttles", action="store_true",
                        help="keep the throttles even when every move is complete")
    verify.add_argument("--watch", action="store_true",
                        help="redraw progress bars until the moves finish")
    verify.add_argument("--interval-s", type=float, default=1.0, metavar="S",
                        help="--watch refresh interval (default 1)")
    verify.add_argument("--watch-timeout-s", type=float, default=3600.0, metavar="S",
                        help="give up watching after S seconds (default 3600)")
    verify.set_defaults(func=run_verify)
    conventions.declare_exit_codes(verify, VERIFY_EXIT_CODES)

    cancel = sub.add_parser("cancel", help="stop the moves of a plan that are in progress")
    tc._common(cancel, output=False)
    cancel.add_argument("--reassignment-json-file", required=True, metavar="FILE")
    cancel.add_argument("--preserve-throttles", action="store_true")
    cancel.set_defaults(func=run_cancel)

    listing = sub.add_parser("list", help="every reassignment in progress")
    tc._common(listing, output=True)
    listing.add_argument("--topics", default=None, metavar="T1,T2")
    listing.set_defaults(func=run_list)

    election = subparsers.add_parser(
        "leader-election", help="elect preferred or unclean leaders (kafka-leader-election)",
        description="Run preferred or unclean leader elections for all partitions, a topic "
                    "(or one partition) or a JSON file of partitions.")
    tc._common(election, output=True)
    election.add_argument("--election-type", "--type", required=True,
                          choices=("preferred", "unclean"))
    election.add_argument("--all-topic-partitions", action="store_true")
    election.add_argument("--topic", default=None)
    election.add_argument("--partition", type=int, default=None)
    election.add_argument("--path-to-json-file", default=None, metavar="FILE",
                          help='{"partitions":[{"topic":"t","partition":0}]}')
    election.set_defaults(func=run_leader_election)
