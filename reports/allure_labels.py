"""Allure labelling of one case result, and the run-level files Allure reads.

Labels: ``testCaseId`` = case id, epic = expectation set, feature = table, story = row, parentSuite =
broker, tag = verdict, severity; the source cited in the description (and linked when the table gives
a URL); attachments: the frame log (text and JSON) and expected vs observed.
``environment.properties`` and ``categories.json`` go beside the results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import allure
import pytest

SEVERITY = {"blocker": allure.severity_level.BLOCKER, "critical": allure.severity_level.CRITICAL,
            "normal": allure.severity_level.NORMAL, "minor": allure.severity_level.MINOR,
            "trivial": allure.severity_level.TRIVIAL}

CATEGORIES = [
    {"name": "Known deviations (NON-STRICT)", "matchedStatuses": ["skipped"], "messageRegex": ".*NON-STRICT.*"},
    {"name": "Unsupported by the broker's profile", "matchedStatuses": ["skipped"], "messageRegex": ".*UNSUPPORTED.*"},
    {"name": "Product failures (FAIL)", "matchedStatuses": ["failed"]},
    {"name": "Harness errors (ERROR)", "matchedStatuses": ["broken"]},
]


def set_test_case_id(request: pytest.FixtureRequest, case_id: str) -> None:
    """Make Allure's ``testCaseId`` the case id (allure-pytest derives it from the test name otherwise)."""
    listener = request.config.pluginmanager.get_plugin("allure_listener")
    if listener is None:
        return
    try:
        result = listener.allure_logger.get_test(listener._cache.get(request.node.nodeid))
    except AttributeError:  # a future allure-pytest without these internals: keep its own id
        return
    if result is not None:
        result.testCaseId = case_id


def label(request: pytest.FixtureRequest, case: Any, expectation_set: str, broker_name: str) -> None:
    """Apply the case's labels, title, description and source link to the running Allure test."""
    set_test_case_id(request, case.id)
    allure.dynamic.title(f"{case.id} [{expectation_set}] {case.title}")
    allure.dynamic.epic(expectation_set)
    allure.dynamic.feature(case.table)
    allure.dynamic.story(f"row {case.source.row}")
    allure.dynamic.parent_suite(broker_name)
    allure.dynamic.severity(SEVERITY[case.severity])
    allure.dynamic.description(f"{case.text}\n\nSource: {case.source.cite()}\nGiven: {json.dumps(case.given)}")
    if case.source.url:
        allure.dynamic.link(case.source.url, name=case.source.cite())


def attach_evidence(verdict: str, expected: Any, observed: Any, frames_text: str, frames_json: str) -> None:
    """Attach the verdict tag, expected vs observed (JSON) and the frame log (text and JSON)."""
    allure.dynamic.tag(verdict)
    allure.attach(json.dumps({"expected": expected, "observed": observed}, indent=2),
                  name="expected vs observed", attachment_type=allure.attachment_type.JSON)
    allure.attach(frames_text, name="frame log", attachment_type=allure.attachment_type.TEXT)
    allure.attach(frames_json, name="frame log (JSON)", attachment_type=allure.attachment_type.JSON)


def write_run_files(allure_dir: Path, environment: dict[str, str]) -> None:
    """Write ``environment.properties`` and ``categories.json`` into the Allure results directory."""
    allure_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"{key}={str(value).replace(chr(10), ' ')}" for key, value in environment.items()]
    (allure_dir / "environment.properties").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (allure_dir / "categories.json").write_text(json.dumps(CATEGORIES, indent=2), encoding="utf-8")
