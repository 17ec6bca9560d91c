"""The Helm chart (charts/kraftlog) checked with a real Helm and the program itself.

Kubernetes cannot run here (no Docker daemon), so the chart is held to account in
three ways:

- ``helm lint --strict`` and ``helm template`` with a real Helm 3.17, installed by
  ``scripts/install-helm.sh`` (the same script a fresh CI machine runs; when it
  fails, for lack of network say, the tests fail with its message: never skip);
- every rendered object validated with ``kubernetes-validate --strict`` against
  several Kubernetes versions, for default values and each ``ci/values-*.yaml``;
- facts read back from the rendered YAML: the voters string, node ids, PVCs and
  their mounts, probes, PDBs -- and the init containers' shell scripts *executed*
  locally (volumes mapped to temp dirs) with the real ``kraftlog storage format``,
  their properties files parsed with :mod:`kraftlog.config`, so the chart and the
  program cannot drift apart.
"""

from __future__ import annotations

import base64
import functools
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kraftlog import config

REPO = pathlib.Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "kraftlog"
INSTALL_HELM = REPO / "scripts" / "install-helm.sh"
OVERLAYS = sorted(p.name for p in (CHART / "ci").glob("values-*.yaml"))
VALUE_SETS = ["default", *OVERLAYS]
# The oldest version the chart supports well (gRPC probes, PVC retention), a middle
# one and the newest kubernetes-validate knows.
K8S_VERSIONS = ["1.29.0", "1.33.0", "1.37.0"]
# Custom resources have no schema in kubernetes-validate; checked by hand below.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}

RELEASE = "kraftlog"
NAMESPACE = "streaming"
HELM_TIMEOUT_S = 120


# --- helm -------------------------------------------------------------------------------


@functools.cache
def _install_helm() -> tuple[str | None, str]:
    """(path of the pinned helm, "") or (None, why not); runs the installer once per session."""
    try:
        proc = subprocess.run([str(INSTALL_HELM)], capture_output=True, text=True,
                              timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"scripts/install-helm.sh could not run: {exc}"
    if proc.returncode != 0:
        return None, (f"scripts/install-helm.sh failed (exit {proc.returncode}); helm is "
                      f"needed for the chart tests:\n{proc.stderr.strip()}")
    return proc.stdout.strip().splitlines()[-1], ""


def helm_binary() -> str:
    """Path of the pinned helm; fails the test (never skips) with the installer's message."""
    path, why = _install_helm()
    if path is None:
        pytest.fail(why, pytrace=False)
    return path


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_binary(), *args], capture_output=True, text=True,
                          timeout=HELM_TIMEOUT_S, check=False, cwd=REPO)


CLUSTER_ID = "QUJDREVGR0hJSktMTU5PUA"
"""An offline render (helm template) needs a cluster id from values: the tests' own."""


def value_args(value_set: str, sets: Mapping[str, str] | None = None) -> list[str]:
    args = []
    if value_set != "default":
        args += ["-f", str(CHART / "ci" / value_set)]
    # --set beats -f whatever the order: only where the overlay has no clusterId of its own.
    overlay = {} if value_set == "default" else yaml.safe_load(
        (CHART / "ci" / value_set).read_text()) or {}
    if "clusterId" not in overlay and "clusterId" not in (sets or {}):
        args += ["--set", f"clusterId={CLUSTER_ID}"]
    for key, value in (sets or {}).items():
        args += ["--set", f"{key}={value}"]
    return args


@functools.cache
def _render_cached(value_set: str, sets: tuple[tuple[str, str], ...]) -> str:
    proc = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                    *value_args(value_set, dict(sets)))
    assert proc.returncode == 0, f"helm template ({value_set}, {sets}) failed:\n{proc.stderr}"
    return proc.stdout


def render(value_set: str = "default", **sets: str) -> list[dict[str, Any]]:
    """Rendered objects (a fresh copy each call) for a value set plus --set overrides."""
    text = _render_cached(value_set, tuple(sorted(sets.items())))
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render_fails(*args: str) -> str:
    proc = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    assert proc.returncode != 0, f"helm template {args} should have failed"
    return proc.stderr


def find(docs: Iterable[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def container(pod_spec: Mapping[str, Any], name: str, *, init: bool = False) -> dict[str, Any]:
    key = "initContainers" if init else "containers"
    found = [c for c in pod_spec.get(key, []) if c["name"] == name]
    assert len(found) == 1, f"no {key[:-1]} named {name}"
    return found[0]


def properties(docs: Sequence[dict[str, Any]], role: str) -> dict[str, str]:
    """A role's properties file from the ConfigMap, parsed by the program's own parser."""
    data = find(docs, "ConfigMap", f"{RELEASE}-config")["data"]
    values, _ = config.parse_properties(data[f"{role}.properties"], origin=f"{role}.properties")
    return values


def voters_for(count: int, *, port: int = 9093) -> str:
    return ",".join(
        f"{i}@{RELEASE}-controller-{i}.{RELEASE}-controller-headless.{NAMESPACE}"
        f".svc.cluster.local:{port}" for i in range(count))


# --- lint, render, validate ---------------------------------------------------------------


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_helm_lint_strict_passes(value_set: str) -> None:
    proc = run_helm("lint", "--strict", str(CHART), *value_args(value_set))
    assert proc.returncode == 0, f"helm lint --strict ({value_set}):\n{proc.stdout}{proc.stderr}"


@pytest.mark.parametrize("k8s_version", K8S_VERSIONS)
@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_rendered_objects_pass_strict_kubernetes_schema(value_set: str, k8s_version: str) -> None:
    docs = render(value_set)
    failures = []
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, k8s_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            failures.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message} "
                            f"at {list(exc.path)}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            failures.append(f"{doc['kind']}/{doc['metadata']['name']}: no schema ({exc})")
    assert not failures, "\n".join(failures)


def test_every_overlay_is_rendered_by_these_tests() -> None:
    assert {"values-5-controllers.yaml", "values-no-jaeger.yaml",
            "values-networkpolicy.yaml"} <= set(OVERLAYS)


# --- schema and template rejections ---------------------------------------------------


@pytest.mark.parametrize("count", ["1", "2", "4", "6", "7"])
def test_schema_rejects_controller_counts_other_than_3_or_5(count: str) -> None:
    stderr = render_fails("--set", f"controller.replicaCount={count}")
    assert "controller.replicaCount" in stderr and "3, 5" in stderr, stderr


@pytest.mark.parametrize("key", ["replicas", "controller.replicas", "broker.persistence.sizee",
                                 "jaeger.service.port"])
def test_schema_rejects_unknown_keys(key: str) -> None:
    stderr = render_fails("--set", f"{key}=1")
    leaf = key.rsplit(".", 1)[-1]
    assert f"Additional property {leaf} is not allowed" in stderr, stderr


def test_schema_rejects_a_malformed_cluster_id() -> None:
    stderr = render_fails("--set", "clusterId=not-a-uuid")
    assert "clusterId" in stderr, stderr


@pytest.mark.parametrize(("sets", "message"), [
    ({"broker.minInsyncReplicas": "3", "broker.defaultReplicationFactor": "2"},
     "broker.minInsyncReplicas (3) must be <= broker.defaultReplicationFactor (2)"),
    ({"broker.replicaCount": "1"},
     "broker.defaultReplicationFactor (3) must be <= broker.replicaCount (1)"),
    ({"metrics.serviceMonitor.enabled": "true"}, "metrics.serviceMonitor.enabled needs metrics.enabled"),
    ({"controller.replicaCount": "5", "broker.nodeIdOffset": "4"},
     "broker.nodeIdOffset: Must be greater than or equal to 5"),
])
def test_inconsistent_values_fail_with_a_clear_message(sets: dict[str, str], message: str) -> None:
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    assert message in render_fails(*args)


# --- controller quorum ------------------------------------------------------------------------


@pytest.mark.parametrize(("value_set", "count"), [("default", 3), ("values-5-controllers.yaml", 5)])
def test_quorum_voters_list_every_controller_pod_by_headless_dns(value_set: str, count: int) -> None:
    docs = render(value_set)
    for role in ("controller", "broker"):
        assert properties(docs, role)["controller.quorum.voters"] == voters_for(count)
    sts = find(docs, "StatefulSet", f"{RELEASE}-controller")
    assert sts["spec"]["replicas"] == count
    assert sts["spec"]["serviceName"] == f"{RELEASE}-controller-headless"
    bootstrap = properties(docs, "admin")["controller.quorum.bootstrap.servers"]
    assert bootstrap == ",".join(v.split("@", 1)[1] for v in voters_for(count).split(","))


def test_controller_headless_service_publishes_not_ready_pods() -> None:
    svc = find(render(), "Service", f"{RELEASE}-controller-headless")
    assert svc["spec"]["clusterIP"] == "None"
    # Voters must resolve each other before any of them is ready (no leader yet).
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert [p["port"] for p in svc["spec"]["ports"]] == [9093]


def test_controller_statefulset_shape() -> None:
    sts = find(render(), "StatefulSet", f"{RELEASE}-controller")
    spec = sts["spec"]
    assert spec["podManagementPolicy"] == "Parallel"
    pod = spec["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 30
    main = container(pod, "controller")
    assert main["command"] == ["kraftlog"]
    assert main["args"] == ["controller", "--config", "/etc/kraftlog/server.properties"]
    assert main["lifecycle"]["preStop"]["exec"]["command"][:2] == ["/bin/sh", "-c"]
    assert [p["containerPort"] for p in main["ports"]] == [9093]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["labelSelector"]["matchLabels"][
        "app.kubernetes.io/component"] == "controller"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert main["securityContext"]["readOnlyRootFilesystem"] is True


def test_hard_anti_affinity_overlay_requires_separate_nodes() -> None:
    sts = find(render("values-5-controllers.yaml"), "StatefulSet", f"{RELEASE}-controller")
    anti = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == \
        "kubernetes.io/hostname"


@pytest.mark.parametrize(("role", "port"), [("controller", 9093), ("broker", 9092)])
def test_probes_are_grpc_health_checks_on_the_serving_port(role: str, port: int) -> None:
    pod = find(render(), "StatefulSet", f"{RELEASE}-{role}")["spec"]["template"]["spec"]
    main = container(pod, role)
    assert main["readinessProbe"]["grpc"]["port"] == port
    assert main["livenessProbe"]["grpc"] == {"port": port, "service": "liveness"}
    # The roll-safe readiness the process serves (kraftlog.health_server): a broker back
    # in the ISR of what it hosts, a controller caught up to the leader's high watermark.
    from kraftlog import health_server
    assert main["readinessProbe"]["grpc"]["service"] == {
        "broker": health_server.IN_SYNC_SERVICE_NAME,
        "controller": health_server.CAUGHT_UP_SERVICE_NAME}[role]
    # The startup probe covers log recovery (before gRPC serves): liveness waits for it.
    startup = main["startupProbe"]
    assert startup["grpc"] == {"port": port, "service": "liveness"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    admin = container(find(render(), "Deployment", f"{RELEASE}-admin")["spec"]["template"]["spec"],
                      "admin")
    assert admin["readinessProbe"]["grpc"]["port"] == 9095


@pytest.mark.parametrize(("role", "volume", "path", "keys"), [
    ("controller", "metadata", "/var/lib/kraftlog/metadata", ("metadata.log.dir", "log.dirs")),
    ("broker", "data", "/var/lib/kraftlog/data", ("log.dirs", "metadata.log.dir")),
])
def test_pvc_templates_mount_where_the_config_points(role: str, volume: str, path: str,
                                                     keys: tuple[str, ...]) -> None:
    docs = render()
    sts = find(docs, "StatefulSet", f"{RELEASE}-{role}")
    claims = sts["spec"]["volumeClaimTemplates"]
    assert [c["metadata"]["name"] for c in claims] == [volume]
    assert claims[0]["spec"]["accessModes"] == ["ReadWriteOnce"]
    pod = sts["spec"]["template"]["spec"]
    for name, init in ((role, False), ("format", True)):
        mounts = {m["name"]: m["mountPath"] for m in container(pod, name, init=init)["volumeMounts"]}
        assert mounts[volume] == path
    props = properties(docs, role)
    for key in keys:
        assert props[key] == path
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_pdbs_allow_one_voluntary_disruption_and_select_the_pods(role: str) -> None:
    docs = render()
    pdb = find(docs, "PodDisruptionBudget", f"{RELEASE}-{role}")
    assert pdb["spec"]["maxUnavailable"] == 1
    labels = find(docs, "StatefulSet", f"{RELEASE}-{role}")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


# --- init containers, executed ------------------------------------------------------------


def _kraftlog_on_path(tmp_path: pathlib.Path) -> dict[str, str]:
    """Environment with this venv's ``kraftlog`` first on PATH."""
    exe = shutil.which("kraftlog", path=str(pathlib.Path(sys.executable).parent))
    assert exe, "the kraftlog console script is not installed in this environment"
    return {"PATH": f"{pathlib.Path(exe).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(tmp_path)}


def _run_init(script: str, *, pod_name: str, env: Mapping[str, str],
              remap: Mapping[str, pathlib.Path]) -> subprocess.CompletedProcess[str]:
    """Run an init container's ``sh -ec`` script as the pod would, paths remapped to tmp."""
    for pod_path, local in sorted(remap.items(), key=lambda kv: -len(kv[0])):
        script = script.replace(pod_path, str(local))
    return subprocess.run(["/bin/sh", "-ec", script], env={**env, "HOSTNAME": pod_name},
                          capture_output=True, text=True, timeout=60, check=False)


def _secret_cluster_id(docs: Sequence[dict[str, Any]]) -> str:
    secret = find(docs, "Secret", f"{RELEASE}-cluster-id")
    return base64.b64decode(secret["data"]["cluster-id"]).decode()


@pytest.mark.parametrize(("role", "ordinal", "node_id"), [
    ("controller", 0, 0), ("controller", 2, 2), ("broker", 0, 100), ("broker", 2, 102)])
def test_init_containers_write_node_config_and_format_the_volume(
        tmp_path: pathlib.Path, role: str, ordinal: int, node_id: int) -> None:
    docs = render()
    sts = find(docs, "StatefulSet", f"{RELEASE}-{role}")
    pod = sts["spec"]["template"]["spec"]
    pod_name = f"{RELEASE}-{role}-{ordinal}"
    data_path = sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    template_dir = tmp_path / "template"
    template_dir.mkdir()
    for key, text in find(docs, "ConfigMap", f"{RELEASE}-config")["data"].items():
        (template_dir / key).write_text(text)
    remap = {"/etc/kraftlog/template": template_dir, "/etc/kraftlog": tmp_path / "etc",
             data_path: tmp_path / "data"}
    (tmp_path / "etc").mkdir()
    env = _kraftlog_on_path(tmp_path)

    cfg = container(pod, "config", init=True)
    assert cfg["command"] == ["/bin/sh", "-ec"]
    proc = _run_init(cfg["args"][0], pod_name=pod_name, env=env, remap=remap)
    assert proc.returncode == 0, proc.stderr
    props, _ = config.load_properties(tmp_path / "etc" / "server.properties")
    assert props["node.id"] == str(node_id)
    assert props["process.roles"] == role
    listener = "CONTROLLER" if role == "controller" else "PLAINTEXT"
    port = 9093 if role == "controller" else 9092
    assert props["advertised.listeners"] == (
        f"{listener}://{pod_name}.{RELEASE}-{role}-headless.{NAMESPACE}.svc.cluster.local:{port}")

    fmt = container(pod, "format", init=True)
    assert fmt["command"] == ["/bin/sh", "-ec"]
    assert fmt["args"][0].startswith("exec kraftlog storage format --cluster-id=")
    secret_ref = fmt["env"][0]["valueFrom"]["secretKeyRef"]
    assert (fmt["env"][0]["name"], secret_ref["name"], secret_ref["key"]) == (
        "KRAFTLOG_CLUSTER_ID", f"{RELEASE}-cluster-id", "cluster-id")
    cluster_id = _secret_cluster_id(docs)
    env = {**env, "KRAFTLOG_CLUSTER_ID": cluster_id}
    for attempt in (1, 2):  # the second run is a pod restart: must be a no-op, not an error
        proc = _run_init(fmt["args"][0], pod_name=pod_name, env=env, remap=remap)
        assert proc.returncode == 0, f"format attempt {attempt}:\n{proc.stdout}{proc.stderr}"
    meta, _ = config.load_properties(tmp_path / "data" / "meta.properties")
    assert meta["node.id"] == str(node_id)
    assert meta["cluster.id"] == cluster_id
    assert (tmp_path / "data" / "__cluster_metadata-0").is_dir()

    # A volume from another cluster is refused, not silently reused.
    proc = _run_init(fmt["args"][0], pod_name=pod_name,
                     env={**env, "KRAFTLOG_CLUSTER_ID": "MkU3OEVBNTcwNTJENDM2Qg"}, remap=remap)
    assert proc.returncode != 0


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_format_init_container_takes_a_cluster_id_that_starts_with_a_dash(
        tmp_path: pathlib.Path, role: str) -> None:
    # 1 in 64 base64url ids starts with "-"; `--cluster-id -x...` would read as a flag.
    # (The chart's generator avoids a leading "-" as Kafka's Uuid.randomUuid does, but an
    # id from values or an existing Secret may have one.)
    sts = find(render(), "StatefulSet", f"{RELEASE}-{role}")
    fmt = container(sts["spec"]["template"]["spec"], "format", init=True)
    data_path = fmt["volumeMounts"][0]["mountPath"]
    cluster_id = "-" + "MkU3OEVBNTcwNTJENDM2Qg"[1:]
    proc = _run_init(fmt["args"][0], pod_name=f"{RELEASE}-{role}-0",
                     env={**_kraftlog_on_path(tmp_path), "KRAFTLOG_CLUSTER_ID": cluster_id},
                     remap={data_path: tmp_path / "data"})
    assert proc.returncode == 0, proc.stderr
    meta, _ = config.load_properties(tmp_path / "data" / "meta.properties")
    assert meta["cluster.id"] == cluster_id


def test_offline_render_without_a_cluster_id_fails_saying_what_to_set() -> None:
    # helm template (Argo CD, CI) cannot look up the Secret that keeps a generated id, so
    # a generated id would change on every render and orphan every formatted volume.
    stderr = render_fails()
    assert "clusterId or existingClusterIdSecret must be set" in stderr, stderr
    assert "helm template" in stderr
    # Lint renders offline too; it reports the template's fail as information and passes.
    proc = run_helm("lint", "--strict", str(CHART))
    assert proc.returncode == 0, proc.stdout
    assert "clusterId or existingClusterIdSecret" in proc.stdout + proc.stderr


def test_cluster_id_from_values_or_an_existing_secret() -> None:
    secret = find(render(), "Secret", f"{RELEASE}-cluster-id")
    assert base64.b64decode(secret["data"]["cluster-id"]).decode() == CLUSTER_ID
    # Kept on uninstall with the PVCs: a new id would orphan every volume.
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert _secret_cluster_id(render("values-5-controllers.yaml")) == "MkU3OEVBNTcwNTJENDM2Qg"
    # Rendered twice: the same id (what GitOps tools need).
    assert _render_cached("default", ()) == run_helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *value_args("default")).stdout
    proc = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                    "--set", "existingClusterIdSecret=mine")
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert not [d for d in docs if d["kind"] == "Secret"]
    fmt = container(find(docs, "StatefulSet", f"{RELEASE}-controller")["spec"]["template"]["spec"],
                    "format", init=True)
    assert fmt["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "mine"


def test_broker_node_ids_follow_the_offset_overlay() -> None:
    pod = find(render("values-5-controllers.yaml"), "StatefulSet",
               f"{RELEASE}-broker")["spec"]["template"]["spec"]
    assert "$(( ${HOSTNAME##*-} + 1000 ))" in container(pod, "format", init=True)["args"][0]
    assert "$(( ${HOSTNAME##*-} + 1000 ))" in container(pod, "config", init=True)["args"][0]


# --- brokers, admin, config --------------------------------------------------------------


def test_broker_services_and_properties() -> None:
    docs = render()
    headless = find(docs, "Service", f"{RELEASE}-broker-headless")
    assert headless["spec"]["clusterIP"] == "None"
    client = find(docs, "Service", f"{RELEASE}-broker")
    assert client["spec"]["ports"][0]["port"] == 9092
    props = properties(docs, "broker")
    assert props["process.roles"] == "broker"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("3", "2")


def test_admin_properties_hold_only_keys_the_admin_command_reads(tmp_path: pathlib.Path) -> None:
    from kraftlog.tools import admin_commands as server_commands

    path = tmp_path / "admin.properties"
    path.write_text(find(render(), "ConfigMap", f"{RELEASE}-config")["data"]["admin.properties"])
    cfg = config.load(server_commands.ADMIN_CONFIG, path)
    assert not cfg.unused(), cfg.unused()
    assert cfg.get_int("request.timeout.ms") == 2000
    assert server_commands.listen_address(cfg) == "0.0.0.0:9095"


def test_in_sync_readiness_timeout_reaches_the_broker_config() -> None:
    assert properties(render(), "broker")["kraftlog.readiness.isr.timeout.ms"] == "300000"
    docs = render(**{"broker.readiness.isrTimeoutSeconds": "45"})
    assert properties(docs, "broker")["kraftlog.readiness.isr.timeout.ms"] == "45000"


def test_zone_spread_is_soft_by_default_and_hard_in_the_rack_overlay() -> None:
    for value_set, when in (("default", "ScheduleAnyway"), ("values-rack-awareness.yaml",
                                                            "DoNotSchedule")):
        for role in ("controller", "broker"):
            pod = find(render(value_set), "StatefulSet",
                       f"{RELEASE}-{role}")["spec"]["template"]["spec"]
            [spread] = pod["topologySpreadConstraints"]
            assert (spread["topologyKey"], spread["whenUnsatisfiable"], spread["maxSkew"]) == (
                "topology.kubernetes.io/zone", when, 1)
            assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == role
    pod = find(render(**{"broker.topologySpread": ""}), "StatefulSet",
               f"{RELEASE}-broker")["spec"]["template"]["spec"]
    assert "topologySpreadConstraints" not in pod


def test_external_access_gives_each_broker_a_service_and_an_advertised_external_listener(
        tmp_path: pathlib.Path) -> None:
    from kraftlog.server import broker_server as broker_process

    docs = render("values-external-access.yaml")
    for ordinal, (host, node_port) in enumerate(
            [("node-a.example.com", 31090), ("node-b.example.com", 31091),
             ("node-c.example.com", 31092)]):
        svc = find(docs, "Service", f"{RELEASE}-broker-{ordinal}-external")
        assert svc["spec"]["type"] == "NodePort"
        assert svc["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] == \
            f"{RELEASE}-broker-{ordinal}"
        [port] = svc["spec"]["ports"]
        assert (port["nodePort"], port["targetPort"]) == (node_port, "external")
        # The pod's init container advertises exactly that address on EXTERNAL.
        sts = find(docs, "StatefulSet", f"{RELEASE}-broker")
        pod = sts["spec"]["template"]["spec"]
        assert {p["name"]: p["containerPort"] for p in container(pod, "broker")["ports"]}[
            "external"] == 9094
        work = tmp_path / str(ordinal)
        (work / "template").mkdir(parents=True)
        (work / "etc").mkdir()
        (work / "template" / "broker.properties").write_text(
            find(docs, "ConfigMap", f"{RELEASE}-config")["data"]["broker.properties"])
        proc = _run_init(container(pod, "config", init=True)["args"][0],
                         pod_name=f"{RELEASE}-broker-{ordinal}", env=_kraftlog_on_path(work),
                         remap={"/etc/kraftlog/template": work / "template",
                                "/etc/kraftlog": work / "etc"})
        assert proc.returncode == 0, proc.stderr
        cfg = config.load(broker_process.BROKER_CONFIG, work / "etc" / "server.properties")
        assert cfg.get_list("listeners") == ["PLAINTEXT://0.0.0.0:9092", "EXTERNAL://0.0.0.0:9094"]
        assert cfg.get_list("advertised.listeners")[1] == f"EXTERNAL://{host}:{node_port}"
        assert "EXTERNAL:PLAINTEXT" in cfg.get_list("listener.security.protocol.map")
        assert cfg.get_str("inter.broker.listener.name") == "PLAINTEXT"
        assert not cfg.unused(), cfg.unused()
    # A pod beyond the listed addresses refuses to start rather than advertise nothing.
    proc = _run_init(container(pod, "config", init=True)["args"][0],
                     pod_name=f"{RELEASE}-broker-7", env=_kraftlog_on_path(work),
                     remap={"/etc/kraftlog/template": work / "template",
                            "/etc/kraftlog": work / "etc"})
    assert proc.returncode != 0 and "no broker.externalAccess entry" in proc.stderr
    lb = render(**{"broker.externalAccess.enabled": "true",
                   "broker.externalAccess.type": "LoadBalancer",
                   "broker.externalAccess.advertisedHosts": "{a.lb,b.lb,c.lb}"})
    svc = find(lb, "Service", f"{RELEASE}-broker-2-external")
    assert svc["spec"]["type"] == "LoadBalancer" and "nodePort" not in svc["spec"]["ports"][0]
    assert 'external="c.lb:9094"' in container(find(lb, "StatefulSet", f"{RELEASE}-broker")[
        "spec"]["template"]["spec"], "config", init=True)["args"][0]
    assert not [d for d in render() if d["metadata"]["name"].endswith("-external")]
    # With the NetworkPolicy on, the EXTERNAL port stays open to outside clients.
    policy = find(render("values-external-access.yaml", **{
        "networkPolicy.enabled": "true", "networkPolicy.allowExternal": "false"}),
        "NetworkPolicy", f"{RELEASE}-broker")
    assert {"ports": [{"port": 9094, "protocol": "TCP"}]} in policy["spec"]["ingress"]


@pytest.mark.parametrize(("sets", "message"), [
    (("broker.externalAccess.advertisedHosts={a,b}",),
     "broker.externalAccess.advertisedHosts has 2 entries for 3 brokers"),
    (("broker.externalAccess.advertisedHosts={a,b,c}", "broker.externalAccess.nodePorts={31000}"),
     "broker.externalAccess.nodePorts has 1 entries for 3 brokers"),
])
def test_external_access_needs_an_address_per_broker(sets: tuple[str, ...], message: str) -> None:
    args = ["--set", f"clusterId={CLUSTER_ID}", "--set", "broker.externalAccess.enabled=true"]
    for item in sets:
        args += ["--set", item]
    assert message in render_fails(*args)


def test_rack_awareness_is_off_by_default() -> None:
    docs = render()
    assert not [d for d in docs if d["kind"] in {"ClusterRole", "ClusterRoleBinding"}]
    pod = find(docs, "StatefulSet", f"{RELEASE}-broker")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["config", "format"]


def test_rack_init_container_reads_the_node_zone_with_get_nodes_only(
        tmp_path: pathlib.Path) -> None:
    from kraftlog.server import broker_server as broker_process
    from kraftlog.tools import cli

    docs = render("values-rack-awareness.yaml")
    role = find(docs, "ClusterRole", f"{NAMESPACE}-{RELEASE}-node-reader")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    binding = find(docs, "ClusterRoleBinding", f"{NAMESPACE}-{RELEASE}-node-reader")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RELEASE,
                                    "namespace": NAMESPACE}]
    sts = find(docs, "StatefulSet", f"{RELEASE}-broker")
    pod = sts["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == RELEASE
    assert [c["name"] for c in pod["initContainers"]] == ["rack", "config", "format"]
    rack = container(pod, "rack", init=True)
    assert rack["env"] == [{"name": "NODE_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    # The arguments are ones the command takes.
    args = cli.build_parser(["broker-rack"]).parse_args(rack["args"])
    assert (args.node, args.label, args.output) == (
        "$(NODE_NAME)", "topology.kubernetes.io/zone", "/etc/kraftlog/rack.properties")
    # The API token reaches the rack container only; the pod does not automount it.
    token_path = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert pod["automountServiceAccountToken"] is False
    mounts = {c["name"]: {m["mountPath"] for m in c.get("volumeMounts", [])}
              for c in [*pod["initContainers"], *pod["containers"]]}
    assert [name for name, paths in mounts.items() if token_path in paths] == ["rack"]
    sources = next(v for v in pod["volumes"] if v["name"] == "kube-api-access")["projected"]
    assert {next(iter(src)) for src in sources["sources"]} == {
        "serviceAccountToken", "configMap", "downwardAPI"}
    # The config init container takes the rack file into server.properties.
    (tmp_path / "template").mkdir()
    (tmp_path / "etc").mkdir()
    (tmp_path / "template" / "broker.properties").write_text(
        find(docs, "ConfigMap", f"{RELEASE}-config")["data"]["broker.properties"])
    (tmp_path / "etc" / "rack.properties").write_text("broker.rack=eu-west-1b\n")
    proc = _run_init(container(pod, "config", init=True)["args"][0],
                     pod_name=f"{RELEASE}-broker-0", env=_kraftlog_on_path(tmp_path),
                     remap={"/etc/kraftlog/template": tmp_path / "template",
                            "/etc/kraftlog": tmp_path / "etc"})
    assert proc.returncode == 0, proc.stderr
    cfg = config.load(broker_process.BROKER_CONFIG, tmp_path / "etc" / "server.properties")
    assert cfg.get_str("broker.rack") == "eu-west-1b"
    assert not cfg.unused(), cfg.unused()


def _notes(tmp_path: pathlib.Path, *sets: str) -> str:
    """NOTES.txt rendered offline (helm template skips it): the chart copied with the notes
    wrapped in a define that a ConfigMap includes."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text(
        '{{- define "test.notes" }}' + notes + "{{- end }}")
    (chart / "templates" / "notes.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n'
        'data:\n  text: {{ include "test.notes" . | toJson }}\n')
    proc = run_helm("template", RELEASE, str(chart), "--namespace", NAMESPACE,
                    "--show-only", "templates/notes.yaml", "--set", f"clusterId={CLUSTER_ID}",
                    *sets)
    assert proc.returncode == 0, proc.stderr
    text: str = yaml.safe_load(proc.stdout)["data"]["text"]
    return text


def test_notes_say_to_decommission_the_last_broker_before_scaling_down(
        tmp_path: pathlib.Path) -> None:
    from kraftlog.tools import cli

    notes = _notes(tmp_path, "--set", "broker.replicaCount=4")
    assert "BEFORE lowering\nbroker.replicaCount from 4 to 3" in notes
    [line] = [ln.strip() for ln in notes.splitlines() if "cluster decommission" in ln]
    argv = line.split()
    assert argv[0] == "kraftlog"
    args = cli.build_parser(argv[1:]).parse_args(argv[1:])
    assert (args.broker, args.throttle) == (103, 50_000_000)  # ordinal 3 + nodeIdOffset 100
    assert "--set broker.replicaCount=3" in notes
    assert 'readiness probe, service "in-sync"' in notes


def test_notes_show_the_external_bootstrap_without_a_port_forward(
        tmp_path: pathlib.Path) -> None:
    notes = _notes(tmp_path, "-f", str(CHART / "ci" / "values-external-access.yaml"))
    assert ("export KRAFTLOG_BOOTSTRAP_SERVER=node-a.example.com:31090,"
            "node-b.example.com:31091,node-c.example.com:31092") in notes
    assert "From outside the cluster" not in _notes(tmp_path / "plain")


def test_broker_pod_config_is_accepted_by_the_broker_command(tmp_path: pathlib.Path) -> None:
    from kraftlog.server import broker_server as broker_process

    docs = render()
    pod = find(docs, "StatefulSet", f"{RELEASE}-broker")["spec"]["template"]["spec"]
    (tmp_path / "template").mkdir()
    (tmp_path / "etc").mkdir()
    (tmp_path / "template" / "broker.properties").write_text(
        find(docs, "ConfigMap", f"{RELEASE}-config")["data"]["broker.properties"])
    proc = _run_init(container(pod, "config", init=True)["args"][0],
                     pod_name=f"{RELEASE}-broker-1", env=_kraftlog_on_path(tmp_path),
                     remap={"/etc/kraftlog/template": tmp_path / "template",
                            "/etc/kraftlog": tmp_path / "etc"})
    assert proc.returncode == 0, proc.stderr
    cfg = config.load(broker_process.BROKER_CONFIG, tmp_path / "etc" / "server.properties")
    assert cfg.get_int("node.id") == 101
    assert cfg.get_list("advertised.listeners") == [
        f"PLAINTEXT://{RELEASE}-broker-1.{RELEASE}-broker-headless.{NAMESPACE}"
        ".svc.cluster.local:9092"]
    assert not cfg.unused(), cfg.unused()


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_metrics_port_is_the_port_the_process_serves(role: str) -> None:
    docs = render(**{"metrics.enabled": "true", "metrics.port": "9500"})
    assert properties(docs, role)["kraftlog.metrics.port"] == "9500"
    pod = find(docs, "StatefulSet", f"{RELEASE}-{role}")["spec"]["template"]["spec"]
    ports = {p["name"]: p["containerPort"] for p in container(pod, role)["ports"]}
    assert ports["metrics"] == 9500
    assert "kraftlog.metrics.port" not in properties(render(), role)
    # tests/test_chart_pods.py scrapes the port of every controller and broker pod.


def test_admin_metrics_port_is_the_port_the_admin_serves() -> None:
    docs = render(**{"metrics.enabled": "true", "metrics.port": "9500"})
    assert properties(docs, "admin")["kraftlog.metrics.port"] == "9500"
    pod = find(docs, "Deployment", f"{RELEASE}-admin")["spec"]["template"]["spec"]
    ports = {p["name"]: p["containerPort"] for p in container(pod, "admin")["ports"]}
    assert ports["metrics"] == 9500
    assert "kraftlog.metrics.port" not in properties(render(), "admin")


def test_admin_deployment_reads_its_properties_from_the_configmap() -> None:
    docs = render()
    pod = find(docs, "Deployment", f"{RELEASE}-admin")["spec"]["template"]["spec"]
    main = container(pod, "admin")
    assert main["command"] == ["kraftlog"]
    assert main["args"] == ["admin", "--config", "/etc/kraftlog/admin.properties"]
    mount = next(m for m in main["volumeMounts"] if m["name"] == "config")
    assert mount["mountPath"] == "/etc/kraftlog"
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert volume["configMap"]["items"] == [{"key": "admin.properties", "path": "admin.properties"}]
    assert find(docs, "Service", f"{RELEASE}-admin")["spec"]["ports"][0]["port"] == 9095


def test_extra_kafka_configs_from_values_reach_the_properties_file() -> None:
    docs = render(**{"controller.config.controller\\.quorum\\.append\\.linger\\.ms": "25"})
    assert properties(docs, "controller")["controller.quorum.append.linger.ms"] == "25"


def _env(container_spec: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container_spec["env"]}


def test_otlp_env_points_at_the_bundled_jaeger_or_the_configured_collector() -> None:
    docs = render()
    assert find(docs, "Service", f"{RELEASE}-jaeger")["spec"]["ports"][1]["port"] == 4317
    for role, kind in (("controller", "StatefulSet"), ("broker", "StatefulSet"),
                       ("admin", "Deployment")):
        pod = find(docs, kind, f"{RELEASE}-{role}")["spec"]["template"]["spec"]
        env = _env(container(pod, role))
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://{RELEASE}-jaeger:4317"
        assert env["OTEL_SERVICE_NAME"] == f"kraftlog-{role}"
    docs = render("values-no-jaeger.yaml")
    assert not [d for d in docs if d["metadata"]["name"] == f"{RELEASE}-jaeger"]
    pod = find(docs, "StatefulSet", f"{RELEASE}-controller")["spec"]["template"]["spec"]
    assert _env(container(pod, "controller"))["OTEL_EXPORTER_OTLP_ENDPOINT"] == \
        "http://otel-collector.observability.svc:4317"
    docs = render(**{"jaeger.enabled": "false"})
    pod = find(docs, "StatefulSet", f"{RELEASE}-controller")["spec"]["template"]["spec"]
    env = _env(container(pod, "controller"))
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in env and env["OTEL_TRACES_EXPORTER"] == "none"


def test_networkpolicy_overlay_restricts_ingress_and_adds_a_servicemonitor() -> None:
    docs = render("values-networkpolicy.yaml")
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "NetworkPolicy"}
    assert set(policies) == {f"{RELEASE}-controller", f"{RELEASE}-broker", f"{RELEASE}-admin"}
    controller_from = policies[f"{RELEASE}-controller"]["spec"]["ingress"][0]["from"]
    assert controller_from[0]["podSelector"]["matchLabels"]["app.kubernetes.io/part-of"] == "kraftlog"
    monitor = find(docs, "ServiceMonitor", RELEASE)
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    for role in ("controller-headless", "broker-headless", "admin"):
        ports = find(docs, "Service", f"{RELEASE}-{role}")["spec"]["ports"]
        assert {"name": "metrics", "port": 9404, "targetPort": "metrics", "protocol": "TCP"} in ports
    assert not [d for d in render() if d["kind"] in {"NetworkPolicy", "ServiceMonitor"}]


def test_helm_test_pod_calls_describe_cluster_on_the_admin_service() -> None:
    pod = find(render(), "Pod", f"{RELEASE}-test-describe-cluster")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    main = pod["spec"]["containers"][0]
    assert "DescribeCluster" in main["args"][0]
    assert _env(main)["KRAFTLOG_ADMIN"] == f"{RELEASE}-admin:9095"
    # The script must at least compile and import what it uses from this package.
    compile(main["args"][0], "helm-test", "exec")
    from kraftlog.v1 import admin_pb2_grpc, controller_pb2
    assert hasattr(admin_pb2_grpc.AdminServiceStub, "__init__")
    assert {"cluster_id", "brokers", "error"} <= set(
        controller_pb2.DescribeClusterResponse.DESCRIPTOR.fields_by_name)


def test_controller_pod_config_is_accepted_by_the_controller_command(tmp_path: pathlib.Path) -> None:
    """The file `kraftlog controller --config` reads, as the pod writes it, parses cleanly."""
    from kraftlog.raft import raft_config
    from kraftlog.server import controller_server as commands
    from kraftlog.server import shared_server

    docs = render("values-5-controllers.yaml")
    pod = find(docs, "StatefulSet", f"{RELEASE}-controller")["spec"]["template"]["spec"]
    (tmp_path / "template").mkdir()
    (tmp_path / "etc").mkdir()
    (tmp_path / "template" / "controller.properties").write_text(
        find(docs, "ConfigMap", f"{RELEASE}-config")["data"]["controller.properties"])
    proc = _run_init(container(pod, "config", init=True)["args"][0],
                     pod_name=f"{RELEASE}-controller-4", env=_kraftlog_on_path(tmp_path),
                     remap={"/etc/kraftlog/template": tmp_path / "template",
                            "/etc/kraftlog": tmp_path / "etc"})
    assert proc.returncode == 0, proc.stderr
    cfg = config.load(commands.CONTROLLER_CONFIG, tmp_path / "etc" / "server.properties")
    assert cfg.get_int("node.id") == 4
    voters = raft_config.parse_voters(cfg.get_str("controller.quorum.voters"))
    assert sorted(voters) == [0, 1, 2, 3, 4]
    assert voters[4] == (f"{RELEASE}-controller-4.{RELEASE}-controller-headless.{NAMESPACE}"
                         ".svc.cluster.local:9093")
    assert commands.controller_listener(cfg).endswith(":9093")
    assert str(shared_server.metadata_dir(cfg)) == "/var/lib/kraftlog/metadata"
    assert shared_server.raft_config(cfg).election_timeout_ms == 1000
    assert not cfg.unused(), cfg.unused()


# The local StatefulSet simulation (every rendered pod run as a local process) is in
# tests/test_chart_pods.py.
