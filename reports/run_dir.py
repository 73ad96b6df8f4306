"""A run directory's own files, kept apart from every other run's: nothing of an earlier run is lost.

A run writes its records into ``--out DIR``. When DIR already holds an earlier run's outputs, they are moved
(never deleted, never appended to) into ``DIR/earlier-runs/<that run's id>/`` first, so every run's files
hold that run alone: a killed run's truncated last line stays at the end of its own file, where readers skip
it (:func:`read_json_lines`), instead of gluing the next run's first record onto it. The rendered
``DIR/allure-report/`` stays in place: the next render takes its history for the trend graphs.
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .records import FRAMES_FILE, NOT_APPLICABLE_FILE, RESULTS_FILE, STALE_CLIENT_FILE

EARLIER_RUNS = "earlier-runs"
SUMMARY_FILE = "summary.html"
ALLURE_RESULTS = "allure-results"
# what a run writes into its --out directory (and what moves away when the next run starts there)
RUN_OUTPUTS = (RESULTS_FILE, FRAMES_FILE, ALLURE_RESULTS, SUMMARY_FILE, "junit.xml", NOT_APPLICABLE_FILE,
               STALE_CLIENT_FILE)


def read_json_lines(path: Path, warn: bool = True) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, in order; a line that does not decode (a killed run's truncated
    last line) is skipped, and with ``warn`` one line on stderr says how many were skipped and where.
    A missing file reads as no records."""
    if not path.is_file():
        return []
    records, broken = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            broken.append(number)
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            broken.append(number)
    if broken and warn:
        print(f"amqp-conformance: warning: {path}: skipped {len(broken)} line(s) that are not whole JSON records "
              f"(line {', '.join(map(str, broken[:5]))}{', ...' if len(broken) > 5 else ''}; a run killed while "
              f"writing leaves one)", file=sys.stderr)
    return records


def earlier_run_id(out_dir: Path) -> str | None:
    """The run id of the run whose outputs ``out_dir`` holds (its first whole result record's, else its Allure
    results' ``run.id``, else a stamp of the files' time); None when it holds no run outputs."""
    present = [out_dir / name for name in RUN_OUTPUTS if (out_dir / name).exists()]
    present = [p for p in present if not p.is_dir() or any(p.iterdir())]
    if not present:
        return None
    for record in read_json_lines(out_dir / RESULTS_FILE, warn=False):
        if isinstance(record.get("run_id"), str) and record["run_id"]:
            return record["run_id"].replace("/", "_")
    properties = out_dir / ALLURE_RESULTS / "environment.properties"
    if properties.is_file():
        for line in properties.read_text(encoding="utf-8", errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "run.id" and value.strip():
                return value.strip().replace("/", "_")
    newest = max(p.stat().st_mtime for p in present)
    return datetime.fromtimestamp(newest, UTC).strftime("%Y%m%dT%H%M%SZ") + "-unknown"


def keep_earlier_run(out_dir: Path) -> Path | None:
    """Move an earlier run's outputs in ``out_dir`` into ``out_dir/earlier-runs/<its run id>/`` (a numbered
    name when that exists); returns where they went, or None when ``out_dir`` holds no run outputs.

    Only the files a run writes (``RUN_OUTPUTS``) move; anything else in ``out_dir`` stays where it is.
    """
    run_id = earlier_run_id(out_dir)
    if run_id is None:
        return None
    target = out_dir / EARLIER_RUNS / run_id
    suffix = 1
    while target.exists():
        suffix += 1
        target = out_dir / EARLIER_RUNS / f"{run_id}.{suffix}"
    target.mkdir(parents=True)
    for name in RUN_OUTPUTS:
        if (out_dir / name).exists():
            shutil.move(str(out_dir / name), str(target / name))
    return target


def restore_earlier_run(out_dir: Path, kept: Path) -> None:
    """Undo :func:`keep_earlier_run` (a run that selected no case): the outputs kept in ``kept`` move back into
    ``out_dir``, replacing what the empty run left (empty folders), and ``kept`` is removed."""
    for name in RUN_OUTPUTS:
        if not (kept / name).exists():
            continue
        current = out_dir / name
        if current.is_dir():
            shutil.rmtree(current)
        elif current.exists():
            current.unlink()
        shutil.move(str(kept / name), str(current))
    kept.rmdir()
    earlier = kept.parent
    if earlier.is_dir() and not any(earlier.iterdir()):
        earlier.rmdir()


def remove_if_empty(out_dir: Path) -> None:
    """Remove the empty folders a run that wrote nothing left in ``out_dir`` (and ``out_dir`` itself when that
    leaves it empty); a folder holding any file is kept."""
    for name in RUN_OUTPUTS:
        path = out_dir / name
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    if out_dir.is_dir() and not any(out_dir.iterdir()):
        out_dir.rmdir()
