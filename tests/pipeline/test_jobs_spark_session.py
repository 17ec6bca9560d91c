"""With pyspark installed, a machine without Java fails the Spark tests and jobs; it never skips.

``conftest.py``'s ``spark`` fixture (one local[2] session per module) checks Java
first. Here: the fixture runs a job; a pytest run of that test with Java hidden
(no JAVA_HOME, no ``java`` on PATH) reports an ERROR naming the problem, not a
skip; and the jobs themselves (``kraftlog pipeline ...``) exit 1 with one line.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

from kraftlog.pipeline import jobs_spark
from tests.dev_cluster import kraftlog

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _without_java() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not os.access(os.path.join(d, "java"), os.X_OK))
    return env


def test_the_spark_fixture_runs_a_job(spark: Any) -> None:
    assert spark.range(0, 100, 1, 2).selectExpr("sum(id) AS s").first()["s"] == 4950


def test_missing_java_is_an_error_not_a_skip() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
         f"{pathlib.Path(__file__).relative_to(ROOT)}::test_the_spark_fixture_runs_a_job"],
        cwd=ROOT, env=_without_java(), capture_output=True, text=True, timeout=180,
        check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "1 error" in output and "skipped" not in output, output
    assert "pyspark is installed but Spark cannot run: no Java found" in output, output


def test_jobs_refuse_to_start_without_java(tmp_path: pathlib.Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    env = _without_java()
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", env["PATH"])
    with pytest.raises(jobs_spark.JobError, match=r"^no Java found"):
        jobs_spark.spark_session("no-java", master="local[1]")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert jobs_spark.java_problem() == (f"JAVA_HOME={tmp_path / 'no-jdk'} has no bin/java; "
                                         "Spark needs Java 17+")
    monkeypatch.undo()
    log_dir = tmp_path / "meta" / "__cluster_metadata-0"
    log_dir.mkdir(parents=True)
    (log_dir / f"{0:020d}.log").write_bytes(b"")
    done = subprocess.run(
        [sys.executable, "-m", "kraftlog", "pipeline", "metadata-audit", "--metadata-log-dir",
         str(tmp_path / "meta"), "--output-dir", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        "kraftlog: error: no Java found (no JAVA_HOME, no java on PATH); Spark needs Java 17+"]
    assert kraftlog("pipeline", "--help").returncode == 0
