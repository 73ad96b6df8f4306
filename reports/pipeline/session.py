"""The SparkSession the pipeline runs in: ``local[*]`` by default, any master URL on request, or a Spark
Connect server (``sc://host:port``) that keeps its JVM warm between reports."""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
CONNECT_SCHEME = "sc://"
CONCURRENT_WRITERS = 16
LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


# The driver JVM's garbage collector: the throughput collector. A report is a batch job on a few cores,
# where G1's concurrent threads compete with the tasks for them; measured on 2 cores with the full-size
# benchmark, ingest took 84 s against 95 s and the report 28 s against 30 s (docs/pipeline.md).
DRIVER_GC = "-XX:+UseParallelGC"
# More options for every driver JVM the pipeline launches (a local driver, a Connect server), after its own. For
# small data the JIT's compiling costs more than it saves: the project's own tests set -XX:TieredStopAtLevel=1
# (C1 only), which took their Spark modules from 138 s to 98 s on 2 cores; at full size it slows ingest
# (docs/pipeline.md), so it is no default.
JAVA_OPTIONS_ENV = "AMQP_CONFORMANCE_SPARK_JAVA_OPTIONS"


def driver_java_options(log4j: Path) -> str:
    """The driver JVM's options: the log configuration ``log4j``, the throughput collector (:data:`DRIVER_GC`),
    then whatever :data:`JAVA_OPTIONS_ENV` names (so a caller's option wins over ours)."""
    return " ".join(part for part in (f"-Dlog4j2.configurationFile=file:{log4j}", DRIVER_GC,
                                      os.environ.get(JAVA_OPTIONS_ENV, "").strip()) if part)


def _driver_java_options() -> None:
    """The driver JVM this process launches: Spark's start-up chatter off (errors still shown), the
    throughput collector and any options of :data:`JAVA_OPTIONS_ENV` (:func:`driver_java_options`); left alone
    when the caller configured the JVM (its own ``PYSPARK_SUBMIT_ARGS``, or ``spark-submit``)."""
    if "PYSPARK_SUBMIT_ARGS" in os.environ or "SPARK_ENV_LOADED" in os.environ:
        return
    path = Path(tempfile.gettempdir()) / "amqp-conformance-log4j2.properties"
    if not path.exists():
        path.write_text(LOG4J, encoding="utf-8")
    # PySpark splits this as a shell would (shlex): quoted whole, a path or an option with a space stays one
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-java-options {shlex.quote(driver_java_options(path))} pyspark-shell"


def is_connect_url(master: str | None) -> bool:
    """True when ``master`` names a Spark Connect server (``sc://host:port``) rather than a cluster master."""
    return bool(master) and master.startswith(CONNECT_SCHEME)


def is_connect(spark: SparkSession) -> bool:
    """True when ``spark`` is a Spark Connect client session: it has no JVM of its own (no ``sparkContext``,
    no Hadoop file system), and its plans run in the server's driver."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def session_conf(conf: dict[str, str]) -> dict[str, str]:
    """The settings of ``conf`` a Spark Connect client may set for its own session: the SQL ones
    (``spark.sql.*``, e.g. shuffle partitions); the JVM's (driver memory, scheduler mode) are the server's."""
    return {key: value for key, value in conf.items() if key.startswith("spark.sql.")}


def _connect_session(url: str, shuffle_partitions: int | None, conf: dict[str, str] | None) -> SparkSession:
    """A Spark Connect session on ``url`` with this pipeline's SQL settings (see :func:`spark_session`)."""
    settings = {"spark.sql.sources.partitionOverwriteMode": "dynamic", "spark.sql.session.timeZone": "UTC",
                "spark.sql.maxConcurrentOutputFileWriters": str(CONCURRENT_WRITERS), **session_conf(conf or {})}
    if shuffle_partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    spark = SparkSession.builder.remote(url).getOrCreate()
    for key, value in settings.items():
        spark.conf.set(key, value)
    return spark


def _chmodless_conf(conf: dict[str, str]) -> dict[str, str]:
    """The settings of :func:`.local_fs.local_fs_conf` when this process is about to start its driver JVM
    (they take effect only then) and ``conf`` chooses no local file system or driver class path of its own."""
    from pyspark import SparkContext

    from .local_fs import CLASS_PATH_KEY, FS_KEY, local_fs_conf

    if SparkContext._gateway is not None or FS_KEY in conf or CLASS_PATH_KEY in conf:
        return {}
    return local_fs_conf()


def spark_session(master: str | None = None, app_name: str = "amqp-conformance-report",
                  shuffle_partitions: int | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession on ``master`` (default ``local[*]``, or the one ``spark-submit`` already set), UI off,
    dynamic partition overwrite (so re-ingesting a run replaces it), session time zone UTC; a local driver
    binds to 127.0.0.1 only. ``conf`` adds Spark settings (e.g. ``spark.driver.memory`` before the JVM starts).

    Under ``spark-submit`` the master it was given wins when ``master`` is None. A ``sc://host:port`` master
    is a Spark Connect server (see :mod:`.connect_server`): the session's SQL settings are set for this
    client's session only, the JVM's settings stay the server's. A local driver that this call starts writes
    local files without a ``chmod`` process per file (:mod:`.local_fs`) unless ``conf`` names its own.
    """
    if is_connect_url(master):
        return _connect_session(master, shuffle_partitions, conf)
    _driver_java_options()
    builder = SparkSession.builder.appName(app_name)
    if master is not None or "SPARK_ENV_LOADED" not in os.environ:  # spark-submit sets SPARK_ENV_LOADED
        builder = builder.master(master or DEFAULT_MASTER)
    submitted = "SPARK_ENV_LOADED" in os.environ
    local = (master or ("" if submitted else DEFAULT_MASTER)).startswith("local")
    if local:  # the embedded driver listens on loopback only
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
    builder = (builder.config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
               .config("spark.sql.session.timeZone", "UTC")
               # a partitioned write keeps this many files open per task rather than sorting all its rows by
               # partition first (ingest writes the partitions of a few runs per task)
               .config("spark.sql.maxConcurrentOutputFileWriters", str(CONCURRENT_WRITERS)))
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if local and not submitted:
        conf = {**_chmodless_conf(conf or {}), **(conf or {})}
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
