"""kraftlog's data pipeline: the ``kraftlog`` PySpark data source (issue 8).

The public face::

    from kraftlog import pipeline
    pipeline.register(spark)     # then spark.read/readStream/write .format("kraftlog")

Rooms: :mod:`.options` (option parsing, pure), :mod:`.planning` (offset ranges,
rate limits, pure), :mod:`.arrow_convert` (records <-> Arrow columns),
:mod:`.client_io` (metadata, offsets, reading and producing through
:mod:`kraftlog.client`), :mod:`.source` (the Spark classes). Needs the ``spark``
extra (pyspark, pyarrow); importing this package does not import Spark.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register ``format("kraftlog")`` with a SparkSession."""
    from kraftlog.pipeline import source

    spark.dataSource.register(source.KraftlogDataSource)
