"""The kind end-to-end driver: fault drills against a Helm-installed kraftlog.

Runs where the pods' DNS names resolve -- as the Job in ``e2e/kind/driver-job.yaml``
(image target ``e2e`` of docker/Dockerfile, a ServiceAccount allowed to read workloads
and get/list/delete pods) -- because brokers advertise their pod DNS names
(``<release>-broker-<n>.<release>-broker-headless.<ns>.svc.cluster.local``) and the
producer and consumer connect to those. ``e2e/kind/run.sh`` starts it after
``helm install``. It can also run from a workstation inside the cluster network
(``--kubeconfig``), never from behind a port-forward.

The drill, in order (each step bounded by a timeout; the first failure ends the run
with one ``e2e-driver: FAILED: ...`` line on stderr and exit status 1):

1. wait for the controller and broker StatefulSets and the admin Deployment to roll
   out (Kubernetes API: observed generation, ready/updated replicas, revisions);
2. through the AdminService (kraftlog's :class:`~kraftlog.admin.admin_client.AdminClient`):
   DescribeCluster, DescribeQuorum, CreateTopics (RF 3, ``min.insync.replicas`` 2);
3. start a producer with ``acks=all`` (:class:`kraftlog.client.producer.Producer`) that
   keeps writing, and remembers every acknowledged record's partition and offset;
4. move every partition one broker along (AlterPartitionReassignments; needs more
   brokers than the replication factor) and wait until no reassignment is left;
5. delete the active controller's pod through the Kubernetes API; wait for a new
   leader with a higher epoch, and for the StatefulSet to bring the pod back ready;
6. ask Jaeger's HTTP query API (``/api/traces?service=<prefix>-controller&operation=
   raft.election``) for that election: a ``won`` ``raft.election`` span with the new epoch;
7. delete the pod of the broker leading partition 0; writes must keep being
   acknowledged; wait for the pod to come back ready and its broker to be unfenced;
8. rolling restart of the broker StatefulSet (``kubectl rollout restart``) while a
   second, strict acks=all producer (no retries) writes: no Produce may be refused with
   NOT_ENOUGH_REPLICAS (the chart's "in-sync" readiness makes the roll wait for each
   broker to rejoin the ISR), and the rollout must complete;
9. stop the producers and read every partition from the beginning: every acknowledged
   record must be at its acknowledged offset.

The pure parts -- :func:`parse_args`, the rollout checks on the API objects (as
dicts), :func:`parse_election_spans` / :func:`won_elections` for Jaeger's JSON,
:func:`shifted_assignment` and :func:`audit` for the records -- are unit-tested in
``e2e/kind/test_driver.py`` against canned data. The ``kubernetes`` package (extra
``kind`` of pyproject.toml) is imported only when the driver talks to a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

logger = logging.getLogger("e2e-driver")
T = TypeVar("T")

IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
ELECTION_OPERATION = "raft.election"
OUTCOME_WON = "won"  # kraftlog.telemetry.raft_tracing.OUTCOME_WON
CLOCK_SKEW_US = 5_000_000


class DriverError(Exception):
    """A step of the drill failed; the message says which and what was seen."""


# -- settings ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Where the release is and how hard to push it. Times in seconds."""

    namespace: str
    release: str
    fullname: str
    """Resource-name prefix the chart uses (= release when it contains "kraftlog")."""
    admin: str
    """AdminService host:port."""
    jaeger_url: str
    """Jaeger query base URL (UI port), e.g. http://kraftlog-jaeger:16686."""
    jaeger_service: str
    """OTEL_SERVICE_NAME of the controllers (<otel.serviceNamePrefix>-controller)."""
    topic: str
    partitions: int
    replication_factor: int
    min_insync_replicas: int
    broker_id_offset: int
    in_cluster: bool
    kubeconfig: str | None
    context: str | None
    rollout_timeout_s: float
    step_timeout_s: float
    produce_interval_s: float
    min_racks: int = 0


def default_namespace() -> str:
    """POD_NAMESPACE, else the in-cluster ServiceAccount's namespace, else "kraftlog"."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(IN_CLUSTER_NAMESPACE_FILE, encoding="utf-8") as handle:
            return handle.read().strip() or "kraftlog"
    except OSError:
        return "kraftlog"


def chart_fullname(release: str, chart: str = "kraftlog") -> str:
    """The chart's ``kraftlog.fullname`` (no fullnameOverride): the release name when it
    contains the chart name, else ``<release>-<chart>``; at most 63 characters."""
    name = release if chart in release else f"{release}-{chart}"
    return name[:63].rstrip("-")


def _positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="driver.py", description="kind e2e fault drill against a kraftlog Helm release "
        "(see the module docstring and e2e/kind/README.md).")
    parser.add_argument("--namespace", default=None,
                        help="release namespace (default: $POD_NAMESPACE, the in-cluster "
                             "namespace, else kraftlog)")
    parser.add_argument("--release", default="kraftlog", help="Helm release name (kraftlog)")
    parser.add_argument("--admin", default=None, metavar="HOST:PORT",
                        help="AdminService (default <fullname>-admin.<ns>.svc:9095)")
    parser.add_argument("--jaeger-url", default=None, metavar="URL",
                        help="Jaeger query API (default http://<fullname>-jaeger.<ns>.svc:16686)")
    parser.add_argument("--jaeger-service", default="kraftlog-controller",
                        help="controllers' OTEL_SERVICE_NAME (kraftlog-controller)")
    parser.add_argument("--topic", default=None,
                        help="topic to create (default e2e-<unix time>; must not exist)")
    parser.add_argument("--partitions", type=_positive(int), default=6)
    parser.add_argument("--replication-factor", type=_positive(int), default=3)
    parser.add_argument("--min-insync-replicas", type=_positive(int), default=2)
    parser.add_argument("--broker-id-offset", type=int, default=100,
                        help="the chart's broker.nodeIdOffset (100)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--in-cluster", action="store_true", default=None,
                       help="use the pod's ServiceAccount (default when "
                            "KUBERNETES_SERVICE_HOST is set)")
    where.add_argument("--kubeconfig", default=None, metavar="FILE",
                       help="use this kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--context", default=None, help="kubeconfig context")
    parser.add_argument("--rollout-timeout", type=_positive(float), default=300.0, metavar="S",
                        help="seconds to wait for the workloads to roll out (300)")
    parser.add_argument("--step-timeout", type=_positive(float), default=120.0, metavar="S",
                        help="seconds each drill step may take (120)")
    parser.add_argument("--produce-interval", type=_positive(float), default=0.02, metavar="S",
                        help="pause between produced records (0.02)")
    parser.add_argument("--min-racks", type=int, default=0, metavar="N",
                        help="fail unless the brokers report at least N distinct racks "
                             "(broker.rackAwareness on zoned nodes; default 0: no check)")
    return parser


def parse_args(argv: Sequence[str], *, environ: Mapping[str, str] | None = None,
               now_s: float | None = None) -> Settings:
    """Settings from the command line (argparse exits 2 with a usage line on bad input)."""
    env = os.environ if environ is None else environ
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if args.min_insync_replicas > args.replication_factor:
        parser.error(f"--min-insync-replicas ({args.min_insync_replicas}) must be <= "
                     f"--replication-factor ({args.replication_factor})")
    if args.context and args.in_cluster:
        parser.error("--context needs a kubeconfig, not --in-cluster")
    namespace = args.namespace or default_namespace()
    fullname = chart_fullname(args.release)
    in_cluster = bool(args.in_cluster) if args.in_cluster is not None else (
        args.kubeconfig is None and args.context is None
        and bool(env.get("KUBERNETES_SERVICE_HOST")))
    stamp = int(time.time() if now_s is None else now_s)
    return Settings(
        namespace=namespace, release=args.release, fullname=fullname,
        admin=args.admin or f"{fullname}-admin.{namespace}.svc:9095",
        jaeger_url=(args.jaeger_url or f"http://{fullname}-jaeger.{namespace}.svc:16686"
                    ).rstrip("/"),
        jaeger_service=args.jaeger_service, topic=args.topic or f"e2e-{stamp}",
        partitions=args.partitions, replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas, broker_id_offset=args.broker_id_offset,
        in_cluster=in_cluster, kubeconfig=args.kubeconfig, context=args.context,
        rollout_timeout_s=args.rollout_timeout, step_timeout_s=args.step_timeout,
        produce_interval_s=args.produce_interval, min_racks=max(0, args.min_racks))


# -- rollout status (pure: the API objects as dicts) ---------------------------------------------


def statefulset_pending(sts: Mapping[str, Any]) -> str | None:
    """Why a StatefulSet has not rolled out (``kubectl rollout status`` rules), or None."""
    meta, spec, status = sts.get("metadata", {}), sts.get("spec", {}), sts.get("status") or {}
    name = meta.get("name", "?")
    want = int(spec.get("replicas", 1))
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return f"statefulset {name}: spec not yet observed"
    ready = int(status.get("readyReplicas") or 0)
    if ready < want:
        return f"statefulset {name}: {ready}/{want} pods ready"
    updated = int(status.get("updatedReplicas") or 0)
    if updated < want:
        return f"statefulset {name}: {updated}/{want} pods updated"
    current, update = status.get("currentRevision"), status.get("updateRevision")
    if update and current != update:
        return f"statefulset {name}: revision {current} -> {update} in progress"
    return None


def deployment_pending(deploy: Mapping[str, Any]) -> str | None:
    """Why a Deployment has not rolled out, or None."""
    meta, spec = deploy.get("metadata", {}), deploy.get("spec", {})
    status = deploy.get("status") or {}
    name = meta.get("name", "?")
    want = int(spec.get("replicas", 1))
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return f"deployment {name}: spec not yet observed"
    for field_name in ("updatedReplicas", "availableReplicas", "readyReplicas"):
        have = int(status.get(field_name) or 0)
        if have < want:
            return f"deployment {name}: {have}/{want} {field_name}"
    if int(status.get("replicas") or 0) > want:
        return f"deployment {name}: old replicas still terminating"
    return None


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """The pod's Ready condition is True (and it is not being deleted)."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# -- Jaeger (pure) ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionSpan:
    """One ``raft.election`` span as Jaeger's query API returns it."""

    trace_id: str
    span_id: str
    service: str
    pod: str
    """The ``k8s.pod.name`` resource attribute (the chart sets it), "" if absent."""
    node_id: int
    """``kraftlog.node.id`` resource attribute, -1 if absent."""
    start_us: int
    duration_us: int
    epoch: int
    outcome: str


def jaeger_traces_url(base: str, *, service: str, operation: str, start_us: int,
                      end_us: int, limit: int = 500) -> str:
    query = urllib.parse.urlencode({"service": service, "operation": operation,
                                    "start": start_us, "end": end_us, "limit": limit})
    return f"{base.rstrip('/')}/api/traces?{query}"


def _tags(items: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {t["key"]: t.get("value") for t in items or () if "key" in t}


def _as_int(value: Any, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def parse_election_spans(payload: Mapping[str, Any]) -> list[ElectionSpan]:
    """Every ``raft.election`` span of a ``/api/traces`` answer, oldest first.

    Jaeger's shape: ``{"data": [{"traceID", "spans": [{"traceID", "spanID",
    "operationName", "startTime" (µs), "duration" (µs), "tags": [{"key", "type",
    "value"}], "processID"}], "processes": {"p1": {"serviceName", "tags"}}}],
    "errors": null}``. A non-empty ``errors`` is a DriverError.
    """
    if payload.get("errors"):
        raise DriverError(f"Jaeger answered errors: {json.dumps(payload['errors'])[:500]}")
    found: list[ElectionSpan] = []
    for trace in payload.get("data") or ():
        processes = trace.get("processes") or {}
        for span in trace.get("spans") or ():
            if span.get("operationName") != ELECTION_OPERATION:
                continue
            process = processes.get(span.get("processID"), {})
            resource = _tags(process.get("tags"))
            tags = _tags(span.get("tags"))
            found.append(ElectionSpan(
                trace_id=str(span.get("traceID", trace.get("traceID", ""))),
                span_id=str(span.get("spanID", "")),
                service=str(process.get("serviceName", "")),
                pod=str(resource.get("k8s.pod.name", "")),
                node_id=_as_int(resource.get("kraftlog.node.id")),
                start_us=_as_int(span.get("startTime"), 0),
                duration_us=_as_int(span.get("duration"), 0),
                epoch=_as_int(tags.get("raft.epoch")),
                outcome=str(tags.get("raft.election.outcome", ""))))
    return sorted(found, key=lambda s: (s.start_us, s.span_id))


def won_elections(spans: Sequence[ElectionSpan], *, after_us: int,
                  min_epoch: int) -> list[ElectionSpan]:
    """Won elections that started at/after ``after_us`` with epoch >= ``min_epoch``."""
    return [s for s in spans
            if s.outcome == OUTCOME_WON and s.start_us >= after_us and s.epoch >= min_epoch]


# -- reassignment plan (pure) -------------------------------------------------------------------


def shifted_assignment(current: Mapping[int, Sequence[int]],
                       brokers: Sequence[int]) -> dict[int, list[int]]:
    """Every partition's replicas moved one broker along the sorted broker list.

    ``[a, b, c]`` becomes ``[a+1, b+1, c+1]`` (next broker ids, wrapping), so each
    partition gains one replica and loses one: a real data move, not a reorder. Needs
    more brokers than replicas; brokers outside ``brokers`` are a DriverError.
    """
    ring = sorted(set(brokers))
    plan: dict[int, list[int]] = {}
    for partition, replicas in sorted(current.items()):
        if len(replicas) >= len(ring):
            raise DriverError(f"partition {partition} has {len(replicas)} replicas and there "
                              f"are {len(ring)} brokers: moving it needs more brokers than "
                              "replicas (install with --set broker.replicaCount=4)")
        unknown = [r for r in replicas if r not in ring]
        if unknown:
            raise DriverError(f"partition {partition}: replicas {unknown} are not live brokers")
        plan[partition] = [ring[(ring.index(r) + 1) % len(ring)] for r in replicas]
    return plan


# -- record accounting (pure) --------------------------------------------------------------------


Position = tuple[int, int]
"""(partition, offset)."""


class Ledger:
    """What the producer was told: acknowledged records and failed sends. Thread-safe
    (producer callbacks run on its threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._acked: dict[bytes, Position] = {}
        self._failed: dict[bytes, str] = {}

    def acknowledged(self, value: bytes, partition: int, offset: int) -> None:
        with self._lock:
            if value in self._acked:
                raise DriverError(f"record {value!r} acknowledged twice")
            self._acked[value] = (partition, offset)

    def failed(self, value: bytes, error: str) -> None:
        with self._lock:
            self._failed[value] = error

    def acked_count(self) -> int:
        with self._lock:
            return len(self._acked)

    def snapshot(self) -> tuple[dict[bytes, Position], dict[bytes, str]]:
        with self._lock:
            return dict(self._acked), dict(self._failed)


@dataclass(frozen=True, slots=True, kw_only=True)
class Audit:
    """Acknowledged records checked against what the partitions hold."""

    acknowledged: int
    read: int
    lost: tuple[tuple[bytes, Position], ...]
    """Acknowledged, but nothing is at their offset (or the partition ends before it)."""
    replaced: tuple[tuple[bytes, Position, bytes | None], ...]
    """Acknowledged, but another value sits at their offset (a truncated, rewritten log)."""
    duplicated: tuple[bytes, ...]
    """Values present at more than one offset (retries after a lost answer; allowed
    without idempotence, reported)."""
    unacknowledged_present: int
    """Records read that were never acknowledged (sends whose answer was lost or that
    failed after being written): allowed."""

    @property
    def ok(self) -> bool:
        return not self.lost and not self.replaced

    def summary(self) -> str:
        return (f"acknowledged={self.acknowledged} read={self.read} lost={len(self.lost)} "
                f"replaced={len(self.replaced)} duplicated={len(self.duplicated)} "
                f"unacknowledged_present={self.unacknowledged_present}")


def audit(acked: Mapping[bytes, Position], found: Mapping[Position, bytes | None]) -> Audit:
    """Check every acknowledged record is at its acknowledged (partition, offset)."""
    lost: list[tuple[bytes, Position]] = []
    replaced: list[tuple[bytes, Position, bytes | None]] = []
    for value, position in sorted(acked.items(), key=lambda kv: kv[1]):
        if position not in found:
            lost.append((value, position))
        elif found[position] != value:
            replaced.append((value, position, found[position]))
    seen: dict[bytes, int] = {}
    for held in found.values():
        if held is not None:
            seen[held] = seen.get(held, 0) + 1
    duplicated = tuple(sorted(v for v, n in seen.items() if n > 1))
    acked_values = set(acked)
    return Audit(acknowledged=len(acked), read=len(found), lost=tuple(lost),
                 replaced=tuple(replaced), duplicated=duplicated,
                 unacknowledged_present=sum(1 for v in found.values()
                                            if v is not None and v not in acked_values))


def broker_pod_name(broker_id: int, host: str, *, fullname: str, id_offset: int) -> str:
    """The pod of a broker: the first DNS label of its advertised host when that is a
    broker pod name (the chart advertises ``<pod>.<headless>.<ns>.svc...``), else from
    the chart's rule node.id = ordinal + broker.nodeIdOffset."""
    label = host.split(".", 1)[0]
    prefix = f"{fullname}-broker-"
    if label.startswith(prefix) and label[len(prefix):].isdigit():
        return label
    if broker_id < id_offset:
        raise DriverError(f"broker id {broker_id} is below --broker-id-offset {id_offset}")
    return f"{prefix}{broker_id - id_offset}"


# -- the cluster (I/O) ---------------------------------------------------------------------------


async def wait_until(probe: Callable[[], Awaitable[T | None]], *, timeout_s: float,
                     what: str, interval_s: float = 1.0) -> T:
    """Poll ``probe`` until it returns a value; DriverError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while True:
        try:
            value = await probe()
        except DriverError:
            raise
        except Exception as exc:  # transient API/RPC errors: retry, report the last
            value, last_error = None, f"{type(exc).__name__}: {exc}"
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise DriverError(f"timed out after {timeout_s:.0f}s waiting for {what}"
                              + (f" (last error: {last_error})" if last_error else ""))
        await asyncio.sleep(interval_s)


class KubeApi(Protocol):
    """The Kubernetes calls the drill makes; objects come back as API-shaped dicts.

    :class:`Kube` is the real one; tests/test_chart_pods.py answers them from local pods.
    """

    def statefulset(self, name: str) -> dict[str, Any]: ...

    def deployment(self, name: str) -> dict[str, Any]: ...

    def pod(self, name: str) -> dict[str, Any] | None:
        """The pod, or None when it does not exist."""

    def delete_pod(self, name: str) -> str:
        """Delete the pod as ``kubectl delete pod`` does; the deleted pod's uid."""

    def restart_statefulset(self, name: str) -> None:
        """``kubectl rollout restart``: a new pod-template annotation, so the StatefulSet
        controller replaces every pod, highest ordinal first, each after the previous
        one is Ready."""


def not_enough_replicas(failed: Mapping[bytes, str]) -> dict[bytes, str]:
    """Failed sends refused with NOT_ENOUGH_REPLICAS (or ..._AFTER_APPEND)."""
    return {value: why for value, why in failed.items() if "NOT_ENOUGH_REPLICAS" in why}


class Kube:
    """The few Kubernetes API calls the drill makes (kubernetes client, sync, short)."""

    def __init__(self, settings: Settings) -> None:
        try:
            from kubernetes import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
                client,
                config,
            )
        except ImportError:
            raise DriverError("the kubernetes package is missing: pip install "
                              "'kraftlog[kind]' (or use the image's e2e target)") from None
        try:
            if settings.in_cluster:
                config.load_incluster_config()
            else:
                config.load_kube_config(config_file=settings.kubeconfig,
                                        context=settings.context)
        except config.ConfigException as exc:
            raise DriverError(f"cannot configure the Kubernetes client: {exc}") from None
        self.namespace = settings.namespace
        self._api = client.ApiClient()
        self._core = client.CoreV1Api(self._api)
        self._apps = client.AppsV1Api(self._api)

    def _dict(self, obj: Any) -> dict[str, Any]:
        value: dict[str, Any] = self._api.sanitize_for_serialization(obj)
        return value

    def statefulset(self, name: str) -> dict[str, Any]:
        return self._dict(self._apps.read_namespaced_stateful_set_status(name, self.namespace))

    def deployment(self, name: str) -> dict[str, Any]:
        return self._dict(self._apps.read_namespaced_deployment_status(name, self.namespace))

    def pod(self, name: str) -> dict[str, Any] | None:
        from kubernetes.client.rest import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            ApiException,
        )
        try:
            return self._dict(self._core.read_namespaced_pod(name, self.namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def delete_pod(self, name: str) -> str:
        """Delete a pod (default grace period, as ``kubectl delete pod``); its uid."""
        pod = self.pod(name)
        if pod is None:
            raise DriverError(f"pod {self.namespace}/{name} does not exist")
        self._core.delete_namespaced_pod(name, self.namespace)
        return str(pod["metadata"]["uid"])

    def restart_statefulset(self, name: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._apps.patch_namespaced_stateful_set(name, self.namespace, {"spec": {"template": {
            "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}}}})


async def _acked_at_least(writer: Writer, count: int) -> bool | None:
    return True if writer.ledger.acked_count() >= count else None


def _admin_call(address: str, call: Callable[[Any], Awaitable[T]], timeout_ms: int) -> Awaitable[T]:
    from kraftlog.admin import admin_client

    async def run() -> T:
        async with admin_client.AdminClient(address, timeout_ms=timeout_ms) as admin:
            return await call(admin)
    return run()


class Writer:
    """An acks=all producer writing numbered records from a thread into a Ledger.

    ``strict``: no retries (and so no idempotence), so every Produce error reaches the
    ledger as a failed send named for its code -- how the rolling restart sees whether
    any Produce was refused with NOT_ENOUGH_REPLICAS, which retries would hide.
    """

    def __init__(self, bootstrap: Sequence[str], topic: str, interval_s: float, *,
                 strict: bool = False, prefix: str = "e2e") -> None:
        from kraftlog.client import config as client_config
        from kraftlog.client import producer as client_producer

        self.ledger = Ledger()
        self._topic = topic
        self._interval_s = interval_s
        self._prefix = prefix
        retry = {"retries": 0, "enable_idempotence": False} if strict else {}
        self._producer = client_producer.Producer(client_config.ProducerConfig(
            bootstrap_servers=tuple(bootstrap), acks=client_config.Acks.ALL, linger_ms=5,
            request_timeout_ms=10_000, delivery_timeout_ms=120_000, **retry))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="e2e-writer", daemon=True)
        self.sent = 0

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            value = f"{self._prefix}-{self.sent:08d}".encode()
            self.sent += 1
            try:
                future = self._producer.send(self._topic, value, key=value[-2:])
            except Exception as exc:  # recorded; the drill judges the ledger
                self.ledger.failed(value, f"send: {exc}")
            else:
                future.add_done_callback(functools.partial(self._on_done, value))
            self._stop.wait(self._interval_s)

    def _on_done(self, value: bytes, future: Any) -> None:
        error = future.exception(0)
        if error is None:
            meta = future.result(0)
            self.ledger.acknowledged(value, meta.partition, meta.offset)
        else:
            self.ledger.failed(value, str(error))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._producer.flush(timeout_ms=120_000)
        self._producer.close(timeout_ms=10_000)


def read_partitions(bootstrap: Sequence[str], topic: str, partitions: int,
                    timeout_s: float) -> dict[Position, bytes | None]:
    """Every record of the topic, from the beginning to each partition's high watermark."""
    from kraftlog.client import config as client_config
    from kraftlog.client import consumer as client_consumer
    from kraftlog.ids import TopicPartition

    cfg = client_config.ConsumerConfig(bootstrap_servers=tuple(bootstrap),
                                       auto_offset_reset=client_config.OffsetReset.EARLIEST)
    found: dict[Position, bytes | None] = {}
    with client_consumer.Consumer(cfg) as consumer:
        tps = [TopicPartition(topic=topic, partition=p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        ends = consumer.end_offsets(tps, timeout_ms=int(timeout_s * 1000))
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise DriverError(f"reading {topic} back stalled after {len(found)} records")
            for record in consumer.poll(timeout_ms=1000):
                found[(record.partition, record.offset)] = record.value
    return found


def fetch_json(url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            payload: dict[str, Any] = json.loads(answer.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ConnectionError(f"GET {url}: {exc}") from exc
    return payload


# -- the drill ----------------------------------------------------------------------------------


class Drill:
    """The steps of the module docstring, one method each; :meth:`run` does them in order
    and returns the report (also filled step by step in :attr:`report`)."""

    def __init__(self, settings: Settings, kube: KubeApi) -> None:
        self.s = settings
        self.kube = kube
        self.report: dict[str, Any] = {"topic": settings.topic}

    def admin(self, call: Callable[[Any], Awaitable[T]], timeout_ms: int = 30_000) -> Awaitable[T]:
        return _admin_call(self.s.admin, call, timeout_ms)

    async def wait_rollouts(self) -> None:
        s = self.s
        checks: list[tuple[str, Callable[[], str | None]]] = [
            ("controllers", lambda: statefulset_pending(self.kube.statefulset(f"{s.fullname}-controller"))),
            ("brokers", lambda: statefulset_pending(self.kube.statefulset(f"{s.fullname}-broker"))),
            ("admin", lambda: deployment_pending(self.kube.deployment(f"{s.fullname}-admin"))),
        ]
        for what, check in checks:
            last: list[str] = []

            async def rolled_out(check: Callable[[], str | None] = check,
                                 last: list[str] = last) -> bool | None:
                pending = await asyncio.to_thread(check)
                if pending:
                    last[:] = [pending]
                    return None
                return True
            try:
                await wait_until(rolled_out, timeout_s=s.rollout_timeout_s,
                                 what=f"the {what} rollout")
            except DriverError as exc:
                raise DriverError(f"{exc}: {last[0] if last else ''}") from None
            logger.info("rolled out: %s", what)

    async def check_racks(self) -> dict[int, str]:
        """Broker id -> rack (the chart's rack init container sets it from the node's zone);
        a DriverError when fewer than ``--min-racks`` distinct racks show."""
        described = await self.admin(lambda a: a.describe_cluster())
        racks = {b.broker_id: b.rack for b in described.brokers}
        self.report["racks"] = {str(b): r for b, r in sorted(racks.items())}
        distinct = {r for r in racks.values() if r}
        if len(distinct) < self.s.min_racks:
            raise DriverError(f"the brokers report {len(distinct)} rack(s) {sorted(distinct)}, "
                              f"fewer than --min-racks {self.s.min_racks}: {racks}")
        return racks

    async def live_brokers(self) -> dict[int, str]:
        """Unfenced broker id -> its advertised host:port."""
        described = await self.admin(lambda a: a.describe_cluster())
        return {b.broker_id: f"{b.endpoints[0].host}:{b.endpoints[0].port}"
                for b in described.brokers if not b.is_fenced and b.endpoints}

    async def quorum(self) -> tuple[int, int]:
        view = await self.admin(lambda a: a.describe_quorum())
        return int(view.leader_id), int(view.leader_epoch)

    async def assignment(self) -> dict[int, tuple[int, list[int]]]:
        """Partition -> (leader, replicas) of the drill's topic."""
        described = await self.admin(lambda a: a.describe_topics([self.s.topic]))
        return {p.partition_index: (p.leader_id, list(p.replicas))
                for p in described.topics[0].partitions}

    async def create_topic(self) -> None:
        from kraftlog.admin import admin_client

        topic = admin_client.NewTopic(
            name=self.s.topic, num_partitions=self.s.partitions,
            replication_factor=self.s.replication_factor,
            configs={"min.insync.replicas": str(self.s.min_insync_replicas)})
        await self.admin(lambda a: a.create_topics([topic]))

        async def has_leaders() -> bool | None:
            parts = await self.assignment()
            return True if len(parts) == self.s.partitions and all(
                leader >= 0 for leader, _ in parts.values()) else None
        await wait_until(has_leaders, timeout_s=self.s.step_timeout_s,
                         what=f"leaders for every partition of {self.s.topic}")

    async def move_partitions(self, brokers: Sequence[int]) -> None:
        current = {p: replicas for p, (_, replicas) in (await self.assignment()).items()}
        plan = shifted_assignment(current, brokers)
        await self.admin(lambda a: a.alter_partition_reassignments(
            {(self.s.topic, p): r for p, r in plan.items()}))
        logger.info("reassigning %s: %s", self.s.topic, plan)

        async def done() -> bool | None:
            progress = await self.admin(lambda a: a.list_partition_reassignments(
                {self.s.topic: []}))
            if any(t.partitions for t in progress.topics):
                return None
            now = {p: replicas for p, (_, replicas) in (await self.assignment()).items()}
            return True if all(sorted(now[p]) == sorted(r) for p, r in plan.items()) else None
        await wait_until(done, timeout_s=self.s.step_timeout_s, what="the reassignment")
        self.report["reassigned"] = {str(p): r for p, r in plan.items()}

    async def recreated(self, pod: str, old_uid: str) -> None:
        async def ready() -> bool | None:
            found = await asyncio.to_thread(self.kube.pod, pod)
            return True if found and found["metadata"]["uid"] != old_uid \
                and pod_ready(found) else None
        await wait_until(ready, timeout_s=self.s.step_timeout_s,
                         what=f"pod {pod} recreated and ready")

    async def delete_active_controller(self) -> tuple[int, int, int]:
        """Delete the active controller's pod; (old leader, new leader, new epoch), and
        the deletion time goes into the report for the Jaeger query."""
        old_leader, old_epoch = await self.quorum()
        pod = f"{self.s.fullname}-controller-{old_leader}"  # controller node.id = ordinal
        deleted_us = time.time_ns() // 1000
        uid = await asyncio.to_thread(self.kube.delete_pod, pod)
        logger.info("deleted %s (leader %d, epoch %d)", pod, old_leader, old_epoch)

        async def new_leader() -> tuple[int, int] | None:
            leader, epoch = await self.quorum()
            return (leader, epoch) if leader >= 0 and epoch > old_epoch else None
        leader, epoch = await wait_until(new_leader, timeout_s=self.s.step_timeout_s,
                                         what="a new active controller")
        self.report["controller_failover"] = {"deleted_pod": pod, "old_epoch": old_epoch,
                                              "new_leader": leader, "new_epoch": epoch,
                                              "deleted_at_us": deleted_us}
        await self.recreated(pod, uid)
        return old_leader, leader, epoch

    async def election_in_jaeger(self, *, after_us: int, epoch: int) -> ElectionSpan:
        s = self.s

        async def traced() -> ElectionSpan | None:
            url = jaeger_traces_url(s.jaeger_url, service=s.jaeger_service,
                                    operation=ELECTION_OPERATION, start_us=after_us,
                                    end_us=time.time_ns() // 1000 + 60_000_000)
            spans = parse_election_spans(await asyncio.to_thread(fetch_json, url))
            won = won_elections(spans, after_us=after_us, min_epoch=epoch)
            return won[0] if won else None
        span = await wait_until(traced, timeout_s=s.step_timeout_s, interval_s=3.0,
                                what=f"a won {ELECTION_OPERATION} span with epoch >= {epoch} "
                                     f"in Jaeger ({s.jaeger_url}, service {s.jaeger_service})")
        self.report["jaeger_election"] = dataclasses.asdict(span)
        return span

    async def delete_leading_broker(self, writer: Writer, brokers: Mapping[int, str]) -> None:
        async def partition_0_leader() -> int | None:
            leader = (await self.assignment())[0][0]
            return leader if leader in brokers else None
        leader = await wait_until(partition_0_leader, timeout_s=self.s.step_timeout_s,
                                  what=f"a live leader for {self.s.topic}-0")
        pod = broker_pod_name(leader, brokers[leader].rsplit(":", 1)[0],
                              fullname=self.s.fullname, id_offset=self.s.broker_id_offset)
        uid = await asyncio.to_thread(self.kube.delete_pod, pod)
        before = writer.ledger.acked_count()
        logger.info("deleted %s (broker %d, leader of %s-0)", pod, leader, self.s.topic)

        async def still_writing() -> bool | None:
            return True if writer.ledger.acked_count() >= before + 100 else None
        await wait_until(still_writing, timeout_s=self.s.step_timeout_s,
                         what="acks=all writes continuing without the deleted broker")
        await self.recreated(pod, uid)

        async def unfenced() -> bool | None:
            return True if leader in await self.live_brokers() else None
        await wait_until(unfenced, timeout_s=self.s.step_timeout_s,
                         what=f"broker {leader} unfenced again")
        self.report["broker_deleted"] = {"pod": pod, "broker_id": leader}

    async def roll_brokers(self, topic: str, brokers: Mapping[int, str]) -> dict[str, Any]:
        """Rolling restart of every broker under acks=all load on ``topic`` (replication
        factor 3, min.insync.replicas 2): the chart's "in-sync" readiness must keep the
        roll from restarting a broker while the previous one is still out of the ISR, so
        no Produce is refused with NOT_ENOUGH_REPLICAS. A strict writer (no retries)
        sees every refusal; its acknowledged records are returned in the report."""
        s = self.s
        sts = f"{s.fullname}-broker"
        writer = Writer(list(brokers.values()), topic, s.produce_interval_s, strict=True,
                        prefix="roll")
        writer.start()
        started = time.monotonic()
        stuck: DriverError | None = None
        try:
            await wait_until(lambda: _acked_at_least(writer, 20), timeout_s=s.step_timeout_s,
                             what=f"acks=all records on {topic} before the roll",
                             interval_s=0.1)
            await asyncio.to_thread(self.kube.restart_statefulset, sts)
            logger.info("rolling restart of %s", sts)
            await asyncio.sleep(1.0)  # the controller observes the new template
            try:
                await self.wait_rollouts()
                before = writer.ledger.acked_count()
                await wait_until(lambda: _acked_at_least(writer, before + 20),
                                 timeout_s=s.step_timeout_s,
                                 what=f"acks=all writes on {topic} after the roll",
                                 interval_s=0.1)
            except DriverError as exc:
                stuck = exc  # reported with the refusals seen until then
        finally:
            await asyncio.to_thread(writer.stop)
        acked, failed = writer.ledger.snapshot()
        refused = not_enough_replicas(failed)
        report = {"topic": topic, "seconds": round(time.monotonic() - started, 1),
                  "acknowledged": len(acked), "failed_sends": len(failed),
                  "not_enough_replicas": len(refused), "acked": acked}
        self.report["broker_roll"] = {k: v for k, v in report.items() if k != "acked"}
        problems = [str(stuck)] if stuck is not None else []
        if refused:
            first = next(iter(refused.items()))
            problems.append(f"{len(refused)} Produce calls failed with NOT_ENOUGH_REPLICAS "
                            f"(first: {first[0]!r}: {first[1]})")
        if problems:
            raise DriverError("the rolling restart: " + "; ".join(problems))
        return report

    async def run(self) -> dict[str, Any]:
        s = self.s
        await self.wait_rollouts()
        brokers = await wait_until(self.live_brokers, timeout_s=s.step_timeout_s,
                                   what="registered brokers")
        leader, epoch = await self.quorum()
        self.report["initial"] = {"brokers": sorted(brokers), "leader": leader, "epoch": epoch}
        await self.check_racks()
        await self.create_topic()
        writer = Writer(list(brokers.values()), s.topic, s.produce_interval_s)
        writer.start()
        try:
            await self.move_partitions(sorted(brokers))
            _, _, new_epoch = await self.delete_active_controller()
            # Slack for clock skew between this pod and the controllers' nodes; the epoch
            # is what identifies the election.
            await self.election_in_jaeger(
                after_us=self.report["controller_failover"]["deleted_at_us"] - CLOCK_SKEW_US,
                epoch=new_epoch)
            await self.delete_leading_broker(writer, brokers)
            rolled = await self.roll_brokers(s.topic, brokers)
        finally:
            await asyncio.to_thread(writer.stop)
        acked, failed = writer.ledger.snapshot()
        acked.update(rolled["acked"])
        found = await asyncio.to_thread(read_partitions, list(brokers.values()), s.topic,
                                        s.partitions, s.step_timeout_s)
        result = audit(acked, found)
        self.report["records"] = {"sent": writer.sent, "failed_sends": len(failed),
                                  "audit": result.summary()}
        if not result.ok:
            raise DriverError(f"acknowledged records missing: {result.summary()}; first lost "
                              f"{list(result.lost[:3])}, first replaced {list(result.replaced[:3])}")
        if result.acknowledged == 0:
            raise DriverError("no record was acknowledged during the drill")
        return self.report


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s e2e-driver: %(message)s")
    try:
        report = asyncio.run(Drill(settings, Kube(settings)).run())
    except DriverError as exc:
        print(f"e2e-driver: FAILED: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # one line, never a traceback
        print(f"e2e-driver: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2, default=str))
    print("e2e-driver: passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
