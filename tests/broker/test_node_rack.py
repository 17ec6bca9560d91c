"""``kraftlog broker-rack`` against a fake Kubernetes API server on loopback.

The real ``kubernetes`` client and the real command line talk HTTP to a small server
that answers ``GET /api/v1/nodes/{name}`` the way the API server does (a Node, a 404
Status, a 403 for a ServiceAccount without ``get nodes``), through a kubeconfig that
points at it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import io
import json
import pathlib
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from kraftlog import errors
from kraftlog.tools import broker_rack_commands as node_rack
from kraftlog.tools import cli

NODES: dict[str, dict[str, str]] = {
    "worker-a": {"kubernetes.io/hostname": "worker-a", node_rack.ZONE_LABEL: "eu-west-1a"},
    "worker-plain": {"kubernetes.io/hostname": "worker-plain"},
    "worker-odd": {node_rack.ZONE_LABEL: "bad zone"},
}


class _FakeApi(http.server.BaseHTTPRequestHandler):
    forbidden = False
    seen: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        type(self).seen.append(self.path)
        prefix = "/api/v1/nodes/"
        name = self.path[len(prefix):] if self.path.startswith(prefix) else ""
        if type(self).forbidden:
            self._send(403, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "Forbidden", "code": 403,
                             "message": f'nodes "{name}" is forbidden'})
        elif name in NODES:
            self._send(200, {"kind": "Node", "apiVersion": "v1",
                             "metadata": {"name": name, "labels": NODES[name]}})
        else:
            self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "NotFound", "code": 404,
                             "message": f'nodes "{name}" not found'})


@pytest.fixture
def kubeconfig(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _FakeApi.forbidden = False
    _FakeApi.seen = []
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {
            "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "sa", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "sa"}}]}))
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()


def _subprocess(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script, as the init container runs it (pays the client's imports)."""
    exe = shutil.which("kraftlog", path=str(pathlib.Path(sys.executable).parent))
    assert exe
    return subprocess.run([exe, "broker-rack", *args], capture_output=True, text=True,
                          timeout=60, check=False)


@dataclasses.dataclass
class _Done:
    returncode: int
    stderr: str


def _cli(*args: str) -> _Done:
    """``kraftlog broker-rack ARGS`` in this process (the kubernetes client imports once
    per session, not per case: seconds each on a loaded machine)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["broker-rack", *args])
    return _Done(returncode=code, stderr=err.getvalue())


def test_the_zone_of_the_node_becomes_broker_rack(kubeconfig: pathlib.Path,
                                                  tmp_path: pathlib.Path) -> None:
    out = tmp_path / "rack.properties"
    done = _subprocess("--node", "worker-a", "--output", str(out), "--kubeconfig", str(kubeconfig))
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "broker.rack=eu-west-1a\n"
    assert _FakeApi.seen == ["/api/v1/nodes/worker-a"]
    assert "broker.rack=eu-west-1a" in done.stderr


def test_a_node_without_the_label_means_no_rack(kubeconfig: pathlib.Path,
                                                tmp_path: pathlib.Path) -> None:
    out = tmp_path / "rack.properties"
    out.write_text("broker.rack=stale\n")  # an emptyDir is fresh, but never trust it
    done = _cli("--node", "worker-plain", "--output", str(out), "--kubeconfig", str(kubeconfig))
    assert done.returncode == 0, done.stderr
    assert out.read_text() == ""
    assert "no topology.kubernetes.io/zone label" in done.stderr


def test_another_label_can_hold_the_zone(kubeconfig: pathlib.Path, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "rack.properties"
    done = _cli("--node", "worker-a", "--output", str(out), "--kubeconfig", str(kubeconfig),
                "--label", "kubernetes.io/hostname")
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "broker.rack=worker-a\n"


@pytest.mark.parametrize(("node", "forbidden", "message"), [
    ("worker-gone", False, "cannot read node 'worker-gone': 404 Not Found"),
    ("worker-a", True, "403 Forbidden (the ServiceAccount needs 'get nodes'"),
    ("worker-odd", False, "is not a valid rack name"),
])
def test_api_failures_are_one_line_and_exit_1(kubeconfig: pathlib.Path, tmp_path: pathlib.Path,
                                              node: str, forbidden: bool, message: str) -> None:
    _FakeApi.forbidden = forbidden
    out = tmp_path / "rack.properties"
    done = _cli("--node", node, "--output", str(out), "--kubeconfig", str(kubeconfig))
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


def test_rack_properties_is_pure_and_checks_the_value() -> None:
    assert node_rack.rack_properties({node_rack.ZONE_LABEL: "z1"}) == "broker.rack=z1\n"
    assert node_rack.rack_properties({}) == ""
    with pytest.raises(errors.ConfigError, match="not a valid rack name"):
        node_rack.rack_properties({node_rack.ZONE_LABEL: "a\nlog.dirs=/"})


def test_without_a_service_account_the_error_is_one_line(tmp_path: pathlib.Path) -> None:
    done = _cli("--node", "worker-a", "--output", str(tmp_path / "r"))
    assert done.returncode == 1
    assert "cannot configure the Kubernetes client" in done.stderr
