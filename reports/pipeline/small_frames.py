"""Small DataFrames of rows the driver program holds (run lists, cell keys), made without a Python worker.

``createDataFrame`` of Python tuples on a local driver pickles them into an RDD, which a Python worker
process must unpickle when the first job reads it: that worker's start cost 1 to 3 s of each report (seen in
Spark's event log). The same rows sent as one Arrow batch are read by the JVM itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import _parse_datatype_string

from .session import is_connect

ARROW = "spark.sql.execution.arrow.pyspark.enabled"


def local_frame(spark: SparkSession, rows: Iterable[tuple], schema: str) -> DataFrame:
    """A DataFrame of ``rows`` (tuples in the column order of ``schema``, a DDL string such as ``"a string, d
    date"``) with exactly that schema, built from one Arrow batch in the driver JVM; on Spark Connect, whose
    client sends local rows as Arrow anyway, by ``createDataFrame``. Leaves the session's Arrow setting as it was."""
    rows = list(rows)
    if is_connect(spark):
        return spark.createDataFrame(rows, schema)
    import pandas as pd

    struct = _parse_datatype_string(schema)
    table = pd.DataFrame.from_records(rows, columns=struct.names)
    previous = spark.conf.get(ARROW)
    spark.conf.set(ARROW, "true")
    try:
        return spark.createDataFrame(table, struct)
    finally:
        spark.conf.set(ARROW, previous)
