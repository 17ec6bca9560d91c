"""The Spark tests' shared session, and the rule for when they may skip.

Only a missing ``pyspark`` module skips a Spark test (each module starts with
``pytest.importorskip("pyspark")``). With pyspark installed, a missing pyarrow or
a missing Java is an ERROR with one clear line, never a skip: a CI box that lost
Java must not turn the whole pipeline suite silently green.

``spark`` is one local[2] SparkSession per test module (stopped at the module's
end), with the ``kraftlog`` data source registered.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


def require_spark_runtime() -> None:
    """pytest.fail (an ERROR in a fixture) when pyspark is installed but Spark cannot run."""
    if importlib.util.find_spec("pyspark") is None:
        pytest.skip("pyspark is not installed (pip install '.[spark]')")
    from kraftlog.pipeline import jobs_spark

    if importlib.util.find_spec("pyarrow") is None:
        pytest.fail("pyspark is installed but pyarrow is not: install the spark extra "
                    "(pip install '.[spark]')", pytrace=False)
    problem = jobs_spark.java_problem()
    if problem is not None:
        pytest.fail(f"pyspark is installed but Spark cannot run: {problem}", pytrace=False)


def new_session(app_name: str) -> Any:
    require_spark_runtime()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from kraftlog.pipeline import jobs_spark

    return jobs_spark.spark_session(app_name, master="local[2]")


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    session = new_session(f"kraftlog-{request.module.__name__}")
    try:
        yield session
    finally:
        session.stop()
