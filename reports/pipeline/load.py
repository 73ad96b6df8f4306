"""Load: collect the transforms' (small) results and write the report files.

The files (DESIGN.md, ``report``): ``compliance.html``, ``compliance.json``, ``compliance.csv``,
``junit.xml`` (through :mod:`amqp_conformance.reports.matrix`), ``regressions.json``, ``flaky.json``,
``latency.json``, ``stale-deviations.json``; ``malformed.json`` lists lines ingest could not read.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from amqp_conformance.peers.frames import render
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from .small_frames import local_frame

FINDINGS_FILES = {"regressions": "regressions.json", "flaky": "flaky.json", "latency": "latency.json",
                  "stale": "stale-deviations.json"}
LOG_FRAMES = 400  # frames shown per embedded frame log


def plain(value: Any) -> Any:
    """A collected Spark value as JSON-ready Python: Rows and maps to dicts, times to ISO text."""
    if hasattr(value, "asDict"):
        return {k: plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    return value


def collect(df: DataFrame, order: Sequence[str] = ()) -> list[dict[str, Any]]:
    """All rows of ``df`` (it must be small: an aggregate) as plain dicts, sorted by ``order`` as Spark sorts
    (ascending, nulls first). Sorted here, not by Spark: a Spark sort of a few rows costs a sampling job and a
    shuffle of its own."""
    rows = [plain(row) for row in df.collect()]
    return sorted(rows, key=lambda row: tuple((row[name] is not None, row[name]) for name in order))


def log_line(t0: int, frame: dict[str, Any]) -> str:
    """One frame record as a log line: time since the case's first frame, party, direction, performative."""
    try:
        fields = json.loads(frame["fields"]) if frame.get("fields") else {}
    except ValueError:
        fields = frame["fields"]
    arrow = "->" if frame["dir"] == "out" else "<-"
    return (f"{(frame['t_ns'] - t0) / 1e6:9.3f}ms [{frame.get('party') or '?'}] {arrow} ch{frame.get('channel')} "
            f"{frame['performative']} {render(fields)}")


def frame_logs(frames: DataFrame, cells: Iterable[dict[str, Any]], limit: int) -> dict[tuple, str]:
    """Frame log text for up to ``limit`` matrix cells (cells that did not pass first), keyed by
    (broker, broker_version, case_id, expectation_set); at most :data:`LOG_FRAMES` frames each."""
    chosen = sorted(cells, key=lambda c: (c["verdict"] in ("PASS", "INFO"), c["broker"], c["case_id"]))[:limit]
    if not chosen:
        return {}
    spark = frames.sparkSession
    keys = local_frame(spark, [(c["run_id"], c["case_id"], c["expectation_set"], c["broker"], c["broker_version"])
                               for c in chosen],
                       "run_id string, case_id string, expectation_set string, cell_broker string, cell_version string")
    runs = sorted({c["run_id"] for c in chosen})  # read only those runs' partitions
    wanted = (frames.filter(F.col("run_id").isin(runs) & (F.col("seq") < LOG_FRAMES))
              .join(F.broadcast(keys), ["run_id", "case_id", "expectation_set"]))
    rows = wanted.select("cell_broker", "cell_version", "case_id", "expectation_set", "seq", "t_ns", "party", "dir",
                         "channel", "performative", "fields").collect()
    grouped: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["cell_broker"], row["cell_version"], row["case_id"], row["expectation_set"])
        grouped.setdefault(key, []).append(row.asDict())
    logs = {}
    for key, frames_of_case in grouped.items():
        frames_of_case.sort(key=lambda f: f["seq"])
        t0 = frames_of_case[0]["t_ns"]
        logs[key] = "\n".join(log_line(t0, f) for f in frames_of_case)
    return logs


def write_json(path: Path, value: Any) -> Path:
    """Write ``value`` as indented JSON; returns the path."""
    path.write_text(json.dumps(value, indent=1, default=str) + "\n", encoding="utf-8")
    return path


def write_findings(out_dir: Path, findings: dict[str, list[dict[str, Any]]]) -> dict[str, Path]:
    """Write each of :data:`FINDINGS_FILES` from ``findings`` (name -> rows); returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {name: write_json(out_dir / file, findings.get(name, [])) for name, file in FINDINGS_FILES.items()}
