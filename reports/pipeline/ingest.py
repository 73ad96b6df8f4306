"""Ingest: run directories (local paths or any Hadoop-compatible URI) -> the Parquet warehouse.

A run directory holds ``results.jsonl`` and ``frames.jsonl`` (``reports/records.py``; either may also be a
directory of part files, as bulk exports write them). Each line is parsed
with an explicit schema (:mod:`.schema`); a line that is not a JSON object of that schema, or lacks a
required field, is *malformed*: it is counted and reported with its file and line number, never silently
dropped (and never written to the warehouse). The warehouse holds two Parquet tables, ``results`` and
``frames``, partitioned by ``broker``, ``run_date`` and ``run_id``; writing uses dynamic partition
overwrite, so ingesting the same run again replaces its partition instead of duplicating it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date

from amqp_conformance.reports.records import FRAMES_FILE, KEY_FIELDS, RESULTS_FILE
from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)
from pyspark.sql.types import StructType

from .observed import ObservationResult, named, observed_counts
from .schema import (
    CORRUPT,
    FRAME_FIELDS,
    FRAME_LINE,
    FRAME_REQUIRED,
    FRAMES_TABLE,
    PARTITIONS,
    RESULT_LINE,
    RESULT_REQUIRED,
    RESULTS_TABLE,
)
from .session import is_connect
from .small_frames import local_frame

RESULTS = "results"
FRAMES = "frames"
SHOWN_LINE = 200  # characters of a malformed line kept in the report


class IngestError(Exception):
    """A run directory that cannot be read (missing, or without results.jsonl); the message says which."""


@dataclass(frozen=True)
class Malformed:
    """One line that could not be read as a record: where it is, why, and its start."""

    file: str
    line: int
    problem: str
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.problem}: {self.text[:80]}"


@dataclass
class IngestReport:
    """What one ingest read and wrote."""

    run_ids: list[str] = field(default_factory=list)
    results: int = 0
    frames: int = 0
    malformed: list[Malformed] = field(default_factory=list)
    orphan_frames: int = 0
    duplicate_results: int = 0
    # observations whose counts did not come back (a Spark Connect server waits 100 ms for them after a
    # write) and were counted again, by name: each cost a second pass over its input
    recounted: list[str] = field(default_factory=list)

    @property
    def malformed_count(self) -> int:
        """Number of malformed lines across all files."""
        return len(self.malformed)


def _observed(report: IngestReport, name: str, observation: ObservationResult, source: DataFrame,
              counts: Mapping[str, Column]) -> dict[str, int]:
    """:func:`.observed.observed_counts` of ``observation`` (of ``source``); ``name`` joins ``report.recounted``
    when the counts had to be taken again."""
    counted, recounted = observed_counts(observation, source, counts)
    if recounted:
        report.recounted.append(name)
    return counted


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def _hadoop_path(spark: SparkSession, uri: str):
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path, path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def files_read(spark: SparkSession, uri: str) -> list[str]:
    """The files Spark reads for ``uri`` (a file, or a directory of part files), fully qualified as
    ``input_file_name()`` spells them; empty when nothing is there. Asked of the driver that reads them, so
    it also works from a Spark Connect client, which has no file system of the server's."""
    try:
        return list(spark.read.text(uri).inputFiles())
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" in str(exc):
            return []
        raise


def exists(spark: SparkSession, uri: str) -> bool:
    """True when ``uri`` (a local path or any Hadoop-compatible URI) exists. On Spark Connect: when it is a
    file, or a directory of files, that the server can read (see :func:`files_read`)."""
    if is_connect(spark):
        return bool(files_read(spark, uri))
    path, fs = _hadoop_path(spark, uri)
    return bool(fs.exists(path))


def qualified(spark: SparkSession, uri: str) -> str:
    """``uri`` fully qualified (``file:/tmp/run`` for ``/tmp/run``), as ``input_file_name()`` spells files."""
    path, fs = _hadoop_path(spark, uri)
    return str(fs.makeQualified(path).toString())


def _plain_uri(uri: str) -> str:
    """``file:/x``, ``file:///x`` and ``/x`` alike (Spark and Hadoop spell local files differently)."""
    return re.sub(r"^file:/*", "/", uri)


def _run_directory(spark: SparkSession, run_dir: str) -> str:
    """``run_dir`` fully qualified; raises :class:`IngestError` when it does not exist or has no results.jsonl.
    A Spark Connect client asks the server for the results file's name instead (the server's driver reads
    the files, and the client has no Hadoop file system)."""
    if is_connect(spark):
        found = files_read(spark, _join(run_dir, RESULTS_FILE))
        if not found:
            raise IngestError(f"{run_dir} does not exist or has no {RESULTS_FILE} where the Spark Connect server "
                              f"reads files; give directories written by 'amqp-conformance run --out DIR' that "
                              f"the server can read (a path on its machine, or a shared URI)")
        return re.sub(RECORDS_FILE_TAIL, "", found[0])
    if not exists(spark, run_dir):
        raise IngestError(f"run directory {run_dir} does not exist; give directories written by "
                          f"'amqp-conformance run --out DIR'")
    directory = qualified(spark, run_dir)
    if not exists(spark, _join(directory, RESULTS_FILE)):
        raise IngestError(f"{run_dir} has no {RESULTS_FILE}; give directories written by "
                          f"'amqp-conformance run --out DIR'")
    return directory


def run_files(spark: SparkSession, run_dirs: Sequence[str]) -> tuple[list[str], list[str]]:
    """The results and frames files of ``run_dirs`` (each directory once); raises :class:`IngestError` for a
    directory that does not exist or has no results.jsonl. A missing frames.jsonl is allowed."""
    results, frames, seen = [], [], set()
    for run_dir in run_dirs:
        directory = _run_directory(spark, run_dir)
        if directory in seen:
            continue
        seen.add(directory)
        results.append(_join(directory, RESULTS_FILE))
        if exists(spark, _join(directory, FRAMES_FILE)):
            frames.append(_join(directory, FRAMES_FILE))
    return results, frames


def task_slots(spark: SparkSession) -> int:
    """Tasks the driver runs at once (its default parallelism); on Spark Connect, which does not say, the
    session's shuffle partitions."""
    if is_connect(spark):
        return int(spark.conf.get("spark.sql.shuffle.partitions"))
    return spark.sparkContext.defaultParallelism


# the tail of a records file's name below its run directory: RUN/frames.jsonl, or RUN/frames.jsonl/part-0
RECORDS_FILE_TAIL = r"/(results|frames)\.jsonl(/.*)?$"


def run_dir_of(file: str) -> Column:
    """The run directory of a records file: ``RUN/results.jsonl`` -> ``RUN``; also when ``results.jsonl`` is a
    directory of part files, as Spark and other bulk writers produce (``RUN/frames.jsonl/part-0``)."""
    return F.regexp_replace(file, RECORDS_FILE_TAIL, "")


def read_lines(spark: SparkSession, files: Sequence[str], schema: StructType | None = None) -> DataFrame:
    """The lines of ``files`` with where they come from: ``file``, ``pid``, ``rid`` (for line numbers), ``value``;
    with ``schema``, also ``r``: the line parsed with it (``PERMISSIVE``, unreadable text in ``_corrupt_record``).

    Blank lines are kept here (they count in line numbers) and skipped by :func:`parse_lines`. The parse sits
    in the same projection as the position columns, which are non-deterministic, so the optimizer pushes no
    filter below it: each line is parsed once, however many checks read ``r`` (a filter on a column derived
    from ``from_json`` would otherwise inline the parse once per reference, and run it uncompiled).
    """
    columns = [F.input_file_name().alias("file"), F.spark_partition_id().alias("pid"),
               F.monotonically_increasing_id().alias("rid"), F.col("value")]
    if schema is not None:
        columns.append(F.from_json("value", schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
                       .alias("r"))
    return spark.read.text(list(files)).select(*columns)


def problem_of(required: Sequence[str]) -> Column:
    """Why a parsed record ``r`` is malformed, or null when it is not: not a JSON object of the record schema,
    or the ``required`` fields it lacks."""
    missing = [F.when(F.col(f"r.{name}").isNull(), F.lit(name)) for name in required]
    any_missing = F.col(f"r.{required[0]}").isNull()
    for name in required[1:]:
        any_missing = any_missing | F.col(f"r.{name}").isNull()
    return (F.when(F.col(f"r.{CORRUPT}").isNotNull(), F.lit("not a JSON object of the record schema"))
            .when(any_missing, F.concat(F.lit("missing field "), F.concat_ws(", ", *missing))))


def parse_lines(lines: DataFrame, required: Sequence[str]) -> DataFrame:
    """The non-blank lines of ``lines`` (from :func:`read_lines` with a schema) with ``problem``: null for a
    good record, else why not (see :func:`problem_of`)."""
    return lines.filter(F.trim("value") != "").withColumn("problem", problem_of(required))


def one_object_a_line(spark: SparkSession, files: Sequence[str]) -> bool:
    """True when every non-blank line of ``files`` starts with ``{``: then Spark's JSON source reads exactly
    one record (or one corrupt record) from each of them, as :func:`read_lines` would. A line that starts
    with anything else (an array, which the JSON source would split into several records or none, leading
    blanks, text) makes this False. One cheap pass over the text: no parse, stops at the first such line."""
    text = spark.read.text(list(files))
    odd = ~F.col("value").startswith("{") & (F.trim("value") != "")
    return text.filter(odd).isEmpty()


def read_records(spark: SparkSession, files: Sequence[str], schema: StructType, required: Sequence[str]) -> DataFrame:
    """The records of ``files`` as :func:`parse_lines` gives them (``file``, ``r``, ``problem``), parsed by
    Spark's JSON source: about twice as fast as ``from_json`` over the text, and a value kept as text keeps
    its text as written. No line positions: give :func:`_collect_malformed` the text path for line numbers.
    Only for files :func:`one_object_a_line` accepts (else the JSON source's records are not the lines)."""
    raw = (spark.read.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
           .json(list(files)))
    return (raw.select(F.input_file_name().alias("file"), F.struct(*raw.columns).alias("r"))
            .withColumn("problem", problem_of(required)))


def line_numbers(lines: DataFrame, bad: DataFrame) -> DataFrame:
    """``bad`` (rows of ``lines`` with ``file``, ``pid``, ``rid``) with its 1-based ``line`` in its file.

    Within one file, the text source keeps the file's order across partitions and within each partition,
    so a line's number is the lines of the file in earlier partitions plus its offset in its partition.
    """
    stats = lines.groupBy("file", "pid").agg(F.count(F.lit(1)).alias("n"), F.min("rid").alias("first_rid"))
    before = Window.partitionBy("file").orderBy("pid").rowsBetween(Window.unboundedPreceding, -1)
    stats = stats.withColumn("before", F.coalesce(F.sum("n").over(before), F.lit(0)))
    return (bad.join(F.broadcast(stats), ["file", "pid"])
            .withColumn("line", F.col("before") + F.col("rid") - F.col("first_rid") + 1))


def _collect_malformed(lines: DataFrame, parsed: DataFrame) -> list[Malformed]:
    """The malformed lines of ``parsed`` with their line numbers; called once a count has found some."""
    bad = parsed.filter(F.col("problem").isNotNull()).select("file", "pid", "rid", "value", "problem")
    rows = line_numbers(lines, bad).orderBy("file", "line").collect()
    return [Malformed(r["file"], int(r["line"]), r["problem"], r["value"][:SHOWN_LINE]) for r in rows]


def results_table(parsed: DataFrame) -> DataFrame:
    """Good result lines -> the warehouse ``results`` table (flat columns, run start and date, source dir)."""
    good = parsed.filter(F.col("problem").isNull())
    flat = good.select(
        run_dir_of("file").alias("run_dir"),
        "r.run_id", "r.case_id",
        F.coalesce("r.table", F.substring_index("r.case_id", "/", 1)).alias("table"),
        F.col("r.source.document").alias("source_document"), F.col("r.source.heading").alias("source_heading"),
        F.col("r.source.row").alias("source_row"),
        F.coalesce("r.broker.name", F.lit("unknown")).alias("broker"),
        F.coalesce("r.broker.version", F.lit("unknown")).alias("broker_version"),
        F.col("r.broker.launcher").alias("broker_launcher"), F.col("r.broker.url").alias("broker_url"),
        "r.expectation_set", "r.verdict", "r.expected", "r.observed", "r.reason",
        F.coalesce("r.mismatches", F.array().cast("array<string>")).alias("mismatches"),
        F.coalesce("r.stale_deviation", F.lit(False)).alias("stale_deviation"),
        F.coalesce("r.deviation_intermittent", F.lit(False)).alias("deviation_intermittent"), "r.duration_ms",
        F.expr("try_cast(r.started_at AS TIMESTAMP)").alias("started_at"))
    from_id = F.expr("try_to_timestamp(substring(run_id, 1, 16), \"yyyyMMdd'T'HHmmss'Z'\")")
    run = Window.partitionBy("run_id")
    flat = flat.withColumn("run_started", F.coalesce(F.min("started_at").over(run), from_id,
                                                     F.lit("1970-01-01 00:00:00").cast("timestamp")))
    return flat.withColumn("run_date", F.to_date("run_started"))


def with_key_fields(flat: DataFrame) -> DataFrame:
    """``flat`` (a frame record's columns, with its ``key_fields`` and ``fields``) with the typed key-field
    columns (warehouse names, :data:`KEY_FIELDS`) in place of ``key_fields``: a record's own ``key_fields``,
    or, for records written before frames carried them, its ``fields`` text parsed once more.

    Three projections, which the optimizer keeps apart since each column they make is read several times
    by the next: the second parse, for those records only (a parse inside a conditional is never shared, so
    reading its fields in the same projection would parse once per field); one struct of the key fields
    from either source; its fields as columns."""
    parsed = F.when(F.col("key_fields").isNull(), F.from_json("fields", FRAME_FIELDS)).alias("_f")

    def at(path: tuple[str, ...]) -> Column:
        column = F.col("_f")
        for step in path:
            column = column.getField(step)
        return column

    from_fields = F.struct(*[at(path).alias(name) for name, path, _ in KEY_FIELDS])
    keys = F.coalesce(F.col("key_fields"), from_fields).alias("_k")
    return (flat.select("*", parsed).select("*", keys).drop("_f", "key_fields")
            .select("*", *[F.col(f"_k.{name}").alias(name) for name, _, _ in KEY_FIELDS]).drop("_k"))


def frames_table(parsed: DataFrame, runs: DataFrame) -> DataFrame:
    """Frame lines (good and malformed: ``problem`` says which) joined with ``runs`` (``file``, ``run_id`` ->
    broker, version, run date; see :func:`runs_by_file`) -> the warehouse ``frames`` table's columns plus
    ``file`` and ``problem``; rows whose run is not in ``runs`` get a null ``broker``. The join is on the
    file's name as read, so no per-line string work finds the run directory. The malformed lines stay in
    (their columns null) so that one observation of this table counts them beside the orphans and the frames
    written: Spark Connect reports only the last observation of a plan."""
    flat = parsed.select(
        "file", "problem", "r.run_id", "r.case_id", "r.expectation_set", "r.seq", "r.t_ns", "r.party", "r.dir",
        "r.channel", "r.performative", "r.fields", "r.payload_len", "r.raw_hex", "r.key_fields")
    return with_key_fields(flat).join(F.broadcast(runs), ["file", "run_id"], "left")


@dataclass(frozen=True)
class RunOfFrames:
    """A run whose frames ingest writes: its id, where its broker, version and date come from, and the run
    directory its frames are read from (as :func:`qualified` spells it)."""

    run_id: str
    broker: str
    broker_version: str
    run_date: date | None
    frames_dir: str


def runs_by_file(spark: SparkSession, files: Sequence[str], runs: Sequence[RunOfFrames]) -> DataFrame:
    """``runs`` keyed by each file Spark reads for ``files`` (a records file, or each part file of a records
    directory): ``file`` as ``input_file_name()`` spells it, ``run_id``, ``broker``, ``broker_version``,
    ``run_date``. Small (one row per file and run of its directory), so it is built here, not by a join."""
    pattern = re.compile(RECORDS_FILE_TAIL)
    by_dir: dict[str, list[RunOfFrames]] = {}
    for run in runs:
        by_dir.setdefault(run.frames_dir, []).append(run)
    rows = [(name, run.run_id, run.broker, run.broker_version, run.run_date)
            for name in spark.read.text(list(files)).inputFiles()
            for run in by_dir.get(pattern.sub("", name), [])]
    return local_frame(spark, rows, "file string, run_id string, broker string, broker_version string, run_date date")


def write_frames(spark: SparkSession, frame_files: Sequence[str], runs: Sequence[RunOfFrames],
                 warehouse: str) -> IngestReport:
    """Parse ``frame_files``, join each frame to its run in ``runs`` (see :func:`frames_table`) and write the
    frames of known runs into ``warehouse``, parsing the text once (by the JSON source when
    :func:`one_object_a_line` allows, a cheap pass that parses nothing; else line by line); returns the frames
    written, the orphans (frames of no run in ``runs``, not written) and the malformed lines with file and line.

    The counts are observed while the frames are written (no second pass, nothing cached); the lines are
    read a second time only when some are malformed, to number them.
    """
    report = IngestReport()
    if one_object_a_line(spark, frame_files):
        parsed = read_records(spark, frame_files, FRAME_LINE, FRAME_REQUIRED)
    else:
        parsed = parse_lines(read_lines(spark, frame_files, FRAME_LINE), FRAME_REQUIRED)
    observation = Observation("frames")
    good = F.col("problem").isNull()
    counts = {"malformed": F.count(F.col("problem")),
              "orphans": F.count(F.when(good & F.col("broker").isNull(), 1)),
              "written": F.count(F.when(good & F.col("broker").isNotNull(), 1))}
    table = frames_table(parsed, runs_by_file(spark, frame_files, runs))
    frames = table.observe(observation, *named(counts))
    frames.filter(good & F.col("broker").isNotNull()).drop("file", "problem").write.mode("overwrite") \
        .option("partitionOverwriteMode", "dynamic").partitionBy(*PARTITIONS).parquet(_join(warehouse, FRAMES))
    counted = _observed(report, "frames", observation, table, counts)
    report.frames = counted["written"]
    report.orphan_frames = counted["orphans"]
    if counted["malformed"]:  # rare: read the text again, for line numbers
        lines = read_lines(spark, frame_files, FRAME_LINE)
        report.malformed = _collect_malformed(lines, parse_lines(lines, FRAME_REQUIRED))
    return report


def ingest(spark: SparkSession, run_dirs: Sequence[str], warehouse: str) -> IngestReport:
    """Read ``run_dirs`` and write their records into ``warehouse``; returns what was read and written.

    Malformed lines are in the report (file, line, problem); frames whose run has no result record are
    counted as ``orphan_frames`` and not written. A run found in two directories is taken from the first.
    Raises :class:`IngestError` for a missing directory or results file.
    """
    report = IngestReport()
    result_files, frame_files = run_files(spark, run_dirs)

    lines = read_lines(spark, result_files, RESULT_LINE)
    parsed = parse_lines(lines, RESULT_REQUIRED).persist(StorageLevel.MEMORY_AND_DISK)
    checked = Observation("result lines")
    malformed = {"malformed": F.count(F.col("problem"))}
    results = results_table(parsed.observe(checked, *named(malformed)))
    # one job finds every run (its directories, broker, version, date and records) and counts the malformed lines
    run_rows = results.groupBy("run_id", "run_dir", "broker", "broker_version", "run_date").count().collect()
    if _observed(report, "result lines", checked, parsed, malformed)["malformed"]:
        report.malformed += _collect_malformed(lines, parsed)
    # a run id in several directories: keep the first directory's copy (in the order given)
    order = {_plain_uri(f.rsplit("/", 1)[0]): i for i, f in enumerate(result_files)}
    owners: dict[str, str] = {}
    for row in run_rows:
        current = owners.get(row["run_id"])
        if current is None or order.get(_plain_uri(row["run_dir"]), 0) < order.get(_plain_uri(current), 0):
            owners[row["run_id"]] = row["run_dir"]
    owner_df = local_frame(spark, sorted(owners.items()), "run_id string, run_dir string")
    results = results.join(F.broadcast(owner_df), ["run_id", "run_dir"]).drop("run_dir")
    read = sum(row["count"] for row in run_rows if owners[row["run_id"]] == row["run_dir"])
    # observed last in this plan (Spark Connect reports only a plan's last observation; `checked` is done)
    kept = Observation("results kept")
    rows = {"n": F.count(F.lit(1))}
    # one shuffle by run, a task a core: the duplicates meet in it, and each task writes whole runs (adaptive
    # execution would pack these few rows into one task, which then writes every run's file alone)
    results = (results.repartition(task_slots(spark), "run_id")
               .dropDuplicates(["run_id", "case_id", "expectation_set"]))
    results.observe(kept, *named(rows)).write.mode("overwrite").option("partitionOverwriteMode", "dynamic") \
        .partitionBy(*PARTITIONS).parquet(_join(warehouse, RESULTS))
    report.results = _observed(report, "results kept", kept, results, rows)["n"]
    report.duplicate_results = read - report.results
    report.run_ids = sorted(owners)

    if frame_files:
        runs = list({RunOfFrames(r["run_id"], r["broker"], r["broker_version"], r["run_date"], r["run_dir"])
                     for r in run_rows if owners[r["run_id"]] == r["run_dir"]})
        frame_report = write_frames(spark, frame_files, runs, warehouse)
        report.malformed += frame_report.malformed
        report.orphan_frames = frame_report.orphan_frames
        report.frames = frame_report.frames
        report.recounted += frame_report.recounted
    parsed.unpersist()
    return report


def read_table(spark: SparkSession, warehouse: str, table: str, run_ids: Sequence[str] | None = None) -> DataFrame:
    """Warehouse ``table`` (``results`` or ``frames``), only ``run_ids`` when given (partition pruning)."""
    schema = {RESULTS: RESULTS_TABLE, FRAMES: FRAMES_TABLE}[table]
    df = spark.read.schema(schema).parquet(_join(warehouse, table))
    if run_ids is not None:
        df = df.filter(F.col("run_id").isin(list(run_ids)))
    return df
