"""The chart's pods run as local processes: a StatefulSet simulation.

Kubernetes cannot run here, so this test plays the kubelet for the rendered chart:
for every pod of the controller and broker StatefulSets and the admin Deployment it
takes the rendered init containers and main container -- command, args, env (literal
values, ``$(VAR)`` references, ``secretKeyRef`` from the rendered Secret, ``fieldRef``
for the pod name and namespace) -- and runs them as local processes, with

- each volume a temp dir: a PVC survives a pod deletion, an ``emptyDir`` does not, a
  ``configMap`` volume is filled from the rendered ConfigMap (its ``items`` honoured);
  mount paths in commands and scripts are rewritten to those dirs;
- the cluster DNS on loopback: every ``<pod>.<headless>.<ns>.svc.<domain>:<port>`` (and
  ``<service>.<ns>.svc.<domain>:<port>``) in the files a pod reads becomes
  ``127.0.0.1:<a free port>`` for that pod's container port, and each pod's
  ``0.0.0.0:<containerPort>`` listeners and ``kraftlog.metrics.port`` bind that port.

Nothing else is changed: node ids come from the init scripts' ordinal arithmetic, the
format is the init container's ``kraftlog storage format``, the probes are the
rendered gRPC probes. The cluster must form, every probe answer SERVING, the admin
Service answer DescribeCluster and CreateTopics (the CLI, ``kraftlog topics create
--admin``), and every controller and broker serve /metrics on the port the chart
names.

Then the kind e2e driver's fault drill (e2e/kind/driver.py, its own code) runs against
these pods, with :class:`LocalKube` standing in for the Kubernetes API: rollout status,
a topic, acks=all writes throughout, every partition moved one broker along, the
active controller's pod deleted and a partition leader's broker pod deleted (kill -9,
then init containers and main container again on the same PVC), and every
acknowledged record read back at its offset. Only the Jaeger step is left out (no
collector here; the election spans themselves are tested in tests/telemetry).

Last, the drill's rolling restart of the broker StatefulSet (``kubectl rollout restart``,
played by :meth:`LocalKube.restart_statefulset` as the StatefulSet controller does it:
highest ordinal first, a graceful deletion, the next only once the new pod answers its
rendered readiness probe) under a strict acks=all producer on a topic at replication
factor 3 and ``min.insync.replicas`` 2: no Produce is refused with NOT_ENOUGH_REPLICAS
and every acknowledged record is read back. With the old readiness (the broker's
``kraftlog.v1.BrokerService`` status: registered, unfenced, caught up on metadata) the
same roll had 11 Produce calls refused with NOT_ENOUGH_REPLICAS.

Values: the chart's own ``broker.config`` / ``controller.config`` pass-through sets
shorter broker session timeouts (as ``kraftlog dev`` does), Jaeger is off (no
collector here: the chart then sets OTEL_TRACES_EXPORTER=none) and metrics are on.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kraftlog.admin import admin_client
from kraftlog.raft import transport
from tests.quorum_cluster import free_ports, wait_for

REPO = pathlib.Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "kraftlog"
INSTALL_HELM = REPO / "scripts" / "install-helm.sh"
RELEASE = "kraftlog"
NAMESPACE = "streaming"
CLUSTER_DOMAIN = "cluster.local"
TOPIC = "orders"
CLI_TOPIC = "from-cli"
ROLL_TOPIC = "rolled"
KIND_DRIVER = REPO / "e2e" / "kind" / "driver.py"
VALUES = {
    "clusterId": "S3JhZnRsb2dQb2RzVGVzdA",  # helm template needs one (GitOps rule)
    "jaeger.enabled": "false",
    "metrics.enabled": "true",
    "controller.config.broker\\.session\\.timeout\\.ms": "6000",
    "controller.config.broker\\.heartbeat\\.interval\\.ms": "1000",
    "controller.config.metadata\\.max\\.idle\\.interval\\.ms": "500",
    "broker.config.broker\\.session\\.timeout\\.ms": "6000",
    "broker.config.broker\\.heartbeat\\.interval\\.ms": "1000",
    "broker.config.replica\\.fetch\\.wait\\.max\\.ms": "200",
    "broker.replicaLagTimeMaxMs": "10000",
}
SERVING = health_pb2.HealthCheckResponse.SERVING
DNS_NAME = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?\.svc\." + re.escape(CLUSTER_DOMAIN)
                      + r"):(\d+)")


# --- rendering ------------------------------------------------------------------------------------


@functools.cache
def _helm() -> str:
    proc = subprocess.run([str(INSTALL_HELM)], capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, f"scripts/install-helm.sh failed:\n{proc.stderr}"
    return proc.stdout.strip().splitlines()[-1]


def render(values: Mapping[str, str]) -> list[dict[str, Any]]:
    sets = [a for k, v in values.items() for a in ("--set", f"{k}={v}")]
    proc = subprocess.run([_helm(), "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                           *sets], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def find(docs: Sequence[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


# --- the kubelet, locally --------------------------------------------------------------------------


@dataclass(kw_only=True)
class Cluster:
    """What every local pod shares: rendered objects, the port plan, the DNS on loopback."""

    docs: list[dict[str, Any]]
    root: pathlib.Path
    ports: dict[tuple[str, int], int] = field(default_factory=dict)
    """(pod name, container port) -> local port."""
    services: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    """(service FQDN, port) -> (pod, container port) answering it (the first pod selected)."""

    def local(self, pod: str, port: int) -> int:
        if (pod, port) not in self.ports:
            self.ports[(pod, port)] = free_ports(1)[0]
        return self.ports[(pod, port)]

    def resolve(self, host: str, port: int) -> str:
        """``host:port`` as the cluster DNS would route it, on loopback."""
        pod, target = self.services.get((host, port), (host.split(".")[0], port))
        if (pod, target) not in self.ports:
            raise AssertionError(f"{host}:{port} names no pod or service of the release")
        return f"127.0.0.1:{self.ports[(pod, target)]}"

    def secret(self, name: str, key: str) -> str:
        return base64.b64decode(find(self.docs, "Secret", name)["data"][key]).decode()

    def configmap(self, name: str) -> dict[str, str]:
        data: dict[str, str] = find(self.docs, "ConfigMap", name)["data"]
        return data


def _venv_env(home: pathlib.Path) -> dict[str, str]:
    exe = shutil.which("kraftlog", path=str(pathlib.Path(sys.executable).parent))
    assert exe, "the kraftlog console script is not installed in this environment"
    return {"PATH": f"{pathlib.Path(exe).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(home), "LANG": "C.UTF-8"}


class LocalPod:
    """One pod of a rendered workload, run the way the kubelet runs it."""

    def __init__(self, cluster: Cluster, workload: dict[str, Any], name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.spec: dict[str, Any] = workload["spec"]["template"]["spec"]
        self.claims = {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
        self.root = cluster.root / name
        self.main: dict[str, Any] = self.spec["containers"][0]
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = 0
        for port in self.main.get("ports", []):
            cluster.local(name, int(port["containerPort"]))

    # -- volumes -------------------------------------------------------------------------------

    def _volume_dir(self, name: str) -> pathlib.Path:
        # A PVC is per pod and outlives it; anything else is per pod incarnation.
        if name in self.claims:
            return self.root / "pvc" / name
        return self.root / f"run-{self.incarnation}" / name

    def _make_volumes(self) -> dict[str, pathlib.Path]:
        dirs: dict[str, pathlib.Path] = {}
        for claim in self.claims:
            dirs[claim] = self._volume_dir(claim)
            dirs[claim].mkdir(parents=True, exist_ok=True)
        for volume in self.spec.get("volumes", []):
            path = self._volume_dir(volume["name"])
            path.mkdir(parents=True, exist_ok=True)
            dirs[volume["name"]] = path
            if "configMap" in volume:
                data = self.cluster.configmap(volume["configMap"]["name"])
                items = volume["configMap"].get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    (path / item["path"]).write_text(data[item["key"]])
            else:
                assert "emptyDir" in volume, f"{self.name}: unsupported volume {volume}"
        return dirs

    def _mounts(self, container: Mapping[str, Any], dirs: Mapping[str, pathlib.Path]
                ) -> dict[str, pathlib.Path]:
        return {m["mountPath"]: dirs[m["name"]] for m in container.get("volumeMounts", [])}

    # -- container processes -------------------------------------------------------------------

    def _env(self, container: Mapping[str, Any]) -> dict[str, str]:
        env = {**_venv_env(self.root), "HOSTNAME": self.name}
        for var in container.get("env", []):
            if "value" in var:
                # $(VAR) expands to an earlier variable of this container, as in Kubernetes.
                env[var["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                          lambda m: env.get(m[1], m[0]), var["value"])
                continue
            source = var["valueFrom"]
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[var["name"]] = self.cluster.secret(ref["name"], ref["key"])
            else:
                path = source["fieldRef"]["fieldPath"]
                env[var["name"]] = {"metadata.name": self.name,
                                    "metadata.namespace": NAMESPACE}[path]
        return env

    @staticmethod
    def _remap(text: str, mounts: Mapping[str, pathlib.Path]) -> str:
        """Mount paths in a command line or script -> the local dirs (one pass, longest first)."""
        if not mounts:
            return text
        alternatives = "|".join(re.escape(p) for p in sorted(mounts, key=len, reverse=True))
        return re.sub(rf"(?<![\w./-])({alternatives})(?![\w.-])",
                      lambda m: str(mounts[m[1]]), text)

    def _argv(self, container: Mapping[str, Any], mounts: Mapping[str, pathlib.Path]) -> list[str]:
        return [self._remap(a, mounts) for a in [*container.get("command", []),
                                                 *container.get("args", [])]]

    def _route_files(self, dirs: Mapping[str, pathlib.Path],
                     mounts: Mapping[str, pathlib.Path]) -> None:
        """The cluster DNS, this pod's ports and its mount paths, locally, in every file
        the main container will read."""
        for name, path in dirs.items():
            if name in self.claims:
                continue
            for file in path.iterdir():
                text = file.read_text()
                text = DNS_NAME.sub(lambda m: self.cluster.resolve(m[1], int(m[3])), text)
                text = re.sub(r"://0\.0\.0\.0:(\d+)",
                              lambda m: f"://127.0.0.1:{self.cluster.local(self.name, int(m[1]))}",
                              text)
                text = re.sub(r"(?m)^kraftlog\.metrics\.port=(\d+)$",
                              lambda m: f"kraftlog.metrics.port="
                                        f"{self.cluster.local(self.name, int(m[1]))}", text)
                file.write_text(self._remap(text, mounts))

    def start(self) -> None:
        """Create the pod: fresh emptyDirs, init containers in order, then the main container."""
        assert self.proc is None, f"{self.name} is already running"
        self.incarnation += 1
        dirs = self._make_volumes()
        for init in self.spec.get("initContainers", []):
            mounts = self._mounts(init, dirs)
            done = subprocess.run(self._argv(init, mounts), env=self._env(init),
                                  capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, f"{self.name} init {init['name']}: {done.stderr}"
        mounts = self._mounts(self.main, dirs)
        self._route_files(dirs, mounts)
        with (self.root / "pod.log").open("ab") as log:
            self.proc = subprocess.Popen(self._argv(self.main, mounts), env=self._env(self.main),
                                         stdout=log, stderr=log, start_new_session=True)

    def terminate(self) -> None:
        """A graceful pod deletion (what a rolling update does): SIGTERM, then SIGKILL after
        the pod's terminationGracePeriodSeconds. (The preStop sleep, there to let
        endpoints drop the pod first, is left out: no endpoints here.)"""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=int(self.spec.get("terminationGracePeriodSeconds", 30)))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def delete(self) -> None:
        """``kubectl delete pod`` with no grace: the process dies, emptyDirs go, PVCs stay."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    # -- what the kubelet and clients see --------------------------------------------------------

    def check_running(self) -> None:
        """A pod whose main container exited fails the test at once (no restartPolicy here)."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}")

    def address(self, container_port: int) -> str:
        return f"127.0.0.1:{self.cluster.ports[(self.name, container_port)]}"

    def probe(self, kind: str) -> bool:
        """The rendered gRPC probe (readinessProbe/livenessProbe) answers SERVING."""
        self.check_running()
        grpc_probe = self.main[kind]["grpc"]
        try:
            with grpc.insecure_channel(self.address(int(grpc_probe["port"]))) as channel:
                answer = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=grpc_probe.get("service", "")),
                    timeout=1.0)
        except grpc.RpcError:
            return False
        return bool(answer.status == SERVING)

    def log_tail(self) -> str:
        path = self.root / "pod.log"
        return f"--- {self.name}\n" + (path.read_text()[-2500:] if path.exists() else "")


def local_pods(cluster: Cluster, kind: str, name: str) -> list[LocalPod]:
    workload = find(cluster.docs, kind, name)
    replicas = int(workload["spec"]["replicas"])
    if kind == "StatefulSet":
        names = [f"{name}-{i}" for i in range(replicas)]
    else:
        names = [f"{name}-local{i}" for i in range(replicas)]
    pods = [LocalPod(cluster, workload, n) for n in names]
    # Services that select these pods route to the first one (enough for one admin pod).
    labels = workload["spec"]["template"]["metadata"]["labels"]
    for svc in (d for d in cluster.docs if d["kind"] == "Service"):
        selector = svc["spec"].get("selector") or {}
        if selector and selector.items() <= labels.items():
            fqdn = f"{svc['metadata']['name']}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}"
            for port in svc["spec"]["ports"]:
                target = _container_port(pods[0].main, port.get("targetPort", port["port"]))
                cluster.services[(fqdn, int(port["port"]))] = (pods[0].name, target)
    return pods


def _container_port(container: Mapping[str, Any], target: int | str) -> int:
    if isinstance(target, int):
        return target
    return next(int(p["containerPort"]) for p in container["ports"] if p["name"] == target)


# --- the test ---------------------------------------------------------------------------------------


def _quorum(controllers: Sequence[LocalPod]) -> tuple[int, int] | None:
    """(leader node id, epoch) when every running controller agrees, else None."""
    seen = set()
    for pod in controllers:
        if pod.proc is None:
            continue
        pod.check_running()
        try:
            view = asyncio.run(transport.describe_quorum(pod.address(9093), timeout_s=1.0))
        except grpc.RpcError:
            return None
        if view.error.code == 0:
            seen.add((view.leader_id, view.leader_epoch))
    return next(iter(seen)) if len(seen) == 1 else None


def _admin(address: str, call: Callable[[admin_client.AdminClient], Any]) -> Any:
    async def run() -> Any:
        async with admin_client.AdminClient(address, timeout_ms=15_000) as admin:
            return await call(admin)
    return asyncio.run(run())


def _load_kind_driver() -> ModuleType:
    """e2e/kind/driver.py (a script, not part of the package), loaded from its path."""
    spec = importlib.util.spec_from_file_location("kind_driver", KIND_DRIVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kind_driver"] = module
    spec.loader.exec_module(module)
    return module


class LocalKube:
    """The driver's Kubernetes calls (``driver.Kube``), answered by the local pods.

    Workload status is what the kubelet would report (ready = the rendered readiness
    probe answers SERVING); deleting a pod kills it and, like the StatefulSet or
    Deployment controller, creates it again (init containers, same PVC) a moment later.
    """

    RECREATE_DELAY_S = 0.5
    ROLL_READY_TIMEOUT_S = 60.0

    def __init__(self, workloads: Mapping[str, Sequence[LocalPod]]) -> None:
        self.workloads = workloads
        self.pods = {p.name: p for pods in workloads.values() for p in pods}
        self.errors: list[str] = []
        self._timers: list[threading.Timer] = []
        self._threads: list[threading.Thread] = []
        self._generation = dict.fromkeys(workloads, 1)
        self._updated: dict[str, set[str]] = {name: {p.name for p in pods}
                                              for name, pods in workloads.items()}
        self.roll_log: list[tuple[float, str]] = []
        """(monotonic time, "<pod> terminated" / "<pod> ready") for every rolled pod."""

    def _status(self, name: str) -> dict[str, Any]:
        pods = self.workloads[name]
        ready = sum(1 for p in pods if p.proc is not None and p.probe("readinessProbe"))
        generation = self._generation[name]
        updated = len(self._updated[name])
        current = generation if updated == len(pods) else generation - 1
        return {"metadata": {"name": name, "generation": generation},
                "spec": {"replicas": len(pods)},
                "status": {"observedGeneration": generation, "replicas": len(pods),
                           "readyReplicas": ready, "updatedReplicas": updated,
                           "availableReplicas": ready, "currentRevision": f"r{current}",
                           "updateRevision": f"r{generation}"}}

    def restart_statefulset(self, name: str) -> None:
        """The StatefulSet controller's RollingUpdate after ``kubectl rollout restart``:
        from the highest ordinal down, delete a pod gracefully, create it again, and go on
        to the next only once it is Ready (its rendered readiness probe answers SERVING)."""
        self._generation[name] += 1
        self._updated[name] = set()

        def roll() -> None:
            for pod in reversed(self.workloads[name]):
                pod.terminate()
                self.roll_log.append((time.monotonic(), f"{pod.name} terminated"))
                try:
                    pod.start()
                    deadline = time.monotonic() + self.ROLL_READY_TIMEOUT_S
                    while not pod.probe("readinessProbe"):
                        if time.monotonic() > deadline:
                            raise AssertionError("not ready after the restart")
                        time.sleep(0.1)
                except Exception as exc:  # reported by the test, not lost in this thread
                    self.errors.append(f"rolling {pod.name}: {exc}")
                    return
                self.roll_log.append((time.monotonic(), f"{pod.name} ready"))
                self._updated[name].add(pod.name)
        thread = threading.Thread(target=roll, name=f"roll-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def statefulset(self, name: str) -> dict[str, Any]:
        return self._status(name)

    def deployment(self, name: str) -> dict[str, Any]:
        return self._status(name)

    def pod(self, name: str) -> dict[str, Any] | None:
        pod = self.pods[name]
        if pod.proc is None:
            return None
        ready = "True" if pod.probe("readinessProbe") else "False"
        return {"metadata": {"name": name, "uid": f"{name}-{pod.incarnation}"},
                "status": {"conditions": [{"type": "Ready", "status": ready}]}}

    def delete_pod(self, name: str) -> str:
        pod = self.pods[name]
        uid = f"{name}-{pod.incarnation}"
        pod.delete()

        def recreate() -> None:
            try:
                pod.start()
            except Exception as exc:  # reported by the test, not lost in this thread
                self.errors.append(f"recreating {name}: {exc}")
        timer = threading.Timer(self.RECREATE_DELAY_S, recreate)
        self._timers.append(timer)
        timer.start()
        return uid

    def join(self) -> None:
        for timer in self._timers:
            timer.join(timeout=60)
        for thread in self._threads:
            thread.join(timeout=120)


def test_rendered_pods_run_as_a_local_cluster_and_survive_pod_deletions(
        tmp_path: pathlib.Path) -> None:
    started = time.monotonic()
    driver = _load_kind_driver()
    docs = render(VALUES)
    cluster = Cluster(docs=docs, root=tmp_path)
    controllers = local_pods(cluster, "StatefulSet", f"{RELEASE}-controller")
    brokers = local_pods(cluster, "StatefulSet", f"{RELEASE}-broker")
    admins = local_pods(cluster, "Deployment", f"{RELEASE}-admin")
    pods = [*controllers, *brokers, *admins]
    admin_address = admins[0].address(9095)
    bootstrap = [b.address(9092) for b in brokers]
    cluster_id = cluster.secret(f"{RELEASE}-cluster-id", "cluster-id")
    kube = LocalKube({f"{RELEASE}-controller": controllers, f"{RELEASE}-broker": brokers,
                      f"{RELEASE}-admin": admins})

    def all_probes_serving(among: Sequence[LocalPod]) -> bool | None:
        return all(p.probe(k) for p in among
                   for k in ("startupProbe", "readinessProbe", "livenessProbe")
                   if k in p.main) or None

    try:
        for pod in pods:
            pod.start()
        wait_for(lambda: _quorum(controllers), timeout_s=40, what="the controller quorum")
        wait_for(lambda: all_probes_serving(pods), timeout_s=40,
                 what="every pod's readiness and liveness probes SERVING")

        # The admin Service answers DescribeCluster: three unfenced brokers, ids from the
        # ordinal + broker.nodeIdOffset, advertised on their pod DNS names (here: loopback).
        described = _admin(admin_address, lambda a: a.describe_cluster())
        assert described.cluster_id == cluster_id
        assert sorted(b.broker_id for b in described.brokers if not b.is_fenced) == [100, 101, 102]
        advertised = {f"{e.host}:{e.port}" for b in described.brokers for e in b.endpoints}
        assert advertised == set(bootstrap)

        # Every controller and broker serves Prometheus /metrics on its container port
        # named "metrics" (what the Services and the ServiceMonitor target).
        for among, metric in ((controllers, b"kraftlog_raft_current_epoch"),
                              (brokers, b"kraftlog_broker_")):
            metrics_port = _container_port(among[0].main, "metrics")
            for pod in among:
                with urllib.request.urlopen(f"http://{pod.address(metrics_port)}/metrics",
                                            timeout=5) as answer:
                    assert metric in answer.read(), f"{pod.name}: no {metric!r} metrics"

        # CreateTopics through the admin Service, with the CLI a user would run.
        created = subprocess.run(
            [shutil.which("kraftlog", path=str(pathlib.Path(sys.executable).parent)) or "kraftlog",
             "topics", "create", "--admin", admin_address, "--topic", CLI_TOPIC,
             "--partitions", "2", "--replication-factor", "3"],
            capture_output=True, text=True, timeout=60, check=False)
        assert created.returncode == 0, created.stderr
        topics = _admin(admin_address, lambda a: a.describe_topics([CLI_TOPIC]))
        assert [sorted(p.replicas) for p in topics.topics[0].partitions] == [[100, 101, 102]] * 2

        # The kind e2e driver's drill, its own code, against these pods: rollouts, a topic,
        # acks=all writes throughout, every partition moved one broker along (RF 2 of 3
        # brokers; min.insync.replicas 1 so one broker down does not stop writes), the
        # active controller's pod deleted, a partition leader's pod deleted, read back.
        settings = driver.parse_args(
            ["--admin", admin_address, "--namespace", NAMESPACE, "--release", RELEASE,
             "--topic", TOPIC, "--partitions", "3", "--replication-factor", "2",
             "--min-insync-replicas", "1", "--step-timeout", "40", "--rollout-timeout", "45",
             "--produce-interval", "0.01", "--kubeconfig", "/nonexistent"], environ={})
        drill = driver.Drill(settings, kube)
        report = asyncio.run(_drill(driver, drill, bootstrap))
        kube.join()
        assert not kube.errors, kube.errors
        failover = report["controller_failover"]
        deleted = int(failover["deleted_pod"].rsplit("-", 1)[1])  # node.id = ordinal
        assert failover["deleted_pod"] == f"{RELEASE}-controller-{deleted}"
        assert failover["new_epoch"] > failover["old_epoch"]
        assert failover["new_leader"] != deleted
        assert report["broker_deleted"]["pod"].startswith(f"{RELEASE}-broker-")
        audit = report["audit"]
        assert audit.ok, audit.summary()
        assert audit.acknowledged >= 200, audit.summary()

        # The recreated controller pod fetched from the new leader and caught up.
        restarted = controllers[deleted]

        def back_in_sync() -> bool | None:
            current = _quorum(controllers)
            if current is None:
                return None
            if current[0] == deleted:  # elected again: a leader holds every committed entry
                return True
            # The leader never saw the old incarnation fetch (it was the leader then).
            view = asyncio.run(transport.describe_quorum(
                controllers[current[0]].address(9093), timeout_s=1.0))
            mine = [r for r in view.current_voters if r.replica_id == deleted]
            return True if mine and mine[0].last_fetch_timestamp > 0 \
                and mine[0].log_end_offset >= view.high_watermark - 5 else None
        wait_for(back_in_sync, timeout_s=30, what=f"{restarted.name} back in sync")
        wait_for(lambda: all_probes_serving(pods), timeout_s=40,
                 what="every pod SERVING again after both deletions")

        # A rolling restart of every broker (kubectl rollout restart) under acks=all load on
        # a topic at replication factor 3, min.insync.replicas 2: the "in-sync" readiness
        # holds each next restart until the previous broker is back in the ISR, so no
        # Produce is refused with NOT_ENOUGH_REPLICAS, and nothing acknowledged is lost.
        roll = asyncio.run(_roll(driver, drill, bootstrap))
        kube.join()
        assert not kube.errors, kube.errors
        assert roll["not_enough_replicas"] == 0, roll
        assert roll["audit"].ok and roll["audit"].acknowledged >= 100, roll["audit"].summary()
        events = [what for _, what in kube.roll_log]
        assert events == [f"{RELEASE}-broker-{i} {step}" for i in (2, 1, 0)
                          for step in ("terminated", "ready")]
        assert roll["seconds"] < 60, roll
        assert time.monotonic() - started < 210
    except Exception as exc:
        raise AssertionError(f"{type(exc).__name__}: {exc}\n"
                             + "\n".join(p.log_tail() for p in pods)) from exc
    finally:
        kube.join()
        for pod in pods:
            pod.delete()


async def _drill(driver: ModuleType, drill: Any, bootstrap: Sequence[str]) -> dict[str, Any]:
    """Drill.run's steps, minus Jaeger (no collector here): see e2e/kind/driver.py."""
    await drill.wait_rollouts()
    brokers = await driver.wait_until(drill.live_brokers, timeout_s=20, what="brokers")
    assert sorted(brokers.values()) == sorted(bootstrap)
    await drill.create_topic()
    writer = driver.Writer(list(brokers.values()), drill.s.topic, drill.s.produce_interval_s)
    writer.start()
    try:
        await driver.wait_until(
            lambda: _ready(writer.ledger.acked_count() >= 50), timeout_s=20,
            what="acks=all records acknowledged", interval_s=0.1)
        await drill.move_partitions(sorted(brokers))
        await drill.delete_active_controller()
        await drill.delete_leading_broker(writer, brokers)
    finally:
        await asyncio.to_thread(writer.stop)
    acked, _failed = writer.ledger.snapshot()
    found = await asyncio.to_thread(driver.read_partitions, list(brokers.values()),
                                    drill.s.topic, drill.s.partitions, 30.0)
    report: dict[str, Any] = drill.report
    report["audit"] = driver.audit(acked, found)
    return report


async def _roll(driver: ModuleType, drill: Any, bootstrap: Sequence[str]) -> dict[str, Any]:
    """Drill.roll_brokers on a topic of its own (the drill's is RF 2, min ISR 1 here), then
    every acknowledged record read back."""
    from kraftlog.admin import admin_client as ac

    brokers = await drill.live_brokers()
    assert sorted(brokers.values()) == sorted(bootstrap)
    topic = ac.NewTopic(name=ROLL_TOPIC, num_partitions=3, replication_factor=3,
                        configs={"min.insync.replicas": "2"})
    await drill.admin(lambda a: a.create_topics([topic]))

    async def synced() -> bool | None:
        described = await drill.admin(lambda a: a.describe_topics([ROLL_TOPIC]))
        parts = described.topics[0].partitions if described.topics else []
        return True if len(parts) == 3 and all(
            p.leader_id >= 0 and len(p.isr) == 3 for p in parts) else None
    await driver.wait_until(synced, timeout_s=20, what=f"{ROLL_TOPIC} fully in sync",
                            interval_s=0.2)
    report: dict[str, Any] = await drill.roll_brokers(ROLL_TOPIC, brokers)
    found = await asyncio.to_thread(driver.read_partitions, list(brokers.values()), ROLL_TOPIC,
                                    3, 30.0)
    report["audit"] = driver.audit(report["acked"], found)
    return report


async def _ready(condition: bool) -> bool | None:
    return True if condition else None
