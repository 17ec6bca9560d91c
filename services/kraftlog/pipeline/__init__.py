"""kraftlog's data pipeline: the ``kraftlog`` PySpark data source (Python Data Source API).

The public face::

    from kraftlog import pipeline
    pipeline.register(spark)     # then spark.read/readStream/write .format("kraftlog")

Rooms: :mod:`.options` (option parsing, pure), :mod:`.planning` (offset ranges,
rate limits, pure), :mod:`.arrow_convert` (records <-> Arrow columns),
:mod:`.client_io` (metadata, offsets, reading and producing through
:mod:`kraftlog.client`), :mod:`.source` (the Spark classes: batch and streaming
read and write).

The Spark jobs (``kraftlog pipeline ...`` or ``spark-submit``): :mod:`.balance`
(with :mod:`.jobs_admin_client` for the AdminService and :mod:`.jobs_balance_plan`,
the pure greedy) and :mod:`.audit` (with :mod:`.jobs_audit_decode`, run in
executors); :mod:`.jobs_spark` makes their SparkSession, :mod:`.pipeline_commands`
their CLI. Needs the ``spark`` extra (pyspark, pyarrow, matplotlib); importing this
package does not import Spark.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register ``format("kraftlog")`` with a SparkSession."""
    from kraftlog.pipeline import source

    spark.dataSource.register(source.KraftlogDataSource)
