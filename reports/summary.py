"""The summary of one run, as data and as text: what a vendor reads first and acts on.

Pure functions over the run's result records (``results.jsonl``) and its not-applicable records
(``not-applicable.jsonl``: selected rows under an expectation set the profile does not claim, which get no
run). :func:`summarize` gathers everything into a :class:`RunSummary`: the broker, its version and
launcher, the profile and the sets it claims; how the selected cases became the case runs; counts per
verdict and per table; the cases to act on grouped by verdict and whole reason (so 83 deviations sharing
ten reasons are ten groups); stale and unmatched deviations; a stopped run. :func:`render_text` prints it
for a terminal (reasons wrapped, never cut); :mod:`.summary_html` renders the same as one HTML page.
"""

from __future__ import annotations

import textwrap
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amqp_conformance.fixtures.verdict import VERDICT_NAMES

# The verdicts a vendor acts on, in the order they are listed.
LISTED = ("FAIL", "ERROR", "NON-STRICT")
LISTED_TITLE = {"FAIL": "failures (FAIL): the broker differs from the row",
                "ERROR": "harness errors (ERROR): the case could not be completed",
                "NON-STRICT": "declared deviations (NON-STRICT), grouped by reason"}
# a client grid's cell FAILs for the broker's part or a client library's (its reason says whose)
GRID_FAIL_TITLE = "failures (FAIL): the broker or a client library differs from the row (the reason says which)"


@dataclass(frozen=True)
class ReasonGroup:
    """Case runs of one verdict that share one reason (its first line, whole)."""

    verdict: str
    reason: str
    runs: tuple[str, ...]  # "case id [expectation set]", in run order


@dataclass(frozen=True)
class NotApplicable:
    """Selected cases that got no run, or fewer runs, because the profile does not claim their sets.

    ``no_run``: case ids none of whose sets the profile claims, grouped by the sets they have;
    ``unclaimed_pairs``: how many (case, set) pairs of the cases that did run were left out the same way.
    """

    no_run: dict[tuple[str, ...], list[str]] = field(default_factory=dict)
    unclaimed_pairs: int = 0

    @property
    def case_count(self) -> int:
        """How many selected cases got no run at all."""
        return sum(len(ids) for ids in self.no_run.values())


@dataclass(frozen=True)
class RunSummary:
    """Everything the summary shows, as plain data (see :func:`summarize`)."""

    run_ids: tuple[str, ...]
    brokers: tuple[str, ...]  # "name version (launcher, url)"
    profiles: tuple[str, ...]  # "name (claims core, um-10.11)"
    selected_cases: int
    ran_cases: int
    runs: int
    counts: Counter
    per_table: dict[str, Counter]
    groups: tuple[ReasonGroup, ...]
    stale: tuple[str, ...]
    unmatched: tuple[tuple[str, str], ...]  # (case run, the pattern's mismatches)
    stopped: tuple[str, ...]
    not_applicable: NotApplicable
    records: tuple[dict[str, Any], ...] = ()
    stale_clients: tuple[str, ...] = ()  # each client deviation the run judged stale, described whole


def section_title(verdict: str, summary: RunSummary) -> str:
    """The heading of the summary's section for ``verdict`` (one of :data:`LISTED`): :data:`LISTED_TITLE`'s, except a
    client grid's FAILs (records naming a ``client`` pair), which a client library may cause as well as the
    broker."""
    if verdict == "FAIL" and any(record.get("client") for record in summary.records):
        return GRID_FAIL_TITLE
    return LISTED_TITLE[verdict]


def run_label(record: dict[str, Any]) -> str:
    """``case id [expectation set]``: how a case run is named in summaries."""
    return f"{record['case_id']} [{record['expectation_set']}]"


def first_line(reason: str | None) -> str:
    """The reason's first non-empty line, whole (a traceback or frame log after it stays in the records)."""
    lines = [line.strip() for line in (reason or "").strip().splitlines() if line.strip()]
    return lines[0] if lines else "(no reason recorded)"


def summarize(records: list[dict[str, Any]], not_applicable: list[dict[str, Any]] | None = None,
              stale_clients: Sequence[str] = ()) -> RunSummary:
    """Gather the summary of ``records`` (one run, or the repetitions of one run).

    ``not_applicable``: the run's ``not-applicable.jsonl`` records (only those of the records' run ids
    count). ``stale_clients``: an interop grid's client deviations that no longer show, each a line that says
    what to change (:meth:`.fixtures.client_deviations.StaleClientDeviation.describe`).
    Guarantees: every record is counted once per verdict and per table; every FAIL, ERROR and NON-STRICT
    record is in exactly one :class:`ReasonGroup`; a selected case is either ran or in ``not_applicable.no_run``,
    never both; each of ``stale_clients`` is shown once, as given.
    """
    run_ids = tuple(dict.fromkeys(r.get("run_id", "") for r in records))
    skipped = [n for n in not_applicable or [] if n.get("run_id") in run_ids or not run_ids]
    ran = {r["case_id"] for r in records}
    per_table: dict[str, Counter] = defaultdict(Counter)
    for record in records:
        per_table[record.get("table") or record["case_id"].split("/", 1)[0]][record["verdict"]] += 1
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for verdict in LISTED:
        for record in records:
            if record["verdict"] == verdict:
                grouped[(verdict, first_line(record.get("reason")))].append(run_label(record))
    groups = sorted(grouped.items(), key=lambda kv: (LISTED.index(kv[0][0]), -len(kv[1]), kv[0][1]))
    no_run: dict[tuple[str, ...], set[str]] = defaultdict(set)
    unclaimed_pairs = set()
    for entry in skipped:
        if entry["case_id"] in ran:
            unclaimed_pairs.add((entry["case_id"], entry["expectation_set"]))
        else:
            no_run[tuple(entry.get("case_expectation_sets") or [entry["expectation_set"]])].add(entry["case_id"])
    return RunSummary(
        run_ids=run_ids, brokers=_brokers(records), profiles=_profiles(records, skipped),
        selected_cases=len(ran) + sum(len(ids) for ids in no_run.values()), ran_cases=len(ran), runs=len(records),
        counts=Counter(r["verdict"] for r in records), per_table=dict(sorted(per_table.items())),
        groups=tuple(ReasonGroup(v, reason, tuple(runs)) for (v, reason), runs in groups),
        stale=tuple(run_label(r) for r in records if r.get("stale_deviation")),
        unmatched=tuple((run_label(r), "; ".join(r["deviation_unmatched"])) for r in records
                        if r.get("deviation_unmatched")),
        stopped=tuple(dict.fromkeys(r["run_stopped"] for r in records if r.get("run_stopped"))),
        not_applicable=NotApplicable({sets: sorted(ids) for sets, ids in sorted(no_run.items())},
                                     len(unclaimed_pairs)),
        records=tuple(records), stale_clients=tuple(stale_clients))


def _brokers(records: list[dict[str, Any]]) -> tuple[str, ...]:
    """Each broker of the records, with its version (the one its records name most, "unknown" last)."""
    versions: dict[str, Counter] = defaultdict(Counter)
    where: dict[str, str] = {}
    for record in records:
        broker = record.get("broker") or {}
        name = broker.get("name", "unknown")
        versions[name][broker.get("version") or "unknown"] += 1
        where[name] = ", ".join(str(broker[k]) for k in ("launcher", "url") if broker.get(k))
    out = []
    for name, seen in versions.items():
        known = [v for v, _ in seen.most_common() if v != "unknown"]
        out.append(f"{name} {known[0] if known else 'version unknown'}" + (f" ({where[name]})" if where[name] else ""))
    return tuple(out)


def _profiles(records: list[dict[str, Any]], skipped: list[dict[str, Any]]) -> tuple[str, ...]:
    """Each profile the run was judged by, with the sets it claims."""
    found: dict[str, list[str]] = {}
    for record in records:
        profile = record.get("profile") or {}
        if profile.get("name"):
            found.setdefault(profile["name"], list(profile.get("expectation_sets") or []))
    for entry in skipped:
        found.setdefault(entry["profile"], list(entry.get("claimed") or []))
    return tuple(f"{name} (claims {', '.join(sets) or 'nothing'})" for name, sets in found.items()) or \
        ("not recorded",)


def render_text(summary: RunSummary, outputs: dict[str, Path] | None = None, width: int = 100) -> str:
    """The summary as terminal text no wider than ``width`` (reasons and case lists wrapped, never cut), except
    where one word (a URL) is longer than a line: it stays whole on a line of its own, so it can be copied.

    ``outputs``: label -> path lines printed at the end (results, frames, the HTML summary, ...).
    """
    out: list[str] = []

    def wrap(text: str, indent: str = "", first: str | None = None) -> None:
        out.extend(textwrap.wrap(text, width, initial_indent=indent if first is None else first,
                                 subsequent_indent=indent, break_long_words=False, break_on_hyphens=False) or [""])

    out.append("")
    wrap(f"broker: {'; '.join(summary.brokers)}", "  ", "")
    wrap(f"profile: {'; '.join(summary.profiles)}", "  ", "")
    if len(summary.run_ids) > 1:
        wrap(f"runs: {len(summary.run_ids)} repetitions ({', '.join(summary.run_ids)})", "  ", "")
    wrap(selection_line(summary), "  ", "")
    counted = ", ".join(f"{summary.counts[v]} {v}" for v in VERDICT_NAMES if summary.counts[v])
    wrap(f"verdicts ({summary.runs} case runs): {counted}", "  ", "")
    out.extend(_table_lines(summary, width))
    current = None
    for group in summary.groups:
        if group.verdict != current:
            current = group.verdict
            out.append(f"{section_title(current, summary)}:")
        if len(group.runs) == 1:
            wrap(f"{group.verdict} {group.runs[0]}", "    ", "  ")
        else:
            wrap(f"{group.verdict} x{len(group.runs)}: {', '.join(group.runs)}", "    ", "  ")
        wrap(group.reason, "      ")
    if summary.stale:
        out.append("stale deviations (declared, no longer occur: remove them from the profile):")
        wrap(", ".join(summary.stale), "  ")
    if summary.stale_clients:
        out.append("stale client deviations (declared to show against this broker, excused none of their cells):")
        for line in summary.stale_clients:
            wrap(line, "      ", "  ")
    if summary.unmatched:
        out.append("declared deviations that did not match what was observed (FAIL):")
        for run, says in summary.unmatched:
            wrap(f"{run}: {says}", "      ", "  ")
    for line in summary.stopped:
        wrap(f"run stopped: {line} (its reason has the broker's log tail)", "  ", "")
    quiet = [f"{summary.counts[v]} {v}" for v in ("UNSUPPORTED", "INFO") if summary.counts[v]]
    if quiet:
        wrap(f"not listed: {', '.join(quiet)} (reasons: the HTML summary, results.jsonl, the Allure report)", "  ", "")
    for label, path in (outputs or {}).items():
        out.append(f"{label + ':':<9}{path}")
    return "\n".join(out)


def selection_line(summary: RunSummary) -> str:
    """How the selected cases became the case runs, and which did not apply to the profile and why."""
    na = summary.not_applicable
    plural = "" if summary.runs == 1 else "s"
    text = (f"cases: {summary.selected_cases} selected; {summary.ran_cases} ran, in {summary.runs} case "
            f"run{plural} (one per expectation set of the case that the profile claims)")
    if na.case_count:
        kinds = "; ".join(f"{' and '.join(sets)} only: {len(ids)}" for sets, ids in na.no_run.items())
        text += (f"; {na.case_count} did not apply: the profile claims none of their expectation sets, so "
                 f"they got no run ({kinds})")
    if na.unclaimed_pairs:
        text += (f"; {na.unclaimed_pairs} more (case, set) pair{'' if na.unclaimed_pairs == 1 else 's'} of cases "
                 f"that ran got no run: set not claimed")
    return text


SHORT = {"NON-STRICT": "NSTR", "UNSUPPORTED": "UNSUP"}


def _table_lines(summary: RunSummary, width: int) -> list[str]:
    """Counts per table, one row a table, one column per verdict that occurs; headings shortened (with a
    legend) when the full ones would not fit in ``width``."""
    shown = [v for v in VERDICT_NAMES if summary.counts[v]]
    if not summary.per_table or not shown:
        return []
    name_width = max(len("table"), *(len(t) for t in summary.per_table))

    def lines_with(heads: list[str]) -> list[str]:
        widths = [max(len(h), 4) for h in heads]
        rows = ["  " + f"{'table':<{name_width}}" + "".join(f"  {h:>{w}}" for h, w in zip(heads, widths, strict=True))]
        for table, counts in summary.per_table.items():
            cells = [str(sum(counts.values())), *(str(counts[v]) if counts[v] else "." for v in shown)]
            rows.append("  " + f"{table:<{name_width}}" + "".join(f"  {c:>{w}}"
                                                                  for c, w in zip(cells, widths, strict=True)))
        return rows

    rows = lines_with(["runs", *shown])
    if max(map(len, rows)) <= width:
        return ["per table:", *rows]
    legend = ", ".join(f"{SHORT[v]} = {v}" for v in shown if v in SHORT)
    return [f"per table ({legend}):", *lines_with(["runs", *(SHORT.get(v, v) for v in shown)])]
