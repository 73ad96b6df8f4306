"""``amqp-conformance report``: the Spark results pipeline over run directories.

``report RUN_DIR... [--out DIR] [--master URL] [--warehouse DIR]`` ingests the runs into a Parquet
warehouse and writes the compliance matrix (HTML, JSON, CSV, JUnit XML), regressions, flaky cases,
settlement latencies and stale deviations into ``--out``. PySpark is the optional extra ``spark``.

``spark-server [--port N] [--memory SIZE]`` keeps a Spark Connect server running for reports to attach to
(``report --master sc://127.0.0.1:N``): each report after the first runs in a warm JVM.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amqp_conformance.reports.pipeline.ingest import IngestReport

SPARK_MISSING = "the report pipeline needs PySpark: pip install 'amqp-conformance[spark]'"
CONNECT_MISSING = "a Spark Connect server (--master sc://...) needs PySpark's Connect client: " \
                  "pip install 'amqp-conformance[spark]' (it pulls in pyspark[connect])"
JAVA_MISSING = "the report pipeline runs Spark, which needs Java 17 or later: install a JDK (e.g. apt-get install " \
               "openjdk-17-jre-headless) or set JAVA_HOME"


def add_report_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``report`` and ``spark-server`` sub-commands to ``commands`` (the CLI's sub-parsers); returns
    ``report``'s parser."""
    report = commands.add_parser("report", help="the results pipeline (Spark): compliance matrix, regressions, "
                                                "flaky cases, latencies")
    report.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                        help="run directories (local paths or Hadoop URIs such as hdfs://, s3a://)")
    report.add_argument("--out", default=None,
                        help="output directory (default: ./amqp-report; with --allure, the first RUN_DIR)")
    report.add_argument("--master", default=None,
                        help="Spark master URL (default local[*], or what spark-submit was given), or a Spark "
                             "Connect server, sc://HOST:PORT (see 'amqp-conformance spark-server')")
    report.add_argument("--warehouse", default=None,
                        help="Parquet warehouse to ingest into (default: OUT/warehouse); with no RUN_DIR, "
                             "report on every run it holds")
    report.add_argument("--max-logs", type=int, default=500, help="frame logs embedded in the HTML (500)")
    add_report_extension_arguments(report)
    report.set_defaults(func=cmd_report)
    server = commands.add_parser("spark-server", help="keep a Spark Connect server running for reports "
                                                      "(report --master sc://127.0.0.1:PORT runs warm)")
    server.add_argument("--port", type=int, default=None, help="TCP port on 127.0.0.1 (default 15002)")
    server.add_argument("--memory", default=None,
                        help="the server driver's heap, e.g. 2g (default 2g; about 1g plus 256m a GiB of "
                             "run records a report reads)")
    server.set_defaults(func=cmd_spark_server)
    return report


def cmd_spark_server(args: argparse.Namespace) -> int:
    """``spark-server``: a Spark Connect server in the foreground until interrupted; prints the ``--master``
    that ``report`` takes to use it."""
    from amqp_conformance.conformance.cli import Usage

    _check_spark_installed(connect=True)
    from amqp_conformance.reports.pipeline import connect_server

    port = connect_server.DEFAULT_PORT if args.port is None else args.port
    if not 0 < port < 65536:
        raise Usage(f"--port {port}: give a TCP port between 1 and 65535")
    memory = args.memory or connect_server.DEFAULT_MEMORY
    if not re.fullmatch(r"[0-9]+[kmgt]?", memory.lower()):
        raise Usage(f"--memory {memory!r}: give a JVM heap size such as 2g or 1536m")
    print(f"starting a Spark Connect server on 127.0.0.1:{port} (driver heap {memory}) ...", flush=True)
    # kill: stop the JVM too, never leave it running; taken before the JVM starts, so that a kill that comes as
    # soon as the ready line is read (or while the server starts) is never the default one, which orphans it
    previous = signal.signal(signal.SIGTERM, _interrupted)
    process = None
    try:
        process = connect_server.start_server(port, memory)  # stopped by itself when interrupted while starting
        print(f"Spark Connect server ready: amqp-conformance report RUN_DIR... --master sc://127.0.0.1:{port} "
              f"(Ctrl-C or kill stops it)", flush=True)
        return process.wait()
    except connect_server.ConnectServerError as exc:
        raise Usage(str(exc)) from None
    except KeyboardInterrupt:
        return 0
    finally:
        if process is not None:
            connect_server.stop_server(process)
        signal.signal(signal.SIGTERM, previous)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _check_spark_installed(connect: bool = False) -> None:
    """Raise the CLI's usage error naming what to install when PySpark (and, with ``connect``, its Spark
    Connect client) or Java is missing."""
    from amqp_conformance.conformance.cli import Usage

    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise Usage(SPARK_MISSING) from None
    if connect:
        try:  # PySpark checks the Connect client's own dependencies (grpcio, pandas, pyarrow, ...) on import
            import pyspark.sql.connect.session  # noqa: F401
        except ImportError as exc:
            raise Usage(f"{CONNECT_MISSING} ({exc})") from None
    if not shutil.which("java") and not _java_home():
        raise Usage(JAVA_MISSING)


# Hook for further renderers of ``report`` (the Allure HTML renderer adds ``--allure`` here): add its
# arguments in add_report_extension_arguments and run it in run_report_extensions. Extensions run before
# the Spark pipeline and return an exit code to stop there, or None to go on.
def add_report_extension_arguments(parser: argparse.ArgumentParser) -> None:
    """Hook: arguments of other report renderers: ``--allure`` (the Allure HTML report, no Spark)."""
    parser.add_argument("--allure", action="store_true",
                        help="render the runs' Allure results into OUT/allure-report with the Allure command line "
                             "(instead of the Spark pipeline)")


def run_report_extensions(args: argparse.Namespace) -> int | None:
    """Hook: run the renderers asked for by the arguments of :func:`add_report_extension_arguments`.

    ``--allure`` renders the Allure report into OUT/allure-report and OUT/allure-report.html (one file
    that opens from disk; OUT defaults to the first RUN_DIR) and stops there (exit 0); raises the CLI's
    usage error when the Allure command line is missing.
    """
    if not getattr(args, "allure", False):
        return None
    from amqp_conformance.conformance.cli import Usage
    from amqp_conformance.reports.allure_render import AllureMissing, RenderFailed, render_allure

    if not args.run_dirs:
        raise Usage("report --allure: give the run directories whose allure-results to render")
    out = Path(args.out) if args.out else Path(args.run_dirs[0])
    try:
        report = render_allure([Path(d) for d in args.run_dirs], out)
    except (AllureMissing, RenderFailed) as exc:
        raise Usage(str(exc)) from None
    from amqp_conformance.reports.allure_render import SINGLE_FILE

    print(f"allure report: {out / SINGLE_FILE} (one file: open it from disk in any browser)")
    print(f"               {report / 'index.html'} (with its history for the trends; view it with: allure open "
          f"{report})")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """``report``: ingest the run directories, run the pipeline, write the outputs, print where they are."""
    from amqp_conformance.conformance.cli import Usage

    code = run_report_extensions(args)
    if code is not None:
        return code
    out = Path(args.out or "amqp-report")
    warehouse = args.warehouse or str(out.resolve() / "warehouse")
    if not args.run_dirs and not args.warehouse:
        raise Usage("give at least one RUN_DIR (written by 'amqp-conformance run --out DIR'), or --warehouse DIR")
    for run_dir in args.run_dirs:  # local directories are checked before Spark starts
        if "://" not in run_dir and not run_dir.startswith("file:"):
            if not Path(run_dir).is_dir():
                raise Usage(f"run directory {run_dir} does not exist; give directories written by "
                            f"'amqp-conformance run --out DIR'")
            if not (Path(run_dir) / "results.jsonl").exists():
                raise Usage(f"{run_dir} has no results.jsonl; give directories written by "
                            f"'amqp-conformance run --out DIR'")
    from amqp_conformance.reports.pipeline.session import is_connect_url

    _check_spark_installed(connect=is_connect_url(args.master))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Usage(f"cannot write to --out {out}: {exc.strerror}; choose another directory") from None

    from amqp_conformance.reports.pipeline.ingest import FRAMES, RESULTS, IngestError, ingest, read_table
    from amqp_conformance.reports.pipeline.job import run_report
    from amqp_conformance.reports.pipeline.load import write_json
    from amqp_conformance.reports.pipeline.session import spark_session

    spark = spark_session(args.master, conf=_local_sizing(args.master, args.run_dirs, warehouse))
    try:
        run_ids = None
        notes: list[str] = []
        if args.run_dirs:
            try:
                ingested = ingest(spark, args.run_dirs, warehouse)
            except IngestError as exc:
                raise Usage(str(exc)) from None
            run_ids = ingested.run_ids
            write_json(out / "malformed.json", [vars(m) for m in ingested.malformed])
            notes += tell_ingested(ingested, warehouse, out / "malformed.json")
            if not run_ids:
                raise Usage("no result records in the run directories given; run 'amqp-conformance run' first")
        results = read_table(spark, warehouse, RESULTS, run_ids)
        frames = read_table(spark, warehouse, FRAMES, run_ids) if _has_table(warehouse, FRAMES) else None
        summary = run_report(results, frames, out, run_ids, max_logs=args.max_logs, notes=notes)
    finally:
        spark.stop()
    counts = summary.counts
    print(f"matrix: {counts['cells']} cells; regressions: {counts['regressions']}; flaky: {counts['flaky']}; "
          f"latency groups: {counts['latency']}; stale deviations: {counts['stale']}")
    for regression in summary.regressions[:20]:
        print(f"  REGRESSION {regression['broker']} {regression['case_id']} [{regression['expectation_set']}] "
              f"{regression['from_verdict']} -> {regression['to_verdict']} ({regression['kind']} "
              f"{regression['from_version']} -> {regression['to_version']})")
    for name, path in summary.paths.items():
        print(f"{name + ':':<12} {path}")
    return 0


def tell_ingested(ingested: IngestReport, warehouse: str, malformed_file: Path) -> list[str]:
    """Print what one ingest read and wrote (stdout) and what it left out or did twice (stderr: malformed
    lines, the first 20 of them, orphan frames, counts taken again); returns the notes the report carries
    (malformed lines and orphan frames)."""
    print(f"ingested {len(ingested.run_ids)} run(s): {ingested.results} results, {ingested.frames} frames "
          f"into {warehouse}")
    notes = []
    if ingested.malformed:
        print(f"warning: {ingested.malformed_count} malformed line(s) not ingested (all in {malformed_file}):",
              file=sys.stderr)
        for problem in ingested.malformed[:20]:
            print(f"  {problem}", file=sys.stderr)
        notes.append(f"{ingested.malformed_count} malformed line(s) were not ingested: see {malformed_file.name}")
    if ingested.orphan_frames:
        print(f"warning: {ingested.orphan_frames} frame record(s) belong to no run in results.jsonl "
              f"and were not ingested", file=sys.stderr)
        notes.append(f"{ingested.orphan_frames} frame record(s) had no run in results.jsonl")
    if ingested.recounted:
        print(f"note: counted again, by a second pass (the observed counts did not come back from Spark, as a "
              f"Connect server's may not after a write): {', '.join(ingested.recounted)}", file=sys.stderr)
    return notes


def _local_sizing(master: str | None, run_dirs: list[str], warehouse: str) -> dict[str, str]:
    """Driver heap and shuffle partitions sized to the data (:mod:`.pipeline.sizing`) for a local master
    (``local[*]`` by default); the SQL ones (shuffle partitions, plan settings) for a Spark Connect server,
    whose JVM is its own; nothing for a cluster or under ``spark-submit``, whose settings win."""
    import os

    from amqp_conformance.reports.pipeline.session import is_connect_url, session_conf
    from amqp_conformance.reports.pipeline.sizing import input_bytes, local_conf

    if is_connect_url(master):
        return session_conf(local_conf(input_bytes(run_dirs or [warehouse])))
    if (master is not None and not master.startswith("local")) or (master is None and "SPARK_ENV_LOADED" in os.environ):
        return {}
    return local_conf(input_bytes(run_dirs or [warehouse]))


def _java_home() -> bool:
    import os

    home = os.environ.get("JAVA_HOME")
    return bool(home) and Path(home, "bin", "java").exists()


def _has_table(warehouse: str, table: str) -> bool:
    if "://" in warehouse and not warehouse.startswith("file:"):
        return True  # a remote warehouse: let Spark read it
    return Path(warehouse.removeprefix("file:"), table).exists()
