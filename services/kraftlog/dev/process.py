"""Start, stop and probe the processes of a local dev cluster (the embedded default).

Each node runs as its own ``python -m kraftlog <role> --config FILE`` process in its
own session (so Ctrl-C in the terminal that ran ``dev up`` does not reach it), with
stdout/stderr appended to ``<dir>/<node>.log`` and its pid in ``<dir>/<node>.pid``.
A pid file alone proves nothing after a reboot, so a node counts as running only if
that pid is alive *and* its command line names the node's config file.

Readiness is what an operator would check: the quorum has a leader (DescribeQuorum),
each broker's ``kraftlog.v1.BrokerService`` health is SERVING (registered, caught up,
unfenced), and the admin service's health is SERVING. Every wait is bounded.
Edge module: owns processes, sockets and the clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kraftlog import errors, rpc
from kraftlog import ids as kuuid
from kraftlog.dev import layout as lay
from kraftlog.storage import atomic_file
from kraftlog.v1 import raft_pb2, raft_pb2_grpc

HEALTH_SERVICE = {lay.Role.CONTROLLER: "kraftlog.v1.RaftService",
                  lay.Role.BROKER: "kraftlog.v1.BrokerService",
                  lay.Role.ADMIN: "kraftlog.v1.AdminService"}
PROBE_TIMEOUT_S = 1.0
STOP_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.2
FORMAT_TIMEOUT_S = 60.0


def create_or_load(directory: pathlib.Path, *, controllers: int | None, brokers: int | None,
                   base_port: int | None, with_admin: bool,
                   broker_config: tuple[tuple[str, str], ...] | None = None,
                   security: str | None = None) -> lay.Layout:
    """The cluster kept in ``directory``, created (cluster id, ``cluster.json``) if new.

    ``broker_config`` (None: keep what is stored) replaces an existing cluster's broker
    settings; brokers write their properties when they start, so running ones keep the
    old settings until restarted."""
    stored = lay.load(directory)
    if stored is not None:
        lay.check_same_shape(stored, controllers=controllers, brokers=brokers,
                             base_port=base_port, security=security)
        if broker_config is None or broker_config == stored.broker_config:
            ensure_certificates(stored)
            return stored
        layout = dataclasses.replace(stored, broker_config=broker_config)
    else:
        layout = lay.Layout(directory=directory, cluster_id=str(kuuid.random_uuid()),
                            controllers=3 if controllers is None else controllers,
                            brokers=3 if brokers is None else brokers,
                            base_port=lay.DEFAULT_BASE_PORT if base_port is None else base_port,
                            with_admin=with_admin, broker_config=broker_config or (),
                            security=security or "none")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        atomic_file.write_atomically(directory / lay.LAYOUT_FILE, layout.to_json().encode())
    except OSError as exc:
        raise errors.ConfigError(f"cannot create the dev cluster directory {directory}: "
                                 f"{exc}") from None
    ensure_certificates(layout)
    return layout


def ensure_certificates(layout: lay.Layout) -> bool:
    """With ``--security mtls``: the throwaway CA and every node's and the client's
    certificate (made once, kept across restarts), and ``client.properties``. True if
    made now. Keys are written readable by the owner only."""
    if layout.security != "mtls":
        return False
    made = False
    if not layout.truststore_path.exists():
        # Imported here: only an mTLS cluster needs the cryptography library.
        from kraftlog.security import certificates
        authority = certificates.CertificateAuthority(
            common_name=f"kraftlog dev CA {layout.cluster_id}")
        try:
            layout.tls_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            for name in [n.name for n in layout.nodes] + [lay.CLIENT_CERTIFICATE]:
                common_name = lay.CLIENT_COMMON_NAME if name == lay.CLIENT_CERTIFICATE else name
                issued = authority.issue(common_name, dns_names=("localhost",),
                                         ip_addresses=(layout.host,))
                path = layout.keystore_path(name)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(issued.keystore_pem())
            # The CA last: its presence says the set is complete.
            atomic_file.write_atomically(layout.truststore_path, authority.certificate_pem)
        except OSError as exc:
            raise errors.ConfigError(f"cannot write certificates in {layout.tls_dir}: "
                                     f"{exc}") from None
        made = True
    try:
        atomic_file.write_atomically(layout.client_properties_path,
                                     layout.client_properties_text().encode())
    except OSError as exc:
        raise errors.ConfigError(f"cannot write {layout.client_properties_path}: {exc}") \
            from None
    return made


def use_client_tls(layout: lay.Layout) -> None:
    """Make this process's probes dial ``layout``'s cluster as its clients do."""
    if layout.security != "mtls":
        return
    from kraftlog import config as kconfig
    from kraftlog.security import tls
    values, _sources = kconfig.load_properties(layout.client_properties_path)
    rpc.configure_client(tls.client_tls_from_properties(
        values, what=str(layout.client_properties_path)))


def existing(directory: pathlib.Path) -> lay.Layout:
    """The cluster kept in ``directory``; an error naming the directory if there is none."""
    stored = lay.load(directory)
    if stored is None:
        raise errors.ConfigError(f"no dev cluster in {directory} (start one with "
                                 f"'kraftlog dev up --dir {directory}')")
    use_client_tls(stored)
    return stored


# -- processes ------------------------------------------------------------------------------

def running_pid(layout: lay.Layout, node: lay.Node) -> int | None:
    """The pid of ``node``'s process if it runs (a stale pid file is ignored)."""
    try:
        pid = int(layout.pid_path(node).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if not _alive(pid):
        return None
    try:
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        return pid  # no /proc (not Linux): trust the live pid
    if str(layout.config_path(node)).encode() in cmdline:
        return pid
    # Between fork and exec our own child still shows our command line: under load that
    # window is long enough for wait_ready to look (it once called a starting admin
    # service dead, and `dev up` then stopped the cluster).
    with contextlib.suppress(OSError):
        if cmdline == pathlib.Path("/proc/self/cmdline").read_bytes():
            return pid
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own child that exited) is not alive.
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def ensure_formatted(layout: lay.Layout, node: lay.Node) -> bool:
    """Format ``node``'s data dir on its first start; True if it formatted now."""
    if node.role is lay.Role.ADMIN or (layout.data_dir(node) / "meta.properties").exists():
        return False
    done = subprocess.run(
        [sys.executable, "-m", "kraftlog", "storage", "format", "--cluster-id",
         layout.cluster_id, "--node-id", str(node.node_id), "--data-dir",
         str(layout.data_dir(node))],
        capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise errors.ConfigError(f"formatting {layout.data_dir(node)} failed: "
                                 f"{done.stderr.strip() or done.stdout.strip()}")
    return True


def start(layout: lay.Layout, node: lay.Node) -> int:
    """Start ``node`` (formatting its storage first if new) and return its pid; a node
    already running is left alone."""
    pid = running_pid(layout, node)
    if pid is not None:
        return pid
    if port_in_use(layout.host, node.port):
        raise errors.ConfigError(f"cannot start {node.name}: {layout.host}:{node.port} is in "
                                 "use by another process (pick another --base-port)")
    ensure_formatted(layout, node)
    config = layout.config_path(node)
    atomic_file.write_atomically(config, layout.config_text(node).encode())
    with layout.log_path(node).open("ab") as log:
        log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} dev: starting {node.name}\n"
                  .encode())
        log.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "kraftlog", node.role.value, "--config", str(config)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=layout.directory)
    atomic_file.write_atomically(layout.pid_path(node), f"{proc.pid}\n".encode())
    return proc.pid


def signal_node(layout: lay.Layout, node: lay.Node, sig: signal.Signals) -> int | None:
    """Send ``sig`` to ``node``'s process; its pid, or None if it was not running."""
    pid = running_pid(layout, node)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    return pid


def wait_stopped(layout: lay.Layout, nodes: Iterable[lay.Node], *, timeout_s: float) -> list[lay.Node]:
    """Wait until none of ``nodes`` runs; the ones still running at the deadline."""
    deadline = time.monotonic() + timeout_s
    pending = list(nodes)
    while pending:
        _reap()
        pending = [n for n in pending if running_pid(layout, n) is not None]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(POLL_INTERVAL_S)
    for node in nodes:
        if node not in pending:
            layout.pid_path(node).unlink(missing_ok=True)
    return pending


def _reap() -> None:
    """Collect exited children of this process (nodes started by this very command)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def stop(layout: lay.Layout, nodes: Iterable[lay.Node], *,
         timeout_s: float = STOP_TIMEOUT_S) -> tuple[list[lay.Node], list[lay.Node]]:
    """SIGTERM ``nodes`` (brokers shut down in a controlled way, a raft leader resigns),
    SIGKILL whatever still runs after ``timeout_s``; (stopped, killed)."""
    targets = [n for n in nodes if signal_node(layout, n, signal.SIGTERM) is not None]
    stubborn = wait_stopped(layout, targets, timeout_s=timeout_s)
    for node in stubborn:
        signal_node(layout, node, signal.SIGKILL)
    wait_stopped(layout, stubborn, timeout_s=5.0)
    return [n for n in targets if n not in stubborn], stubborn


# -- probes -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QuorumView:
    leader_id: int
    epoch: int
    high_watermark: int
    voter_end_offsets: dict[int, int]


def describe_quorum(layout: lay.Layout) -> QuorumView | None:
    """The quorum as its leader describes it, None while no live controller leads."""
    for node in layout.of_role(lay.Role.CONTROLLER):
        try:
            with rpc.sync_channel(layout.endpoint(node)) as channel:
                answer = raft_pb2_grpc.RaftServiceStub(channel).DescribeQuorum(
                    raft_pb2.DescribeQuorumRequest(), timeout=PROBE_TIMEOUT_S)
        except grpc.RpcError:
            continue
        if answer.error.code == 0 and answer.leader_id >= 0:
            return QuorumView(leader_id=answer.leader_id, epoch=answer.leader_epoch,
                              high_watermark=answer.high_watermark,
                              voter_end_offsets={r.replica_id: r.log_end_offset
                                                 for r in answer.current_voters})
    return None


def serving(layout: lay.Layout, node: lay.Node) -> bool:
    """True if ``node``'s role service answers SERVING on its health service."""
    try:
        with rpc.sync_channel(layout.endpoint(node)) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=HEALTH_SERVICE[node.role]),
                timeout=PROBE_TIMEOUT_S)
    except grpc.RpcError:
        return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def log_tail(layout: lay.Layout, node: lay.Node, lines: int) -> list[str]:
    try:
        text = layout.log_path(node).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return text.splitlines()[-lines:]


def wait_ready(layout: lay.Layout, *, timeout_s: float,
               on_ready: Callable[[str], None]) -> QuorumView:
    """Wait until the quorum has a leader and every broker and the admin service serve.

    ``on_ready`` hears one line per milestone. A node that exits meanwhile fails the
    wait at once, with the end of its log.
    """
    deadline = time.monotonic() + timeout_s
    quorum: QuorumView | None = None
    pending = [n for n in layout.nodes if n.role is not lay.Role.CONTROLLER]
    while True:
        _reap()
        for node in layout.nodes:
            if running_pid(layout, node) is None:
                tail = "\n    ".join(log_tail(layout, node, 15))
                raise errors.KraftlogError(
                    f"{node.name} exited during start-up; the end of "
                    f"{layout.log_path(node)}:\n    {tail}")
        if quorum is None:
            quorum = describe_quorum(layout)
            if quorum is not None:
                on_ready(f"quorum has a leader: controller {quorum.leader_id}, "
                         f"epoch {quorum.epoch}")
        if quorum is not None:
            for node in list(pending):
                if serving(layout, node):
                    on_ready(f"{node.name} serving on {layout.endpoint(node)}")
                    pending.remove(node)
            if not pending:
                return quorum
        if time.monotonic() > deadline:
            what = ("a quorum leader" if quorum is None
                    else ", ".join(n.name for n in pending) + " to serve")
            raise errors.KraftlogError(
                f"timed out after {timeout_s:.0f} s waiting for {what}; see the logs in "
                f"{layout.directory} ('kraftlog dev logs NODE')")
        time.sleep(POLL_INTERVAL_S)
