"""The summary of one run as one self-contained HTML page (``run`` writes it as ``summary.html``).

A pure function of a :class:`.summary.RunSummary`: the broker, version and profile; how the selected cases
became case runs and which did not apply; counts per verdict and per table; FAIL, ERROR and NON-STRICT
grouped by their whole reason; stale and unmatched deviations; then every case run with its verdict and
its whole reason. Styles are inline and nothing is fetched, so the page opens from disk; no Spark or Java
is needed (the compliance matrix of many runs and brokers stays ``amqp-conformance report``).
"""

from __future__ import annotations

from html import escape

from amqp_conformance.fixtures.verdict import VERDICT_NAMES

from .summary import RunSummary, first_line, run_label, section_title, selection_line

COLOURS = {  # background, text (as the compliance matrix colours them)
    "PASS": ("#c8e6c9", "#1b5e20"), "FAIL": ("#ef9a9a", "#7f0000"), "NON-STRICT": ("#ffe0b2", "#8a4b00"),
    "UNSUPPORTED": ("#e0e0e0", "#424242"), "ERROR": ("#ce93d8", "#4a148c"), "INFO": ("#bbdefb", "#0d47a1"),
}
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1.2em; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: left; vertical-align: top; }
td.num { text-align: right; }
.meta { color: #555; }
.reason { white-space: pre-wrap; overflow-wrap: anywhere; }
.group { margin: .6em 0; }
.runs { color: #444; font-family: monospace; font-size: 12px; }
""" + "".join(f".v-{v.lower().replace('-', '_')} {{ background: {bg}; color: {fg}; }}\n"
              for v, (bg, fg) in COLOURS.items())


def _chip(verdict: str) -> str:
    return f"<span class=\"v-{verdict.lower().replace('-', '_')}\" data-verdict=\"{escape(verdict)}\">" \
           f"{escape(verdict)}</span>"


def render_html(summary: RunSummary) -> str:
    """The page (a whole HTML document): every case run appears once in the last table, each FAIL, ERROR
    and NON-STRICT also once in its reason group, and each reason is shown whole (escaped)."""
    shown = [v for v in VERDICT_NAMES if summary.counts[v]]
    title = f"AMQP 1.0 conformance: {'; '.join(summary.brokers)}"
    out = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
           f"<style>{STYLE}</style></head><body>", f"<h1>{escape(title)}</h1>",
           f"<p id=\"profile\">profile: {escape('; '.join(summary.profiles))}</p>",
           f"<p id=\"run\" class=\"meta\">run {escape(', '.join(summary.run_ids))}</p>",
           f"<p id=\"selection\">{escape(selection_line(summary))}</p>",
           "<h2>Verdicts</h2><table id=\"verdicts\"><tr>" + "".join(f"<th>{_chip(v)}</th>" for v in shown) +
           "<th>case runs</th></tr><tr>" +
           "".join(f"<td class=\"num\" data-verdict=\"{v}\">{summary.counts[v]}</td>" for v in shown) +
           f"<td class=\"num\">{summary.runs}</td></tr></table>",
           "<h2>Per table</h2><table id=\"tables\"><tr><th>table</th><th>case runs</th>" +
           "".join(f"<th>{_chip(v)}</th>" for v in shown) + "</tr>"]
    for table, counts in summary.per_table.items():
        out.append(f"<tr data-table=\"{escape(table)}\"><td>{escape(table)}</td>"
                   f"<td class=\"num\">{sum(counts.values())}</td>" +
                   "".join(f"<td class=\"num\" data-verdict=\"{v}\">{counts[v]}</td>" for v in shown) + "</tr>")
    out.append("</table>")
    current = None
    for group in summary.groups:
        if group.verdict != current:
            if current is not None:
                out.append("</div>")
            current = group.verdict
            title = escape(section_title(current, summary))
            out.append(f"<div class=\"section\" data-verdict=\"{group.verdict}\"><h2>{title}</h2>")
        out.append(f"<div class=\"group\" data-count=\"{len(group.runs)}\">{_chip(group.verdict)} "
                   f"<b>{len(group.runs)}</b> <span class=\"reason\">{escape(group.reason)}</span>"
                   f"<div class=\"runs\">{escape(', '.join(group.runs))}</div></div>")
    if current is not None:
        out.append("</div>")
    na = summary.not_applicable
    if na.case_count:
        out.append("<h2>Did not apply</h2><p>None of these cases' expectation sets is claimed by the profile, so "
                   "they got no run.</p><table id=\"not-applicable\"><tr><th>the case's sets</th><th>cases</th>"
                   "<th>ids</th></tr>")
        for sets, ids in na.no_run.items():
            out.append(f"<tr><td>{escape(', '.join(sets))}</td><td class=\"num\">{len(ids)}</td>"
                       f"<td class=\"runs\">{escape(', '.join(ids))}</td></tr>")
        out.append("</table>")
    if summary.stale:
        out.append("<h2>Stale deviations</h2><p>Declared in the profile, no longer deviating: remove them from the "
                   f"profile.</p><p class=\"runs\" id=\"stale\">{escape(', '.join(summary.stale))}</p>")
    if summary.stale_clients:
        out.append("<h2>Stale client deviations</h2><p>Declared in a client's profile to show against this broker, "
                   "they excused none of their cells.</p><ul id=\"stale-clients\">"
                   + "".join(f"<li>{escape(line)}</li>" for line in summary.stale_clients) + "</ul>")
    if summary.unmatched:
        out.append("<h2>Declared deviations that did not match (FAIL)</h2><ul id=\"unmatched\">" +
                   "".join(f"<li>{escape(run)}: <span class=\"reason\">{escape(says)}</span></li>"
                           for run, says in summary.unmatched) + "</ul>")
    for line in summary.stopped:
        out.append(f"<p class=\"stopped\"><b>Run stopped:</b> {escape(line)}</p>")
    out.append("<h2>Every case run</h2><table id=\"cases\"><tr><th>case [set]</th><th>table</th><th>verdict</th>"
               "<th>reason</th></tr>")
    for record in summary.records:
        reason = (record.get("reason") or "").strip()
        out.append(f"<tr><td>{escape(run_label(record))}</td><td>{escape(record.get('table') or '')}</td>"
                   f"<td>{_chip(record['verdict'])}</td><td class=\"reason\" title=\"{escape(first_line(reason))}\">"
                   f"{escape(reason)}</td></tr>")
    out.append("</table></body></html>\n")
    return "".join(out)
