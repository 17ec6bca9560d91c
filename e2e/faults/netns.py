"""The run's private network: one namespace per node, a bridge, nftables faults.

Owns :class:`Network`: for a run id it creates a bridge namespace holding ``br0`` and,
for each host (three controllers, three brokers, the client), a namespace of its own
with a veth pair whose one end (``eth0``, an address in :data:`SUBNET`) sits in the
host's namespace and whose other end is a port of ``br0``. Nothing touches the
machine's own namespace: every address, route and rule lives in namespaces this run
created, named ``kflt-<run id>-<host>`` so that a run never collides with a leftover
(the run id holds the creating process's pid; :func:`leftover_namespaces` finds runs
whose process is gone, for ``python -m e2e.faults cleanup``).

Faults on the wire are nftables rules in a host's own namespace (the kernel here has
no netem): a table ``inet kraftlog_faults`` with an input and an output chain that drop
packets on ``eth0``: all of them (a cut), one direction (a one-way cut), or a share
(``numgen random mod 100 < N drop``: packet loss). Each host's active rules are kept
by name, so overlapping faults combine, and the table is rewritten whole on every
change (``nft -f``, atomic).

:meth:`Network.destroy` SIGKILLs every process still inside the run's namespaces
(``ip netns pids``) and deletes them; the CLI calls it in a ``finally`` and on
SIGINT/SIGTERM. Needs root, ``ip`` and ``nft``; :func:`missing_prerequisites` says
what is missing. Edge module: subprocesses only.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

SUBNET = "10.213.0"
"""The /24 every run uses inside its own namespaces (never routed outside them)."""
PREFIX = "kflt-"
TABLE = "kraftlog_faults"
IP_TIMEOUT_S = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class Host:
    """One namespace on the bridge: ``name`` (``c1``, ``b4``, ``client``) and its address."""

    name: str
    address: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """A drop rule on a host's ``eth0``: ``inbound`` and/or ``outbound`` packets, from or to
    ``peers`` (addresses; empty = everyone), ``percent`` of them (100 = all)."""

    inbound: bool
    outbound: bool
    peers: tuple[str, ...] = ()
    percent: int = 100


def missing_prerequisites() -> list[str]:
    """What stops this machine from running the suite (empty when nothing does)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces and nftables need it)")
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            missing.append(f"the {tool!r} command" + (" (Debian package nftables)"
                                                      if tool == "nft" else " (iproute2)"))
    if not missing:
        probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                               timeout=IP_TIMEOUT_S, check=False)
        if probe.returncode != 0:
            missing.append(f"'ip netns' ({probe.stderr.strip()})")
    return missing


def _run(argv: Sequence[str], *, stdin: str | None = None) -> None:
    done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True,
                          timeout=IP_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): "
                           f"{done.stderr.strip() or done.stdout.strip()}")


def render_table(rules: Iterable[Rule]) -> str:
    """The ``nft -f`` script that replaces the fault table with ``rules``. Pure."""
    inbound: list[str] = []
    outbound: list[str] = []
    for rule in rules:
        sample = f" numgen random mod 100 < {rule.percent}" if rule.percent < 100 else ""
        peers = "{ " + ", ".join(rule.peers) + " }" if rule.peers else ""
        if rule.inbound:
            match = f" ip saddr {peers}" if peers else ""
            inbound.append(f'    iifname "eth0"{match}{sample} drop')
        if rule.outbound:
            match = f" ip daddr {peers}" if peers else ""
            outbound.append(f'    oifname "eth0"{match}{sample} drop')
    return "\n".join([
        f"table inet {TABLE}", f"delete table inet {TABLE}", f"table inet {TABLE} {{",
        "  chain input {", "    type filter hook input priority 0; policy accept;", *inbound,
        "  }", "  chain output {", "    type filter hook output priority 0; policy accept;",
        *outbound, "  }", "}", ""])


class Network:
    """The namespaces of one run (see the module docstring)."""

    def __init__(self, run_id: str, hosts: Sequence[Host]) -> None:
        if not re.fullmatch(r"[0-9a-z]{1,12}", run_id):
            raise ValueError(f"run id {run_id!r}: 1-12 lower-case letters or digits")
        self.run_id = run_id
        self.hosts = {h.name: h for h in hosts}
        self._rules: dict[str, dict[str, Rule]] = {h.name: {} for h in hosts}

    @property
    def bridge_namespace(self) -> str:
        return f"{PREFIX}{self.run_id}-br"

    def namespace(self, host: str) -> str:
        return f"{PREFIX}{self.run_id}-{host}"

    def namespaces(self) -> list[str]:
        return [self.bridge_namespace, *(self.namespace(h) for h in self.hosts)]

    def create(self) -> None:
        """Make the bridge and every host's namespace; on failure remove what was made."""
        try:
            bridge = self.bridge_namespace
            _run(["ip", "netns", "add", bridge])
            _run(["ip", "-n", bridge, "link", "set", "lo", "up"])
            _run(["ip", "-n", bridge, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", bridge, "link", "set", "br0", "up"])
            for host in self.hosts.values():
                namespace = self.namespace(host.name)
                port = f"v-{host.name}"[:15]
                _run(["ip", "netns", "add", namespace])
                _run(["ip", "-n", bridge, "link", "add", port, "type", "veth", "peer", "name",
                      "eth0", "netns", namespace])
                _run(["ip", "-n", bridge, "link", "set", port, "master", "br0"])
                _run(["ip", "-n", bridge, "link", "set", port, "up"])
                _run(["ip", "-n", namespace, "link", "set", "lo", "up"])
                _run(["ip", "-n", namespace, "addr", "add", f"{host.address}/24", "dev",
                      "eth0"])
                _run(["ip", "-n", namespace, "link", "set", "eth0", "up"])
        except BaseException:
            self.destroy()
            raise

    def exec_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``host``'s namespace (``ip netns exec`` execs it: the child's
        pid is the command's own)."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    # -- faults ---------------------------------------------------------------------------------

    def add_rule(self, host: str, name: str, rule: Rule) -> None:
        self._rules[host][name] = rule
        self._apply(host)

    def remove_rule(self, host: str, name: str) -> None:
        if self._rules[host].pop(name, None) is not None:
            self._apply(host)

    def clear_rules(self) -> None:
        for host, rules in self._rules.items():
            if rules:
                rules.clear()
                self._apply(host)

    def _apply(self, host: str) -> None:
        _run(self.exec_argv(host, ["nft", "-f", "-"]),
             stdin=render_table(self._rules[host].values()))

    # -- teardown -------------------------------------------------------------------------------

    def destroy(self) -> list[str]:
        """Kill every process left in the run's namespaces and delete them; returns what it
        had to kill or could not delete (for the report). Never raises."""
        return destroy_namespaces(self.namespaces())


def _existing_namespaces() -> list[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                          timeout=IP_TIMEOUT_S, check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def destroy_namespaces(names: Iterable[str]) -> list[str]:
    notes = []
    existing = set(_existing_namespaces())
    for namespace in names:
        if namespace not in existing:
            continue
        pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                              text=True, timeout=IP_TIMEOUT_S, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
                notes.append(f"killed pid {pid} left in {namespace}")
        done = subprocess.run(["ip", "netns", "del", namespace], capture_output=True,
                              text=True, timeout=IP_TIMEOUT_S, check=False)
        if done.returncode != 0:
            notes.append(f"could not delete {namespace}: {done.stderr.strip()}")
    return notes


def leftover_namespaces(alive: Mapping[int, bool] | None = None) -> list[str]:
    """Namespaces of runs whose creating process is gone (``kflt-<pid>x<rand>-...``)."""
    found = []
    for namespace in _existing_namespaces():
        match = re.fullmatch(rf"{PREFIX}(\d+)x[0-9a-z]+-\S+", namespace)
        if match is None:
            continue
        pid = int(match.group(1))
        running = alive.get(pid) if alive is not None else None
        if running is None:
            running = _pid_alive(pid)
        if not running:
            found.append(namespace)
    return found


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
