"""The walls of the house hold: the import-linter contracts of ``.importlinter``.

The contracts (README, "Layering"): dependencies point down, from ``tools`` over the
composition root ``server`` over the libraries to the cores and ``storage``; the clients of
the cluster (admin, client, pipeline, dev) import none of its cores; telemetry implements
the cores' hooks without reaching into broker or timeline state; and the pure cores
(storage, timeline, raft, metadata, controller, broker) import no asyncio, grpc,
OpenTelemetry, protobuf, threads, sockets or wall clock, directly or through another
module, except the edge modules the contract names one import at a time. A new module in
a core package is pure until the contract says otherwise.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".importlinter"
LINT_IMPORTS = pathlib.Path(sys.executable).parent / "lint-imports"


def _lint(services: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(services)}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(CONFIG), "--no-cache", "--no-logo"],
                          capture_output=True, text=True, timeout=120, cwd=services, env=env,
                          check=False)


def test_every_import_contract_is_kept() -> None:
    done = _lint(ROOT / "services")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_the_contracts_catch_a_core_that_imports_asyncio_or_the_composition_root(
        tmp_path: pathlib.Path) -> None:
    services = tmp_path / "services"
    shutil.copytree(ROOT / "services" / "kraftlog", services / "kraftlog",
                    ignore=shutil.ignore_patterns("__pycache__"))
    consensus = services / "kraftlog" / "raft" / "consensus.py"
    consensus.write_text(consensus.read_text() + "\nimport asyncio  # noqa\n")
    segment = services / "kraftlog" / "storage" / "segment.py"
    segment.write_text(segment.read_text() + "\nfrom kraftlog.server import shared_server  # noqa\n")
    done = _lint(services)
    assert done.returncode != 0
    assert "kraftlog.raft is not allowed to import asyncio" in done.stdout, done.stdout
    assert "kraftlog.storage.segment -> kraftlog.server.shared_server" in done.stdout, done.stdout
