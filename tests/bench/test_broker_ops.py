"""Smoke test of ``bench/broker_ops.py``: a few batches through the in-process data path."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_broker_ops_times_every_operation_and_replicates_everything() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "broker_ops.py"), "--batches", "4"],
                            capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr  # it exits non-zero if the HW fell short
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:]}
    assert set(rows) == {"produce", "serve_data", "serve_empty", "apply_data", "apply_empty", "consume"}
    assert rows["produce"][2] == "4" and rows["serve_data"][2] == "8" and rows["consume"][2] == "1"
    assert all(float(median) > 0 for median, _mean, _count in rows.values())
