"""``kraftlog topics create|list|describe|alter|delete`` and ``kraftlog cluster describe``
(``cluster decommission``: :mod:`.decommission_commands`).

The kafka-topics.sh of kraftlog, over the AdminService (:mod:`.admin_client`). Every
subcommand takes where the AdminService is, one of:

- ``--bootstrap-server HOST:PORT[,HOST:PORT...]``: brokers, as Kafka's tools take
  (KIP-590): every broker serves the AdminService on its port and forwards controller
  writes to the active controller;
- ``--admin HOST:PORT[,...]``: ``kraftlog admin`` processes;

(not both; default: ``$KRAFTLOG_ADMIN``, else ``$KRAFTLOG_BOOTSTRAP_SERVER``, else
``127.0.0.1:19090``). In a list the addresses are tried in turn while one is
unreachable. Also ``--timeout-ms``; read commands take ``--output table|json`` (JSON with
lowerCamelCase keys, :mod:`kraftlog.cli_conventions`). The
``reassign`` and ``leader-election`` tools (:mod:`.reassign_commands`) take the same.

- ``topics create --topic T [--partitions N] [--replication-factor N]
  [--replica-assignment 4:5,5:6] [--config k=v ...] [--if-not-exists]``
- ``topics list [--exclude-internal]``
- ``topics describe [--topic T[,T...]] [--under-replicated-partitions |
  --under-min-isr-partitions | --at-min-isr-partitions | --unavailable-partitions]
  [--exclude-internal]``
- ``topics alter --topic T [--partitions N] [--config k=v ...] [--delete-config k ...]``
- ``topics delete --topic T[,T...] [--if-exists]``
- ``cluster describe [--include-fenced]``

Bad input (a malformed ``--config``, a non-positive count, an unknown topic, a
replication factor above the broker count, an unreachable admin service) is one
line on stderr and exit 1 (:mod:`kraftlog.tools.cli` prints the
:class:`~kraftlog.errors.KraftlogError`); argparse usage errors exit 2. The
rendering functions (``format_*``, ``*_json``) are pure and unit-tested.
Edge module: argparse, asyncio, protobuf.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from kraftlog import cli_conventions as conventions
from kraftlog import errors
from kraftlog.admin import admin_client as ac
from kraftlog.error_codes import ErrorCode
from kraftlog.metadata import record_convert
from kraftlog.v1 import admin_pb2, common_pb2, controller_pb2

ADMIN_ENV = conventions.ADMIN_ENV
BOOTSTRAP_ENV = conventions.BOOTSTRAP_SERVER_ENV
_CONFIG_KEY = re.compile(r"^[A-Za-z0-9._-]+$")
T = TypeVar("T")

_FILTERS = {
    "under_replicated_partitions": ac.HealthFilter.UNDER_REPLICATED,
    "under_min_isr_partitions": ac.HealthFilter.UNDER_MIN_ISR,
    "at_min_isr_partitions": ac.HealthFilter.AT_MIN_ISR,
    "unavailable_partitions": ac.HealthFilter.UNAVAILABLE,
}


# -- input validation (pure) ----------------------------------------------------------------------

def parse_config_pairs(items: Sequence[str] | None) -> dict[str, str]:
    """``--config key=value`` flags; ConfigError naming the bad one."""
    configs: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not _CONFIG_KEY.match(key):
            raise errors.ConfigError(f"--config {item!r} is not key=value (e.g. "
                                     "--config retention.ms=86400000)")
        if key in configs:
            raise errors.ConfigError(f"--config {key} is given twice")
        configs[key] = value.strip()
    return configs


def parse_config_keys(items: Sequence[str] | None) -> list[str]:
    keys = []
    for item in items or ():
        key = item.strip()
        if not key or not _CONFIG_KEY.match(key):
            raise errors.ConfigError(f"--delete-config {item!r} is not a config name")
        keys.append(key)
    return keys


def single_topic(value: str | None, command: str) -> str:
    names = parse_topics(value, required=True)
    if len(names) > 1:
        raise errors.ConfigError(f"topics {command} takes one --topic, got {','.join(names)}")
    return names[0]


def parse_topics(value: str | None, *, required: bool) -> list[str]:
    """``--topic a,b``: the names, in order, without duplicates."""
    names = list(dict.fromkeys(n.strip() for n in (value or "").split(",") if n.strip()))
    if required and not names:
        raise errors.ConfigError("--topic is required (a name, or a comma-separated list)")
    return names


def parse_replica_assignment(value: str) -> dict[int, list[int]]:
    """kafka-topics' ``--replica-assignment``: ``4:5:6,5:6:4`` = partition 0 on 4,5,6 ..."""
    assignment: dict[int, list[int]] = {}
    for index, part in enumerate(value.split(",")):
        try:
            replicas = [int(b) for b in part.split(":")]
        except ValueError:
            raise errors.ConfigError(f"--replica-assignment {value!r}: partition {index} "
                                     f"({part!r}) is not broker ids separated by ':'") from None
        if len(set(replicas)) != len(replicas):
            raise errors.ConfigError(f"--replica-assignment {value!r}: partition {index} "
                                     "names a broker twice")
        assignment[index] = replicas
    if len({len(r) for r in assignment.values()}) > 1:
        raise errors.ConfigError(f"--replica-assignment {value!r}: every partition needs "
                                 "the same number of replicas")
    return assignment


def check_positive(flag: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise errors.ConfigError(f"{flag} must be at least 1, got {value}")


def parse_addresses(value: str, source: str) -> list[str]:
    """``HOST:PORT[,HOST:PORT...]`` from ``source`` (a flag or variable, for the error)."""
    addresses = list(dict.fromkeys(a.strip() for a in value.split(",") if a.strip()))
    if not addresses:
        raise errors.ConfigError(f"{source} {value!r} holds no HOST:PORT")
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise errors.ConfigError(f"{source} {address!r} is not HOST:PORT")
    return addresses


def admin_targets(admin: str | None, bootstrap_server: str | None = None) -> list[str]:
    """Where the AdminService is: ``--admin`` or ``--bootstrap-server`` (not both), else
    ``$KRAFTLOG_ADMIN``, else ``$KRAFTLOG_BOOTSTRAP_SERVER``, else the default.

    Both variables may be set (``kraftlog dev up`` prints both, and produce/consume
    read the second): the admin service, named for this purpose, wins."""
    if admin and bootstrap_server:
        raise errors.ConfigError("--admin and --bootstrap-server are mutually exclusive")
    if admin:
        return parse_addresses(admin, "--admin")
    if bootstrap_server:
        return parse_addresses(bootstrap_server, "--bootstrap-server")
    env_admin = conventions.env_default(ADMIN_ENV)
    env_bootstrap = conventions.env_default(BOOTSTRAP_ENV)
    if env_admin:
        return parse_addresses(env_admin, f"${ADMIN_ENV}")
    if env_bootstrap:
        return parse_addresses(env_bootstrap, f"${BOOTSTRAP_ENV}")
    return [ac.DEFAULT_ADMIN]


def admin_address(value: str | None) -> str:
    """``--admin`` (else the environment, else the default) as one ``h:p[,h:p...]`` text."""
    return ",".join(admin_targets(value))


# -- rendering (pure) -----------------------------------------------------------------------------

def topic_id_text(value: common_pb2.Uuid) -> str:
    return str(record_convert.uuid_from_proto(value))


def _ids(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values) if values else "-"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, indent: str = "") -> list[str]:
    """Left-aligned columns two spaces apart."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in [header, *rows]]


def format_list(response: admin_pb2.ListTopicsResponse) -> list[str]:
    if not response.topics:
        return ["(no topics)"]
    return table(("TOPIC", "PARTITIONS", "TOPIC ID", "INTERNAL"),
                 [(t.name, str(t.partition_count), topic_id_text(t.topic_id),
                   "yes" if t.is_internal else "no") for t in response.topics])


def list_json(response: admin_pb2.ListTopicsResponse) -> dict[str, Any]:
    return {"topics": [{"name": t.name, "topicId": topic_id_text(t.topic_id),
                        "partitionCount": t.partition_count, "internal": t.is_internal}
                       for t in response.topics]}


PARTITION_COLUMNS = ("PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "ADDING", "REMOVING",
                     "OFFLINE", "ELR", "LAST-KNOWN-ELR")


def format_describe(response: admin_pb2.DescribeTopicsResponse) -> list[str]:
    """Per topic a kafka-topics style summary line, then its partitions as a table."""
    lines: list[str] = []
    for topic in response.topics:
        if lines:
            lines.append("")
        configs = ",".join(f"{c.name}={c.value}" for c in topic.configs) or "-"
        lines.append(f"Topic: {topic.name}  TopicId: {topic_id_text(topic.topic_id)}  "
                     f"PartitionCount: {topic.partition_count}  "
                     f"ReplicationFactor: {topic.replication_factor}  "
                     f"MinIsr: {topic.min_insync_replicas}  Configs: {configs}")
        lines += table(PARTITION_COLUMNS, [
            (str(p.partition_index), str(p.leader_id) if p.leader_id >= 0 else "none",
             str(p.leader_epoch), _ids(p.replicas), _ids(p.isr), _ids(p.adding_replicas),
             _ids(p.removing_replicas), _ids(p.offline_replicas),
             _ids(p.eligible_leader_replicas), _ids(p.last_known_elr))
            for p in topic.partitions], indent="  ")
    return lines or ["(no matching partitions)"]


def describe_json(response: admin_pb2.DescribeTopicsResponse) -> dict[str, Any]:
    return {"topics": [{
        "name": t.name, "topicId": topic_id_text(t.topic_id), "internal": t.is_internal,
        "partitionCount": t.partition_count, "replicationFactor": t.replication_factor,
        "minInsyncReplicas": t.min_insync_replicas,
        # Config names are values (Kafka's dotted names), not keys of this format.
        "configs": {c.name: c.value for c in t.configs},
        "partitions": [{"partition": p.partition_index, "leader": p.leader_id,
                        "leaderEpoch": p.leader_epoch, "replicas": list(p.replicas),
                        "isr": list(p.isr), "addingReplicas": list(p.adding_replicas),
                        "removingReplicas": list(p.removing_replicas),
                        "offlineReplicas": list(p.offline_replicas),
                        "eligibleLeaderReplicas": list(p.eligible_leader_replicas),
                        "lastKnownElr": list(p.last_known_elr)}
                       for p in t.partitions]} for t in response.topics]}


def _endpoint(broker: controller_pb2.DescribeClusterResponse.DescribeClusterBroker) -> str:
    if not broker.endpoints:
        return "-"
    e = broker.endpoints[0]
    return f"{e.host}:{e.port}"


def _broker_state(broker: controller_pb2.DescribeClusterResponse.DescribeClusterBroker) -> str:
    if broker.in_controlled_shutdown:
        return "shutting-down"
    return "fenced" if broker.is_fenced else "unfenced"


def format_cluster(response: controller_pb2.DescribeClusterResponse) -> list[str]:
    lines = [f"ClusterId:     {response.cluster_id}",
             f"ControllerId:  {response.controller_id}",
             f"Brokers:       {len(response.brokers)}"]
    if response.brokers:
        lines.append("")
        lines += table(("BROKER", "ENDPOINT", "RACK", "STATE", "EPOCH"), [
            (str(b.broker_id), _endpoint(b), b.rack or "-", _broker_state(b),
             str(b.broker_epoch)) for b in response.brokers])
    return lines


def cluster_json(response: controller_pb2.DescribeClusterResponse) -> dict[str, Any]:
    return {"clusterId": response.cluster_id, "controllerId": response.controller_id,
            "brokers": [{"id": b.broker_id, "endpoint": _endpoint(b), "rack": b.rack,
                         "state": _broker_state(b), "brokerEpoch": b.broker_epoch}
                        for b in response.brokers]}


# -- commands -------------------------------------------------------------------------------------

def _run(args: argparse.Namespace, body: Callable[[ac.AdminClient], Awaitable[T]]) -> T:
    target = admin_targets(args.admin, args.bootstrap_server)
    if args.timeout_ms <= 0:
        raise errors.ConfigError(f"--timeout-ms must be positive, got {args.timeout_ms}")

    async def main() -> T:
        async with ac.AdminClient(target, timeout_ms=args.timeout_ms) as admin:
            return await body(admin)
    return asyncio.run(main())


def _emit(args: argparse.Namespace, lines: list[str], payload: dict[str, Any]) -> None:
    print(json.dumps(payload) if args.output == "json" else "\n".join(lines))


def run_create(args: argparse.Namespace) -> int:
    name = single_topic(args.topic, "create")
    check_positive("--partitions", args.partitions)
    check_positive("--replication-factor", args.replication_factor)
    configs = parse_config_pairs(args.config)
    assignment = parse_replica_assignment(args.replica_assignment) \
        if args.replica_assignment else {}
    if assignment and (args.partitions is not None or args.replication_factor is not None):
        raise errors.ConfigError("--replica-assignment replaces --partitions and "
                                 "--replication-factor; give one or the other")
    topic = ac.NewTopic(name=name, num_partitions=args.partitions or -1,
                        replication_factor=args.replication_factor or -1,
                        assignments=assignment, configs=configs)
    try:
        answer = _run(args, lambda admin: admin.create_topics([topic]))
    except ac.TopicExistsError:
        if args.if_not_exists:
            return 0
        raise
    result = answer.topics[0] if answer.topics else None
    detail = (f" ({result.num_partitions} partitions, replication factor "
              f"{result.replication_factor})") if result is not None else ""
    print(f"Created topic {name}{detail}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    answer = _run(args, lambda admin: admin.list_topics(exclude_internal=args.exclude_internal))
    _emit(args, format_list(answer), list_json(answer))
    return 0


def run_describe(args: argparse.Namespace) -> int:
    names = parse_topics(args.topic, required=False)
    chosen = [f for flag, f in _FILTERS.items() if getattr(args, flag)]
    health = chosen[0] if chosen else ac.HealthFilter.ALL
    answer = _run(args, lambda admin: admin.describe_topics(
        names, health_filter=health, exclude_internal=args.exclude_internal))
    _emit(args, format_describe(answer), describe_json(answer))
    return 0


def run_alter(args: argparse.Namespace) -> int:
    name = single_topic(args.topic, "alter")
    check_positive("--partitions", args.partitions)
    configs = parse_config_pairs(args.config)
    removed = parse_config_keys(args.delete_config)
    if args.partitions is None and not configs and not removed:
        raise errors.ConfigError("topics alter needs --partitions and/or --config / "
                                 "--delete-config")

    async def body(admin: ac.AdminClient) -> list[str]:
        done: list[str] = []
        if configs or removed:
            resource = ac.ConfigResource(type=ac.ResourceType.TOPIC, name=name)
            changes = [ac.ConfigChange(name=k, value=v) for k, v in configs.items()] + [
                ac.ConfigChange(name=k, op=ac.ConfigOp.DELETE) for k in removed]
            # Validate first, so a bad config does not leave the partitions half-changed.
            await admin.incremental_alter_configs({resource: changes}, validate_only=True)
        if args.partitions is not None:
            await admin.create_partitions([ac.NewPartitions(topic=name,
                                                            total_count=args.partitions)])
            done.append(f"partitions increased to {args.partitions}")
        if configs or removed:
            await admin.incremental_alter_configs({resource: changes})
            done.append("configs updated: " + ", ".join(
                [f"{k}={v}" for k, v in configs.items()] + [f"{k} deleted" for k in removed]))
        return done

    done = _run(args, body)
    print(f"Altered topic {name}: " + "; ".join(done) + ".")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    names = parse_topics(args.topic, required=True)
    answer = _run(args, lambda admin: admin.delete_topics(names, check=False))
    failures = ac.item_errors(answer)
    if args.if_exists:
        failures = [f for f in failures if f.code is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    for r in answer.responses:
        if r.error.code == common_pb2.NONE:
            print(f"Deleted topic {r.name}.")
    if failures:
        raise ac.error_for(failures[0].code, ac.describe_failures(failures),
                           failures=failures)
    return 0


def run_cluster_describe(args: argparse.Namespace) -> int:
    answer = _run(args, lambda admin: admin.describe_cluster(
        include_fenced_brokers=args.include_fenced))
    _emit(args, format_cluster(answer), cluster_json(answer))
    return 0


# -- parsers --------------------------------------------------------------------------------------

def _common(parser: argparse.ArgumentParser, *, output: bool) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT[,...]",
                       help="brokers (each serves the AdminService and forwards to the "
                            f"active controller; default: ${BOOTSTRAP_ENV})")
    where.add_argument("--admin", default=None, metavar="HOST:PORT[,...]",
                       help=f"the 'kraftlog admin' service (default: ${ADMIN_ENV}, else "
                            f"${BOOTSTRAP_ENV}, else {ac.DEFAULT_ADMIN})")
    parser.add_argument("--timeout-ms", type=int, default=ac.DEFAULT_TIMEOUT_MS, metavar="MS",
                        help=f"deadline of the call, retries included "
                             f"(default {ac.DEFAULT_TIMEOUT_MS})")
    if output:
        conventions.add_output_option(parser)


def register(subparsers: Any) -> None:
    """Add ``topics`` and ``cluster`` to the ``kraftlog`` command (see :mod:`kraftlog.tools.cli`)."""
    topics = subparsers.add_parser(
        "topics", help="create, list, describe, alter and delete topics",
        description="Manage topics through the AdminService (like kafka-topics.sh).")
    sub = topics.add_subparsers(dest="topics_command", metavar="SUBCOMMAND")
    sub.required = True

    create = sub.add_parser("create", help="create a topic")
    create.add_argument("--topic", required=True, metavar="NAME")
    create.add_argument("--partitions", type=int, default=None, metavar="N",
                        help="partition count (default: the controller's num.partitions)")
    create.add_argument("--replication-factor", type=int, default=None, metavar="N",
                        help="replicas per partition (default: default.replication.factor)")
    create.add_argument("--replica-assignment", default=None, metavar="B:B,B:B",
                        help="explicit placement: partitions separated by ',', their "
                             "brokers by ':' (the first is the preferred leader)")
    create.add_argument("--config", action="append", metavar="KEY=VALUE",
                        help="a topic config; repeatable")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed if the topic already exists")
    _common(create, output=False)
    create.set_defaults(func=run_create)

    lst = sub.add_parser("list", help="list topics")
    lst.add_argument("--exclude-internal", action="store_true", help="leave internal topics out")
    _common(lst, output=True)
    lst.set_defaults(func=run_list)

    desc = sub.add_parser("describe", help="leaders, replicas and ISRs of topics")
    desc.add_argument("--topic", default=None, metavar="NAME[,NAME...]",
                      help="topics to describe (default: all)")
    health = desc.add_mutually_exclusive_group()
    health.add_argument("--under-replicated-partitions", action="store_true",
                        help="only partitions whose ISR is smaller than the replication factor")
    health.add_argument("--under-min-isr-partitions", action="store_true",
                        help="only partitions whose ISR is below min.insync.replicas")
    health.add_argument("--at-min-isr-partitions", action="store_true",
                        help="only partitions whose ISR is exactly min.insync.replicas")
    health.add_argument("--unavailable-partitions", action="store_true",
                        help="only partitions without a live leader")
    desc.add_argument("--exclude-internal", action="store_true",
                      help="leave internal topics out")
    _common(desc, output=True)
    desc.set_defaults(func=run_describe)

    alter = sub.add_parser("alter", help="add partitions and/or change topic configs")
    alter.add_argument("--topic", required=True, metavar="NAME")
    alter.add_argument("--partitions", type=int, default=None, metavar="N",
                       help="the new (larger) partition count")
    alter.add_argument("--config", action="append", metavar="KEY=VALUE",
                       help="set a topic config; repeatable")
    alter.add_argument("--delete-config", action="append", metavar="KEY",
                       help="remove a topic config (back to the default); repeatable")
    _common(alter, output=False)
    alter.set_defaults(func=run_alter)

    delete = sub.add_parser("delete", help="delete topics")
    delete.add_argument("--topic", required=True, metavar="NAME[,NAME...]")
    delete.add_argument("--if-exists", action="store_true",
                        help="succeed for topics that do not exist")
    _common(delete, output=False)
    delete.set_defaults(func=run_delete)

    cluster = subparsers.add_parser(
        "cluster", help="describe the cluster (id, active controller, brokers); decommission a broker",
        description="Look at the cluster through the AdminService.")
    csub = cluster.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    csub.required = True
    cdesc = csub.add_parser("describe", help="cluster id, active controller and brokers")
    cdesc.add_argument("--include-fenced", action="store_true",
                       help="also list fenced brokers")
    _common(cdesc, output=True)
    cdesc.set_defaults(func=run_cluster_describe)
    from kraftlog.tools import decommission_commands  # it imports this module
    decommission_commands.register(csub)
