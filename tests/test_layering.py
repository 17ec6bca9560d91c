"""The pure cores import no I/O framework and no wall clock (STYLE.md rule 1).

Pure cores: storage, timeline, raft (but its driver/transport/server), the
controller's managers and the broker's partition logic. Their time, network and
randomness are injected, so the same code runs under asyncio+gRPC and under the
deterministic simulator. Edge modules (names below) translate at the boundary
and may import anything.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "services" / "kraftlog"
PURE_ROOMS = ("storage", "timeline", "raft", "controller", "broker", "metadata")
EDGE_NAME_PARTS = ("driver", "transport", "server", "service", "grpc", "rpc", "client",
                   "commands", "telemetry", "convert", "process", "data_plane")
FORBIDDEN = ("grpc", "asyncio", "opentelemetry", "time", "datetime", "kraftlog.v1",
             "google.protobuf", "threading", "socket")


def _is_edge(path: pathlib.Path) -> bool:
    return any(part in path.stem for part in EDGE_NAME_PARTS)


def _pure_modules() -> list[pathlib.Path]:
    found: list[pathlib.Path] = []
    for room in PURE_ROOMS:
        for path in sorted((PACKAGE / room).rglob("*.py")):
            if not _is_edge(path):
                found.append(path)
    return found


def _imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


@pytest.mark.parametrize("path", _pure_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_core_imports_no_io_framework_or_clock(path: pathlib.Path) -> None:
    bad = sorted({name for name in _imports(path) if _forbidden(name)})
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}: inject it instead"


def test_layering_checker_catches_a_forbidden_import(tmp_path: pathlib.Path) -> None:
    module = tmp_path / "core.py"
    module.write_text("import grpc\nfrom time import monotonic\nfrom kraftlog.v1 import raft_pb2\n")
    bad = [name for name in _imports(module) if _forbidden(name)]
    assert "grpc" in bad and "time" in bad and "kraftlog.v1" in bad
