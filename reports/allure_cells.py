"""Allure results for the client grid's cells (``amqp-conformance interop``), written without pytest.

A cell is labelled as a case is (:mod:`.allure_labels`: parentSuite = broker, suite and feature = table,
subSuite and epic = expectation set, story = row, the verdict as a tag, the same status mapping and
categories, NON-STRICT filed as failed under "Known deviations") plus a ``client`` label naming the pair
(``rhea>qpid-jms``: sending client > receiving client) and a tag per client and role, so Allure can group
and filter the grid by client library. Its history id is stable per (cell, expectation set, broker), its
steps are the exchanges of both connections' frames, its attachments the expectation against the
observations and the frame log. Files go through allure's own file writer (``AllureFileLogger``).
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from allure_commons.logger import AllureFileLogger
from allure_commons.model2 import (
    ATTACHMENT_PATTERN,
    Attachment,
    Label,
    Link,
    Parameter,
    Status,
    StatusDetails,
    TestResult,
)
from allure_commons.types import AttachmentType
from amqp_conformance.peers.frames import labelled_lines

from . import allure_steps
from .allure_labels import (
    NON_STRICT_MESSAGE,
    capped,
    description,
    history_id,
    omitted_note,
    source_link,
    write_run_files,
)

STATUS = {"PASS": Status.PASSED, "INFO": Status.PASSED, "FAIL": Status.FAILED, "NON-STRICT": Status.FAILED,
          "ERROR": Status.BROKEN, "UNSUPPORTED": Status.SKIPPED}
MESSAGE_PREFIX = {"NON-STRICT": NON_STRICT_MESSAGE, "UNSUPPORTED": "UNSUPPORTED: ", "FAIL": "FAIL: ",
                  "ERROR": "ERROR: "}


class CellResults:
    """Writes one Allure result per grid cell into ``allure_dir``, and the run files (categories) once."""

    def __init__(self, allure_dir: Path, environment: dict[str, str]) -> None:
        write_run_files(allure_dir, environment)
        self._logger = AllureFileLogger(str(allure_dir))

    def write(self, record: dict[str, Any], frames: list, case: Any) -> None:
        """The cell's result from its record (fixtures/interop.cell_record), its ``(party, Frame)`` log and its
        row (:class:`~amqp_conformance.conformance.catalogue.Case`)."""
        verdict, expectation_set = record["verdict"], record["expectation_set"]
        broker = record["broker"]["name"]
        sender, receiver = (record["clients"][role]["client"] for role in ("sender", "receiver"))
        started = int(datetime.fromisoformat(record["started_at"]).timestamp() * 1000)
        result = TestResult(uuid=str(uuid.uuid4()), historyId=history_id(record["case_id"], expectation_set, broker),
                            testCaseId=record["case_id"], fullName=f"{broker}:{record['case_id']}:{expectation_set}",
                            name=f"{record['case_id']} [{expectation_set}] {case.title}",
                            description=description(case, expectation_set), status=STATUS[verdict],
                            start=started, stop=started + int(record["duration_ms"]), stage="finished")
        if verdict in MESSAGE_PREFIX:
            result.statusDetails = StatusDetails(message=MESSAGE_PREFIX[verdict] + record["reason"])
        result.labels = [Label("parentSuite", broker), Label("suite", case.table), Label("subSuite", expectation_set),
                         Label("epic", expectation_set), Label("feature", case.table),
                         Label("story", f"row {case.source.row}"), Label("severity", case.severity),
                         Label("client", f"{sender}>{receiver}"), Label("tag", verdict),
                         Label("tag", f"sender:{sender}"), Label("tag", f"receiver:{receiver}")]
        result.parameters = [Parameter(name="sending client", value=sender),
                             Parameter(name="receiving client", value=receiver),
                             Parameter(name="expectation set", value=expectation_set),
                             Parameter(name="broker", value=broker)]
        result.links = [Link(type="source", url=source_link(case), name=case.source.cite())]
        shown, after, omitted = capped(list(frames))
        offset = time.time_ns() - time.monotonic_ns()
        result.steps = allure_steps.step_results(allure_steps.exchanges(shown + after), offset) if frames else []
        lines = labelled_lines(list(frames))  # times relative to the cell's first frame, as run_case shows them
        if omitted:
            lines = lines[:len(shown)] + [omitted_note(omitted, len(frames))] + lines[len(lines) - len(after):]
        log = "\n".join(lines)
        evidence = {"verdict": verdict, "expected": record["expected"], "observed": record["observed"],
                    "reports": record.get("reports")}
        result.attachments = [self._attach("expected vs observed", json.dumps(evidence, indent=2, default=str),
                                           AttachmentType.JSON),
                              self._attach("frame log", log, AttachmentType.TEXT)]
        self._logger.report_result(result)

    def _attach(self, name: str, body: str, kind: AttachmentType) -> Attachment:
        file_name = ATTACHMENT_PATTERN.format(prefix=uuid.uuid4(), ext=kind.extension)
        self._logger.report_attached_data(body=body, file_name=file_name)
        return Attachment(name=name, source=file_name, type=kind.mime_type)

