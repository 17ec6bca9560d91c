"""``kraftlog quorum describe|history``: look at the controller quorum, live or from its log.

``kraftlog quorum describe --bootstrap-controller HOST:PORT[,HOST:PORT...] --status``
prints what ``kafka-metadata-quorum.sh describe --status`` prints (ClusterId,
LeaderId, LeaderEpoch, HighWatermark, MaxFollowerLag, MaxFollowerLagTimeMs,
CurrentVoters, CurrentObservers); ``--replication`` prints its table (NodeId,
LogEndOffset, Lag, LastFetchTimestamp, LastCaughtUpTimestamp, Status). Only the
raft leader can describe the quorum, so a controller that is not the leader is
asked for the leader's endpoint (ControllerService.DescribeCluster's hint) and the
question follows it; while no leader is known the tool retries until
``--timeout-ms``. ``--output json`` prints the same facts as one JSON object, under
Kafka's names with a lower-case first letter (``leaderId``, ``logEndOffset``: the
lowerCamelCase of every ``--output json``, :mod:`kraftlog.cli_conventions`).
``--bootstrap-controller`` defaults to ``$KRAFTLOG_BOOTSTRAP_CONTROLLER``.

``--status`` also prints ``KRaftVersion`` (0: static voters, 1: voters in the log, KIP-853)
and ``--replication`` a ``DirectoryId`` column, as Kafka 3.9's tool does.

``kraftlog quorum add-controller --config controller.properties`` and
``kraftlog quorum remove-controller --controller-id N --controller-directory-id ID``
(both with ``--bootstrap-controller``) are kafka-metadata-quorum.sh's: AddRaftVoter takes
the new controller's node id, the ``directory.id`` of its formatted metadata log dir and
its advertised controller endpoint from its own config, and must reach a leader that sees
it caught up (it has to be running and fetching); both answer once the new voter set has
committed, and a refusal prints Kafka's error name (DUPLICATE_VOTER, VOTER_NOT_FOUND,
UNSUPPORTED_VERSION for static voters, REQUEST_TIMED_OUT, ...). Sent to any controller,
they follow the leader hint.

``kraftlog quorum history --metadata-dir DIR`` reads a node's metadata log offline
(read-only; the node may be running or stopped) and prints the epochs and leaders it
records (:mod:`.quorum_history`).

Every failure is a :class:`kraftlog.errors.KraftlogError`, printed by
:mod:`kraftlog.tools.cli` as one line with exit code 1. Edge module: gRPC and file reads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from kraftlog import cli_conventions as conventions
from kraftlog import config as kconfig
from kraftlog import errors, rpc
from kraftlog import ids as topic_partition
from kraftlog import ids as uuid
from kraftlog.admin import quorum_history
from kraftlog.raft import convert, transport
from kraftlog.raft import snapshot as raft_snapshot
from kraftlog.storage import meta_properties
from kraftlog.v1 import common_pb2, controller_pb2, controller_pb2_grpc, raft_pb2, raft_pb2_grpc

METADATA_PARTITION_DIR = topic_partition.METADATA_PARTITION_DIR
DEFAULT_TIMEOUT_MS = 5000
RETRY_BACKOFF_S = 0.1
_SEGMENT_NAME = re.compile(r"^\d{20}\.log$")
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[^:\s\[\]]+):(?P<port>\d{1,5})$")


class QuorumUnavailableError(errors.KraftlogError):
    """No controller answered, or none knows a leader within the timeout."""


# -- describe: the facts --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class QuorumDescription:
    """The leader's DescribeQuorum answer and the cluster id, as the tool prints them."""

    cluster_id: str
    """The cluster id, "" when the active controller could not be asked for it."""
    answer: raft_pb2.DescribeQuorumResponse
    leader_endpoint: str


def parse_bootstrap(value: str, source: str = "--bootstrap-controller") -> list[str]:
    """``host:port[,host:port...]`` from ``source`` (a flag or variable, for the error);
    raises ConfigError naming the bad entry."""
    targets = [entry.strip() for entry in value.split(",") if entry.strip()]
    if not targets:
        raise errors.ConfigError(f"{source} is empty; give HOST:PORT[,HOST:PORT]")
    for target in targets:
        match = _HOST_PORT.match(target)
        if match is None or not 0 < int(match.group("port")) < 65536:
            raise errors.ConfigError(f"{source} entry {target!r} is not "
                                     "HOST:PORT (port 1-65535)")
    return targets


def bootstrap_targets(flag: str | None) -> list[str]:
    """``--bootstrap-controller``, else ``$KRAFTLOG_BOOTSTRAP_CONTROLLER``; one is needed."""
    if flag is not None:
        return parse_bootstrap(flag)
    env = conventions.env_default(conventions.BOOTSTRAP_CONTROLLER_ENV)
    if env is None:
        raise errors.ConfigError(f"give --bootstrap-controller HOST:PORT[,...] or set "
                                 f"${conventions.BOOTSTRAP_CONTROLLER_ENV}")
    return parse_bootstrap(env, f"${conventions.BOOTSTRAP_CONTROLLER_ENV}")


def _endpoint_text(endpoint: common_pb2.Endpoint) -> str:
    host = endpoint.host
    return f"[{host}]:{endpoint.port}" if ":" in host else f"{host}:{endpoint.port}"


async def _describe_cluster(target: str, timeout_s: float,
                            ) -> controller_pb2.DescribeClusterResponse | None:
    """``target``'s ControllerService answer: the cluster id on the active controller, the
    active controller's id and endpoint (a NOT_CONTROLLER hint) elsewhere."""
    async with rpc.aio_channel(target) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        try:
            answer: controller_pb2.DescribeClusterResponse = await stub.DescribeCluster(
                controller_pb2.DescribeClusterRequest(), timeout=timeout_s)
        except grpc.aio.AioRpcError:
            return None
    return answer


async def describe(targets: Sequence[str], *, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                   ) -> QuorumDescription:
    """Ask ``targets`` in turn, follow the leader hint, retry while leaderless.

    Fails at once when no target is reachable at all; otherwise keeps trying until
    ``timeout_ms`` and then names what it saw."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    leader_target: str | None = None
    unreachable: dict[str, str] = {}
    leaderless: set[str] = set()
    first_round = True
    while True:
        candidates = ([leader_target] if leader_target else []) + [
            t for t in targets if t != leader_target]
        found_leader = False
        for target in candidates:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                answer = await transport.describe_quorum(target, timeout_s=min(remaining, 2.0))
            except grpc.aio.AioRpcError as exc:
                unreachable[target] = exc.code().name
                continue
            unreachable.pop(target, None)
            if answer.error.code == common_pb2.NONE:
                cluster_id = ""
                while not cluster_id and loop.time() < deadline:
                    cluster = await _describe_cluster(target, max(deadline - loop.time(), 0.05))
                    if cluster is not None and cluster.error.code == common_pb2.NONE:
                        cluster_id = cluster.cluster_id
                    else:  # the controller activates just after raft elects it
                        await asyncio.sleep(RETRY_BACKOFF_S)
                return QuorumDescription(cluster_id=cluster_id, answer=answer,
                                         leader_endpoint=target)
            if answer.leader_id < 0:
                leaderless.add(target)
                continue
            cluster = await _describe_cluster(target, max(deadline - loop.time(), 0.05))
            hint = cluster.active_controller if cluster is not None else None
            if hint is not None and hint.leader_id == answer.leader_id \
                    and hint.HasField("endpoint") and _endpoint_text(hint.endpoint) != target:
                # Ask the leader next, at once unless the hints go round in circles.
                found_leader = _endpoint_text(hint.endpoint) != leader_target
                leader_target = _endpoint_text(hint.endpoint)
                break
        if first_round and len(unreachable) == len(targets) and leader_target is None:
            raise QuorumUnavailableError(
                "cannot reach any controller of --bootstrap-controller: " + ", ".join(
                    f"{t} ({code})" for t, code in sorted(unreachable.items())))
        first_round = False
        if loop.time() >= deadline:
            if leaderless:
                raise QuorumUnavailableError(
                    f"no quorum leader known after {timeout_ms} ms (asked "
                    f"{', '.join(sorted(leaderless | set(unreachable)))})")
            raise QuorumUnavailableError(
                f"could not reach the quorum leader within {timeout_ms} ms" + (
                    f" (last tried {leader_target})" if leader_target else "") + (
                    "; unreachable: " + ", ".join(f"{t} ({c})" for t, c in
                                                  sorted(unreachable.items()))
                    if unreachable else ""))
        if not found_leader:
            await asyncio.sleep(RETRY_BACKOFF_S)


# -- describe: the rendering (pure) ---------------------------------------------------------------

Replica = raft_pb2.DescribeQuorumResponse.ReplicaState


def _leader_state(answer: raft_pb2.DescribeQuorumResponse) -> Replica | None:
    return next((v for v in answer.current_voters if v.replica_id == answer.leader_id), None)


def _leader_end_offset(answer: raft_pb2.DescribeQuorumResponse) -> int:
    """The leader's log end: no voter holds more, so the largest reported end offset (also
    right when the leader's own entry lags behind its followers' fetch offsets)."""
    return max([answer.high_watermark, *(v.log_end_offset for v in answer.current_voters)])


def status_fields(description: QuorumDescription) -> dict[str, Any]:
    """kafka-metadata-quorum's ``--status`` facts, in its order and with its names."""
    answer = description.answer
    leader = _leader_state(answer)
    voters = sorted(v.replica_id for v in answer.current_voters)
    observers = sorted(o.replica_id for o in answer.observers)
    max_lag = 0
    max_lag_time_ms = 0
    followers = [v for v in answer.current_voters if v.replica_id != answer.leader_id]
    if leader is not None and followers:
        # As MetadataQuorumCommand: the voter furthest behind the leader's log end decides
        # both numbers; its lag time is how long before the leader's latest catch-up time
        # it last caught up.
        laggard = min(followers, key=lambda v: v.log_end_offset)
        max_lag = max(0, _leader_end_offset(answer) - laggard.log_end_offset)
        latest_ms = max(v.last_caught_up_timestamp for v in answer.current_voters)
        if max_lag == 0:
            max_lag_time_ms = 0
        elif laggard.last_caught_up_timestamp >= 0:
            max_lag_time_ms = max(0, latest_ms - laggard.last_caught_up_timestamp)
        else:
            max_lag_time_ms = -1
    return {
        "ClusterId": description.cluster_id or "unknown",
        "LeaderId": answer.leader_id,
        "LeaderEpoch": answer.leader_epoch,
        "HighWatermark": answer.high_watermark,
        "MaxFollowerLag": max_lag,
        "MaxFollowerLagTimeMs": max_lag_time_ms,
        "CurrentVoters": voters,
        "CurrentObservers": observers,
        "KRaftVersion": answer.kraft_version,
    }


def json_names(fields: dict[str, Any]) -> dict[str, Any]:
    """Kafka's names (``LeaderId``) as JSON keys: lower-case first letter (``leaderId``)."""
    return {_JSON_NAMES.get(key, key[:1].lower() + key[1:]): value
            for key, value in fields.items()}


_JSON_NAMES = {"KRaftVersion": "kraftVersion"}


def status_json(description: QuorumDescription) -> dict[str, Any]:
    return json_names(status_fields(description))


def replication_json(description: QuorumDescription) -> dict[str, Any]:
    return {"replicas": [json_names(row) for row in replication_rows(description)]}


def format_status(description: QuorumDescription) -> list[str]:
    lines = []
    for key, value in status_fields(description).items():
        shown = ("[" + ",".join(str(v) for v in value) + "]") if isinstance(value, list) \
            else str(value)
        lines.append(f"{key + ':':<24}{shown}")
    return lines


def replication_rows(description: QuorumDescription) -> list[dict[str, Any]]:
    """One row per replica: the leader, the other voters by id, then observers by id."""
    answer = description.answer
    leader = _leader_state(answer)
    leader_end = _leader_end_offset(answer)

    def row(replica: Replica, status: str) -> dict[str, Any]:
        directory = uuid.Uuid.from_bits(replica.replica_directory_id.most_significant_bits,
                                        replica.replica_directory_id.least_significant_bits)
        return {"NodeId": replica.replica_id, "DirectoryId": str(directory),
                "LogEndOffset": replica.log_end_offset,
                "Lag": 0 if status == "Leader" else max(0, leader_end - replica.log_end_offset),
                "LastFetchTimestamp": replica.last_fetch_timestamp,
                "LastCaughtUpTimestamp": replica.last_caught_up_timestamp, "Status": status}

    rows = [row(leader, "Leader")] if leader is not None else []
    rows += [row(v, "Follower") for v in sorted(answer.current_voters, key=lambda v: v.replica_id)
             if v.replica_id != answer.leader_id]
    rows += [row(o, "Observer") for o in sorted(answer.observers, key=lambda o: o.replica_id)]
    return rows


REPLICATION_COLUMNS = ("NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                       "LastCaughtUpTimestamp", "Status")


def _cell(column: str, value: Any, now_ms: int | None) -> str:
    if now_ms is not None and column.endswith("Timestamp"):
        # kafka-metadata-quorum --human-readable: how long ago, on the leader's wall clock.
        return "-" if value < 0 else f"{max(0, now_ms - value)} ms ago"
    return str(value)


def format_replication(description: QuorumDescription, *, now_ms: int | None = None,
                       ) -> list[str]:
    """The table; with ``now_ms`` (``--human-readable``) timestamps become "N ms ago"."""
    table = [list(REPLICATION_COLUMNS)] + [[_cell(c, r[c], now_ms) for c in REPLICATION_COLUMNS]
                                           for r in replication_rows(description)]
    widths = [max(len(line[i]) for line in table) for i in range(len(REPLICATION_COLUMNS))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
            for line in table]


# -- history: the files ---------------------------------------------------------------------------

def partition_dir(directory: pathlib.Path) -> pathlib.Path:
    """``DIR/__cluster_metadata-0``, or DIR itself when it is that partition directory."""
    if (directory / METADATA_PARTITION_DIR).is_dir():
        return directory / METADATA_PARTITION_DIR
    if directory.name == METADATA_PARTITION_DIR and directory.is_dir():
        return directory
    if not directory.exists():
        raise errors.ConfigError(f"--metadata-dir {directory} does not exist")
    raise errors.ConfigError(f"--metadata-dir {directory} holds no {METADATA_PARTITION_DIR} "
                             "(give a controller's metadata.log.dir)")


def read_history(directory: pathlib.Path) -> quorum_history.QuorumHistory:
    """Read the segments and snapshots (never writes: safe on a running node's dir)."""
    part = partition_dir(directory)
    segments: list[tuple[str, bytes]] = []
    snapshots: list[tuple[Any, bytes]] = []
    for path in sorted(part.iterdir()):
        if _SEGMENT_NAME.match(path.name):
            segments.append((path.name, path.read_bytes()))
        elif (snapshot_id := raft_snapshot.parse_snapshot_file_name(path.name)) is not None:
            snapshots.append((snapshot_id, path.read_bytes()))
    return quorum_history.build_history(segments, snapshots)


# -- commands -------------------------------------------------------------------------------------

def _wants_json(args: argparse.Namespace) -> bool:
    return bool(args.json) or args.output == "json"


def run_describe(args: argparse.Namespace) -> int:
    if args.status == args.replication:
        raise errors.ConfigError("quorum describe needs exactly one of --status and "
                                 "--replication")
    if args.timeout_ms <= 0:
        raise errors.ConfigError(f"--timeout-ms must be positive, got {args.timeout_ms}")
    targets = bootstrap_targets(args.bootstrap_controller)
    description = asyncio.run(describe(targets, timeout_ms=args.timeout_ms))
    if _wants_json(args):
        payload = (status_json(description) if args.status
                   else replication_json(description))
        print(json.dumps(payload))
    else:
        now_ms = time.time_ns() // 1_000_000 if args.human_readable else None
        lines = (format_status(description) if args.status
                 else format_replication(description, now_ms=now_ms))
        print("\n".join(lines))
    return 0


# -- add-controller / remove-controller (KIP-853) -------------------------------------------------

class VoterChangeRefusedError(errors.KraftlogError):
    """The leader refused a voter change; the message names Kafka's error code."""


_VOTER_CHANGE_RETRIABLE = {common_pb2.NOT_LEADER_OR_FOLLOWER, common_pb2.REQUEST_TIMED_OUT}
_ALREADY_DONE = {common_pb2.DUPLICATE_VOTER, common_pb2.VOTER_NOT_FOUND}


async def change_voters(targets: Sequence[str], request: convert.ProtoVoterChangeRequest, *,
                        timeout_ms: int) -> bool:
    """Send ``request`` to the quorum leader (following NOT_LEADER_OR_FOLLOWER hints across
    ``targets``, retrying REQUEST_TIMED_OUT: a change in progress, a voter still catching
    up) until ``timeout_ms``. True: done; False: a retry found it already done
    (DUPLICATE_VOTER / VOTER_NOT_FOUND after an attempt whose answer was lost or that timed
    out; the caller checks the voter set)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    queue = list(targets)
    last = "no controller answered"
    retried = False
    while True:
        for target in list(queue):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            async with grpc.aio.insecure_channel(target) as channel:
                stub = raft_pb2_grpc.RaftServiceStub(channel)
                method = (stub.AddRaftVoter if isinstance(request, raft_pb2.AddRaftVoterRequest)
                          else stub.RemoveRaftVoter)
                try:
                    answer = await method(request, timeout=remaining)
                except grpc.aio.AioRpcError as exc:
                    last = f"{target}: {exc.code().name}"
                    # The leader may have applied it and the answer been lost.
                    retried = retried or exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED
                    continue
            code = answer.error.code
            if code == common_pb2.NONE:
                return True
            name = common_pb2.ErrorCode.Name(code)
            if retried and code in _ALREADY_DONE:
                return False
            # A timed-out change may still commit; NOT_LEADER_OR_FOLLOWER applied nothing.
            retried = retried or code == common_pb2.REQUEST_TIMED_OUT
            if code not in _VOTER_CHANGE_RETRIABLE:
                raise VoterChangeRefusedError(
                    f"{name}: {answer.error.message or 'refused'} (from {target})")
            last = f"{target}: {name}"
            hint = answer.current_leader
            if hint.HasField("endpoint") and hint.endpoint.host:
                leader = _endpoint_text(hint.endpoint)
                if leader != target:
                    queue = [leader, *(t for t in queue if t != leader)]
                    break
        if loop.time() >= deadline:
            raise QuorumUnavailableError(f"no quorum leader accepted the change within "
                                         f"{timeout_ms} ms (last: {last})")
        await asyncio.sleep(RETRY_BACKOFF_S)


def controller_identity(config_path: str, overrides: Sequence[str]) -> tuple[int, uuid.Uuid, str]:
    """(node.id, directory.id, advertised controller endpoint) of a controller, read from
    its config and its formatted metadata log dir, as kafka-metadata-quorum reads them."""
    # Imported here: the controller's config definition pulls in the whole process.
    from kraftlog.server import controller_server as controller_commands
    from kraftlog.server import shared_server

    cfg = kconfig.load(controller_commands.CONTROLLER_CONFIG, config_path, list(overrides))
    node_id = cfg.get_int("node.id")
    directory = shared_server.metadata_dir(cfg)
    props = meta_properties.read(directory)
    if props is None or props.directory_id is None:
        raise errors.ConfigError(f"{directory} is not formatted (no meta.properties with a "
                                 "directory.id); run 'kraftlog storage format "
                                 "--no-initial-controllers' for this controller first")
    endpoint = controller_commands.advertised_endpoint(
        cfg, controller_commands.controller_listener(cfg))
    if not endpoint:
        raise errors.ConfigError("the controller listens on a wildcard address: set "
                                 "advertised.listeners=CONTROLLER://host:port")
    return node_id, props.directory_id, endpoint


def run_add_controller(args: argparse.Namespace) -> int:
    if args.timeout_ms <= 0:
        raise errors.ConfigError(f"--timeout-ms must be positive, got {args.timeout_ms}")
    targets = bootstrap_targets(args.bootstrap_controller)
    node_id, directory_id, endpoint = controller_identity(args.config, args.override or ())
    request = raft_pb2.AddRaftVoterRequest(
        voter_id=node_id, voter_directory_id=convert.uuid_to_proto(directory_id),
        listeners=convert.endpoint_to_proto(endpoint), timeout_ms=args.timeout_ms,
        ack_when_committed=True)
    cluster = _cluster_id_of(args.config, args.override or ())
    request.cluster_id = cluster
    if not asyncio.run(change_voters(targets, request, timeout_ms=args.timeout_ms)):
        _check_voter(targets, node_id, directory_id, present=True, timeout_ms=args.timeout_ms)
    print(f"Added controller {node_id} with directory id {directory_id} and endpoint "
          f"CONTROLLER://{endpoint}")
    return 0


def _check_voter(targets: Sequence[str], node_id: int, directory_id: uuid.Uuid, *,
                 present: bool, timeout_ms: int) -> None:
    """After a retry was answered "already done": make sure that is so for this very voter
    (id and directory), not another controller with the same id."""
    answer = asyncio.run(describe(targets, timeout_ms=timeout_ms)).answer
    found = any(v.replica_id == node_id
                and convert.uuid_from_proto(v.replica_directory_id) == directory_id
                for v in answer.current_voters)
    if found != present:
        raise VoterChangeRefusedError(
            f"{'DUPLICATE_VOTER' if present else 'VOTER_NOT_FOUND'}: node {node_id} "
            f"{'votes with another directory' if present else 'is not a voter'}")


def _cluster_id_of(config_path: str, overrides: Sequence[str]) -> str:
    from kraftlog.server import controller_server as controller_commands
    from kraftlog.server import shared_server

    cfg = kconfig.load(controller_commands.CONTROLLER_CONFIG, config_path, list(overrides))
    props = meta_properties.read(shared_server.metadata_dir(cfg))
    return "" if props is None else props.cluster_id


def run_remove_controller(args: argparse.Namespace) -> int:
    if args.timeout_ms <= 0:
        raise errors.ConfigError(f"--timeout-ms must be positive, got {args.timeout_ms}")
    if args.controller_id < 0:
        raise errors.ConfigError(f"--controller-id {args.controller_id} is negative")
    try:
        directory_id = uuid.parse_uuid(args.controller_directory_id)
    except ValueError as exc:
        raise errors.ConfigError(f"--controller-directory-id: {exc}") from None
    targets = bootstrap_targets(args.bootstrap_controller)
    description = asyncio.run(describe(targets, timeout_ms=args.timeout_ms))
    request = raft_pb2.RemoveRaftVoterRequest(
        cluster_id=description.cluster_id, voter_id=args.controller_id,
        voter_directory_id=convert.uuid_to_proto(directory_id))
    if not asyncio.run(change_voters([description.leader_endpoint, *targets], request,
                                     timeout_ms=args.timeout_ms)):
        _check_voter(targets, args.controller_id, directory_id, present=False,
                     timeout_ms=args.timeout_ms)
    print(f"Removed controller {args.controller_id} with directory id {directory_id}")
    return 0


def run_history(args: argparse.Namespace) -> int:
    history = read_history(pathlib.Path(args.metadata_dir))
    if _wants_json(args):
        print(json.dumps(quorum_history.to_json(history)))
    else:
        print("\n".join(quorum_history.format_text(history)))
    return 0


def _output_options(parser: argparse.ArgumentParser) -> None:
    conventions.add_output_option(parser)
    parser.add_argument("--json", action="store_true", help="same as --output json")


def register(subparsers: Any) -> None:
    """Add ``quorum describe|history|add-controller|remove-controller`` to the ``kraftlog``
    command (see :mod:`kraftlog.tools.cli`)."""
    quorum = subparsers.add_parser(
        "quorum", help="describe the controller quorum, or its leader history",
        description="Look at the KRaft controller quorum (like kafka-metadata-quorum.sh).")
    sub = quorum.add_subparsers(dest="quorum_command", metavar="SUBCOMMAND")
    sub.required = True
    desc = sub.add_parser(
        "describe", help="the quorum leader's view: --status or --replication",
        description="Ask a controller (following the leader hint) for the quorum's state.")
    desc.add_argument("--bootstrap-controller", default=None, metavar="HOST:PORT[,...]",
                      help="one or more controller listener addresses (default: "
                           f"${conventions.BOOTSTRAP_CONTROLLER_ENV})")
    desc.add_argument("--status", action="store_true",
                      help="leader, epoch, high watermark, lag, voters and observers")
    desc.add_argument("--replication", action="store_true",
                      help="per replica: log end offset, lag, last fetch, last caught up")
    desc.add_argument("--human-readable", action="store_true",
                      help="with --replication: timestamps as 'N ms ago'")
    desc.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                      help=f"give up after this many ms without a leader's answer "
                           f"(default {DEFAULT_TIMEOUT_MS})")
    _output_options(desc)
    desc.set_defaults(func=run_describe)
    hist = sub.add_parser(
        "history", help="epochs and leaders recorded in a metadata log (offline)",
        description="Read a controller's metadata log (LeaderChange records, snapshot "
                    "headers) and print each epoch: leader, voters, granting voters, when, "
                    "and how long the quorum was leaderless before it. Read-only.")
    hist.add_argument("--metadata-dir", required=True, metavar="DIR",
                      help="the controller's metadata.log.dir (or its __cluster_metadata-0)")
    _output_options(hist)
    hist.set_defaults(func=run_history)
    add = sub.add_parser(
        "add-controller", help="add a running controller to the voters (KIP-853)",
        description="Add the controller that --config describes (node.id, the directory.id "
                    "of its formatted metadata dir, its advertised controller endpoint) to a "
                    "dynamic quorum. It must be running and caught up; the command returns "
                    "when the new voter set has committed.")
    add.add_argument("--bootstrap-controller", default=None, metavar="HOST:PORT[,...]",
                     help="controllers of the quorum (default: "
                          f"${conventions.BOOTSTRAP_CONTROLLER_ENV})")
    add.add_argument("--config", "--command-config", required=True, metavar="FILE",
                     help="the new controller's server.properties")
    add.add_argument("--override", action="append", metavar="KEY=VALUE",
                     help="a property overriding the file; repeatable")
    add.add_argument("--timeout-ms", type=int, default=30_000, metavar="MS",
                     help="give up after this long (default 30000)")
    add.set_defaults(func=run_add_controller)
    remove = sub.add_parser(
        "remove-controller", help="remove a controller from the voters (KIP-853)",
        description="Remove the voter (--controller-id, --controller-directory-id) from a "
                    "dynamic quorum; returns when the new voter set has committed. A leader "
                    "that removes itself resigns then.")
    remove.add_argument("--bootstrap-controller", default=None, metavar="HOST:PORT[,...]",
                        help="controllers of the quorum (default: "
                             f"${conventions.BOOTSTRAP_CONTROLLER_ENV})")
    remove.add_argument("--controller-id", type=int, required=True, metavar="ID")
    remove.add_argument("--controller-directory-id", required=True, metavar="DIRECTORY_ID",
                        help="the voter's directory id (quorum describe --replication shows it)")
    remove.add_argument("--timeout-ms", type=int, default=30_000, metavar="MS",
                        help="give up after this long (default 30000)")
    remove.set_defaults(func=run_remove_controller)
