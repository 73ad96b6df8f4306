"""Allure labelling of one case result, and the run-level files Allure reads.

While a case runs (during pytest's set-up of the test, see ``amqp_outcome``, or in its body) :func:`label`
and :func:`attach_evidence` use allure's public ``allure.dynamic`` API: title, epic = expectation set,
feature = table, story = row, parentSuite = broker, severity (the row's ``severity`` field), a link to the
source document and row, a Markdown description with the row's text, tag = verdict. They also hand the
case's title, description, evidence (frame log as text and JSON, expected vs observed, the broker's log
tail on FAIL/ERROR), frames and timing to :class:`CaseResultHook`.

:class:`CaseResultHook` is an ``allure_commons`` plugin implementing the public ``report_result`` hook (the
one allure's own file writer implements) and running before the writer. It finishes what
``allure.dynamic`` cannot set, or what allure-pytest resets after a fixture ran: ``testCaseId`` = case
id, a ``historyId`` stable per (case id, expectation set, broker) so history and retries line up across
runs and never merge two brokers, readable parameters instead of pytest's parameter repr, suite = table
and subSuite = expectation set, the title and description, the attachments (written through the public
``report_attached_data`` hook, so they sit on the test whether the case ran in set-up or in the body),
the case's own start and stop, one step per exchange built from the captured frame log
(:mod:`.allure_steps`), and the status of a NON-STRICT case: pytest's xfail is Allure "skipped", which
Allure's overview leaves out of its percentage, so it is made "failed" and filed under "Known deviations
(NON-STRICT)" (docs/reports.md says why). Nothing here touches allure-pytest's internals.

``environment.properties`` and ``categories.json`` go beside the results (:func:`write_run_files`).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import allure
import allure_commons
from allure_commons.model2 import ATTACHMENT_PATTERN, Attachment, Label, Parameter, Status, TestStepResult
from allure_commons.utils import md5

from . import allure_steps

SEVERITY = {"blocker": allure.severity_level.BLOCKER, "critical": allure.severity_level.CRITICAL,
            "normal": allure.severity_level.NORMAL, "minor": allure.severity_level.MINOR,
            "trivial": allure.severity_level.TRIVIAL}

# How fixtures/execution.py reports each verdict and the status allure-pytest gives it:
#   PASS, INFO -> test returns -> "passed"
#   FAIL -> pytest.fail(...) (a Failed exception) -> "failed", message "Failed: FAIL <case>: ..."
#   ERROR -> raises HarnessError (not an assertion) -> "broken", message "...HarnessError: ERROR <case>: ..."
#   NON-STRICT -> pytest.xfail(...) -> "skipped", message "XFAIL NON-STRICT: ...", made "failed" by
#       CaseResultHook (Allure's overview percentage is passed / (passed + failed + broken): a skipped
#       deviation would not count against the broker)
#   UNSUPPORTED -> pytest.skip(...) -> "skipped", message "Skipped: UNSUPPORTED: ..."
# Allure matches messageRegex against the whole message (Java String.matches), hence the (?s) and ".*", and
# files a result under every category it matches: the two "failed" categories exclude each other.
NON_STRICT_MESSAGE = "XFAIL NON-STRICT: "
CATEGORIES = [
    {"name": "Known deviations (NON-STRICT)", "matchedStatuses": ["failed"],
     "messageRegex": f"(?s){NON_STRICT_MESSAGE}.*",
     "description": "Differs from the row exactly as a profile declares (the broker's, or in the client grid a "
                    "client library's: its observed pattern matched), "
                    "with a reason and a reference. Counted as failed: a declared deviation is still a deviation."},
    {"name": "Unsupported by the broker's profile", "matchedStatuses": ["skipped"],
     "messageRegex": "(?s).*UNSUPPORTED.*",
     "description": "The profile lacks a capability the row needs, or the broker's admin cannot provoke it."},
    {"name": "Product failures (FAIL)", "matchedStatuses": ["failed"],
     "messageRegex": f"(?s)(?!{NON_STRICT_MESSAGE}).*",
     "description": "What the product under test did differs from the row's expectation: the broker, or in "
                    "the client grid a client library (the message says which)."},
    {"name": "Harness errors (ERROR)", "matchedStatuses": ["broken"],
     "description": "The harness could not complete the case (broker died, refused connection, no answer in "
                    "time, login refused, a crash of our own code); never excused by a deviation."},
]

# The FAIL/ERROR message of fixtures/execution.py ends with the whole frame log: in Allure the steps and the
# "frame log" attachment show it, so the message shown at the top of a case stops there (the trace keeps it).
FRAME_LOG_MARK = "\nframe log:\n"
FRAME_LOG_NOTE = "\n(frame log: the steps below, one per exchange, and the 'frame log' attachment)"

# A private label carrying the case's key from the call phase to report_result, removed there.
KEY_LABEL = "amqp-conformance-key"
# A case's evidence in Allure (steps, frame log text and JSON) shows at most this many frames, its first and
# last halves: a case of 65,000 transfers (a broker granting the credit of a delivery-count wrap-around) would
# otherwise weigh tens of megabytes in the report. frames.jsonl always keeps every frame.
MAX_ALLURE_FRAMES = 2000


def capped(items: list, limit: int | None = None) -> tuple[list, list, int]:
    """``(head, tail, omitted)``: all of ``items`` in ``head`` when there are at most ``limit`` (default
    :data:`MAX_ALLURE_FRAMES`), else the first and the last ``limit // 2`` and how many between them are left
    out."""
    limit = MAX_ALLURE_FRAMES if limit is None else limit
    if len(items) <= limit:
        return list(items), [], 0
    half = limit // 2
    return list(items[:half]), list(items[-half:]), len(items) - 2 * half


def omitted_note(omitted: int, total: int) -> str:
    """The line that stands for the frames :func:`capped` left out of the Allure evidence."""
    return f"... {omitted:,} frames not shown here (the case has {total:,}; frames.jsonl holds every one) ..."


def history_id(case_id: str, expectation_set: str, broker: str) -> str:
    """Allure's ``historyId`` for a case run: stable per (case id, expectation set, broker), nothing else."""
    return md5("amqp-conformance", case_id, expectation_set, broker)


def case_key(case_id: str, expectation_set: str, broker: str) -> str:
    """The private key label's value for a case run (JSON of the three parts)."""
    return json.dumps([case_id, expectation_set, broker])


@dataclass
class PendingCase:
    """What :class:`CaseResultHook` puts on a case's Allure result when it is written."""

    title: str | None = None
    description: str | None = None
    verdict: str | None = None
    frames: list = field(default_factory=list)
    frames_after: list = field(default_factory=list)  # the last frames, after ``omitted`` left out
    omitted: int = 0
    attachments: list[tuple[str, str, Any]] = field(default_factory=list)  # (name, body, attachment type)
    timing: tuple[int, int] | None = None  # start, stop in ms since the epoch


def label(request: Any, case: Any, expectation_set: str, broker_name: str) -> None:
    """Apply the case's labels, title, description and source link to the running Allure test.

    ``request`` is unused (kept for callers); a no-op when Allure is not recording. The title and
    description are also kept for :class:`CaseResultHook`, since allure-pytest resets both after set-up.
    """
    title = f"{case.id} [{expectation_set}] {case.title}"
    hook = active_hook()
    if hook is not None:
        pending = hook.pending_case(case_key(case.id, expectation_set, broker_name))
        pending.title, pending.description = title, description(case, expectation_set)
    allure.dynamic.title(title)
    allure.dynamic.epic(expectation_set)
    allure.dynamic.feature(case.table)
    allure.dynamic.story(f"row {case.source.row}")
    allure.dynamic.parent_suite(broker_name)
    allure.dynamic.severity(SEVERITY[case.severity])
    allure.dynamic.label(KEY_LABEL, case_key(case.id, expectation_set, broker_name))
    allure.dynamic.description(description(case, expectation_set))
    allure.dynamic.link(source_link(case), link_type="source", name=case.source.cite())


def description(case: Any, expectation_set: str) -> str:
    """The Markdown description: the row's text, its source, what is given and what is expected."""
    expected = json.dumps(case.expect[expectation_set], indent=2, sort_keys=True)
    given = json.dumps(case.given, indent=2, sort_keys=True)
    return (f"{case.text}\n\n**Source:** {case.source.cite()}  \n**Case:** `{case.id}` "
            f"(table file `{case.file}`), expectation set `{expectation_set}`\n\n"
            f"**Given:**\n\n```\n{given}\n```\n\n**Expected:**\n\n```\n{expected}\n```\n")


def source_link(case: Any) -> str:
    """The source row's address: the table's source URL (or its document's name) with ``#row=ROW``."""
    return f"{case.source.url or case.source.document}#row={case.source.row}"


def attach_evidence(verdict: str, expected: Any, observed: Any, frames_text: str, frames_json: str,
                    frames: list | None = None, log_tail: str | None = None, key: str | None = None,
                    timing: tuple[int, int] | None = None) -> None:
    """Attach the verdict tag, expected vs observed (JSON), the frame log (text and JSON) and the log tail.

    With ``key`` (:func:`case_key`) and Allure recording, the attachments, ``frames`` (the case's ``(party,
    Frame)`` log, one step per exchange; beyond :data:`MAX_ALLURE_FRAMES`, the first and last halves and a
    step saying how many are left out between them) and ``timing`` (start and stop, ms since the epoch) are put on
    the result labelled with ``key`` when it is written, whichever pytest phase ran the case; without a
    key they are attached where allure attaches now. ``log_tail`` (the broker's log, already free of
    secrets) is attached when given.
    """
    allure.dynamic.tag(verdict)
    attachments = [("expected vs observed", json.dumps({"verdict": verdict, "expected": expected,
                                                         "observed": observed}, indent=2),
                    allure.attachment_type.JSON),
                   ("frame log", frames_text, allure.attachment_type.TEXT),
                   ("frame log (JSON)", frames_json, allure.attachment_type.JSON)]
    if log_tail:
        attachments.append(("broker log (tail)", log_tail, allure.attachment_type.TEXT))
    hook = active_hook()
    if hook is None or key is None:
        for name, body, kind in attachments:
            allure.attach(body, name=name, attachment_type=kind)
        return
    pending = hook.pending_case(key)
    pending.verdict, pending.attachments, pending.timing = verdict, attachments, timing
    pending.frames, pending.frames_after, pending.omitted = capped(list(frames or []))


class CaseResultHook:
    """Finishes each case's Allure result before allure's file writer writes it (hook ``report_result``)."""

    name = "amqp_conformance_results"

    def __init__(self) -> None:
        self.pending: dict[str, PendingCase] = {}

    def pending_case(self, key: str) -> PendingCase:
        """The pending additions of the case run labelled ``key`` (made empty on first use)."""
        return self.pending.setdefault(key, PendingCase())

    @allure_commons.hookimpl(tryfirst=True)
    def report_result(self, result: Any) -> None:
        """Set ids, parameters, suites, title, description, attachments, times, steps and the NON-STRICT
        status of a case's result."""
        key = next((lbl.value for lbl in result.labels if lbl.name == KEY_LABEL), None)
        if key is None:
            return
        pending = self.pending.pop(key, PendingCase())
        frames = pending.frames
        case_id, expectation_set, broker = json.loads(key)
        result.testCaseId = case_id
        result.historyId = history_id(case_id, expectation_set, broker)
        result.fullName = f"{broker}:{case_id}:{expectation_set}"
        result.parameters = [Parameter(name="case", value=case_id),
                             Parameter(name="expectation set", value=expectation_set),
                             Parameter(name="broker", value=broker)]
        result.labels = [lbl for lbl in result.labels if lbl.name not in (KEY_LABEL, "suite", "subSuite")]
        table = case_id.split("/", 1)[0]
        result.labels += [Label(name="suite", value=table), Label(name="subSuite", value=expectation_set)]
        if pending.title:
            result.name = pending.title
        if pending.description:
            result.description = pending.description
        if pending.timing:
            result.start, result.stop = pending.timing
        result.attachments = list(result.attachments) + [_write_attachment(*a) for a in pending.attachments]
        if frames:
            result.steps = _steps(pending) + list(result.steps)
        details = result.statusDetails
        if details is not None and details.message and FRAME_LOG_MARK in details.message:
            details.message = details.message.split(FRAME_LOG_MARK, 1)[0] + FRAME_LOG_NOTE
        if pending.verdict == "NON-STRICT" and result.status == Status.SKIPPED:
            result.status = Status.FAILED  # a declared deviation still counts against the broker in the overview


def _steps(pending: PendingCase) -> list[Any]:
    """The exchange steps of the case's frames; when frames were left out, a step between the first and the
    last frames says how many."""
    offset = time.time_ns() - time.monotonic_ns()
    groups = allure_steps.exchanges(pending.frames)
    steps = allure_steps.step_results(groups, offset)
    if pending.omitted:
        at = (groups[-1].stop_ns + offset) // 1_000_000
        total = len(pending.frames) + pending.omitted + len(pending.frames_after)
        steps.append(TestStepResult(name=omitted_note(pending.omitted, total), status=Status.PASSED,
                                    stage="finished", start=at, stop=at))
        steps += allure_steps.step_results(allure_steps.exchanges(pending.frames_after), offset,
                                           origin_ns=groups[0].start_ns)
    return steps


def _write_attachment(name: str, body: str, kind: Any) -> Attachment:
    """Write ``body`` through allure's public ``report_attached_data`` hook; returns the result's entry."""
    file_name = ATTACHMENT_PATTERN.format(prefix=uuid.uuid4(), ext=kind.extension)
    allure_commons.plugin_manager.hook.report_attached_data(body=body, file_name=file_name)
    return Attachment(name=name, source=file_name, type=kind.mime_type)


def active_hook() -> CaseResultHook | None:
    """The registered :class:`CaseResultHook`, or None when Allure is not recording."""
    return allure_commons.plugin_manager.get_plugin(CaseResultHook.name)


def activate() -> CaseResultHook:
    """Register the hook with allure_commons (idempotent); call when ``--alluredir`` is given."""
    hook = active_hook()
    if hook is None:
        hook = CaseResultHook()
        allure_commons.plugin_manager.register(hook, name=CaseResultHook.name)
    return hook


def deactivate() -> None:
    """Unregister the hook (at the end of the pytest session)."""
    if active_hook() is not None:
        allure_commons.plugin_manager.unregister(name=CaseResultHook.name)


def write_run_files(allure_dir: Path, environment: dict[str, str]) -> None:
    """Write ``environment.properties`` and ``categories.json`` into the Allure results directory."""
    allure_dir.mkdir(parents=True, exist_ok=True)
    (allure_dir / "environment.properties").write_text(environment_properties(environment), encoding="utf-8")
    (allure_dir / "categories.json").write_text(json.dumps(CATEGORIES, indent=2), encoding="utf-8")


def environment_properties(environment: dict[str, str]) -> str:
    """Java properties text for ``environment``: one ``key=value`` a line, newlines and ``\\`` escaped."""
    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", " ").replace("\r", " ")

    return "".join(f"{escape(str(key))}={escape(str(value))}\n" for key, value in environment.items())
