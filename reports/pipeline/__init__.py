"""The results pipeline on Apache Spark: ingest run directories, transform, load the report outputs.

``schema`` (record schemas), ``session`` (the SparkSession), ``ingest`` (run directories -> Parquet
warehouse), ``transforms`` (pure DataFrame -> DataFrame functions), ``load`` (write the outputs),
``plots`` (inline SVG). PySpark is an optional extra: ``pip install 'amqp-conformance[spark]'``.
"""
