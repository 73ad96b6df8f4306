"""The compliance matrix as files: self-contained HTML, JSON, CSV and JUnit XML.

Pure Python over plain rows (the pipeline collects them; see ``reports/pipeline/load.py``): brokers (one
column per broker and version) x cases (grouped by table, with the source row), one cell per case and
expectation set, coloured by verdict, with a tooltip and a link to the case's frame log embedded in the
same page. The HTML fetches nothing: styles and plots are inline, so it opens from disk.
"""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from amqp_conformance.conformance.documents import row_label, source_title
from amqp_conformance.fixtures.verdict import VERDICT_NAMES as VERDICTS

from .matrix_charts import broker_bars_svg, table_grid_html
from .matrix_deviations import deviations_html
from .matrix_grid import client_grid_html
from .verdict_style import COLOURS, MEANING, css_class

__all__ = ["COLOURS", "CSV_COLUMNS", "MAX_COLUMNS", "MEANING", "MatrixReport", "anchor", "render_csv", "render_html",
           "render_json", "render_junit", "write_matrix"]

MAX_COLUMNS = 40
CSV_COLUMNS = ("broker", "broker_version", "table", "case_id", "source_document", "source_heading", "source_row",
               "expectation_set", "verdict", "stale_deviation", "run_id", "reason")


@dataclass
class MatrixReport:
    """Everything the matrix files show, as plain data.

    ``cells``: compliance-matrix rows (broker, broker_version, table, case_id, source_*, expectation_set,
    verdict, reason, stale_deviation, run_id); ``summary``: per broker, version and set, the verdict counts
    and ``compliant_pct``; ``logs``: frame log text per (broker, version, case_id, expectation_set).
    """

    cells: list[dict[str, Any]]
    summary: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[tuple[str, str, str, str], str] = field(default_factory=dict)
    regressions: list[dict[str, Any]] = field(default_factory=list)
    flaky: list[dict[str, Any]] = field(default_factory=list)
    stale: list[dict[str, Any]] = field(default_factory=list)
    plots: list[tuple[str, str]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    generated_at: str = ""
    notes: list[str] = field(default_factory=list)

    def columns(self) -> list[tuple[str, str]]:
        """(broker, version) columns in order; beyond :data:`MAX_COLUMNS`, only each broker's latest version."""
        from_cells = {(c["broker"], c["broker_version"]) for c in self.cells}
        columns = sorted(from_cells, key=lambda bv: (bv[0], _version_key(bv[1]), bv[1]))
        if len(columns) > MAX_COLUMNS:
            latest: dict[str, tuple[str, str]] = {}
            for column in columns:
                latest[column[0]] = column
            columns = sorted(latest.values())[:MAX_COLUMNS]
        return columns


def _version_key(version: str) -> list[int]:
    digits = "".join(ch if ch.isdigit() else " " for ch in version).split()
    return [int(d) for d in digits]


def _cell_key(cell: dict) -> tuple[str, str, str, str]:
    return cell["broker"], cell["broker_version"], cell["case_id"], cell["expectation_set"]


def _case_sort(case_id: str) -> tuple:
    row = case_id.split("/", 1)[-1]
    digits = "".join(ch for ch in row if ch.isdigit())
    return (int(digits) if digits else 10**9, row)


def anchor(key: tuple[str, str, str, str]) -> str:
    """The HTML id of a cell's frame log: stable and safe for URLs."""
    text = "log-" + "-".join(key)
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)


STYLE = """
body{font-family:"DejaVu Sans",Arial,Helvetica,sans-serif;margin:20px;color:#212121;font-size:14px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:24px 0 8px;border-bottom:1px solid #ccc}
table{border-collapse:collapse}th,td{border:1px solid #bdbdbd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f5f5f5}.meta{color:#555}.num{text-align:right}
td.v{text-align:center;font-weight:bold;font-size:12px;min-width:92px}td.v a{color:inherit;text-decoration:none}
td.none{color:#9e9e9e;background:#fafafa;text-align:center}
tr.group th{background:#37474f;color:#fff;font-size:13px}
.chip{display:inline-block;padding:1px 6px;border-radius:3px;margin:1px;font-size:12px;font-weight:bold}
.log{margin:6px 0;border:1px solid #ddd}.log h3{font-size:13px;margin:0;padding:4px 6px;background:#eceff1}
.log pre{margin:0;padding:6px;font-size:11px;white-space:pre-wrap;font-family:"DejaVu Sans Mono",monospace}
.log:target{outline:3px solid #ff9800}
div.grids{display:flex;flex-wrap:wrap;gap:12px}table.client-grid caption{font-weight:bold;text-align:left}
td.src{max-width:420px;font-size:12px}table.grid td{min-width:96px;font-size:12px}table.grid th{font-size:12px}
td.reason{max-width:520px}td.cases{max-width:420px;font-size:12px}
svg.plot{display:block;max-width:100%;height:auto}
""" + "".join(f"td.v-{v.replace('-', '_')},.chip.v-{v.replace('-', '_')}{{background:{bg};color:{fg}}}"
              for v, (bg, fg) in COLOURS.items())


_cls = css_class


def render_html(report: MatrixReport) -> str:
    """The matrix page, the picture first: verdicts per broker, compliance per table, why brokers deviate,
    the plots (compliance over versions, latency); then the summary per broker, the legend, the matrix grouped
    by table (each group under its source document's title, each row labelled as its source labels it), the
    findings and the frame logs."""
    columns = report.columns()
    cells = {_cell_key(c): c for c in report.cells}
    rows: dict[str, dict[tuple[str, str], dict]] = defaultdict(dict)
    for c in report.cells:
        rows[c["table"]][(c["case_id"], c["expectation_set"])] = c
    log_ids = {key: anchor(key) for key in report.logs}
    out = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
           "<title>AMQP 1.0 compliance matrix</title>", f"<style>{STYLE}</style></head><body>",
           "<h1>AMQP 1.0 compliance matrix</h1>",
           f"<p class=\"meta\">generated {escape(report.generated_at)} from {len(report.runs)} run(s); "
           f"{len(columns)} broker column(s), {len({c['case_id'] for c in report.cells})} case(s). "
           "Each cell is the latest run of that broker and version; hover for the reason, click for the frame "
           "log.</p>"]
    out += [f"<p class=\"meta\">{escape(note)}</p>" for note in report.notes]
    out.append(_picture_html(report, columns))
    out.append(_summary_html(report, columns))
    out.append(client_grid_html(report.cells, columns, log_ids))
    out.append("<h2>Legend</h2><p>" + " ".join(
        f"<span class=\"chip {_cls(v)}\" title=\"{escape(MEANING[v])}\">{v}</span> {escape(MEANING[v])}<br>"
        for v in VERDICTS) + "† the profile declares a deviation that no longer occurs (stale deviation)</p>")
    out.append("<h2>Matrix</h2><table id=\"matrix\"><thead><tr><th>case</th><th>source row</th><th>set</th>")
    out += [f"<th class=\"broker\" data-broker=\"{escape(b)}\" data-version=\"{escape(v)}\">{escape(b)}<br>"
            f"<span class=\"meta\">{escape(v)}</span></th>" for b, v in columns]
    out.append("</tr></thead><tbody>")
    for table in sorted(rows):
        # the heading goes on the group when every row shares it; a table whose rows cite their own section
        # (core.errors) shows each row's heading beside its row instead
        headings = {row.get("source_heading") or "" for row in rows[table].values()}
        common = headings.pop() if len(headings) == 1 else ""
        document = _table_document(rows[table].values())
        source = source_title(document, common)
        out.append(f"<tr class=\"group\" data-table=\"{escape(table)}\"><th colspan=\"{3 + len(columns)}\" "
                   f"title=\"{escape(document)}\">{escape(table)}{' — ' + escape(source) if source else ''}</th></tr>")
        for case_id, expectation_set in sorted(rows[table], key=lambda k: (_case_sort(k[0]), k[1])):
            row = rows[table][(case_id, expectation_set)]
            label, where = _source_cell(row, common)
            out.append(f"<tr data-case=\"{escape(case_id)}\" data-set=\"{escape(expectation_set)}\">"
                       f"<th>{escape(case_id)}</th><td class=\"src\" title=\"{escape(where)}\">{escape(label)}</td>"
                       f"<td>{escape(expectation_set)}</td>")
            for broker, version in columns:
                key = (broker, version, case_id, expectation_set)
                out.append(_cell_html(cells.get(key), key, log_ids.get(key)))
            out.append("</tr>")
    out.append("</tbody></table>")
    out.append(_findings_html(report))
    if report.logs:
        out.append("<h2>Frame logs</h2>")
        for key in sorted(report.logs):
            broker, version, case_id, expectation_set = key
            verdict = cells[key]["verdict"] if key in cells else ""
            out.append(f"<div class=\"log\" id=\"{log_ids[key]}\"><h3>{escape(case_id)} [{escape(expectation_set)}] "
                       f"on {escape(broker)} {escape(version)}: {escape(verdict)}</h3>"
                       f"<pre>{escape(report.logs[key])}</pre></div>")
    out.append("</body></html>")
    return "\n".join(out)


def _cell_html(cell: dict | None, key: tuple[str, str, str, str], log_id: str | None) -> str:
    broker, version, case_id, expectation_set = key
    if cell is None:
        return f"<td class=\"none\" title=\"{escape(case_id)} not run on {escape(broker)} {escape(version)}\">—</td>"
    verdict = cell["verdict"]
    reason = (cell.get("reason") or "").strip().splitlines()
    tip = f"{verdict}: {case_id} [{expectation_set}] on {broker} {version}"
    if reason:
        tip += "\n" + reason[0][:300]
    tip += f"\nrun {cell.get('run_id', '')}"
    mark = "†" if cell.get("stale_deviation") else ""
    label = escape(verdict) + mark
    body = f"<a href=\"#{log_id}\">{label}</a>" if log_id else label
    return (f"<td class=\"v {_cls(verdict)}\" data-verdict=\"{escape(verdict)}\" data-broker=\"{escape(broker)}\" "
            f"title=\"{escape(tip)}\">{body}</td>")


def _summary_html(report: MatrixReport, columns: list[tuple[str, str]]) -> str:
    sets = sorted({s["expectation_set"] for s in report.summary})
    by_column: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for s in report.summary:
        by_column[(s["broker"], s["broker_version"])].append(s)
    out = ["<h2>Summary per broker</h2><table id=\"summary\"><thead><tr><th>broker</th><th>version</th>"]
    out += [f"<th>{v}</th>" for v in VERDICTS]
    out += [f"<th>% compliant {escape(s)}</th>" for s in sets]
    out.append("</tr></thead><tbody>")
    for broker, version in columns:
        entries = by_column.get((broker, version), [])
        counts: Counter[str] = Counter()
        for entry in entries:
            for v in VERDICTS:
                counts[v] += entry.get(v.lower().replace("-", "_"), 0) or 0
        pct = {e["expectation_set"]: e.get("compliant_pct") for e in entries}
        out.append(f"<tr data-broker=\"{escape(broker)}\" data-version=\"{escape(version)}\"><th>{escape(broker)}</th>"
                   f"<td>{escape(version)}</td>")
        out += [f"<td class=\"num\" data-verdict=\"{v}\">" + (f"<span class=\"chip {_cls(v)}\">{counts[v]}</span>"
                if counts[v] else "0") + "</td>" for v in VERDICTS]
        out += [f"<td class=\"num\" data-set=\"{escape(s)}\">"
                f"{'—' if pct.get(s) is None else f'{pct[s]:.1f}%'}</td>" for s in sets]
        out.append("</tr>")
    out.append("</tbody></table><p class=\"meta\">% compliant: PASS or INFO among the cases the broker ran "
               "(UNSUPPORTED left out), per expectation set.</p>")
    return "".join(out)


def _findings_html(report: MatrixReport) -> str:
    out = []
    sections = (
        ("Regressions", report.regressions, ("broker", "kind", "case_id", "expectation_set", "from_version",
                                             "to_version", "from_verdict", "to_verdict", "to_run_id")),
        ("Flaky cases", report.flaky, ("broker", "broker_version", "case_id", "expectation_set", "runs", "verdicts")),
        ("Stale deviations", report.stale, ("broker", "broker_version", "case_id", "expectation_set", "verdict")),
    )
    for title, rows, keys in sections:
        slug = title.lower().replace(" ", "-")
        out.append(f"<h2>{title} ({len(rows)})</h2>")
        if not rows:
            out.append(f"<p id=\"{slug}\" class=\"meta\">none</p>")
            continue
        header = "".join(f"<th>{k}</th>" for k in keys)
        out.append(f"<table id=\"{slug}\"><thead><tr>{header}</tr></thead><tbody>")
        for row in rows[:200]:
            out.append("<tr>" + "".join(f"<td>{escape(_flat(row.get(k)))}</td>" for k in keys) + "</tr>")
        out.append("</tbody></table>")
        if len(rows) > 200:
            out.append(f"<p class=\"meta\">first 200 of {len(rows)}; all in the JSON file</p>")
    return "".join(out)


def _flat(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return "" if value is None else str(value)


def render_json(report: MatrixReport) -> str:
    """The matrix as JSON: generated_at, runs, columns, summary (per broker, version and set) and cells."""
    return json.dumps({
        "generated_at": report.generated_at, "runs": report.runs,
        "columns": [{"broker": b, "broker_version": v} for b, v in report.columns()],
        "summary": report.summary, "cells": report.cells,
    }, indent=1, default=str)


def render_csv(report: MatrixReport) -> str:
    """The matrix as CSV: one line per cell, columns :data:`CSV_COLUMNS`."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for cell in sorted(report.cells, key=lambda c: (c["broker"], c["broker_version"], c["table"],
                                                   _case_sort(c["case_id"]), c["expectation_set"])):
        writer.writerow({k: cell.get(k) for k in CSV_COLUMNS})
    return buffer.getvalue()


def render_junit(report: MatrixReport) -> str:
    """The matrix as JUnit XML: a testsuite per broker and version, a testcase per case and set; FAIL is a
    failure, ERROR an error, UNSUPPORTED and NON-STRICT are skipped with the verdict in the message."""
    suites = ET.Element("testsuites", name="amqp-conformance")
    by_column: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for cell in report.cells:
        by_column[(cell["broker"], cell["broker_version"])].append(cell)
    for (broker, version), cells in sorted(by_column.items()):
        counts = Counter(c["verdict"] for c in cells)
        suite = ET.SubElement(suites, "testsuite", name=f"{broker} {version}", tests=str(len(cells)),
                              failures=str(counts["FAIL"]), errors=str(counts["ERROR"]),
                              skipped=str(counts["UNSUPPORTED"] + counts["NON-STRICT"]))
        for cell in sorted(cells, key=lambda c: (c["table"], _case_sort(c["case_id"]), c["expectation_set"])):
            case = ET.SubElement(suite, "testcase", classname=f"{broker}.{cell['table']}",
                                 name=f"{cell['case_id']} [{cell['expectation_set']}]")
            reason = cell.get("reason") or ""
            verdict = cell["verdict"]
            ET.SubElement(ET.SubElement(case, "properties"), "property", name="verdict", value=verdict)
            if verdict == "FAIL":
                ET.SubElement(case, "failure", message=reason.splitlines()[0][:500] if reason else "FAIL").text = reason
            elif verdict == "ERROR":
                ET.SubElement(case, "error", message=reason.splitlines()[0][:500] if reason else "ERROR").text = reason
            elif verdict in ("UNSUPPORTED", "NON-STRICT"):
                ET.SubElement(case, "skipped", message=f"{verdict}: {reason}"[:500])
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write_matrix(report: MatrixReport, out_dir: Path) -> dict[str, Path]:
    """Write ``compliance.html``, ``compliance.json``, ``compliance.csv`` and ``junit.xml`` into ``out_dir``;
    returns the paths by format."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"html": out_dir / "compliance.html", "json": out_dir / "compliance.json",
             "csv": out_dir / "compliance.csv", "junit": out_dir / "junit.xml"}
    paths["html"].write_text(render_html(report), encoding="utf-8")
    paths["json"].write_text(render_json(report), encoding="utf-8")
    paths["csv"].write_text(render_csv(report), encoding="utf-8")
    paths["junit"].write_text(render_junit(report), encoding="utf-8")
    return paths


def _source_cell(row: dict, common_heading: str) -> tuple[str, str]:
    """The matrix's source cell and its tooltip: the row as its source labels it (a UM row by its column
    values, :func:`~amqp_conformance.conformance.documents.row_label`), after the row's own heading when the
    table's rows differ there; the tooltip cites document file, heading and row."""
    source_row = str(row.get("source_row") or "")
    heading = str(row.get("source_heading") or "")
    document = str(row.get("source_document") or "")
    label = row_label(document, heading, source_row)
    if label != source_row:
        label = f"row {source_row}: {label}"
    where = ", ".join(part for part in (document, f'"{heading}"' if heading else "", f"row {source_row}") if part)
    return (f"{heading}: {label}" if heading and not common_heading else label), where


def _table_document(rows: Iterable[dict]) -> str:
    """The document a table's rows cite (the most cited one, should rows differ)."""
    counts = Counter(str(row.get("source_document") or "") for row in rows)
    return counts.most_common(1)[0][0] if counts else ""


def table_titles(cells: list[dict]) -> dict[str, str]:
    """Each table's source as the page names it: the cited document's title, then the heading its rows share."""
    by_table: dict[str, list[dict]] = defaultdict(list)
    for cell in cells:
        by_table[cell["table"]].append(cell)
    titles = {}
    for table, mine in by_table.items():
        headings = {c.get("source_heading") or "" for c in mine}
        common = headings.pop() if len(headings) == 1 else ""
        titles[table] = source_title(_table_document(mine), common)
    return titles


def _picture_html(report: MatrixReport, columns: list[tuple[str, str]]) -> str:
    """The top of the page: verdicts per broker, compliance per table, why brokers deviate, then the
    pipeline's plots (compliance over versions, settlement latency)."""
    shown = [c for c in report.cells if (c["broker"], c["broker_version"]) in set(columns)]
    out = ["<h2>Compliance per broker</h2>", broker_bars_svg(columns, shown),
           "<p class=\"meta\">Each bar is one broker column: its cells (case and expectation set) by verdict, "
           "hover for the counts.</p>",
           "<h2>Compliance per table</h2>", table_grid_html(columns, shown, table_titles(shown)),
           "<h2>Why brokers deviate</h2>", deviations_html(shown)]
    for title, svg in report.plots:
        out.append(f"<h2>{escape(title)}</h2>{svg}")
    return "".join(out)
