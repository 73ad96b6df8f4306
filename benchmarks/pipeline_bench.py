"""Benchmark of the results pipeline (not a test): synthetic but realistic runs, Spark beside DuckDB.

For each size it
1. generates a warehouse with Spark (brokers x versions x cases x runs, ~FRAMES frame records a case run:
   SASL and AMQP headers, open, begin, attach, flow, then deliveries of three frames each: a transfer, the
   receiver's disposition, the sender's settling disposition; settle modes and latencies vary by broker and
   case; a few cases fail, flip between runs, regress between versions or carry stale deviations);
2. runs the pipeline on it (``reports/pipeline/job.run_report``: compliance matrix, regressions, flaky
   cases, settlement latencies per broker / settle mode / case family, stale deviations, every output file)
   and prints wall time, records/s and peak memory (driver JVM and Python);
3. runs the same aggregation (matrix, regressions, flaky cases, deliveries and latency percentiles) in DuckDB
   on the same Parquet files in a child process, prints its figures, the Spark/DuckDB ratio and whether the
   latency percentiles agree;
4. with ingest, also turns the same JSON lines into the same partitioned Parquet tables with DuckDB (its JSON
   reader builds columns; the memory Spark's driver is given), the single-node figure for ingest, and checks
   that it reads as many results and frames as Spark's ingest writes.

    python benchmarks/pipeline_bench.py                 # sizes 'small' then 'full' (>= 10 M frame records)
    python benchmarks/pipeline_bench.py --sizes tiny    # a quick look
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = {  # brokers, versions, cases, runs, frames per case run
    "tiny": (2, 2, 20, 2, 200),
    "small": (5, 5, 200, 3, 200),
    "full": (20, 5, 200, 3, 200),
}
SETUP = ["sasl-header", "sasl-header", "sasl-mechanisms", "sasl-init", "sasl-outcome", "amqp-header",
         "amqp-header", "open", "open", "begin", "begin", "attach", "attach", "flow"]
SETUP_DIR = ["out", "in", "in", "out", "in", "out", "in", "out", "in", "out", "in", "out", "in", "out"]
TEARDOWN = [("detach", "out"), ("detach", "in"), ("close", "out"), ("close", "in")]
MODES = [("mixed", "first"), ("unsettled", "second"), ("mixed", "second")]


# The generated warehouse's format: 2 since results carry deviation_intermittent (a declared race).
GENERATED_FORMAT = 2


def generate(spark, warehouse: str, brokers: int, versions: int, cases: int, runs: int, frames: int) -> tuple[int, int]:
    """Write a synthetic warehouse (results and frames tables, partitioned like ingest's); returns the
    number of result and frame records."""
    from amqp_conformance.reports.pipeline.ingest import FRAMES, RESULTS
    from amqp_conformance.reports.pipeline.schema import PARTITIONS
    from pyspark.sql import functions as F  # noqa: N812

    case_runs = spark.range(brokers * versions * cases * runs).select(
        (F.col("id") % cases).alias("c"), (F.col("id") / cases % runs).cast("int").alias("r"),
        (F.col("id") / (cases * runs) % versions).cast("int").alias("v"),
        (F.col("id") / (cases * runs * versions)).cast("int").alias("b"))
    day = F.col("v") * runs + F.col("r")
    started = F.timestamp_seconds(F.lit(1_790_000_000) + day * 86_400 + F.col("c") * 2)
    h = F.abs(F.xxhash64("b", "v", "c", "r")) % 1000
    stable = F.abs(F.xxhash64("b", "v", "c")) % 1000
    declared = (F.col("c") % 50 == 7) & (F.col("b") % 3 == 0)  # a declared deviation
    race = declared & (F.col("c") % 100 == 57)  # one declared intermittent: a race seen in some runs only
    verdict = (F.when(h < 8, "ERROR")  # a flaky harness now and then
               .when(race & (h % 3 != 0), "PASS").when(declared, "NON-STRICT")
               .when((F.col("c") % 40 == 3) & (F.col("v") >= 3 + F.col("b") % 2), "FAIL")  # a version regression
               .when(stable < 15, "FAIL").when(F.col("c") % 97 == 5, "UNSUPPORTED").when(stable < 25, "INFO")
               .otherwise("PASS"))
    table = F.concat(F.lit("family"), (F.col("c") % 8).cast("string"))
    broker = F.concat(F.lit("broker"), F.lpad(F.col("b").cast("string"), 2, "0"))
    version = F.concat(F.lit("1."), F.col("v").cast("string"), F.lit(".0"))
    run_id = F.concat(F.date_format(F.timestamp_seconds(F.lit(1_790_000_000) + day * 86_400), "yyyyMMdd'T'HHmmss'Z'"),
                      F.lit("-"), broker, F.lit("v"), F.col("v").cast("string"), F.lit("r"), F.col("r").cast("string"))
    case_id = F.concat(table, F.lit("/"), F.col("c").cast("string"))
    base = case_runs.select("*", broker.alias("broker"), version.alias("broker_version"), run_id.alias("run_id"),
                            table.alias("table"), case_id.alias("case_id"), started.alias("started_at"),
                            verdict.alias("verdict"))
    run_started = F.timestamp_seconds(F.lit(1_790_000_000) + day * 86_400)
    results = base.select(
        "run_id", "case_id", "table", F.lit("seed.txt").alias("source_document"),
        F.lit("Accepted: Subscription Mapping").alias("source_heading"), F.col("c").cast("string").alias("source_row"),
        "broker", "broker_version", F.lit("container").alias("broker_launcher"),
        F.lit("amqp://127.0.0.1:5672").alias("broker_url"), F.lit("um-10.11").alias("expectation_set"), "verdict",
        F.lit('{"link": "advanced"}').alias("expected"), F.lit('{"link": "advanced"}').alias("observed"),
        F.when(F.col("verdict") == "FAIL", "broker_disposition: expected settled, observed none").otherwise("")
        .alias("reason"), F.array().cast("array<string>").alias("mismatches"),
        ((F.col("verdict") == "PASS") & (F.col("c") % 50 == 11)).alias("stale_deviation"),
        (race & (F.col("verdict") == "NON-STRICT")).alias("deviation_intermittent"),
        (h / 3.0 + 20).alias("duration_ms"), "started_at", run_started.alias("run_started"),
        F.to_date(run_started).alias("run_date"))
    results.write.mode("overwrite").partitionBy(*PARTITIONS).parquet(f"{warehouse}/{RESULTS}")

    k = F.col("k")
    n_setup, n_tear = len(SETUP), len(TEARDOWN)
    deliveries = (frames - n_setup - n_tear) // 3
    d = ((k - n_setup) / 3).cast("int")
    phase = (k - n_setup) % 3
    in_body = (k >= n_setup) & (k < n_setup + deliveries * 3)
    tear = k - n_setup - deliveries * 3
    mode = F.col("c") % len(MODES)
    snd = F.element_at(F.array(*[F.lit(m[0]) for m in MODES]), (mode + 1).cast("int"))
    rcv = F.element_at(F.array(*[F.lit(m[1]) for m in MODES]), (mode + 1).cast("int"))
    performative = (F.when(k < n_setup, F.element_at(F.array(*map(F.lit, SETUP)), (k + 1).cast("int")))
                    .when(in_body, F.element_at(F.array(F.lit("transfer"), F.lit("disposition"),
                                                        F.lit("disposition")), (phase + 1).cast("int")))
                    .otherwise(F.element_at(F.array(*[F.lit(t[0]) for t in TEARDOWN]), (tear + 1).cast("int"))))
    direction = (F.when(k < n_setup, F.element_at(F.array(*map(F.lit, SETUP_DIR)), (k + 1).cast("int")))
                 .when(in_body, F.element_at(F.array(F.lit("in"), F.lit("out"), F.lit("in")), (phase + 1).cast("int")))
                 .otherwise(F.element_at(F.array(*[F.lit(t[1]) for t in TEARDOWN]), (tear + 1).cast("int"))))
    noise = F.abs(F.xxhash64("b", "v", "c", "r", "k")) % 1000
    latency_ns = (150_000 + noise * 40 * (1 + F.col("b") % 5) + F.when(noise > 990, 30_000_000).otherwise(0))
    t0 = F.lit(10_000_000_000) + F.col("c") * 1_000_000_000
    t_delivery = t0 + 5_000_000 + d * 2_000_000
    t_ns = (F.when(k < n_setup, t0 + k * 100_000)
            .when(in_body & (phase == 0), t_delivery)
            .when(in_body & (phase == 1), t_delivery + 60_000)
            .when(in_body, t_delivery + 60_000 + latency_ns)
            .otherwise(t_delivery + 10_000_000 + tear * 100_000)).cast("long")
    is_attach = (performative == "attach")
    fields = (F.when(performative == "transfer", F.format_string(
        '{"handle": 0, "delivery-id": %d, "delivery-tag": "b\'%s:%d\'", "message-format": 0}', d, F.col("run_id"), d))
        .when(in_body & (phase == 1), F.format_string(
            '{"role": "receiver", "first": %d, "last": null, "settled": false, "state": {"@type": "accepted"}}', d))
        .when(in_body, F.format_string(
            '{"role": "sender", "first": %d, "last": null, "settled": true, "state": {"@type": "accepted"}}', d))
        .when(is_attach, F.format_string('{"name": "sub", "handle": 0, "snd-settle-mode": "%s", '
                                         '"rcv-settle-mode": "%s"}', snd, rcv))
        .otherwise(F.lit("{}")))
    per_case = n_setup + deliveries * 3 + n_tear
    frame_rows = base.select("run_id", "case_id", "broker", "broker_version", "c", "b", "v", "r",
                             F.to_date(run_started).alias("run_date"),
                             F.explode(F.sequence(F.lit(0), F.lit(per_case - 1))).alias("k"))
    frame_rows = frame_rows.select(
        "run_id", "case_id", F.lit("um-10.11").alias("expectation_set"), "broker", "broker_version", "run_date",
        k.cast("long").alias("seq"), t_ns.alias("t_ns"), F.lit("subscriber").alias("party"),
        direction.alias("dir"), F.lit(0).cast("long").alias("channel"), performative.alias("performative"),
        fields.alias("fields"), F.when(performative == "transfer", F.lit(64)).otherwise(0).cast("long")
        .alias("payload_len"), F.lit("0000002a02000000005314c00d05430043a0").alias("raw_hex"),
        F.when((performative == "transfer") | is_attach, F.lit(0)).cast("long").alias("handle"),
        F.when(performative == "transfer", d).cast("long").alias("delivery_id"),
        F.when(in_body & (phase == 2), True).when(in_body & (phase == 1), False).alias("settled"),
        F.when(in_body & (phase == 1), "receiver").when(in_body & (phase == 2), "sender")
        .when(is_attach, F.when(direction == "out", "receiver").otherwise("sender")).alias("role"),
        F.when(in_body & (phase > 0), d).cast("long").alias("first"), F.lit(None).cast("long").alias("last"),
        F.when(is_attach, snd).alias("snd_settle_mode"), F.when(is_attach, rcv).alias("rcv_settle_mode"),
        F.when(in_body & (phase > 0), "accepted").alias("state"))
    frame_rows.write.mode("overwrite").partitionBy(*PARTITIONS).parquet(f"{warehouse}/{FRAMES}")
    n = brokers * versions * cases * runs
    return n, n * per_case


# The records' format the JSON lines are exported in: 2 since frame records carry key_fields, 3 since result
# records carry deviation_intermittent.
EXPORT_FORMAT = 3


def export_jsonl(spark, warehouse: str, run_dir: Path) -> None:
    """Write the warehouse back out as one run directory of JSON lines, in the records' own format
    (``results.jsonl`` and ``frames.jsonl`` as directories of part files), for timing ingest."""
    from amqp_conformance.reports.pipeline.ingest import FRAMES, RESULTS, read_table
    from amqp_conformance.reports.records import KEY_FIELDS
    from pyspark.sql import functions as F  # noqa: N812

    results = read_table(spark, warehouse, RESULTS)
    line = F.to_json(F.struct(
        "run_id", "case_id", "table",
        F.struct(F.col("source_document").alias("document"), F.col("source_heading").alias("heading"),
                 F.col("source_row").alias("row")).alias("source"),
        F.struct(F.col("broker").alias("name"), F.col("broker_version").alias("version"),
                 F.col("broker_launcher").alias("launcher"), F.col("broker_url").alias("url")).alias("broker"),
        "expectation_set", "verdict", F.parse_json("expected").alias("expected"),
        F.parse_json("observed").alias("observed"), "reason", "mismatches",
        F.array().cast("array<string>").alias("info"),
        "stale_deviation", "deviation_intermittent", "duration_ms",
        F.date_format("started_at", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS+00:00").alias("started_at")))
    results.select(line.alias("value")).write.mode("overwrite").text(str(run_dir / "results.jsonl"))
    frames = read_table(spark, warehouse, FRAMES)
    # as reports/records.py frame_record writes them: key_fields holds the typed columns, nulls left out
    key_fields = F.to_json(F.struct(*[name for name, _, _ in KEY_FIELDS]))
    frame_line = F.format_string(
        '{"run_id": "%s", "case_id": "%s", "expectation_set": "%s", "seq": %d, "t_ns": %d, "party": "%s", '
        '"dir": "%s", "channel": %d, "performative": "%s", "fields": %s, "payload_len": %d, "raw_hex": "%s", '
        '"key_fields": %s}',
        "run_id", "case_id", "expectation_set", "seq", "t_ns", "party", "dir", "channel", "performative", "fields",
        "payload_len", "raw_hex", key_fields)
    frames.select(frame_line.alias("value")).write.mode("overwrite").text(str(run_dir / "frames.jsonl"))


def _jvm_pid(spark) -> int:
    return spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()


def jvm_peak_mb(spark) -> float:
    """Peak resident memory (VmHWM) of the driver JVM over its whole life, in MiB."""
    return process_peak_mb(_jvm_pid(spark))


def _session(data: list[str], driver_memory: str | None, remote: str | None = None):
    """A fresh local session (this child process's own JVM) sized to ``data`` (see pipeline.sizing), or with
    the driver memory asked for; with ``remote`` (``sc://...``), a session of that warm Spark Connect server
    with the same SQL settings (its JVM is the server's)."""
    from amqp_conformance.reports.pipeline.session import session_conf, spark_session
    from amqp_conformance.reports.pipeline.sizing import input_bytes, local_conf

    conf = local_conf(input_bytes(data))
    if driver_memory:
        conf["spark.driver.memory"] = driver_memory
    if remote:
        return spark_session(remote, conf=session_conf(conf)), {**conf, "spark.driver.memory": "server's"}
    return spark_session(conf=conf), conf


def _jvm_figures(spark, remote: str | None) -> dict:
    """The local driver JVM's peak; for a Connect session, none here (the parent reads the server's)."""
    return {} if remote else {"jvm_peak_mb": jvm_peak_mb(spark)}


def ingest_child(run_dir: str, warehouse: str, driver_memory: str | None, remote: str | None = None) -> dict:
    """In this (child) process: ingest ``run_dir`` into a fresh ``warehouse``; wall time from the session's
    start (JVM start-up excluded) and the JVM's peak from its start (on ``remote``: see :func:`_session`)."""
    from amqp_conformance.reports.pipeline.ingest import ingest

    spark, conf = _session([run_dir], driver_memory, remote)
    start = time.perf_counter()
    report = ingest(spark, [run_dir], warehouse)
    figures = {"wall_s": time.perf_counter() - start, "results": report.results, "frames": report.frames,
               "malformed": report.malformed_count, **_jvm_figures(spark, remote),
               "driver_memory": conf["spark.driver.memory"]}
    spark.stop()
    return figures


def pipeline_child(warehouse: str, out: str, driver_memory: str | None, remote: str | None = None) -> dict:
    """In this (child) process: run the report job on ``warehouse`` as ``amqp-conformance report`` would, in a
    JVM sized to the warehouse (or on ``remote``: see :func:`_session`); wall time from the session's start,
    the JVM's peak from its start."""
    from amqp_conformance.reports.pipeline.ingest import FRAMES, RESULTS, read_table
    from amqp_conformance.reports.pipeline.job import run_report

    spark, conf = _session([warehouse], driver_memory, remote)
    start = time.perf_counter()
    summary = run_report(read_table(spark, warehouse, RESULTS), read_table(spark, warehouse, FRAMES), Path(out),
                         max_logs=50)
    figures = {"wall_s": time.perf_counter() - start, **_jvm_figures(spark, remote),
               "python_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               "driver_memory": conf["spark.driver.memory"],
               "shuffle_partitions": conf["spark.sql.shuffle.partitions"], **summary.counts}
    spark.stop()
    return figures


def process_peak_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of process ``pid`` over its life so far, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def warm_figures(size_dir: Path, warehouse: str, ingest: bool, driver_memory: str | None, runs: int) -> dict:
    """Ingest and report on a warm Spark Connect server (``amqp-conformance spark-server``): the server is
    started with the heap a local driver would get for the larger input, and each job runs ``runs`` times in
    turn: the first run warms the server (``first_*``), the median of the others is the warm figure
    (``warm_*``, each run's time in ``*_runs``); the server's peak resident memory over all of them."""
    from amqp_conformance.reports.pipeline import connect_server
    from amqp_conformance.reports.pipeline.sizing import driver_heap_mib, input_bytes, physical_memory

    inputs = [warehouse] + ([str(size_dir / "jsonl-run")] if ingest else [])
    heap = driver_memory or f"{max(driver_heap_mib(input_bytes([d]), physical_memory()) for d in inputs)}m"
    port = connect_server.free_port()
    server = connect_server.start_server(port, heap, log=size_dir / "connect-server.log")
    remote = ["--remote", f"sc://127.0.0.1:{port}"]
    times: dict[str, list[float]] = {"ingest": [], "pipeline": []}
    try:
        for attempt in range(runs):
            if ingest:
                shutil.rmtree(size_dir / "ingested-warm", ignore_errors=True)
                times["ingest"].append(child("--ingest-child", str(size_dir / "jsonl-run"),
                                             str(size_dir / "ingested-warm"), *remote)["wall_s"])
            report = size_dir / ("report-warm" if attempt == runs - 1 else f"report-warm-{attempt}")
            times["pipeline"].append(child("--pipeline-child", warehouse, str(report), *remote)["wall_s"])
        peak = process_peak_mb(server.pid)
    finally:
        connect_server.stop_server(server)
    figures: dict = {"heap": heap, "server_peak_mb": peak}
    for job, walls in times.items():
        if walls:
            figures.update({f"first_{job}": walls[0], f"warm_{job}": statistics.median(walls[1:]),
                            f"{job}_runs": walls})
    return figures


def child(*args: str) -> dict:
    """Run this script with ``args`` in a child process; returns the JSON it prints last."""
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


DUCKDB_SQL = """
CREATE VIEW results AS SELECT * FROM read_parquet('{wh}/results/**/*.parquet', hive_partitioning = true);
CREATE VIEW frames AS SELECT * FROM read_parquet('{wh}/frames/**/*.parquet', hive_partitioning = true);
CREATE MACRO vrank(v) AS CASE v WHEN 'PASS' THEN 0 WHEN 'INFO' THEN 0 WHEN 'NON-STRICT' THEN 1
    WHEN 'UNSUPPORTED' THEN 1 WHEN 'ERROR' THEN 2 ELSE 3 END;
CREATE MACRO cverdict(v, i) AS CASE WHEN v = 'NON-STRICT' AND coalesce(i, false) THEN 'PASS' ELSE v END;
CREATE TABLE matrix AS SELECT * EXCLUDE (n) FROM (SELECT *, row_number() OVER (PARTITION BY broker, broker_version,
    case_id, expectation_set ORDER BY run_started DESC, run_id DESC) AS n FROM results) WHERE n = 1;
CREATE TABLE summary AS SELECT broker, broker_version, expectation_set, count(*) AS cases,
    count(*) FILTER (verdict = 'PASS') AS pass, count(*) FILTER (verdict = 'FAIL') AS fail,
    count(*) FILTER (verdict = 'NON-STRICT') AS non_strict, count(*) FILTER (verdict = 'UNSUPPORTED') AS unsupported,
    count(*) FILTER (verdict = 'ERROR') AS error, count(*) FILTER (verdict = 'INFO') AS info,
    round(100.0 * count(*) FILTER (verdict IN ('PASS', 'INFO'))
          / nullif(count(*) FILTER (verdict <> 'UNSUPPORTED'), 0), 1) AS compliant_pct
    FROM matrix GROUP BY ALL;
CREATE TABLE run_regressions AS SELECT * FROM (SELECT *, lag(verdict) OVER w AS prev, lag(run_id) OVER w AS prev_run,
    lag(broker_version) OVER w AS prev_version, lag(cverdict(verdict, deviation_intermittent)) OVER w AS prev_c
    FROM results WINDOW w AS (PARTITION BY broker, broker_version,
    case_id, expectation_set ORDER BY run_started, run_id))
    WHERE prev IS NOT NULL AND vrank(cverdict(verdict, deviation_intermittent)) > vrank(prev_c);
CREATE TABLE version_regressions AS SELECT * FROM (SELECT *, lag(verdict) OVER w AS prev,
    lag(run_id) OVER w AS prev_run, lag(broker_version) OVER w AS prev_version,
    lag(cverdict(verdict, deviation_intermittent)) OVER w AS prev_c FROM matrix
    WINDOW w AS (PARTITION BY broker, case_id, expectation_set
    ORDER BY list_transform(list_filter(string_split_regex(broker_version, '[^0-9]+'),
    lambda x: x <> ''), lambda x: TRY_CAST(x AS BIGINT)), broker_version))
    WHERE prev IS NOT NULL AND vrank(cverdict(verdict, deviation_intermittent)) > vrank(prev_c);
CREATE TABLE flaky AS SELECT broker, broker_version, case_id, expectation_set, count(*) AS runs FROM results
    GROUP BY ALL HAVING count(DISTINCT cverdict(verdict, deviation_intermittent)) > 1;
CREATE TABLE stale AS SELECT * FROM matrix WHERE stale_deviation;
CREATE TABLE latency AS
WITH opens AS (SELECT run_id, case_id, expectation_set, party, list(seq) AS opens FROM frames
               WHERE performative = 'open' AND dir = 'out' GROUP BY ALL),
attaches AS (SELECT run_id, case_id, expectation_set, party,
             list({{'seq': seq, 'dir': dir, 'channel': channel, 'handle': handle, 'snd': snd_settle_mode,
                    'rcv': rcv_settle_mode}}) AS attaches
             FROM frames WHERE performative = 'attach' GROUP BY ALL),
rel AS (SELECT broker, broker_version, run_id, case_id, expectation_set, party, seq, t_ns, channel, handle, settled,
               performative = 'transfer' AS is_transfer,
               CASE WHEN performative = 'transfer' THEN dir WHEN role = 'sender' THEN dir
                    WHEN dir = 'in' THEN 'out' ELSE 'in' END AS space,
               CASE WHEN performative = 'transfer' THEN [delivery_id]
                    WHEN coalesce(last, first) >= first THEN range(first, coalesce(last, first) + 1)
                    ELSE [first] END AS ids
        FROM frames WHERE (performative = 'transfer' AND delivery_id IS NOT NULL)
                       OR (performative = 'disposition' AND coalesce(settled, false) AND first IS NOT NULL)),
conn AS (SELECT rel.*, coalesce(len(list_filter(opens, lambda s: s < rel.seq)), 0) AS conn, unnest(ids) AS delivery_id
         FROM rel LEFT JOIN opens USING (run_id, case_id, expectation_set, party)),
per_delivery AS (SELECT broker, broker_version, run_id, case_id, expectation_set, party, conn, channel, space,
                        delivery_id,
                        min(t_ns) FILTER (is_transfer) AS transfer_t_ns, min(seq) FILTER (is_transfer) AS transfer_seq,
                        min(handle) FILTER (is_transfer) AS handle, min(t_ns) FILTER (NOT is_transfer) AS disp_t_ns
                 FROM conn GROUP BY ALL HAVING min(t_ns) FILTER (is_transfer) IS NOT NULL),
delivered AS (SELECT p.*, split_part(case_id, '/', 1) AS family,
                     list_reverse_sort(list_filter(a.attaches, lambda x: x.dir = p.space AND x.channel = p.channel
                                       AND x.handle = p.handle AND x.seq < p.transfer_seq))[1] AS link,
                     CASE WHEN disp_t_ns >= transfer_t_ns THEN (disp_t_ns - transfer_t_ns) / 1e6 END AS latency_ms
              FROM per_delivery p LEFT JOIN attaches a USING (run_id, case_id, expectation_set, party))
SELECT broker, coalesce(link.snd || '/' || link.rcv, 'unknown') AS settle_mode, family, count(*) AS deliveries,
       count(latency_ms) AS settled, quantile_cont(latency_ms, [0.5, 0.95, 0.99]) AS p, max(latency_ms) AS max_ms
FROM delivered GROUP BY ALL;
"""


def run_duckdb(warehouse: str) -> dict:
    """The same aggregation in DuckDB (this process); returns figures and the latency rows."""
    import duckdb

    con = duckdb.connect()
    start = time.perf_counter()
    for statement in DUCKDB_SQL.format(wh=warehouse).split(";"):
        if statement.strip():
            con.execute(statement).fetchall()
    rows = con.execute("SELECT broker, settle_mode, family, deliveries, settled, p, max_ms FROM latency").fetchall()
    counts = {name: con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0]
              for name in ("matrix", "run_regressions", "version_regressions", "flaky", "stale")}
    wall = time.perf_counter() - start

    def fetch(query: str) -> list[list]:
        return [list(row) for row in con.execute(query).fetchall()]

    outputs = {  # what the Spark report files hold, to compare (after the timing)
        "matrix": fetch("SELECT broker, broker_version, case_id, expectation_set, verdict, run_id FROM matrix"),
        "summary": fetch("SELECT broker, broker_version, expectation_set, cases, pass, fail, non_strict, unsupported, "
                        "error, info, compliant_pct FROM summary"),
        "regressions": fetch("SELECT broker, 'run', case_id, expectation_set, prev_version, broker_version, prev_run, "
                            "run_id, prev, verdict FROM run_regressions UNION ALL SELECT broker, 'version', case_id, "
                            "expectation_set, prev_version, broker_version, prev_run, run_id, prev, verdict "
                            "FROM version_regressions"),
        "flaky": fetch("SELECT broker, broker_version, case_id, expectation_set, runs FROM flaky"),
        "stale": fetch("SELECT broker, broker_version, case_id, expectation_set, verdict, run_id FROM stale"),
    }
    latency = [{"broker": b, "settle_mode": s, "family": f, "deliveries": n, "settled": k,
                "p50_ms": None if p is None or p[0] is None else round(float(p[0]), 3),
                "p95_ms": None if p is None or p[1] is None else round(float(p[1]), 3),
                "p99_ms": None if p is None or p[2] is None else round(float(p[2]), 3),
                "max_ms": None if m is None else round(float(m), 3)} for b, s, f, n, k, p, m in rows]
    return {"wall_s": wall, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "counts": counts, "latency": latency, "outputs": outputs}


def duckdb_memory(spark_memory: str) -> str:
    """Spark's spelling of a memory size (``2317m``, ``4g``, ``512k``, bytes with no unit) in DuckDB's
    (``2317MiB``, ``4GiB``); raises ValueError for anything else."""
    found = re.fullmatch(r"(\d+)([kmgt]?)b?", spark_memory.strip().lower())
    if found is None:
        raise ValueError(f"not a memory size as Spark spells it: {spark_memory!r} (e.g. 2317m, 4g)")
    return f"{found[1]}{found[2].upper()}iB" if found[2] else f"{found[1]}B"


def duckdb_type(spark_type) -> str:
    """DuckDB's name for a Spark SQL type of the record schemas (string, long, boolean, and structs of them)."""
    from pyspark.sql.types import StructType

    if isinstance(spark_type, StructType):
        return "STRUCT(" + ", ".join(f"{f.name} {duckdb_type(f.dataType)}" for f in spark_type.fields) + ")"
    return {"string": "VARCHAR", "bigint": "BIGINT", "boolean": "BOOLEAN"}[spark_type.simpleString()]


def duckdb_ingest(run_dir: str, warehouse: str, memory: str) -> dict:
    """In this (child) process: the export in ``run_dir`` -> ``warehouse``'s ``results`` and ``frames`` tables
    (Parquet, partitioned by broker, run date and run id, as ingest writes them; the frames' key fields typed,
    ``fields`` kept as JSON) with DuckDB, given ``memory`` (DuckDB's spelling, ``2317MiB``) as Spark's driver is.
    The single-node figure for ingest: no line checks, no malformed-line report, one run directory."""
    import duckdb
    from amqp_conformance.reports.pipeline.schema import CORRUPT, FRAME_LINE, PARTITIONS

    # the frame line's columns as Spark's ingest reads them (schema.FRAME_LINE), but `fields` as JSON: an object
    # in the line, which DuckDB keeps as JSON text where Spark's JSON source keeps the text it read
    columns = "{" + ", ".join(f"'{f.name}': '{'JSON' if f.name == 'fields' else duckdb_type(f.dataType)}'"
                              for f in FRAME_LINE.fields if f.name != CORRUPT) + "}"
    partitioned = f"(FORMAT PARQUET, PARTITION_BY ({', '.join(PARTITIONS)}))"
    Path(warehouse).mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"SET memory_limit = '{memory}'")
    con.execute("SET preserve_insertion_order = false")
    start = time.perf_counter()
    con.execute(f"""CREATE TABLE results AS
        SELECT * EXCLUDE (source, broker, started_at), source.document AS source_document,
               source.heading AS source_heading, source.row AS source_row, broker.name AS broker,
               broker.version AS broker_version, broker.launcher AS broker_launcher, broker.url AS broker_url,
               TRY_CAST(started_at AS TIMESTAMP) AS started_at,
               CAST(min(TRY_CAST(started_at AS TIMESTAMP)) OVER (PARTITION BY run_id) AS DATE) AS run_date
        FROM read_json('{run_dir}/results.jsonl/part-*', format = 'newline_delimited')""")
    con.execute(f"COPY results TO '{warehouse}/results' {partitioned}")
    con.execute(f"""COPY (SELECT f.* EXCLUDE (key_fields), unnest(f.key_fields), r.broker, r.broker_version,
                                 r.run_date
                          FROM read_json('{run_dir}/frames.jsonl/part-*', format = 'newline_delimited',
                                         columns = {columns}) f
                          JOIN (SELECT DISTINCT run_id, broker, broker_version, run_date FROM results) r
                          USING (run_id))
                    TO '{warehouse}/frames' {partitioned}""")
    wall = time.perf_counter() - start

    def rows(table: str) -> int:
        return con.execute(f"SELECT count(*) FROM read_parquet('{warehouse}/{table}/**/*.parquet')").fetchone()[0]

    return {"wall_s": wall, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "results": rows("results"), "frames": rows("frames"), "memory": memory}


def agree(spark_latency: list[dict], duck_latency: list[dict]) -> bool:
    """True when both engines give the same latency rows (percentiles to the microsecond, +-0.001 ms)."""
    def key(r: dict) -> tuple:
        return r["broker"], r["settle_mode"], r["family"]

    a, b = {key(r): r for r in spark_latency}, {key(r): r for r in duck_latency}
    if a.keys() != b.keys():
        return False
    for k in a:
        for name in ("deliveries", "settled", "p50_ms", "p95_ms", "p99_ms", "max_ms"):
            x, y = a[k][name], b[k][name]
            if (x is None) != (y is None) or (x is not None and abs(x - y) > 0.0011):
                return False
    return True


OUTPUT_KEYS = {  # report file -> (its rows' fields DuckDB's rows give, in the same order)
    "matrix": ("compliance.json", "cells", ("broker", "broker_version", "case_id", "expectation_set", "verdict",
                                            "run_id")),
    "summary": ("compliance.json", "summary", ("broker", "broker_version", "expectation_set", "cases", "pass",
                                               "fail", "non_strict", "unsupported", "error", "info", "compliant_pct")),
    "regressions": ("regressions.json", None, ("broker", "kind", "case_id", "expectation_set", "from_version",
                                               "to_version", "from_run_id", "to_run_id", "from_verdict",
                                               "to_verdict")),
    "flaky": ("flaky.json", None, ("broker", "broker_version", "case_id", "expectation_set", "runs")),
    "stale": ("stale-deviations.json", None, ("broker", "broker_version", "case_id", "expectation_set", "verdict",
                                              "run_id")),
}


def agreement(report: Path, duck: dict) -> dict[str, bool]:
    """For each output (matrix cells, summary counts, regressions, flaky cases, stale deviations, latency
    percentiles): True when Spark's report files in ``report`` hold exactly the rows DuckDB found."""
    verdicts = {}
    for name, (file, key, fields) in OUTPUT_KEYS.items():
        data = json.loads((report / file).read_text())
        spark_rows = sorted(tuple(row[f] for f in fields) for row in (data[key] if key else data))
        duck_rows = sorted(tuple(row) for row in duck["outputs"][name])
        verdicts[name] = spark_rows == duck_rows
    verdicts["latency"] = agree(json.loads((report / "latency.json").read_text()), duck["latency"])
    return verdicts


def main() -> int:
    """Run the benchmark for each size asked; print one block of figures a size, then all of them side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,full", help=f"comma-separated, from {', '.join(SIZES)}")
    parser.add_argument("--work", default=None, help="scratch directory (default: a temporary one, removed)")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the data under --work and reuse what an earlier run generated there")
    parser.add_argument("--driver-memory", default=None,
                        help="Spark driver memory of the ingest and pipeline (default: sized to the data, as "
                             "'amqp-conformance report' sizes it)")
    parser.add_argument("--ingest", action=argparse.BooleanOptionalAction, default=True,
                        help="also time ingest of the data as JSON lines (default on)")
    parser.add_argument("--warm", action=argparse.BooleanOptionalAction, default=True,
                        help="also time ingest and pipeline on a warm Spark Connect server (default on)")
    parser.add_argument("--warm-runs", type=int, default=3,
                        help="runs of each job on the warm server: the first warms it, the median of the rest "
                             "is the warm figure (default 3, at least 2)")
    parser.add_argument("--remote", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--duckdb-child", metavar="WAREHOUSE", help=argparse.SUPPRESS)
    parser.add_argument("--ingest-child", nargs=2, metavar=("RUN_DIR", "WAREHOUSE"), help=argparse.SUPPRESS)
    parser.add_argument("--duckdb-ingest-child", nargs=3, metavar=("RUN_DIR", "WAREHOUSE", "MEMORY"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--pipeline-child", nargs=2, metavar=("WAREHOUSE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warm_runs < 2:
        parser.error("--warm-runs must be at least 2 (the first run only warms the server)")
    if args.duckdb_child:
        print(json.dumps(run_duckdb(args.duckdb_child)))
        return 0
    if args.ingest_child:
        print(json.dumps(ingest_child(*args.ingest_child, args.driver_memory, args.remote)))
        return 0
    if args.duckdb_ingest_child:
        print(json.dumps(duckdb_ingest(*args.duckdb_ingest_child)))
        return 0
    if args.pipeline_child:
        print(json.dumps(pipeline_child(*args.pipeline_child, args.driver_memory, args.remote)))
        return 0

    from amqp_conformance.reports.pipeline.session import spark_session

    work = Path(args.work or tempfile.mkdtemp(prefix="pipeline-bench-"))
    memory = ["--driver-memory", args.driver_memory] if args.driver_memory else []
    print(f"machine: {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores; "
          f"Spark local[*], driver memory {args.driver_memory or 'sized to the data'}; scratch {work}")
    table = []
    spark = None
    try:
        for size in args.sizes.split(","):
            brokers, versions, cases, runs, frames = SIZES[size]
            warehouse = str(work / size / "warehouse")
            done_marker = work / size / "generated.json"
            start = time.perf_counter()
            marker = json.loads(done_marker.read_text()) if args.reuse and done_marker.exists() else None
            if not isinstance(marker, dict) or marker.get("generated_format") != GENERATED_FORMAT:
                marker = None  # none, or written by an older generator: generate again
            if marker is None:
                spark = spark or spark_session(conf={"spark.driver.memory": "2g"})
                marker = dict(zip(("results", "frames"), generate(spark, warehouse, brokers, versions, cases, runs,
                                                                  frames), strict=True),
                              generated_format=GENERATED_FORMAT, export_format=None)
            if args.ingest and marker["export_format"] != EXPORT_FORMAT:
                spark = spark or spark_session(conf={"spark.driver.memory": "2g"})
                export_jsonl(spark, warehouse, work / size / "jsonl-run")
                marker["export_format"] = EXPORT_FORMAT
            done_marker.write_text(json.dumps(marker))
            n_results, n_frames = marker["results"], marker["frames"]
            generated = time.perf_counter() - start
            ingested = duck_ingested = None
            if args.ingest:
                shutil.rmtree(work / size / "ingested", ignore_errors=True)
                ingested = child("--ingest-child", str(work / size / "jsonl-run"), str(work / size / "ingested"),
                                 *memory)
                shutil.rmtree(work / size / "ingested-duckdb", ignore_errors=True)
                duck_ingested = child("--duckdb-ingest-child", str(work / size / "jsonl-run"),
                                      str(work / size / "ingested-duckdb"), duckdb_memory(ingested["driver_memory"]))
            report = work / size / "report"
            figures = child("--pipeline-child", warehouse, str(report), *memory)
            duck = child("--duckdb-child", warehouse)
            agreed = agreement(report, duck)
            warm = warm_figures(work / size, warehouse, args.ingest, args.driver_memory, args.warm_runs) \
                if args.warm else None
            if warm:
                for name, ok in agreement(work / size / "report-warm", duck).items():
                    agreed[f"{name} (warm)"] = ok
            if duck_ingested:
                agreed["ingest counts"] = (duck_ingested["results"], duck_ingested["frames"]) == \
                    (ingested["results"], ingested["frames"])
            records = n_results + n_frames
            print(f"\n== size {size}: {brokers} brokers x {versions} versions x {cases} cases x {runs} runs, "
                  f"{frames} frames a case run ==")
            print(f"records:        {n_results:,} results + {n_frames:,} frames = {records:,} "
                  f"(generated and written in {generated:.1f} s)")
            if ingested:
                read = ingested["results"] + ingested["frames"]
                print(f"spark ingest (JSON lines -> Parquet warehouse): {ingested['wall_s']:.1f} s wall, "
                      f"{read / ingested['wall_s']:,.0f} records/s, {read:,} records, {ingested['malformed']} "
                      f"malformed, driver JVM peak {ingested['jvm_peak_mb']:.0f} MiB "
                      f"(driver memory {ingested['driver_memory']})")
                print(f"duckdb ingest (1 node, the same lines -> the same partitioned tables): "
                      f"{duck_ingested['wall_s']:.1f} s wall, {duck_ingested['results']:,} results + "
                      f"{duck_ingested['frames']:,} frames, peak memory {duck_ingested['peak_mb']:.0f} MiB "
                      f"(memory limit {duck_ingested['memory']}); Spark ingest / DuckDB ingest "
                      f"{ingested['wall_s'] / duck_ingested['wall_s']:.2f}")
            print(f"spark pipeline: {figures['wall_s']:.1f} s wall, {records / figures['wall_s']:,.0f} records/s, "
                  f"peak memory: driver JVM {figures['jvm_peak_mb']:.0f} MiB (driver memory "
                  f"{figures['driver_memory']}, {figures['shuffle_partitions']} shuffle partitions), "
                  f"python {figures['python_peak_mb']:.0f} MiB")
            print(f"   outputs:     {figures['cells']:,} matrix cells, {figures['regressions']:,} regressions, "
                  f"{figures['flaky']:,} flaky, {figures['latency']:,} latency groups, {figures['stale']:,} stale")
            print(f"duckdb (1 node): {duck['wall_s']:.1f} s wall, {records / duck['wall_s']:,.0f} records/s, "
                  f"peak memory {duck['peak_mb']:.0f} MiB; counts {duck['counts']}")
            if warm:
                runs_of = {job: ", ".join(f"{t:.1f}" for t in warm.get(f"{job}_runs", []))
                           for job in ("ingest", "pipeline")}
                if ingested:
                    print(f"spark ingest on a warm Spark Connect server (heap {warm['heap']}): {runs_of['ingest']} s "
                          f"wall, run by run; warm (median after the first) {warm['warm_ingest']:.1f} s")
                print(f"spark pipeline on the warm server: {runs_of['pipeline']} s wall, run by run; warm "
                      f"{warm['warm_pipeline']:.1f} s; server JVM peak {warm['server_peak_mb']:.0f} MiB over all runs")
                print(f"ratio spark (warm) / duckdb wall time: {warm['warm_pipeline'] / duck['wall_s']:.2f}")
            print(f"ratio spark/duckdb wall time: {figures['wall_s'] / duck['wall_s']:.2f}; outputs agree with "
                  f"DuckDB: " + ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in agreed.items()))
            table.append((size, records, ingested, figures, duck, agreed, warm, duck_ingested))
            if not args.reuse:
                shutil.rmtree(work / size, ignore_errors=True)
    finally:
        if spark is not None:
            spark.stop()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print_table(table)
    return 0 if all(all(row[5].values()) for row in table) else 1


def print_table(rows: list[tuple]) -> None:
    """All sizes' figures side by side, one line a size (the table docs/pipeline.md records): a cold JVM a
    job, then (when measured) the warm Spark Connect server's second run of each job."""
    print("\n| size | records | Spark ingest | DuckDB ingest | Spark pipeline | driver JVM peak (heap) | DuckDB "
          "| DuckDB peak | Spark / DuckDB | warm ingest | warm pipeline | server peak (heap) | warm Spark / DuckDB "
          "| outputs agree |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for size, records, ingested, spark, duck, agreed, warm, duck_ingested in rows:
        ingest = f"{ingested['wall_s']:.1f} s" if ingested else "-"
        duck_ingest = f"{duck_ingested['wall_s']:.1f} s" if duck_ingested else "-"
        warm_ingest = f"{warm['warm_ingest']:.1f} s" if warm and ingested else "-"
        warm_cells = ("- | - | -" if not warm else
                      f"{warm['warm_pipeline']:.1f} s | {warm['server_peak_mb']:,.0f} MiB ({warm['heap']}) "
                      f"| {warm['warm_pipeline'] / duck['wall_s']:.2f}")
        print(f"| {size} | {records:,} | {ingest} | {duck_ingest} | {spark['wall_s']:.1f} s "
              f"| {spark['jvm_peak_mb']:,.0f} MiB ({spark['driver_memory']}) | {duck['wall_s']:.1f} s "
              f"| {duck['peak_mb']:,.0f} MiB | {spark['wall_s'] / duck['wall_s']:.2f} | {warm_ingest} | {warm_cells} "
              f"| {'all' if all(agreed.values()) else 'NOT ALL'} |")


if __name__ == "__main__":
    sys.exit(main())
