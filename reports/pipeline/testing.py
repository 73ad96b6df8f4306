"""Helpers for tests of the pipeline: the local SparkSession and records built from keyword arguments."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .schema import FRAMES_TABLE, RESULTS_TABLE
from .session import spark_session


def local_spark() -> SparkSession:
    """The session tests share: ``local[2]``, one shuffle partition, UI off (see :func:`.session.spark_session`)."""
    return spark_session("local[2]", app_name="amqp-conformance-tests", shuffle_partitions=1)


def result_row(run_id: str, case_id: str, verdict: str, *, broker: str = "b", version: str = "1.0",
               expectation_set: str = "core", started: str = "2026-01-01T00:00:00", stale: bool = False,
               reason: str = "", intermittent: bool | None = False) -> dict[str, Any]:
    """A row of the warehouse ``results`` table with everything else defaulted (``intermittent``: the
    record's ``deviation_intermittent``; None as in a warehouse written before that column)."""
    started_at = dt.datetime.fromisoformat(started)
    return {"run_id": run_id, "case_id": case_id, "table": case_id.split("/")[0], "source_document": "doc.txt",
            "source_heading": "Heading", "source_row": case_id.split("/")[-1], "broker": broker,
            "broker_version": version, "broker_launcher": "embedded", "broker_url": "amqp://127.0.0.1:1",
            "expectation_set": expectation_set, "verdict": verdict, "expected": "{}", "observed": "{}",
            "reason": reason, "mismatches": [], "stale_deviation": stale,
            "deviation_intermittent": intermittent, "duration_ms": 1.0,
            "started_at": started_at, "run_started": started_at, "run_date": started_at.date()}


def frame_row(seq: int, t_ns: int, dir: str, performative: str, *, run_id: str = "r1", case_id: str = "t/1",
              party: str = "p", channel: int = 0, broker: str = "b", version: str = "1.0",
              **fields: Any) -> dict[str, Any]:
    """A row of the warehouse ``frames`` table; ``fields`` are the typed performative columns
    (handle, delivery_id, settled, role, first, last, snd_settle_mode, rcv_settle_mode, state)."""
    row = {"run_id": run_id, "case_id": case_id, "expectation_set": "core", "broker": broker,
           "broker_version": version, "run_date": dt.date(2026, 1, 1), "seq": seq, "t_ns": t_ns, "party": party,
           "dir": dir, "channel": channel, "performative": performative, "fields": "{}", "payload_len": 0,
           "raw_hex": ""}
    for name in ("handle", "delivery_id", "settled", "role", "first", "last", "snd_settle_mode", "rcv_settle_mode",
                 "state"):
        row[name] = fields.pop(name, None)
    if fields:
        raise TypeError(f"unknown frame fields: {', '.join(fields)}")
    return row


def results_df(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """A ``results`` table DataFrame of ``rows`` (from :func:`result_row`)."""
    return spark.createDataFrame(rows, RESULTS_TABLE)


def frames_df(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """A ``frames`` table DataFrame of ``rows`` (from :func:`frame_row`)."""
    return spark.createDataFrame(rows, FRAMES_TABLE)


def result_line(run_id: str, case_id: str, verdict: str = "PASS", broker: str = "reference", **extra) -> str:
    """A results.jsonl line as reports/records.py writes it (``extra``: more fields of the record)."""
    return json.dumps(extra | {
        "run_id": run_id, "case_id": case_id, "table": case_id.split("/")[0],
        "source": {"document": "000.txt", "heading": "Accepted", "row": case_id.split("/")[1]},
        "broker": {"name": broker, "version": "0.1.0", "launcher": "embedded", "url": "amqp://127.0.0.1:1"},
        "expectation_set": "um-10.11", "verdict": verdict, "expected": {"link": "advanced"},
        "observed": {"link": "advanced", "delivery_tag": "b'x:1'"}, "reason": "", "mismatches": [], "info": [],
        "stale_deviation": False, "duration_ms": 12.5, "started_at": "2026-11-20T10:00:00.000001+00:00"})


def frame_line(run_id: str, case_id: str, seq: int, performative: str = "transfer", **fields) -> str:
    """A frames.jsonl line as reports/records.py writes it."""
    return json.dumps({
        "run_id": run_id, "case_id": case_id, "expectation_set": "um-10.11", "seq": seq, "t_ns": 1000 + seq,
        "party": "subscriber", "dir": "in", "channel": 0, "performative": performative,
        "fields": fields or {"handle": 0, "delivery-id": seq, "delivery-tag": "b'x:1'"}, "payload_len": 2,
        "raw_hex": "00"})


def write_run(directory: Path, results: list[str], frames: list[str] | None) -> Path:
    """A run directory holding ``results`` (lines of results.jsonl) and ``frames`` (of frames.jsonl; None: no
    such file)."""
    directory.mkdir(parents=True)
    (directory / "results.jsonl").write_text("\n".join(results) + "\n")
    if frames is not None:
        (directory / "frames.jsonl").write_text("\n".join(frames) + "\n")
    return directory
