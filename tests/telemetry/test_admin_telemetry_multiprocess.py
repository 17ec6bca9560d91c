"""The admin service's trace context and metrics, from real processes.

Three ``kraftlog controller`` processes and one ``kraftlog admin`` export spans to the
test's OTLP receiver. An AdminService call must arrive as the admin's SERVER span, and the
call the admin makes to the active controller for it as a CLIENT span under it, continued
by the controller's SERVER span in the same trace (context across the admin -> controller
hop). The admin's ``/metrics`` endpoint counts the calls by name and outcome. Every wait is
bounded; every child is killed in a ``finally``.
"""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kraftlog.admin import admin_client as ac
from kraftlog.v1 import common_pb2
from tests.quorum_cluster import SESSION, Cluster, free_ports, wait_for
from tests.telemetry.otlp_receiver import OtlpReceiver, ReceivedSpan

SERVER, CLIENT = 2, 3  # OTLP span kinds


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def describe_cluster(admin: str) -> int | None:
    """The active controller's id via the admin, or None while there is none."""
    async def call() -> int | None:
        async with ac.AdminClient(admin, timeout_ms=3000) as client:
            answer = await client.describe_cluster()
            return answer.controller_id if answer.error.code == common_pb2.NONE else None
    try:
        return asyncio.run(call())
    except (ac.AdminError, grpc.RpcError, TimeoutError):
        return None


def test_admin_calls_continue_into_the_controller_trace_and_are_counted(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with OtlpReceiver() as receiver:
        for key, value in receiver.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
        cluster = Cluster(tmp_path / "controllers", extra=SESSION)
        admin_port, metrics_port = free_ports(2)
        admin = f"127.0.0.1:{admin_port}"
        log = tmp_path / "admin.log"
        proc: subprocess.Popen[bytes] | None = None
        try:
            for node in cluster.ports:
                cluster.start(node)
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "kraftlog", "admin", "--listen", admin,
                     "--bootstrap-controller",
                     ",".join(f"127.0.0.1:{p}" for p in cluster.ports.values()),
                     "--override", f"kraftlog.metrics.port={metrics_port}",
                     "--override", "kraftlog.metrics.host=127.0.0.1"],
                    stdout=out, stderr=out, start_new_session=True)
            wait_for(lambda: describe_cluster(admin), timeout_s=30,
                     what="the admin names an active controller",
                     details=lambda: cluster.logs() + log.read_text())

            def hop(spans: list[ReceivedSpan]) -> tuple[ReceivedSpan, ...] | None:
                for served in spans:
                    if served.name != "kraftlog.v1.AdminService/DescribeCluster" \
                            or served.kind != SERVER:
                        continue
                    calls = [s for s in spans if s.kind == CLIENT
                             and s.parent_span_id == served.span_id
                             and s.name == "kraftlog.v1.ControllerService/DescribeCluster"]
                    for call in calls:
                        for answered in spans:
                            if answered.kind == SERVER and answered.parent_span_id == call.span_id:
                                return served, call, answered
                return None

            served, call, answered = receiver.wait_for(hop, timeout_s=15)
            assert served.resource["service.name"] == "kraftlog-admin"
            assert call.resource["service.name"] == "kraftlog-admin"
            assert answered.resource["service.name"] == "kraftlog-controller"
            assert served.trace_id == call.trace_id == answered.trace_id
            # Whichever controller the call reached (a standby answers NOT_CONTROLLER and the
            # admin moves on to the active one; each attempt is its own client span).
            assert answered.instance.startswith("controller-")

            def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
                got = scrape(metrics_port)
                key = ("kraftlog_admin_requests_total",
                       (("outcome", "ok"), ("request", "DescribeCluster")))
                return got if got is not None and got.get(key, 0) >= 1 else None

            got = wait_for(counted, timeout_s=10, what="the admin's request metrics")
            assert got[("kraftlog_admin_request_latency_seconds_count",
                        (("request", "DescribeCluster"),))] >= 1
            assert got[("kraftlog_admin_active_controller_known", ())] == 1
            assert ("process_cpu_seconds_total", ()) in got
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            cluster.kill_all()
