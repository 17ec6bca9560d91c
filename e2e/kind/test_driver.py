"""The kind e2e driver's pure parts, against canned data (the drill itself needs a cluster).

Covers e2e/kind/driver.py: argument parsing, the rollout checks on API objects,
Jaeger's ``/api/traces`` JSON, the reassignment plan and the record accounting. The
driver is loaded from its path (it is a script, not part of the package) and must
import without the ``kubernetes`` package.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import pathlib
import subprocess
import sys
import threading
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml

DRIVER_PATH = pathlib.Path(__file__).with_name("driver.py")


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kind_driver", DRIVER_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kind_driver"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


driver = _load()


# -- arguments ---------------------------------------------------------------------------------------


def test_defaults_name_the_release_services_in_its_namespace() -> None:
    s = driver.parse_args(["--namespace", "streaming"], environ={}, now_s=1_700_000_000)
    assert s.fullname == "kraftlog"
    assert s.admin == "kraftlog-admin.streaming.svc:9095"
    assert s.jaeger_url == "http://kraftlog-jaeger.streaming.svc:16686"
    assert s.jaeger_service == "kraftlog-controller"
    assert s.topic == "e2e-1700000000"
    assert (s.partitions, s.replication_factor, s.min_insync_replicas) == (6, 3, 2)
    assert s.in_cluster is False


def test_release_not_named_like_the_chart_gets_the_chart_suffix() -> None:
    s = driver.parse_args(["--release", "prod", "--namespace", "n"], environ={})
    assert s.fullname == "prod-kraftlog"
    assert s.admin == "prod-kraftlog-admin.n.svc:9095"
    assert driver.chart_fullname("my-kraftlog") == "my-kraftlog"


def test_in_cluster_is_the_default_inside_a_pod_unless_a_kubeconfig_is_given() -> None:
    pod_env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    assert driver.parse_args(["--namespace", "n"], environ=pod_env).in_cluster is True
    s = driver.parse_args(["--namespace", "n", "--kubeconfig", "/k", "--context", "kind-x"],
                          environ=pod_env)
    assert (s.in_cluster, s.kubeconfig, s.context) == (False, "/k", "kind-x")
    assert driver.parse_args(["--in-cluster", "--namespace", "n"], environ={}).in_cluster


def test_explicit_endpoints_win_and_lose_a_trailing_slash() -> None:
    s = driver.parse_args(["--admin", "127.0.0.1:19090", "--jaeger-url", "http://j:16686/",
                           "--topic", "t", "--namespace", "n"], environ={})
    assert (s.admin, s.jaeger_url, s.topic) == ("127.0.0.1:19090", "http://j:16686", "t")


@pytest.mark.parametrize(("argv", "message"), [
    (["--partitions", "0"], "must be > 0"),
    (["--step-timeout", "soon"], "not a number"),
    (["--min-insync-replicas", "4"], "--min-insync-replicas (4) must be <= --replication-factor (3)"),
    (["--in-cluster", "--kubeconfig", "/k"], "not allowed with argument"),
    (["--in-cluster", "--context", "c"], "--context needs a kubeconfig"),
])
def test_bad_arguments_exit_2_with_one_clear_line(argv: list[str], message: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        driver.parse_args(argv, environ={})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# -- rollouts -------------------------------------------------------------------------------------------


def _sts(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "kraftlog-controller", "generation": 2},
            "spec": {"replicas": 3}, "status": status}


def test_statefulset_rollout_rules() -> None:
    done = dict(observedGeneration=2, readyReplicas=3, updatedReplicas=3,
                currentRevision="r2", updateRevision="r2")
    assert driver.statefulset_pending(_sts(**done)) is None
    assert "spec not yet observed" in driver.statefulset_pending(_sts(**{**done, "observedGeneration": 1}))
    assert "2/3 pods ready" in driver.statefulset_pending(_sts(**{**done, "readyReplicas": 2}))
    assert "1/3 pods updated" in driver.statefulset_pending(_sts(**{**done, "updatedReplicas": 1}))
    assert "r1 -> r2" in driver.statefulset_pending(_sts(**{**done, "currentRevision": "r1"}))
    assert "0/3 pods ready" in driver.statefulset_pending(
        {"metadata": {"name": "x"}, "spec": {"replicas": 3}, "status": None})


def test_deployment_rollout_rules() -> None:
    def deploy(**status: Any) -> dict[str, Any]:
        return {"metadata": {"name": "kraftlog-admin", "generation": 1},
                "spec": {"replicas": 1}, "status": status}
    done = dict(observedGeneration=1, replicas=1, updatedReplicas=1, availableReplicas=1,
                readyReplicas=1)
    assert driver.deployment_pending(deploy(**done)) is None
    assert "0/1 availableReplicas" in driver.deployment_pending(
        deploy(**{**done, "availableReplicas": 0}))
    assert "old replicas" in driver.deployment_pending(deploy(**{**done, "replicas": 2}))


def test_pod_ready_reads_the_ready_condition_and_ignores_terminating_pods() -> None:
    ready = {"metadata": {"uid": "u"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}}
    assert driver.pod_ready(ready)
    assert not driver.pod_ready({**ready, "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})
    assert not driver.pod_ready({"metadata": {}, "status": {"conditions": [
        {"type": "Ready", "status": "False"}]}})
    assert not driver.pod_ready({"metadata": {}, "status": None})


# -- Jaeger ---------------------------------------------------------------------------------------------


def _span(span_id: str, start_us: int, epoch: int, outcome: str, *,
          operation: str = "raft.election", process: str = "p1") -> dict[str, Any]:
    return {"traceID": f"t{span_id}", "spanID": span_id, "operationName": operation,
            "references": [], "startTime": start_us, "duration": 41_000, "processID": process,
            "tags": [{"key": "raft.epoch", "type": "int64", "value": epoch},
                     {"key": "raft.election.outcome", "type": "string", "value": outcome},
                     {"key": "raft.election.reason", "type": "string", "value": "fetch timeout"}],
            "logs": [], "warnings": None}


JAEGER_ANSWER = {
    "data": [
        {"traceID": "t1", "spans": [_span("s1", 1_000, 1, "won")],
         "processes": {"p1": {"serviceName": "kraftlog-controller", "tags": [
             {"key": "k8s.pod.name", "type": "string", "value": "kraftlog-controller-0"},
             {"key": "kraftlog.node.id", "type": "int64", "value": 0}]}}},
        {"traceID": "t3", "spans": [
            _span("s3", 9_000_000, 3, "won", process="p2"),
            _span("v3", 9_000_100, 3, "", operation="raft.vote_request", process="p2")],
         "processes": {"p2": {"serviceName": "kraftlog-controller", "tags": [
             {"key": "k8s.pod.name", "type": "string", "value": "kraftlog-controller-2"},
             {"key": "kraftlog.node.id", "type": "int64", "value": 2}]}}},
        {"traceID": "t2", "spans": [_span("s2", 8_000_000, 2, "lost", process="p3")],
         "processes": {"p3": {"serviceName": "kraftlog-controller", "tags": []}}},
    ],
    "total": 0, "limit": 0, "offset": 0, "errors": None,
}


def test_election_spans_are_parsed_with_their_process_and_sorted_by_start() -> None:
    spans = driver.parse_election_spans(JAEGER_ANSWER)
    assert [(s.span_id, s.epoch, s.outcome) for s in spans] == [
        ("s1", 1, "won"), ("s2", 2, "lost"), ("s3", 3, "won")]
    third = spans[2]
    assert (third.pod, third.node_id, third.service) == ("kraftlog-controller-2", 2,
                                                         "kraftlog-controller")
    assert (third.trace_id, third.start_us, third.duration_us) == ("ts3", 9_000_000, 41_000)
    assert (spans[1].pod, spans[1].node_id) == ("", -1)


def test_only_won_elections_after_the_deletion_with_the_new_epoch_count() -> None:
    spans = driver.parse_election_spans(JAEGER_ANSWER)
    assert [s.span_id for s in driver.won_elections(spans, after_us=5_000_000, min_epoch=2)] == ["s3"]
    assert driver.won_elections(spans, after_us=5_000_000, min_epoch=4) == []
    assert driver.won_elections(spans, after_us=10_000_000, min_epoch=0) == []


def test_an_empty_or_failed_jaeger_answer() -> None:
    assert driver.parse_election_spans({"data": None, "errors": None}) == []
    with pytest.raises(driver.DriverError, match="service not found"):
        driver.parse_election_spans({"data": [], "errors": [{"code": 500, "msg": "service not found"}]})


def test_traces_url_carries_the_query() -> None:
    url = driver.jaeger_traces_url("http://j:16686/", service="kraftlog-controller",
                                   operation="raft.election", start_us=5, end_us=9, limit=20)
    assert url == ("http://j:16686/api/traces?service=kraftlog-controller&"
                   "operation=raft.election&start=5&end=9&limit=20")


# -- reassignment plan ------------------------------------------------------------------------------


def test_every_partition_moves_one_broker_along() -> None:
    plan = driver.shifted_assignment({0: [100, 101, 102], 1: [103, 100, 101]},
                                     [103, 101, 100, 102])
    assert plan == {0: [101, 102, 103], 1: [100, 101, 102]}
    for partition, replicas in plan.items():
        assert len(set(replicas)) == 3
        assert set(replicas) != set({0: [100, 101, 102], 1: [103, 100, 101]}[partition])


def test_a_move_needs_more_brokers_than_replicas() -> None:
    with pytest.raises(driver.DriverError, match="needs more brokers than replicas"):
        driver.shifted_assignment({0: [100, 101, 102]}, [100, 101, 102])
    with pytest.raises(driver.DriverError, match=r"\[104\] are not live brokers"):
        driver.shifted_assignment({0: [100, 104]}, [100, 101, 102])


def test_broker_pod_from_its_advertised_host_else_from_the_node_id_rule() -> None:
    assert driver.broker_pod_name(
        102, "kraftlog-broker-2.kraftlog-broker-headless.kraftlog.svc.cluster.local",
        fullname="kraftlog", id_offset=100) == "kraftlog-broker-2"
    assert driver.broker_pod_name(1003, "10.244.1.7", fullname="prod-kraftlog",
                                  id_offset=1000) == "prod-kraftlog-broker-3"
    with pytest.raises(driver.DriverError, match="below --broker-id-offset 100"):
        driver.broker_pod_name(7, "127.0.0.1", fullname="kraftlog", id_offset=100)


# -- record accounting ------------------------------------------------------------------------------


def test_audit_passes_when_every_acknowledged_record_is_at_its_offset() -> None:
    acked = {b"a": (0, 0), b"b": (0, 1), b"c": (1, 0)}
    found = {(0, 0): b"a", (0, 1): b"b", (0, 2): b"b", (1, 0): b"c", (1, 1): b"never-acked"}
    result = driver.audit(acked, found)
    assert result.ok
    assert (result.acknowledged, result.read) == (3, 5)
    assert result.duplicated == (b"b",)  # a retry after a lost answer: reported, allowed
    assert result.unacknowledged_present == 1
    assert result.summary() == ("acknowledged=3 read=5 lost=0 replaced=0 duplicated=1 "
                                "unacknowledged_present=1")


def test_audit_catches_lost_and_overwritten_records() -> None:
    acked = {b"a": (0, 0), b"b": (0, 1), b"c": (1, 0), b"d": (1, 1)}
    found = {(0, 0): b"a", (1, 0): b"x", (1, 1): None}
    result = driver.audit(acked, found)
    assert not result.ok
    assert result.lost == ((b"b", (0, 1)),)
    assert result.replaced == ((b"c", (1, 0), b"x"), (b"d", (1, 1), None))


def test_rack_check_counts_distinct_non_empty_racks() -> None:
    from types import SimpleNamespace

    class Admin:
        async def describe_cluster(self) -> Any:
            return SimpleNamespace(brokers=[SimpleNamespace(broker_id=b, rack=r) for b, r in
                                            ((100, "zone-a"), (101, "zone-b"), (102, "zone-a"),
                                             (103, ""))])

    def drill(*argv: str) -> Any:
        settings = driver.parse_args(["--kubeconfig", "/nonexistent", *argv], environ={})
        d = driver.Drill(settings, kube=None)  # type: ignore[arg-type]
        d.admin = lambda call, timeout_ms=0: call(Admin())  # type: ignore[method-assign]
        return d

    ok = drill("--min-racks", "2")
    assert asyncio.run(ok.check_racks())[103] == ""
    assert ok.report["racks"] == {"100": "zone-a", "101": "zone-b", "102": "zone-a", "103": ""}
    with pytest.raises(driver.DriverError, match="2 rack"):
        asyncio.run(drill("--min-racks", "3").check_racks())
    asyncio.run(drill().check_racks())  # default: no check


def test_roll_check_counts_only_not_enough_replicas_refusals() -> None:
    failed = {b"a": "NOT_ENOUGH_REPLICAS (t-0 on b:1): ISR 1 < min.insync.replicas 2",
              b"b": "NOT_LEADER_OR_FOLLOWER (t-1 on b:2)",
              b"c": "NOT_ENOUGH_REPLICAS_AFTER_APPEND (t-2 on b:3)"}
    assert sorted(driver.not_enough_replicas(failed)) == [b"a", b"c"]


def test_ledger_is_thread_safe_and_refuses_a_double_acknowledgement() -> None:
    ledger = driver.Ledger()

    def ack(start: int) -> None:
        for i in range(start, start + 500):
            ledger.acknowledged(f"v{i}".encode(), i % 3, i)
    threads = [threading.Thread(target=ack, args=(n * 500,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ledger.failed(b"lost-send", "NOT_ENOUGH_REPLICAS")
    acked, failed = ledger.snapshot()
    assert ledger.acked_count() == len(acked) == 2000
    assert acked[b"v1999"] == (1999 % 3, 1999)
    assert failed == {b"lost-send": "NOT_ENOUGH_REPLICAS"}
    with pytest.raises(driver.DriverError, match="acknowledged twice"):
        ledger.acknowledged(b"v0", 0, 0)


def test_driver_imports_and_parses_without_the_kubernetes_package() -> None:
    # sys.modules[name] = None makes any import of it fail, as if it were not installed.
    code = ("import importlib.util, sys; sys.modules['kubernetes'] = None; "
            f"spec = importlib.util.spec_from_file_location('d', {str(DRIVER_PATH)!r}); "
            "m = importlib.util.module_from_spec(spec); sys.modules['d'] = m; "
            "spec.loader.exec_module(m); print(m.parse_args(['--namespace', 'n']).admin)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "kraftlog-admin.n.svc:9095"


def test_without_the_kubernetes_package_the_drill_fails_with_one_line() -> None:
    code = ("import importlib.util, sys; sys.modules['kubernetes'] = None; "
            f"spec = importlib.util.spec_from_file_location('d', {str(DRIVER_PATH)!r}); "
            "m = importlib.util.module_from_spec(spec); sys.modules['d'] = m; "
            "spec.loader.exec_module(m); sys.exit(m.main(['--namespace', 'n']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.strip() == ("e2e-driver: FAILED: the kubernetes package is missing: pip "
                                   "install 'kraftlog[kind]' (or use the image's e2e target)")


# -- the Job that runs the driver, and the values it installs with ------------------------------


def _render_job(*driver_args: str) -> list[dict[str, Any]]:
    done = subprocess.run([str(DRIVER_PATH.with_name("run-driver.sh")), *driver_args],
                          env={**os.environ, "RENDER_ONLY": "1", "NAMESPACE": "streaming",
                               "RELEASE": "prod"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.mark.parametrize("k8s_version", ["1.29.0", "1.37.0"])
def test_driver_job_manifest_passes_strict_kubernetes_schema(k8s_version: str) -> None:
    docs = _render_job("--partitions", "12")
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "Job"]
    for doc in docs:
        kubernetes_validate.validate(doc, k8s_version, strict=True)


def test_driver_job_runs_the_driver_with_rbac_for_what_it_calls() -> None:
    docs = {d["kind"]: d for d in _render_job("--partitions", "12", "--topic", "a b")}
    pod = docs["Job"]["spec"]["template"]
    assert pod["metadata"]["labels"]["prod-kraftlog-client"] == "true"
    spec = pod["spec"]
    assert spec["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    args = spec["containers"][0]["args"]
    s = driver.parse_args(args, environ={}, now_s=0)
    assert (s.in_cluster, s.release, s.fullname, s.partitions, s.topic) == (
        True, "prod", "prod-kraftlog", 12, "a b")
    rules: dict[tuple[str, str], set[str]] = {}
    for rule in docs["Role"]["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                rules.setdefault((group, resource), set()).update(rule["verbs"])
    assert {"get", "delete"} <= rules[("", "pods")]            # Kube.pod, Kube.delete_pod
    assert "get" in rules[("apps", "statefulsets/status")]      # read_namespaced_stateful_set_status
    assert "get" in rules[("apps", "deployments/status")]
    assert "patch" in rules[("apps", "statefulsets")]           # Kube.restart_statefulset
    assert "patch" not in rules[("apps", "deployments")]
    assert "create" not in set().union(*rules.values())
    binding = docs["RoleBinding"]
    assert binding["subjects"][0]["namespace"] == "streaming"
    assert binding["roleRef"]["name"] == docs["Role"]["metadata"]["name"]


def test_e2e_values_give_the_drill_more_brokers_than_replicas() -> None:
    helm = subprocess.run([str(DRIVER_PATH.parents[2] / "scripts" / "install-helm.sh")],
                          capture_output=True, text=True, timeout=600, check=False)
    assert helm.returncode == 0, helm.stderr
    chart = DRIVER_PATH.parents[2] / "charts" / "kraftlog"
    done = subprocess.run([helm.stdout.strip().splitlines()[-1], "template", "kraftlog",
                           str(chart), "-f", str(DRIVER_PATH.with_name("values-e2e.yaml")),
                           # offline: no lookup, so the id the real install generates is given
                           "--set", "clusterId=QUJDREVGR0hJSktMTU5PUA"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    brokers = next(d for d in docs if d["kind"] == "StatefulSet"
                   and d["metadata"]["name"] == "kraftlog-broker")
    defaults = driver.parse_args([], environ={})
    assert brokers["spec"]["replicas"] > defaults.replication_factor
    assert any(d["kind"] == "Service" and d["metadata"]["name"] == "kraftlog-jaeger" for d in docs)
    assert defaults.jaeger_url.startswith("http://kraftlog-jaeger.")
