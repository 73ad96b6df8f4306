"""Render run directories' Allure results into the HTML report with the Allure command line.

:func:`render_allure` merges the ``allure-results/`` of one or more run directories into a staging
directory with one ``categories.json``, one ``environment.properties`` (values of several runs joined),
an ``executor.json`` (report name and build order, so trend points are numbered) and the ``history/`` of
the report rendered before into the same place, then runs ``allure generate`` twice: once into
``allure-report/`` (a static site that loads its data over HTTP: ``allure open`` serves it; it keeps the
``history/`` the next render's trends grow from) and once with ``--single-file`` into
``allure-report.html`` (everything in one page, which opens straight from disk). Rendering again into
the same ``--out`` therefore extends the trend graphs by one point; nothing in the run directories is changed.

The Allure command line is the npm package ``allure-commandline`` (it needs Java 17 or later); when it
is missing :class:`AllureMissing` says, in one line, how to install it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .allure_labels import CATEGORIES, environment_properties

ALLURE_ENV = "AMQP_CONFORMANCE_ALLURE"
INSTALL_HINT = (f"install it with 'npm install -g allure-commandline' (it needs Java 17 or later), "
                f"or set {ALLURE_ENV} to the allure executable")
REPORT_DIR = "allure-report"
SINGLE_FILE = "allure-report.html"
RUN_FILES = {"categories.json", "environment.properties", "executor.json", "history"}


class AllureMissing(Exception):
    """The Allure command line (or the Java it needs) is not installed; the message says how to get it."""


class RenderFailed(Exception):
    """The inputs cannot be rendered (no Allure results there) or ``allure generate`` failed."""


def find_allure() -> str | None:
    """The allure executable: ``$AMQP_CONFORMANCE_ALLURE``, else ``allure`` on PATH; None when neither exists."""
    configured = os.environ.get(ALLURE_ENV)
    if configured:
        return configured if Path(configured).is_file() else None
    return shutil.which("allure")


def require_allure() -> str:
    """The allure executable; raises :class:`AllureMissing` (one line, how to install) without it or Java."""
    allure = find_allure()
    if allure is None:
        raise AllureMissing(f"the Allure command line is not installed: {INSTALL_HINT}")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise AllureMissing("the Allure command line needs Java 17 or later, and no java was found: install a "
                            "JDK (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME")
    return allure


def results_dir(run_dir: Path) -> Path:
    """The Allure results of a run directory (``RUN_DIR/allure-results``, or RUN_DIR itself if it holds them).

    Raises :class:`RenderFailed` naming the directory when it holds no Allure results.
    """
    for candidate in (run_dir / "allure-results", run_dir):
        if candidate.is_dir() and any(candidate.glob("*-result.json")):
            return candidate
    raise RenderFailed(f"{run_dir}: no Allure results there (expected {run_dir / 'allure-results'}/*-result.json "
                       f"as written by 'amqp-conformance run --out {run_dir}')")


def read_properties(path: Path) -> dict[str, str]:
    """The ``key=value`` lines of a properties file (comments and blank lines skipped)."""
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith(("#", "!")) and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip().replace("\\\\", "\\")
    return out


def merged_environment(dirs: list[Path]) -> dict[str, str]:
    """Every run's environment; a key whose runs disagree gets their distinct values joined by ``, ``."""
    values: dict[str, list[str]] = {}
    for directory in dirs:
        for key, value in read_properties(directory / "environment.properties").items():
            if value not in values.setdefault(key, []):
                values[key].append(value)
    return {key: ", ".join(found) for key, found in values.items()}


def stage(dirs: list[Path], previous_report: Path, staging: Path) -> int:
    """Fill ``staging`` with the merged results and the previous report's history; returns the build order."""
    for directory in dirs:
        for item in directory.iterdir():
            if item.name not in RUN_FILES and item.is_file():
                shutil.copy2(item, staging / item.name)
    environment = merged_environment(dirs)
    (staging / "environment.properties").write_text(environment_properties(environment), encoding="utf-8")
    (staging / "categories.json").write_text(json.dumps(CATEGORIES, indent=2), encoding="utf-8")
    history = previous_report / "history"
    build_order = 1
    if history.is_dir():
        shutil.copytree(history, staging / "history")
        trend = history / "history-trend.json"
        try:
            build_order = len(json.loads(trend.read_text(encoding="utf-8"))) + 1 if trend.is_file() else 1
        except (ValueError, OSError):
            build_order = 1
    brokers = environment.get("broker", "unknown broker")
    executor = {"name": "amqp-conformance", "type": "amqp-conformance", "buildOrder": build_order,
                "buildName": environment.get("run.id", f"render {build_order}"),
                "reportName": f"AMQP 1.0 conformance: {brokers}"}
    (staging / "executor.json").write_text(json.dumps(executor, indent=2), encoding="utf-8")
    return build_order


def render_allure(results_dirs: list[Path], out_dir: Path, timeout: float = 600.0) -> Path:
    """Render the runs' Allure results into ``out_dir/allure-report`` and return that directory; the same
    report as one page that opens from disk goes to ``out_dir/allure-report.html``.

    The previous report there (if any) lends its ``history/`` to the new one, so trends grow across
    renders. Raises :class:`AllureMissing` when the Allure command line is absent and
    :class:`RenderFailed` when an input holds no results or ``allure generate`` fails.
    """
    allure = require_allure()
    dirs = [results_dir(Path(d)) for d in results_dirs]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / REPORT_DIR
    with tempfile.TemporaryDirectory(prefix=".allure-staging-", dir=out_dir) as tmp:
        staging = Path(tmp) / "results"
        staging.mkdir()
        stage(dirs, report, staging)
        _generate(allure, staging, report, [], timeout)
        single = Path(tmp) / "single"
        _generate(allure, staging, single, ["--single-file"], timeout)
        shutil.move(str(single / "index.html"), str(out_dir / SINGLE_FILE))
    return report


def _generate(allure: str, staging: Path, target: Path, options: list[str], timeout: float) -> None:
    """``allure generate --clean OPTIONS -o TARGET STAGING``; raises :class:`RenderFailed` or
    :class:`AllureMissing` (one line) when it cannot run, fails or writes no ``index.html``."""
    try:
        done = subprocess.run([allure, "generate", "--clean", *options, "-o", str(target), str(staging)],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RenderFailed(f"allure generate did not finish within {timeout:.0f} s") from None
    except OSError as exc:
        raise AllureMissing(f"cannot run {allure}: {exc.strerror}; {INSTALL_HINT}") from None
    if done.returncode != 0 or not (target / "index.html").is_file():
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise RenderFailed(f"allure generate failed (exit {done.returncode}): {detail[-1] if detail else 'no output'}")
