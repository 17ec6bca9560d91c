"""``kraftlog dev up|down|status|kill|restart|logs``: the local cluster on loopback.

``up`` starts 3 controllers, 3 brokers and the admin service as local processes,
each with its own data dir under one directory (``--dir``, default
``$KRAFTLOG_DEV_DIR`` or ``./.kraftlog/dev``), formats storage on the first start,
waits until the quorum has a leader and every broker is unfenced, and prints the
endpoints and what to try next. The processes keep running after ``up`` returns;
``down`` stops them (brokers first, with a controlled shutdown) and keeps the data
unless ``--delete-data``; ``up`` again resumes the same cluster. ``kill NODE`` sends
SIGKILL for fault drills (``kill active-controller`` picks the raft leader).
``up`` ends with the ``export`` lines of the three endpoint variables
(:mod:`kraftlog.cli_conventions`), after which no command needs an address flag.
``status`` exits 3 when a node is stopped; ``--output json`` keys are lowerCamelCase.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import sys
import time
from typing import Any

from kraftlog import cli_conventions as conventions
from kraftlog import errors
from kraftlog.dev import layout as lay
from kraftlog.dev import process as proc

DEFAULT_DIR_ENV = "KRAFTLOG_DEV_DIR"
ACTIVE_CONTROLLER = "active-controller"
EXIT_NODE_STOPPED = 3


def _directory(args: argparse.Namespace) -> pathlib.Path:
    chosen = args.dir or os.environ.get(DEFAULT_DIR_ENV) or ".kraftlog/dev"
    return pathlib.Path(chosen).expanduser().resolve()


def _say(line: str) -> None:
    print(f"==> {line}", flush=True)


def run_up(args: argparse.Namespace) -> int:
    settings = (None if args.broker_config is None
                else tuple(lay.parse_setting(text) for text in args.broker_config))
    before = lay.load(_directory(args))
    layout = proc.create_or_load(_directory(args), controllers=args.controllers,
                                 brokers=args.brokers, base_port=args.base_port,
                                 with_admin=not args.no_admin, broker_config=settings,
                                 security=args.security)
    proc.use_client_tls(layout)
    _say(f"dev cluster {layout.cluster_id} in {layout.directory}"
         + (" (mTLS: every listener SSL, client certificates required)"
            if layout.security == "mtls" else ""))
    if before is not None and before.broker_config != layout.broker_config:
        running = [n.name for n in layout.of_role(lay.Role.BROKER)
                   if proc.running_pid(layout, n) is not None]
        _say("broker settings now: " + (", ".join(f"{k}={v}" for k, v in layout.broker_config)
                                        or "dev up's defaults")
             + (f"; {', '.join(running)} keep the old ones until 'kraftlog dev restart NODE'"
                if running else ""))
    for node in layout.nodes:
        was = proc.running_pid(layout, node)
        formatted = proc.ensure_formatted(layout, node)
        pid = proc.start(layout, node)
        state = "already running" if was is not None else "started"
        _say(f"{node.name} {state} (pid {pid}, {layout.endpoint(node)})"
             + (", storage formatted" if formatted else ""))
    quorum = proc.wait_ready(layout, timeout_s=args.timeout_s, on_ready=_say)
    _print_next_steps(layout, quorum)
    return 0


def export_lines(layout: lay.Layout) -> list[str]:
    """``export`` lines for the endpoint variables every command reads as its default."""
    controllers = ",".join(layout.endpoint(n) for n in layout.of_role(lay.Role.CONTROLLER))
    lines = [f"export {conventions.BOOTSTRAP_SERVER_ENV}={layout.bootstrap_servers}",
             f"export {conventions.BOOTSTRAP_CONTROLLER_ENV}={controllers}"]
    if layout.with_admin:
        admin = ",".join(layout.endpoint(n) for n in layout.of_role(lay.Role.ADMIN))
        lines.append(f"export {conventions.ADMIN_ENV}={admin}")
    if layout.security == "mtls":
        lines.append(f"export {conventions.COMMAND_CONFIG_ENV}={layout.client_properties_path}")
    return lines


def _print_next_steps(layout: lay.Layout, quorum: proc.QuorumView) -> None:
    brokers = layout.of_role(lay.Role.BROKER)
    print(f"""
The cluster is up. Active controller: {quorum.leader_id} (epoch {quorum.epoch}).
  controller.quorum.voters = {layout.voters}
  bootstrap.servers        = {layout.bootstrap_servers}   (kraftlog tools, gRPC)""")
    if layout.serves_kafka:
        print(f"  Kafka clients (kcat, librdkafka, Java): "
              f"bootstrap.servers={layout.kafka_bootstrap_servers}")
    else:
        print("  Kafka listener: off with --security (it speaks plaintext only so far)")
    if layout.with_admin:
        print(f"  admin service            = "
              f"{layout.endpoint(layout.of_role(lay.Role.ADMIN)[0])}")
    print("\nEvery kraftlog command's default endpoints (a flag overrides them):")
    for line in export_lines(layout):
        print(f"  {line}")
    if layout.security == "mtls":
        print(f"""
mTLS is on: a call without a certificate signed by {layout.truststore_path} is refused.
  client settings  {layout.client_properties_path} (--command-config FILE, or the
                   export above; the client library and PySpark take the same keys)
  certificates     {layout.tls_dir}/ (CN broker-N / controller-N per node, CN admin for you)""")
    if not layout.with_admin:
        print("\nNo admin service (--no-admin): topics, reassign and leader-election need one.")
        return
    factor = min(2, len(brokers))
    targets = ",".join(str(b.node_id) for b in brokers[-factor:])
    print(f"""
Then try:
  kraftlog topics create --topic demo --partitions 6 --replication-factor {factor}
  seq 1 1000 | kraftlog produce --topic demo --acks all
  kraftlog consume --topic demo --from-beginning --max-messages 10
  kraftlog reassign generate --topics demo --broker-list {targets} --output json \\
      | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["proposed"]))' > plan.json
  kraftlog reassign execute --reassignment-json-file plan.json --throttle 1000000
  kraftlog reassign verify --reassignment-json-file plan.json --watch
  kraftlog quorum describe --status
  kraftlog dev kill {ACTIVE_CONTROLLER}     # then 'quorum describe' again: a new leader
  kraftlog dev status | kraftlog dev logs NODE | kraftlog dev down
""")


def run_down(args: argparse.Namespace) -> int:
    directory = _directory(args)
    layout = lay.load(directory)
    if layout is None:
        if args.delete_data and directory.exists():
            raise errors.ConfigError(f"{directory} holds no dev cluster (no "
                                     f"{lay.LAYOUT_FILE}); not deleting it")
        _say(f"no dev cluster in {directory}")
        return 0
    # Brokers first, while the controllers can still answer their controlled shutdown.
    order = (layout.of_role(lay.Role.ADMIN) + layout.of_role(lay.Role.BROKER)
             + layout.of_role(lay.Role.CONTROLLER))
    stopped: list[lay.Node] = []
    killed: list[lay.Node] = []
    for group in (order[:-layout.controllers], order[-layout.controllers:]):
        done, forced = proc.stop(layout, group, timeout_s=args.timeout_s)
        stopped += done
        killed += forced
    for node in stopped:
        _say(f"{node.name} stopped")
    for node in killed:
        _say(f"{node.name} did not stop within {args.timeout_s:.0f} s: killed")
    if not stopped and not killed:
        _say("nothing was running")
    if args.delete_data:
        shutil.rmtree(layout.directory)
        _say(f"deleted {layout.directory}")
    else:
        _say(f"data kept in {layout.directory} ('kraftlog dev up' resumes)")
    return 0


def _resolve(layout: lay.Layout, name: str) -> lay.Node:
    if name == ACTIVE_CONTROLLER:
        quorum = proc.describe_quorum(layout)
        if quorum is None:
            raise errors.KraftlogError("no controller leads the quorum right now")
        return layout.find(str(quorum.leader_id))
    return layout.find(name)


def run_kill(args: argparse.Namespace) -> int:
    layout = proc.existing(_directory(args))
    node = _resolve(layout, args.node)
    pid = proc.signal_node(layout, node, signal.SIGKILL)
    if pid is None:
        raise errors.KraftlogError(f"{node.name} is not running")
    proc.wait_stopped(layout, [node], timeout_s=5.0)
    _say(f"{node.name} killed (SIGKILL, pid {pid}); 'kraftlog dev restart {node.name}' "
         "or 'kraftlog dev up' starts it again")
    return 0


def run_restart(args: argparse.Namespace) -> int:
    layout = proc.existing(_directory(args))
    node = _resolve(layout, args.node)
    if args.kill:
        if proc.signal_node(layout, node, signal.SIGKILL) is not None:
            proc.wait_stopped(layout, [node], timeout_s=5.0)
    else:
        proc.stop(layout, [node], timeout_s=args.timeout_s)
    pid = proc.start(layout, node)
    _say(f"{node.name} started (pid {pid}, {layout.endpoint(node)})")
    deadline = time.monotonic() + args.timeout_s
    while not proc.serving(layout, node):
        if proc.running_pid(layout, node) is None:
            tail = "\n    ".join(proc.log_tail(layout, node, 15))
            raise errors.KraftlogError(f"{node.name} exited; the end of its log:\n    {tail}")
        if time.monotonic() > deadline:
            raise errors.KraftlogError(f"{node.name} does not serve after "
                                       f"{args.timeout_s:.0f} s; see 'kraftlog dev logs "
                                       f"{node.name}'")
        time.sleep(proc.POLL_INTERVAL_S)
    _say(f"{node.name} serving")
    return 0


def _status_rows(layout: lay.Layout) -> list[dict[str, Any]]:
    quorum = proc.describe_quorum(layout)
    rows: list[dict[str, Any]] = []
    for node in layout.nodes:
        pid = proc.running_pid(layout, node)
        detail = ""
        if pid is not None:
            if node.role is lay.Role.CONTROLLER and quorum is None:
                detail = "no quorum leader"
            elif node.role is lay.Role.CONTROLLER and quorum is not None:
                detail = ("active controller" if quorum.leader_id == node.node_id
                          else "follower")
                detail += f", log end {quorum.voter_end_offsets.get(node.node_id, -1)}"
            elif node.role is not lay.Role.CONTROLLER:
                detail = "serving" if proc.serving(layout, node) else "not serving"
        rows.append({"node": node.name, "role": node.role.value, "nodeId": node.node_id,
                     "endpoint": layout.endpoint(node), "pid": pid,
                     "state": "running" if pid is not None else "stopped",
                     "detail": detail})
    return rows


def status_json(layout: lay.Layout, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"clusterId": layout.cluster_id, "directory": str(layout.directory), "nodes": rows}


def run_status(args: argparse.Namespace) -> int:
    layout = proc.existing(_directory(args))
    rows = _status_rows(layout)
    if args.output == "json":
        print(json.dumps(status_json(layout, rows), indent=2))
    else:
        print(f"dev cluster {layout.cluster_id} in {layout.directory}")
        header = ("NODE", "ENDPOINT", "STATE", "PID", "DETAIL")
        table = [header] + [(r["node"], r["endpoint"], r["state"], str(r["pid"] or "-"),
                             r["detail"]) for r in rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        for row in table:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0 if all(r["state"] == "running" for r in rows) else EXIT_NODE_STOPPED


def run_logs(args: argparse.Namespace) -> int:
    layout = proc.existing(_directory(args))
    node = _resolve(layout, args.node)
    path = layout.log_path(node)
    if not path.exists():
        raise errors.KraftlogError(f"{node.name} has no log yet ({path})")
    for line in proc.log_tail(layout, node, args.lines):
        print(line)
    if not args.follow:
        return 0
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        while True:
            chunk = f.read()
            if chunk:
                sys.stdout.write(chunk.decode("utf-8", errors="replace"))
                sys.stdout.flush()
            else:
                time.sleep(0.25)


def _add_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=None, metavar="DIR",
                        help=f"the cluster's directory (default: ${DEFAULT_DIR_ENV} or "
                             "./.kraftlog/dev)")


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be in (0, 3600] seconds, not {text}")
    return value


def _line_count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number of lines, not {text!r}")
    return int(text)


def register(subparsers: Any) -> None:
    """Add ``dev`` to the ``kraftlog`` command (see :mod:`kraftlog.tools.cli`)."""
    dev = subparsers.add_parser(
        "dev", help="run a local cluster (controllers, brokers, admin) on loopback",
        description="The embedded default: a whole kraftlog cluster as local processes.")
    sub = dev.add_subparsers(dest="dev_command", metavar="ACTION")
    sub.required = True

    up = sub.add_parser("up", help="start (or resume) the cluster and wait until it serves")
    _add_dir(up)
    up.add_argument("--controllers", type=int, default=None, choices=lay.CONTROLLER_COUNTS,
                    help="controller quorum size (first start only; default 3)")
    up.add_argument("--brokers", type=int, default=None, metavar="N",
                    help=f"number of brokers, 1..{lay.MAX_BROKERS} (first start only; default 3)")
    up.add_argument("--base-port", type=int, default=None, metavar="PORT",
                    help=f"admin on PORT, controllers on PORT+1.., brokers on PORT+11.. "
                         f"(first start only; default {lay.DEFAULT_BASE_PORT})")
    up.add_argument("--broker-config", action="append", metavar="KEY=VALUE",
                    help="a broker setting (repeatable), e.g. num.replica.fetchers=2; kept "
                    "in cluster.json; on an existing cluster it replaces the stored ones")
    up.add_argument("--security", default=None, choices=lay.SECURITY_MODES,
                    help="mtls: a throwaway CA, one certificate per node and one for you, "
                         "TLS with client certificates on every listener (first start "
                         "only; default none)")
    up.add_argument("--no-admin", action="store_true",
                    help="do not run the admin service (first start only)")
    up.add_argument("--timeout-s", type=_positive_seconds, default=90.0, metavar="S",
                    help="how long to wait for the cluster to serve (default 90)")
    up.set_defaults(func=run_up)

    down = sub.add_parser("down", help="stop every process (brokers first); keeps the data")
    _add_dir(down)
    down.add_argument("--delete-data", action="store_true",
                      help="also delete the cluster's directory")
    down.add_argument("--timeout-s", type=_positive_seconds, default=proc.STOP_TIMEOUT_S,
                      metavar="S", help="SIGKILL what has not stopped after S seconds")
    down.set_defaults(func=run_down)

    status = sub.add_parser("status", help="every node: running?, endpoint, role; exit 3 "
                                           "if any is stopped")
    _add_dir(status)
    conventions.add_output_option(status)
    status.set_defaults(func=run_status)
    conventions.declare_exit_codes(status, {EXIT_NODE_STOPPED: "a node is stopped"})

    kill = sub.add_parser("kill", help="SIGKILL one node (fault drills)")
    _add_dir(kill)
    kill.add_argument("node", metavar="NODE",
                      help=f"controller-1, broker-101, admin, a node id, or {ACTIVE_CONTROLLER}")
    kill.set_defaults(func=run_kill)

    restart = sub.add_parser("restart", help="stop (SIGTERM) and start one node, wait until "
                                             "it serves")
    _add_dir(restart)
    restart.add_argument("node", metavar="NODE",
                         help=f"controller-1, broker-101, admin, a node id, or "
                              f"{ACTIVE_CONTROLLER}")
    restart.add_argument("--kill", action="store_true", help="SIGKILL instead of SIGTERM")
    restart.add_argument("--timeout-s", type=_positive_seconds, default=60.0, metavar="S")
    restart.set_defaults(func=run_restart)

    logs = sub.add_parser("logs", help="print the end of one node's log")
    _add_dir(logs)
    logs.add_argument("node", metavar="NODE", help="controller-1, broker-101, admin, a node id, "
                                                   f"or {ACTIVE_CONTROLLER}")
    logs.add_argument("--lines", "-n", type=_line_count, default=50, metavar="N")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing new lines")
    logs.set_defaults(func=run_logs)
