"""Smoke test of ``bench/broker.py``: the whole benchmark at tiny sizes, end to end.

Runs the real thing (a ``kraftlog dev`` cluster, three nats-server processes with an
R3 stream, the gRPC sink) with a few thousand records and one-second phases, then
checks the JSON line it prints: every ratio is a positive number, every produced
record was read back on both systems, and no process of the run is left behind.
Skipped only when ``nats-server`` is not installed (the benchmark itself would
install it with apt-get; a test does not). Bounded: the run has a 120 s timeout.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "broker.py"
RUN_TIMEOUT_S = 120


def run_bench(*args: str, tmp: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if tmp is not None:
        env["TMPDIR"] = str(tmp)  # the bench's temporary directory, to look for leftovers
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, check=False, env=env, cwd=ROOT)


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def test_bad_arguments_fail_with_one_line_and_no_cluster() -> None:
    done = run_bench("--records", "0")
    assert done.returncode == 2
    assert "--records must be at least 1" in done.stderr
    assert "Traceback" not in done.stderr
    done = run_bench("--latency-seconds", "0.5")
    assert done.returncode == 2
    assert "--latency-seconds must be more than" in done.stderr


@pytest.mark.skipif(shutil.which("nats-server") is None
                    and not os.path.exists("/usr/sbin/nats-server"),
                    reason="nats-server is not installed (Debian: apt-get install nats-server)")
def test_tiny_run_reports_every_ratio_and_reads_everything_back(tmp_path: pathlib.Path) -> None:
    records = 2000
    done = run_bench("--records", str(records), "--latency-seconds", "1.5", "--rest-seconds", "1.5",
                     "--phase-seconds", "30", "--grpc-seconds", "0.5", tmp=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "Traceback" not in done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["bench"] == "broker"
    for name in ("produce_msgs_ratio", "latency_p99_ratio", "consume_mb_ratio",
                 "produce_vs_grpc"):
        assert isinstance(result[name], float) and math.isfinite(result[name]), name
        assert result[name] > 0, name
    assert set(result["cpu_us_per_record"]) == {"kraftlog_produce", "kraftlog_consume",
                                                 "nats_produce", "nats_consume"}
    assert all(us > 0 for us in result["cpu_us_per_record"].values())
    assert set(result["pass"]) == {"produce_msgs_ratio", "latency_p99_ratio",
                                   "consume_mb_ratio", "rest_p50_ms"}
    assert all(isinstance(ok, bool) for ok in result["pass"].values())
    for system in ("kraftlog", "nats"):
        phases = result[system]
        assert phases["produce"]["records"] == records, system
        assert phases["latency"]["n"] > 0, system
        # 10 warm-up records, the max-rate, paced and at-rest phases, all read back.
        assert phases["rest"]["records"] > 0, system
        assert phases["consume"]["records"] == (
            10 + phases["produce"]["records"] + phases["latency"]["records"]
            + phases["rest"]["records"]), system
    # Both systems were paced at the same rate: half of kraftlog's measured maximum.
    assert result["nats"]["latency"]["target_rate"] == result["kraftlog"]["latency"][
        "target_rate"] == pytest.approx(result["kraftlog"]["produce"]["msgs_per_s"] / 2, abs=0.1)
    assert result["grpc"]["calls"] > 0
    assert "produce msgs/s" in done.stdout
    assert processes_mentioning(str(tmp_path)) == []
