"""The report job: warehouse tables -> transforms -> files. Extract (ingest), transform and load stay
separate functions; this module only strings them together."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from amqp_conformance.reports.matrix import MatrixReport, write_matrix
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from . import load, plots, transforms
from .session import is_connect

T = TypeVar("T")


@dataclass
class ReportSummary:
    """What the job wrote: paths by output name and the number of rows of each finding."""

    paths: dict[str, Path] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    regressions: list[dict] = field(default_factory=list)


FRAMES_POOL = "frames"


def _in_pool(spark: SparkSession, pool: str, work: Callable[..., T], *args: object) -> T:
    """``work(*args)`` with this thread's Spark jobs in scheduler pool ``pool``: under the fair scheduler
    (:data:`.sizing.PLAN_CONF`) the two threads' jobs share the cores, so the small jobs over the results
    are not queued behind every task of the big job over the frames. On Spark Connect ``work`` runs in the
    server's default pool (:mod:`.connect_server` makes that pool fair)."""
    if is_connect(spark):  # a Connect client cannot pick a pool: the server's default pool is fair
        return work(*args)
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
    try:
        return work(*args)
    finally:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)


def run_report(results: DataFrame, frames: DataFrame | None, out_dir: Path, runs: list[str] | None = None,
               max_logs: int = 500, notes: list[str] | None = None) -> ReportSummary:
    """Compute the matrix, regressions, flaky cases, latencies and stale deviations of ``results`` (and
    ``frames``, for latencies and frame logs) and write every report file into ``out_dir``.

    The latencies, the one job over the frames, run in a thread (and scheduler pool, :data:`FRAMES_POOL`) of
    their own while the small jobs over the results run beside them: the driver plans and schedules those
    while the frames job keeps the cores busy, and under the fair scheduler they get cores between its tasks.
    """
    with ThreadPoolExecutor(max_workers=1) as background:
        latency = None if frames is None else background.submit(
            _in_pool, results.sparkSession, FRAMES_POOL, load.collect,
            transforms.settlement_latency(transforms.deliveries(frames)), transforms.LATENCY_BY)
        results = results.persist(StorageLevel.MEMORY_AND_DISK)
        matrix = transforms.compliance_matrix(results).persist(StorageLevel.MEMORY_AND_DISK)
        cells = load.collect(matrix, ("broker", "broker_version", "table", "case_id", "expectation_set"))
        summary = load.collect(transforms.compliance_summary(matrix), ("broker", "broker_version", "expectation_set"))
        over_versions = load.collect(transforms.compliance_over_versions(matrix), ("broker", "version_order"))
        findings = {
            "regressions": load.collect(transforms.regressions(results),
                                        ("broker", "kind", "case_id", "expectation_set", "to_run_id")),
            "flaky": load.collect(transforms.flaky_cases(results),
                                  ("broker", "broker_version", "case_id", "expectation_set")),
            "stale": load.collect(transforms.stale_deviations(matrix),
                                  ("broker", "broker_version", "case_id", "expectation_set")),
        }
        logs: dict[tuple, str] = {} if frames is None else load.frame_logs(frames, cells, max_logs)
        findings["latency"] = [] if latency is None else latency.result()
    report = MatrixReport(
        cells=cells, summary=summary, logs=logs, regressions=findings["regressions"], flaky=findings["flaky"],
        stale=findings["stale"], runs=sorted(runs or {c["run_id"] for c in cells}),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"), notes=list(notes or []),
        plots=[("Compliance over versions", plots.compliance_over_versions_svg(over_versions)),
               ("Settlement latency", plots.latency_svg(findings["latency"]))])
    paths = write_matrix(report, out_dir)
    paths.update(load.write_findings(out_dir, findings))
    matrix.unpersist()
    results.unpersist()
    counts = {"cells": len(cells), **{name: len(rows) for name, rows in findings.items()}}
    return ReportSummary(paths=paths, counts=counts, regressions=findings["regressions"])
